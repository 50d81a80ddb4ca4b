"""``stompfast bench --csv`` and ``--hdr-log``: the timeline as CSV, the interval histograms as an HdrHistogram log.

The log is read back with hdrhistogram's own ``HistogramLogReader`` where that package is
installed (the reference for the format HistogramLogAnalyzer reads), else with the
project's decoder; either way every latency sample of the run must be in it, interval by
interval, and the CSV must add up to the run's counts.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from test_loadgen import bench

from stompfast.loadgen._hdr import HdrHistogram as OwnHistogram
from stompfast.loadgen.export import CSV_COLUMNS

pytestmark = pytest.mark.timeout(120)


def run(*args: str) -> dict:
    done = bench(*args, "--json", "-q")
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)


def read_log(path: Path) -> list:
    """``(start, length, max_ms, histogram)`` per interval line of an HdrHistogram log."""
    try:
        from hdrh.histogram import HdrHistogram
        from hdrh.log import HistogramLogReader
    except ImportError:  # CPython 3.14+: the reference package is not installed there
        HistogramLogReader = None
    lines = [line for line in path.read_text().splitlines() if re.match(r"^\d", line)]
    rows = []
    for line in lines:
        start, length, maximum, payload = line.split(",", 3)
        rows.append((float(start), float(length), float(maximum), OwnHistogram.decode(payload)))
    if HistogramLogReader is not None:
        reader = HistogramLogReader(str(path), HdrHistogram(1, 60_000_000, 3))
        theirs = []
        while (histogram := reader.get_next_interval_histogram()) is not None:
            theirs.append(histogram.get_total_count())
        assert theirs == [row[3].get_total_count() for row in rows]
    return rows


@pytest.mark.parametrize("processes", ["1", "2"])
def test_the_csv_and_the_hdr_log_hold_every_interval_of_the_run(tmp_path: Path, processes: str):
    table, log = tmp_path / "run.csv", tmp_path / "run.hlog"
    document = run("--rate", "1000", "--duration", "2", "--interval", "0.5", "--processes", processes,
                   "-p", processes, "-c", processes, "--csv", str(table), "--hdr-log", str(log))
    with table.open() as f:
        rows = list(csv.reader(f))
    assert tuple(rows[0]) == CSV_COLUMNS
    body = [dict(zip(CSV_COLUMNS, row)) for row in rows[1:]]
    assert len(body) == len(document["timeline"]) >= 4
    assert sum(int(r["sent"]) for r in body) == document["counts"]["sent"]
    assert sum(int(r["received"]) for r in body) == document["counts"]["received"]
    assert [float(r["t"]) for r in body] == [row["t"] for row in document["timeline"]]
    intervals = read_log(log)
    header = log.read_text().splitlines()
    assert header[0] == "#[Histogram log format version 1.3]" and header[1].startswith("#[StartTime: ")
    # every latency sample of the run, each interval's in its own line, at its own time
    assert sum(h.get_total_count() for *_, h in intervals) == document["latency_us"]["count"]
    measured = {row["t"]: row for row in document["timeline"] if row["latency_us"]}
    assert [start for start, *_ in intervals] == sorted(measured)
    for start, length, maximum, histogram in intervals:
        assert length == pytest.approx(measured[start]["seconds"], abs=0.001)
        assert histogram.get_max_value() == measured[start]["latency_us"]["max"]
        assert maximum == pytest.approx(histogram.get_max_value() / 1000, abs=0.001)


def test_an_export_that_cannot_be_written_fails_the_command_clearly(tmp_path: Path):
    done = bench("--count", "100", "--csv", str(tmp_path / "no" / "such" / "dir.csv"), "-q")
    assert done.returncode == 1 and "cannot write" in done.stderr.decode()
