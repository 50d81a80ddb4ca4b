"""stompfast.otel against the in-process broker: spans across the broker, metrics from client.stats(), no cost off.

The OpenTelemetry SDK's in-memory span exporter and metric reader collect what the
instrumented clients report. Every async test runs on asyncio, asyncio+uvloop and
trio (tests/conftest.py); the blocking client's tests on its asyncio and trio loops.
Without opentelemetry-sdk the OTel tests skip (with the reason); the tests named
``*without_opentelemetry*`` run in any case, in a subprocess where ``opentelemetry``
cannot be imported.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Dict, List, Tuple

import anyio
import pytest

from stompfast import AsyncClient, Client, ReconnectPolicy
from stompfast.testing import Broker

try:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    import stompfast.otel as otel
except ImportError as exc:  # the optional extra is not installed
    HAVE_OTEL = False
    MISSING = f"opentelemetry-sdk is not installed ({exc}): pip install 'stompfast[otel]' opentelemetry-sdk"
else:
    HAVE_OTEL = True
    MISSING = ""

ROOT = Path(__file__).resolve().parents[1]
WAIT = 10
FAST = ReconnectPolicy(initial_delay=0.01, max_delay=0.05, jitter=0)
needs_otel = pytest.mark.skipif(not HAVE_OTEL, reason=MISSING)
pytestmark = [pytest.mark.timeout(60)]

# Run in a fresh interpreter before anything else: opentelemetry cannot be imported there.
BLOCK_OTEL = "import sys; sys.modules['opentelemetry'] = None\n"


class Telemetry:
    """A tracer provider and a meter provider of the SDK, with in-memory export."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def instrument(self, client: Any, **kwargs: Any) -> Any:
        return otel.instrument(client, tracer_provider=self.tracer_provider, meter_provider=self.meter_provider,
                               **kwargs)

    def spans(self, name_prefix: str = "") -> List[Any]:
        """The finished spans whose name starts with ``name_prefix``, in the order they started."""
        spans = [s for s in self.exporter.get_finished_spans() if s.name.startswith(name_prefix)]
        return sorted(spans, key=lambda s: s.start_time)

    def metrics(self) -> Dict[Tuple[str, frozenset], float]:
        """Every data point now: (instrument name, attributes) -> value."""
        points: Dict[Tuple[str, frozenset], float] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name.startswith("otel."):
                        # the SDK's own metrics (opentelemetry-sdk 1.41, the last for Python 3.9,
                        # reports its collection time as a histogram): not stompfast's
                        continue
                    for point in metric.data.data_points:
                        points[(metric.name, frozenset(point.attributes.items()))] = point.value
        return points

    def metric(self, name: str, **attributes: Any) -> float:
        wanted = {k.replace("__", "."): v for k, v in attributes.items()}
        found = [v for (n, attrs), v in self.metrics().items() if n == name and wanted.items() <= dict(attrs).items()]
        assert len(found) == 1, (name, wanted, self.metrics())
        return found[0]

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


@pytest.fixture
def telemetry():
    if not HAVE_OTEL:
        pytest.skip(MISSING)
    t = Telemetry()
    yield t
    t.shutdown()


def traceparent_of(span: Any) -> str:
    ctx = span.context
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}"


def assert_consumer_of(consumer: Any, producer: Any) -> None:
    """``consumer`` is the CONSUMER span of the message ``producer`` sent: its child, and linked to it."""
    assert consumer.kind == SpanKind.CONSUMER and producer.kind == SpanKind.PRODUCER
    assert consumer.context.trace_id == producer.context.trace_id
    assert consumer.parent is not None and consumer.parent.span_id == producer.context.span_id
    assert [link.context.span_id for link in consumer.links] == [producer.context.span_id]


async def wait_until(predicate, timeout=WAIT):
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.005)


# -- tracing, the async client ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_message_carries_the_producer_context_to_its_consumer_span(telemetry):
    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0)) as client:
            telemetry.instrument(client)
            async with client.subscribe("/queue/t", ack="client-individual") as sub:
                await client.send("/queue/t", b"one", receipt=True)
                await client.send("/queue/t", "two", headers={"correlation-id": "c-1"})
                first = await sub.receive()
                async for second in sub:  # noqa: B007  (the iterator's first message)
                    break
                await first.ack(receipt=True)
                await second.ack()
        sends = [f for f in broker.received if f.command == "SEND"]
    producers = telemetry.spans("send ")
    consumers = telemetry.spans("receive ")
    assert [p.name for p in producers] == ["send /queue/t"] * 2
    # the W3C context on the wire is the producer span's
    assert [f.headers["traceparent"][:-3] for f in sends] == [traceparent_of(p) for p in producers]
    for producer, consumer, message in zip(producers, consumers, (first, second)):
        assert_consumer_of(consumer, producer)
        assert consumer.attributes["messaging.message.id"] == message.message_id
        assert consumer.attributes["messaging.destination.subscription.name"] == message.subscription
    p = producers[0].attributes
    assert (p["messaging.system"], p["messaging.operation.type"], p["messaging.destination.name"]) == \
        ("stomp", "send", "/queue/t")
    assert p["messaging.message.body.size"] == 3 and p["server.port"] == broker.port
    c = consumers[1].attributes
    assert (c["messaging.system"], c["messaging.operation.type"], c["messaging.message.conversation_id"]) == \
        ("stomp", "receive", "c-1")
    # the receipt of the SEND, the ACK and its receipt are events
    assert [e.name for e in producers[0].events] == ["stomp.receipt"]
    assert [e.name for e in producers[1].events] == []
    assert [e.name for e in consumers[0].events] == ["stomp.ack", "stomp.receipt"]
    assert [e.name for e in consumers[1].events] == ["stomp.ack"]
    assert consumers[0].events[0].attributes["messaging.operation.type"] == "settle"


@pytest.mark.anyio
async def test_nack_cumulative_ack_auto_mode_and_unsettled_messages(telemetry):
    async with Broker(nack="drop") as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0)) as client:
            telemetry.instrument(client, metrics=False)
            async with client.subscribe("/queue/n", ack="client-individual") as sub:
                await client.send("/queue/n", b"refused", receipt=True)
                message = await sub.receive()
                await message.nack(receipt=True)
            async with client.subscribe("/queue/c", ack="client") as sub:
                for i in range(3):
                    await client.send("/queue/c", b"%d" % i)
                batch = []
                while len(batch) < 3:
                    batch += await sub.receive_batch(3)
                await batch[2].ack()  # covers the two before it
            async with client.subscribe("/queue/a") as sub:  # auto: the span ends at once
                await client.send("/queue/a", b"auto", receipt=True)
                auto = await sub.receive()
                assert otel.span_of(auto).is_recording() is False
                assert otel.context_of(auto) is not None
            async with client.subscribe("/queue/u", ack="client-individual") as sub:
                await client.send("/queue/u", b"never acked", receipt=True)
                unsettled = await sub.receive()
                assert otel.span_of(unsettled).is_recording()
    spans = {s.name: s for s in telemetry.spans("receive /queue/n")}
    assert [e.name for e in spans["receive /queue/n"].events] == ["stomp.nack", "stomp.receipt"]
    cumulative = telemetry.spans("receive /queue/c")
    assert [[e.name for e in s.events] for s in cumulative] == [["stomp.ack"]] * 3
    assert [s.events[0].attributes.get("stomp.cumulative", False) for s in cumulative] == [True, True, False]
    assert [e.name for e in telemetry.spans("receive /queue/a")[0].events] == []
    assert [e.name for e in telemetry.spans("receive /queue/u")[0].events] == ["stomp.unsettled"]


@pytest.mark.anyio
async def test_client_level_ack_transactions_and_link_only(telemetry):
    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0)) as client:
            telemetry.instrument(client, metrics=False, link_only=True)
            async with client.subscribe("/queue/x", ack="client-individual") as sub:
                async with client.transaction() as tx:
                    await tx.send("/queue/x", b"in a transaction")
                message = await sub.receive()
                await client.ack(message)
                async with client.transaction() as tx:
                    await client.send("/queue/x", b"second")
                    second = await sub.receive()
                    await tx.ack(second)
    producer, producer2 = telemetry.spans("send ")
    assert producer.attributes["stomp.transaction"] and "stomp.transaction" not in producer2.attributes
    consumer, consumer2 = telemetry.spans("receive ")
    # link only: a trace of its own, tied to the producer's by the link
    assert consumer.parent is None and consumer.context.trace_id != producer.context.trace_id
    assert [link.context.span_id for link in consumer.links] == [producer.context.span_id]
    assert [e.name for e in consumer.events] == ["stomp.ack"]
    assert [e.name for e in consumer2.events] == ["stomp.ack"]
    assert consumer2.events[0].attributes["stomp.transaction"]


@pytest.mark.anyio
async def test_a_raising_tracer_never_fails_a_send_and_is_logged_once(telemetry, caplog):
    class Broken:
        def start_span(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("tracer down")

    class BrokenProvider:
        def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
            return Broken()

    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0)) as client:
            otel.instrument(client, tracer_provider=BrokenProvider(), metrics=False)
            with caplog.at_level(logging.DEBUG, logger="stompfast.otel"):
                async with client.subscribe("/queue/b") as sub:
                    for i in range(3):
                        await client.send("/queue/b", b"%d" % i, receipt=i == 2)
                    assert [(await sub.receive()).body for _ in range(3)] == [b"0", b"1", b"2"]
        sent = [f for f in broker.received if f.command == "SEND"]
    assert [f.body for f in sent] == [b"0", b"1", b"2"] and not any("traceparent" in f.headers for f in sent)
    records = [r for r in caplog.records if r.name == "stompfast.otel"]
    assert [r.levelno for r in records][:1] == [logging.WARNING]
    assert all(r.levelno == logging.DEBUG for r in records[1:]) and len(records) >= 6


@pytest.mark.anyio
async def test_instrument_twice_is_refused_and_uninstrument_restores_the_class_methods(telemetry):
    from stompfast.errors import ConfigurationError

    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0)) as client:
            done = telemetry.instrument(client)
            assert otel.instrumentation_of(client) is done and "send" in vars(client)
            with pytest.raises(ConfigurationError):
                telemetry.instrument(client)
            done.uninstrument()
            assert otel.instrumentation_of(client) is None
            assert not set(vars(client)) & {"send", "send_nowait", "subscribe", "transaction"}
            assert type(client.subscribe("/queue/z")) is type(AsyncClient.subscribe(client, "/queue/z"))
            await client.send("/queue/z", b"plain", receipt=True)
        assert "traceparent" not in [f for f in broker.received if f.command == "SEND"][0].headers
    assert telemetry.spans() == []


# -- tracing, the blocking client ------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_blocking_client_traces_send_receive_and_ack(telemetry, backend):
    with Broker.in_thread() as broker:
        with Client(broker.url, backend=backend, heart_beat=(0, 0)) as client:
            telemetry.instrument(client, metrics=False)
            with client.subscribe("/queue/s", ack="client-individual") as sub:
                client.send("/queue/s", b"one", receipt=True, timeout=WAIT)
                pending = client.send("/queue/s", b"two", receipt=True, wait=False)
                client.send("/queue/s", b"three")
                client.flush(timeout=WAIT)
                assert pending.done()
                one = sub.receive(timeout=WAIT)
                two, three = sub.receive(timeout=WAIT), sub.receive(timeout=WAIT)
                one.ack(receipt=True, timeout=WAIT)
                two.nack()
                client.ack(three)
                client.flush(timeout=WAIT)
        sends = [f for f in broker.received if f.command == "SEND"]
    producers = telemetry.spans("send ")
    consumers = telemetry.spans("receive ")
    assert [f.headers["traceparent"][:-3] for f in sends] == [traceparent_of(p) for p in producers]
    assert [[e.name for e in p.events] for p in producers] == [["stomp.receipt"], ["stomp.receipt"], []]
    assert len(consumers) == 3
    for producer, consumer in zip(producers, consumers):
        assert_consumer_of(consumer, producer)
    assert [[e.name for e in c.events] for c in consumers] == [["stomp.ack", "stomp.receipt"], ["stomp.nack"],
                                                               ["stomp.ack"]]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_callback_runs_in_its_process_span(telemetry, backend):
    from opentelemetry import trace

    seen: List[Any] = []
    done = threading.Event()

    def handle(message: Any) -> None:
        seen.append(trace.get_current_span().get_span_context())
        message.ack()
        if len(seen) == 5:
            done.set()

    with Broker.in_thread() as broker:
        with Client(broker.url, backend=backend, heart_beat=(0, 0)) as client:
            telemetry.instrument(client, metrics=False)
            for i in range(5):  # already queued when the subscription starts: the first callbacks race subscribe()
                client.send("/queue/cb", b"%d" % i)
            client.flush(timeout=WAIT)
            with client.subscribe("/queue/cb", ack="client-individual", callback=handle):
                assert done.wait(WAIT)
    producers = telemetry.spans("send ")
    processes = telemetry.spans("process ")
    assert len(processes) == 5
    assert [s.span_id for s in seen] == [p.context.span_id for p in processes]  # current in the callback
    for producer, process in zip(producers, processes):
        assert_consumer_of(process, producer)
        assert process.attributes["messaging.operation.type"] == "process"
        assert [e.name for e in process.events] == ["stomp.ack"]


# -- metrics ---------------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_counters_equal_what_was_sent_and_received(telemetry):
    async with Broker(nack="drop") as broker:  # (a NACKed message is not redelivered)
        async with AsyncClient(broker.url, heart_beat=(0, 0)) as client:
            telemetry.instrument(client, tracing=False, name="worker")
            async with client.subscribe("/queue/m", ack="client-individual", buffer_size=50) as sub:
                for i in range(20):
                    await client.send("/queue/m", b"%d" % i, receipt=i % 5 == 0)
                await client.flush()
                taken = [await sub.receive() for _ in range(12)]
                for message in taken[:10]:
                    await message.ack()
                await taken[10].nack()
                await wait_until(lambda: sub.pending == 8)
                await client.flush()
                stats = client.stats()
                m = telemetry.metric
                assert m("messaging.client.sent.messages", messaging__operation__name="send") == 20
                assert m("messaging.client.consumed.messages") == 20
                assert m("stomp.client.settled.messages", messaging__operation__name="ack") == 10
                assert m("stomp.client.settled.messages", messaging__operation__name="nack") == 1
                assert m("stomp.client.buffered.messages", messaging__destination__subscription__name=sub.id) == 8
                assert m("stomp.client.frames", network__io__direction="transmit") == stats.frames_out
                assert m("stomp.client.io", network__io__direction="receive") == stats.bytes_in
                confirmed = m("stomp.client.receipts", stomp__receipt__outcome="confirmed")
                assert confirmed == stats.receipts_confirmed >= 4 + 2  # 4 SENDs, 2 flushes (and the SUBSCRIBE)
                assert m("stomp.client.receipt.duration.count") == stats.receipt_rtt.count == confirmed
                assert 0 < m("stomp.client.receipt.duration.sum") == pytest.approx(stats.receipt_rtt.sum)
                assert m("stomp.client.receipt.duration.quantile", quantile=0.5) == stats.receipt_rtt.quantile(0.5)
                assert m("stomp.client.receipts.pending") == 0 and m("stomp.client.errors") == 0
                every = telemetry.metrics()
                assert all(dict(attrs)["messaging.system"] == "stomp" for _, attrs in every)
                assert all(dict(attrs)["stomp.client.name"] == "worker" for _, attrs in every)


@pytest.mark.anyio
async def test_a_reconnect_shows_in_the_counters(telemetry):
    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0), reconnect=FAST) as client:
            telemetry.instrument(client, metrics=True, tracing=False)
            assert telemetry.metric("stomp.client.reconnects") == 0
            await client.send("/queue/r", b"before", receipt=True)
            broker.drop_connections()
            await wait_until(lambda: client.reconnects == 1 and client.is_connected)
            await client.send("/queue/r", b"after", receipt=True)
            assert telemetry.metric("stomp.client.reconnects") == 1
            assert telemetry.metric("stomp.client.connection.losses") == 1
            assert telemetry.metric("messaging.client.sent.messages") == 2


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_blocking_clients_counters_and_several_clients_on_one_meter(telemetry, backend):
    with Broker.in_thread() as broker:
        with Client(broker.url, backend=backend, heart_beat=(0, 0)) as a, \
                Client(broker.url, backend=backend, heart_beat=(0, 0)) as b:
            telemetry.instrument(a, name="a")
            telemetry.instrument(b, name="b")
            with b.subscribe("/queue/sm") as sub:
                for i in range(7):
                    a.send("/queue/sm", b"%d" % i)
                a.flush(timeout=WAIT)
                got = [sub.receive(timeout=WAIT) for _ in range(7)]
            assert len(got) == 7
            m = telemetry.metric
            assert m("messaging.client.sent.messages", stomp__client__name="a") == 7
            assert m("messaging.client.sent.messages", stomp__client__name="b") == 0
            assert m("messaging.client.consumed.messages", stomp__client__name="b") == 7
            otel.uninstrument(b)
            assert [v for (n, attrs), v in telemetry.metrics().items()
                    if n == "messaging.client.consumed.messages" and dict(attrs).get("stomp.client.name") == "b"] == []


# -- no change on the wire, and no opentelemetry ---------------------------------------------------------------

# One session of the async client against a fresh in-process broker: the client frames the broker recorded.
SCENARIO = r'''
import json, sys
import anyio
from stompfast import AsyncClient
from stompfast.testing import Broker

def run(setup=lambda client: None):
    async def main():
        async with Broker() as broker:
            async with AsyncClient(broker.url, heart_beat=(0, 0)) as client:
                setup(client)
                async with client.subscribe("/queue/w", ack="client-individual") as sub:
                    await client.send("/queue/w", b"plain")
                    await client.send("/queue/w", "text", headers={"x": "1"}, receipt=True)
                    for message in [await sub.receive(), await sub.receive()]:
                        await message.ack()
                    async with client.transaction() as tx:
                        await tx.send("/queue/w", b"in tx")
                    await client.flush()
            return [[f.command, dict(f.headers), f.body.decode()] for f in broker.received]
    return anyio.run(main)
'''


def _frames_in_subprocess(prelude: str, body: str) -> List[Any]:
    code = prelude + SCENARIO + body
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@needs_otel
def test_nothing_changes_on_the_wire_when_tracing_is_off():
    namespace: Dict[str, Any] = {}
    exec(SCENARIO, namespace)
    run = namespace["run"]
    plain = run()  # opentelemetry and stompfast.otel imported in this process, this client not instrumented
    metrics_only = run(lambda client: otel.instrument(client, tracing=False, meter_provider=MeterProvider()))
    undone = run(lambda client: otel.instrument(client, tracer_provider=TracerProvider()).uninstrument())
    # opentelemetry not importable at all
    without = _frames_in_subprocess(BLOCK_OTEL, "print(json.dumps(run()))")
    assert plain == json.loads(json.dumps(plain))  # (JSON round trip, as the subprocess's)
    assert plain[0][0] == "CONNECT" and [f[0] for f in plain].count("SEND") == 3
    assert json.loads(json.dumps(plain)) == metrics_only == undone == without
    # with tracing on, the one difference is the trace context added to each SEND
    traced = run(lambda client: otel.instrument(client, tracer_provider=TracerProvider(), metrics=False))
    stripped = [[c, {k: v for k, v in h.items() if k not in ("traceparent", "tracestate")}, b] for c, h, b in traced]
    assert json.loads(json.dumps(stripped)) == without
    assert all("traceparent" in h for c, h, b in traced if c == "SEND")


def test_stompfast_works_and_otel_says_how_to_install_it_without_opentelemetry():
    code = BLOCK_OTEL + r'''
import stompfast, stompfast.testing
try:
    import stompfast.otel
except ImportError as exc:
    print("refused:", exc)
else:
    raise SystemExit("stompfast.otel imported without opentelemetry")
'''
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "refused:" in done.stdout and "pip install 'stompfast[otel]'" in done.stdout


def test_these_tests_skip_with_a_reason_without_opentelemetry():
    """The suite passes where the otel extra is not installed: this module's OTel tests skip, saying why."""
    code = BLOCK_OTEL + (
        "import pytest\n"
        f"sys.exit(pytest.main([{__file__!r}, '-q', '-rs', '-p', 'no:cacheprovider',"
        " '-k', 'not without_opentelemetry']))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "passed" not in done.stdout.splitlines()[-1] and "skipped" in done.stdout.splitlines()[-1]
    assert "pip install 'stompfast[otel]' opentelemetry-sdk" in done.stdout
