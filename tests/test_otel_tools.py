"""``--trace`` of ``stompfast send``, ``listen`` and ``bench``, and ``LoadConfig(trace=True)``: the in-process broker.

What leaves the process is checked where it arrives: the SEND frames the broker
recorded carry a ``traceparent``; the spans of a CLI run in a subprocess are read from
its stderr (``--trace=console``). The Spark sink's ``trace`` option is tested in
tests/spark/test_spark_sink.py. Without opentelemetry-sdk these tests skip (with the
reason); the one named ``*without_opentelemetry*`` runs in any case.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from stompfast import cli
from stompfast.loadgen import LoadConfig, run as run_load

try:
    import opentelemetry.sdk.trace  # noqa: F401

    import stompfast.otel  # noqa: F401
except ImportError as exc:  # the optional extra is not installed
    HAVE_OTEL = False
    MISSING = f"opentelemetry-sdk is not installed ({exc}): pip install 'stompfast[otel]' opentelemetry-sdk"
else:
    HAVE_OTEL = True
    MISSING = ""

ROOT = Path(__file__).resolve().parents[1]
needs_otel = pytest.mark.skipif(not HAVE_OTEL, reason=MISSING)
pytestmark = [pytest.mark.timeout(60)]


def sends(broker: Any) -> List[Any]:
    return [f for f in broker.received if f.command == "SEND"]


def stompfast_cli(*args: str, env: Dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m stompfast ARGS`` of this tree, stdin /dev/null, output captured."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environ["PYTHONPATH"] = str(ROOT) + os.pathsep + environ.get("PYTHONPATH", "")
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "stompfast", *args], stdin=subprocess.DEVNULL,
                          capture_output=True, env=environ, timeout=30, check=False)


def console_spans(stderr: bytes) -> List[Dict[str, Any]]:
    """The spans ConsoleSpanExporter wrote (one indented JSON object each) among other lines."""
    text = stderr.decode()
    decoder = json.JSONDecoder()
    spans, at = [], 0
    while True:
        at = text.find("{\n", at)
        if at < 0:
            return spans
        obj, end = decoder.raw_decode(text, at)
        if isinstance(obj, dict) and "context" in obj:
            spans.append(obj)
        at = end


@needs_otel
@pytest.mark.stomp_broker(record=True)
def test_send_trace_puts_a_traceparent_on_every_send(stomp_broker_thread: Any) -> None:
    broker = stomp_broker_thread
    code = cli.main(["send", "--url", broker.url, "/queue/traced", "hi", "--count", "3", "--trace=none", "-q"])
    assert code == 0
    parents = [f.headers.get("traceparent") for f in sends(broker)]
    assert len(parents) == 3 and all(parents), parents
    assert len({p.split("-")[2] for p in parents}) == 3  # a PRODUCER span each

    # without --trace: nothing added
    assert cli.main(["send", "--url", broker.url, "/queue/plain", "hi", "-q"]) == 0
    assert "traceparent" not in sends(broker)[-1].headers


@needs_otel
@pytest.mark.stomp_broker(record=True)
def test_send_and_listen_spans_on_the_console_share_one_trace(stomp_broker_thread: Any) -> None:
    url = stomp_broker_thread.url
    sent = stompfast_cli("send", "--url", url, "/queue/console", "hello", "--trace=console", "-q")
    assert sent.returncode == 0, sent.stderr.decode()
    (producer,) = console_spans(sent.stderr)
    assert producer["name"] == "send /queue/console" and producer["kind"] == "SpanKind.PRODUCER"
    assert producer["attributes"]["messaging.system"] == "stomp"

    got = stompfast_cli("listen", "--url", url, "/queue/console", "--count", "1", "--timeout", "10",
                        "-q", "--trace", env={"OTEL_TRACES_EXPORTER": "console"})
    assert got.returncode == 0, got.stderr.decode()
    assert got.stdout == b"hello\n"
    (consumer,) = console_spans(got.stderr)
    assert consumer["name"] == "receive /queue/console" and consumer["kind"] == "SpanKind.CONSUMER"
    assert consumer["context"]["trace_id"] == producer["context"]["trace_id"]  # across the broker
    assert consumer["parent_id"] == producer["context"]["span_id"]
    assert [e["name"] for e in consumer["events"]] == ["stomp.ack"]


def test_trace_without_opentelemetry_is_a_usage_error_with_the_install_hint() -> None:
    code = ("import sys; sys.modules['opentelemetry'] = None\n"
            "from stompfast import cli\n"
            "sys.exit(cli.main(['send', '--url', 'stomp://127.0.0.1:9/', '/queue/a', 'x', '--trace']))\n")
    environ = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, env=environ, timeout=30, check=False)
    assert done.returncode == cli.EXIT_USAGE, done
    assert b"--trace needs OpenTelemetry" in done.stderr and b"pip install 'stompfast[otel]'" in done.stderr


@needs_otel
def test_unknown_exporter_is_a_usage_error() -> None:
    done = stompfast_cli("send", "--url", "stomp://127.0.0.1:9/", "/queue/a", "x", "--trace",
                         env={"OTEL_TRACES_EXPORTER": "jaeger"})
    assert done.returncode == cli.EXIT_USAGE
    assert b"unknown trace exporter 'jaeger'" in done.stderr


@needs_otel
@pytest.mark.parametrize("trace", [True, False])
def test_loadgen_trace_instruments_every_client(trace: bool) -> None:
    from stompfast.testing import Broker

    with Broker.in_thread(record=True, record_limit=10_000) as broker:
        result = run_load(LoadConfig(url=broker.url, count=200, producers=2, consumers=1, ack="client",
                                     trace=trace, trace_exporter="none"))
        assert result.ok, result.problems
        frames = sends(broker)
    assert len(frames) == 200
    carrying = [f for f in frames if "traceparent" in f.headers]
    assert len(carrying) == (200 if trace else 0)


def test_loadgen_config_refuses_an_unknown_exporter() -> None:
    from stompfast.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="trace_exporter"):
        LoadConfig(trace=True, trace_exporter="jaeger").validate()


@needs_otel
def test_bench_trace_flag() -> None:
    done = stompfast_cli("bench", "--count", "200", "--trace=none", "--json", "-q")
    assert done.returncode == 0, done.stderr.decode()
    config = json.loads(done.stdout)["config"]
    assert config["trace"] is True and config["trace_exporter"] == "none"
