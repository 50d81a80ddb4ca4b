"""The failover run: a constant-rate load through link cuts, each outage counted message by message.

``--cut-links 5s,15s`` puts a :class:`~stompfast.testing.FaultProxy` between every client
and the broker, turns the clients' reconnect on, and resets every link at those times.
Each consumer then logs every delivery (producer, sequence number, receive time,
latency), and :func:`outage_rows` counts, for the time before the first cut and then for
each cut's window (from it to the next cut), exactly:

- ``lost``: messages that never arrived, each counted at the first cut at or after its
  intended send time (the cut that lost it);
- ``duplicated``: deliveries received in the window of a message received before;
- ``reordered``: first deliveries received in the window after a later message of the
  same producer had reached that consumer;
- ``delayed``: messages first received in the window with a latency above
  ``delayed_after_us``, the p99.9 latency of those received before the first cut (at
  least 1 ms);
- ``latency_max_us``: the worst latency of the messages first received in the window;
- ``gap_s``: the longest silence between two deliveries in the window (any consumer),
  counted from the cut: the outage as the consumers saw it.

``cut_command`` (``--cut-command``) makes the outage something else than a reset
link: no proxy, and at each cut the command runs (a broker restart: ``scripts/brokers.sh
restart rabbitmq``, ``systemctl restart ...``) while the load goes on; the run waits for it
to end, its exit status and duration are in each cut's row (``command``), and one that
fails is an error of the run. :class:`CutCommand` runs it.

Open loop only (a constant ``rate``), one queue, no receipts or transactions: the
intended time of message ``i`` of a producer is then ``t0 + (i + phase) / rate``, which
is what makes the attribution exact. The log costs memory: about 100 bytes per message.
"""

from __future__ import annotations

import math
import subprocess
import tempfile
import time
from typing import IO, Any, Dict, List, Optional, Sequence, Tuple

from ..errors import ConfigurationError
from .histogram import new_histogram

#: One delivery as a consumer logs it: (producer index, sequence number, receive ns, latency us)
Delivery = Tuple[int, int, int, int]


def check_failover(config: Any) -> None:
    """Raise ConfigurationError for a failover run (``link_cuts``) this module cannot account exactly."""
    cuts = config.link_cuts
    command = config.cut_command
    if command is not None and (not isinstance(command, str) or not command.strip()):
        raise ConfigurationError(f"cut_command is a shell command, not {command!r}")
    if command is not None and not cuts:
        raise ConfigurationError("a cut command (--cut-command) runs at the link cuts: give --cut-links too")
    if not isinstance(cuts, tuple) or not all(isinstance(c, (int, float)) and math.isfinite(c) and c > 0
                                              for c in cuts):
        raise ConfigurationError(f"link_cuts holds seconds after the start, each above 0, not {cuts!r}")
    if not cuts:
        return
    if not config.rate:
        raise ConfigurationError("a failover run (--cut-links) needs a constant --rate: outages are counted"
                                 " against each message's intended send time")
    if config.receipts or config.transaction_size:
        raise ConfigurationError("a failover run (--cut-links) sends without receipts or transactions: a receipt"
                                 " or COMMIT lost with the link would end its producer")
    if len(config.destinations) > 1 or any(d.startswith(("/topic/", "/exchange/")) for d in config.destinations):
        raise ConfigurationError("a failover run (--cut-links) uses one queue")
    if not config.consumers:
        raise ConfigurationError("a failover run (--cut-links) needs consumers: it counts what they receive")
    _, duration = config.limits()
    if duration is not None and max(cuts) >= duration:
        raise ConfigurationError(f"every link cut must come before the end of sending ({duration:g} s)")


def outage_rows(
    cuts: Sequence[float], rates: Sequence[Tuple[float, float]], sent: Sequence[int],
    logs: Sequence[Sequence[Delivery]], t0: int,
) -> List[Dict[str, Any]]:
    """One row per cut, and a first row for the time before it (``cut`` None): see the module docstring.

    ``cuts``: seconds after ``t0`` (wall ns) the links were reset; ``rates[p]``: producer
    ``p``'s ``(rate, phase)``; ``sent[p]``: how many messages it sent; ``logs``: each
    consumer's deliveries in its receive order.
    """
    edges = [0.0, *sorted(cuts), math.inf]
    windows = len(edges) - 1

    def window_at(ns: int) -> int:
        """The window a receive time falls in: after the last cut before it."""
        seconds = (ns - t0) / 1e9
        index = 0
        while seconds >= edges[index + 1]:
            index += 1
        return index

    def window_lost(p: int, seq: int) -> int:
        """The window of a message that never arrived: the first cut at or after its intended time lost it."""
        rate, phase = rates[p]
        intended = (seq + phase) / rate
        index = 1
        while index < windows - 1 and intended >= edges[index + 1]:
            index += 1
        return index if windows > 1 else 0

    rows: List[Dict[str, Any]] = [{
        "cut": None if w == 0 else edges[w], "lost": 0, "duplicated": 0, "reordered": 0, "delayed": 0,
        "latency_max_us": 0, "gap_s": 0.0, "delayed_after_us": 0,
    } for w in range(windows)]
    # (producer, seq) -> (first receive ns, its latency)
    first: Dict[Tuple[int, int], Tuple[int, int]] = {}
    for log in logs:
        # the newest sequence number this consumer received from each producer
        newest: Dict[int, int] = {}
        for p, seq, at, us in log:
            key = (p, seq)
            row = rows[window_at(at)]
            if key in first:
                # a duplicate is counted as one, not also as out of order
                row["duplicated"] += 1
                first[key] = min(first[key], (at, us))
                continue
            first[key] = (at, us)
            if seq < newest.get(p, -1):
                row["reordered"] += 1
            else:
                newest[p] = seq
    baseline = new_histogram()
    for at, us in first.values():
        if window_at(at) == 0:
            baseline.record_value(min(us, 3_600_000_000))
    delayed_after = max(1000, int(baseline.get_value_at_percentile(99.9))) if baseline.get_total_count() else 1000
    for at, us in first.values():
        row = rows[window_at(at)]
        row["latency_max_us"] = max(row["latency_max_us"], us)
        if us > delayed_after:
            row["delayed"] += 1
    for p, count in enumerate(sent):
        for seq in range(count):
            if (p, seq) not in first:
                rows[window_lost(p, seq)]["lost"] += 1
    for row in rows:
        row["delayed_after_us"] = delayed_after
    _gaps(rows, edges, sorted(at for log in logs for _, _, at, _ in log), t0)
    return rows


def _gaps(rows: List[Dict[str, Any]], edges: List[float], times: List[int], t0: int) -> None:
    """Each window's longest silence between two deliveries (from the window's start, for an outage)."""
    for w, row in enumerate(rows):
        start_ns = t0 + int(edges[w] * 1e9)
        end_ns = t0 + int(edges[w + 1] * 1e9) if math.isfinite(edges[w + 1]) else None
        last: Optional[int] = start_ns if w else None
        longest = 0
        for at in times:
            if at < start_ns or (end_ns is not None and at >= end_ns):
                continue
            if last is not None:
                longest = max(longest, at - last)
            last = at
        row["gap_s"] = round(longest / 1e9, 6)


class CutCommand:
    """The shell command of a failover run, started at each cut beside the running load.

    Its output goes to a temporary file (a pipe nobody reads would stall a chatty
    command); :meth:`poll` notes the runs that ended, :meth:`wait` waits for the rest.
    """

    def __init__(self, command: str) -> None:
        self.command = command
        # (seconds after t0 it started, monotonic start, process, its output file)
        self._running: List[Tuple[float, float, "subprocess.Popen[bytes]", IO[bytes]]] = []
        self._ended: List[Dict[str, Any]] = []

    def start(self, at: float) -> None:
        """Start the command at ``at`` (seconds after the run's start)."""
        output = tempfile.TemporaryFile()
        # A session of its own: Ctrl-C in the terminal reaches the run, not a restart half done
        process = subprocess.Popen(self.command, shell=True, stdin=subprocess.DEVNULL, stdout=output,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        self._running.append((at, time.monotonic(), process, output))

    @property
    def running(self) -> bool:
        """Whether a run of the command has not ended yet (as of the last :meth:`poll`)."""
        return bool(self._running)

    def poll(self) -> None:
        """Note each run that has ended."""
        for run in list(self._running):
            if run[2].poll() is not None:
                self._end(run)

    def wait(self) -> None:
        """Wait for every run to end (blocking: call it from a worker thread)."""
        for run in list(self._running):
            run[2].wait()
            self._end(run)

    def _end(self, run: Tuple[float, float, "subprocess.Popen[bytes]", IO[bytes]]) -> None:
        at, started, process, output = run
        self._running.remove(run)
        output.seek(0)
        tail = output.read()[-2000:].decode("utf-8", "replace")
        output.close()
        self._ended.append({"at": at, "seconds": round(time.monotonic() - started, 3),
                            "returncode": process.returncode, "output": tail})

    def runs(self) -> List[Dict[str, Any]]:
        """Each run that ended, in the order the cuts were made: at, seconds, returncode, output (its tail)."""
        return sorted(self._ended, key=lambda run: run["at"])

    def errors(self) -> List[str]:
        """One line per run that failed."""
        return [f"the cut command at {run['at']:.2f} s exited {run['returncode']} after {run['seconds']:.1f} s:"
                f" {run['output'].strip()[-300:]}" for run in self.runs() if run["returncode"] != 0]
