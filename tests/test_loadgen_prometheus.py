"""``stompfast bench --prometheus``: the live numbers served at /metrics, and the Grafana dashboard over them.

The endpoint is scraped over HTTP as Prometheus would, during a real run on the
in-process broker (through the installed command) and with snapshots handed to it
directly; the exposition text is checked line by line (every sample's metric declared
with HELP and TYPE before it), and every query of ``docs/grafana-bench.json`` must name
only metrics the endpoint serves.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from test_loadgen import _executable

from stompfast.errors import ConfigurationError
from stompfast.loadgen import LoadConfig, Progress, run_load
from stompfast.loadgen.prometheus import METRICS, MetricsEndpoint, parse_listen
from stompfast.testing import Broker

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = re.compile(r'^(?P<name>[a-z_]+)(?:\{quantile="(?P<q>[0-9.]+)"\})? (?P<value>-?[0-9.e+]+)$')


def scrape(url: str) -> dict:
    """``{(name, quantile): value}`` from an exposition, checking its form on the way."""
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    declared, samples = set(), {}
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            declared.add(line.split()[2])
            continue
        match = SAMPLE.match(line)
        assert match, f"not an exposition sample: {line!r}"
        assert match["name"] in declared, f"{match['name']} sampled before its HELP and TYPE"
        samples[(match["name"], match["q"])] = float(match["value"])
    return samples


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_listen_addresses_are_parsed_and_bad_ones_refused():
    assert parse_listen("9464") == ("127.0.0.1", 9464)
    assert parse_listen("0.0.0.0:9464") == ("0.0.0.0", 9464)
    assert parse_listen("[::1]:0") == ("::1", 0)
    for bad in ("", "host:", "9464x", "1:70000"):
        with pytest.raises(ConfigurationError, match="HOST:]PORT"):
            parse_listen(bad)


@pytest.mark.anyio
async def test_the_endpoint_serves_the_latest_snapshot_then_the_final_result():
    endpoint = MetricsEndpoint("127.0.0.1", 0)
    try:
        # before the first snapshot: declared, no samples
        assert scrape(endpoint.url) == {}
        endpoint.update(Progress("running", 1.5, sent=120, received=100, confirmed=0, errors=2, send_rate=80.0,
                                 receive_rate=70.0, target_rate=100.0,
                                 client_stats={"connection_losses": 1, "reconnects": 1},
                                 latency_us={"p50": 1500, "p90": 2000, "p99": 4000, "max": 9000}))
        live = scrape(endpoint.url)
        assert live[("stompfast_bench_messages_sent_total", None)] == 120
        assert live[("stompfast_bench_in_flight_messages", None)] == 20
        assert live[("stompfast_bench_errors_total", None)] == 2
        assert live[("stompfast_bench_latency_seconds", "0.99")] == 0.004
        assert live[("stompfast_bench_latency_seconds", "1")] == 0.009
        assert live[("stompfast_bench_reconnects_total", None)] == 1
        assert live[("stompfast_bench_running", None)] == 1
        async with Broker() as broker:
            result = await run_load(LoadConfig(url=broker.url, count=300, heart_beat=(0, 0)))
        endpoint.finish(result)
        final = scrape(endpoint.url)
        assert final[("stompfast_bench_messages_received_total", None)] == 300
        assert final[("stompfast_bench_running", None)] == 0
        assert final[("stompfast_bench_latency_seconds", "0.5")] == result.latency_us["p50"] / 1e6
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(endpoint.url.replace("/metrics", "/"), timeout=5)
        assert info.value.code == 404
    finally:
        endpoint.close()


def test_a_run_is_scraped_live_through_the_command():
    port = free_port()
    run = subprocess.Popen(
        [_executable(), "bench", "--rate", "500", "--duration", "3", "--prometheus", f"127.0.0.1:{port}", "-q"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        seen = []
        deadline = time.monotonic() + 30
        while run.poll() is None and time.monotonic() < deadline:
            try:
                seen.append(scrape(f"http://127.0.0.1:{port}/metrics"))
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.3)
        out, err = run.communicate(timeout=30)
    finally:
        run.kill()
    assert run.returncode == 0, err.decode()
    sent = [s[("stompfast_bench_messages_sent_total", None)] for s in seen if s]
    # scraped while it ran: the count grew between scrapes
    assert len(sent) >= 3 and sent == sorted(sent) and sent[-1] > sent[0], sent
    assert any(s.get(("stompfast_bench_latency_seconds", "0.99")) for s in seen)


def test_every_dashboard_query_names_a_metric_the_endpoint_serves():
    dashboard = json.loads((ROOT / "docs" / "grafana-bench.json").read_text())
    served = {name for name, _, _ in METRICS}
    queries = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert queries
    named = {name for q in queries for name in re.findall(r"stompfast_bench_[a-z_]+", q)}
    assert named and named <= served, named - served
    # and every metric served is on the dashboard
    assert served <= named, served - named
