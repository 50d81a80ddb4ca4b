"""stompfast.otel through RabbitMQ and ActiveMQ: the trace context crosses the broker in the SEND's headers.

A message sent by an instrumented client arrives with a CONSUMER span that is a child
of (and linked to) the producer's span, on both clients and every backend; the
metrics count what was sent and received. Skipped without opentelemetry-sdk.
"""

from __future__ import annotations

import anyio
import pytest

from stompfast import AsyncClient, Client

otel = pytest.importorskip("stompfast.otel", reason="opentelemetry is not installed: pip install 'stompfast[otel]'")
sdk_trace = pytest.importorskip("opentelemetry.sdk.trace", reason="opentelemetry-sdk is not installed")

from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import SpanKind  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

WAIT = 10
N = 5


class Telemetry:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = sdk_trace.TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def instrument(self, client):
        return otel.instrument(client, tracer_provider=self.tracer_provider, meter_provider=self.meter_provider)

    def spans(self, prefix):
        found = [s for s in self.exporter.get_finished_spans() if s.name.startswith(prefix)]
        return sorted(found, key=lambda s: s.start_time)

    def metric(self, name, **attributes):
        data = self.reader.get_metrics_data()
        values = [p.value for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
                  if m.name == name for p in m.data.data_points if attributes.items() <= dict(p.attributes).items()]
        assert len(values) == 1, (name, values)
        return values[0]


@pytest.fixture
def telemetry():
    t = Telemetry()
    yield t
    t.tracer_provider.shutdown()
    t.meter_provider.shutdown()


def check(telemetry: Telemetry, queue: str, bodies) -> None:
    producers = telemetry.spans("send ")
    consumers = telemetry.spans("receive ")
    assert len(producers) == len(consumers) == N
    by_trace = {p.context.trace_id: p for p in producers}
    for consumer, body in zip(consumers, bodies):
        producer = by_trace[consumer.context.trace_id]  # the consumer span is in the producer's trace
        assert consumer.kind == SpanKind.CONSUMER and producer.kind == SpanKind.PRODUCER
        assert consumer.parent.span_id == producer.context.span_id
        assert [link.context.span_id for link in consumer.links] == [producer.context.span_id]
        assert consumer.attributes["messaging.system"] == "stomp"
        assert consumer.attributes["messaging.message.id"]
        assert queue in consumer.attributes["messaging.destination.name"]
        assert [e.name for e in consumer.events] == ["stomp.ack", "stomp.receipt"]
        assert consumer.attributes["messaging.message.body.size"] == len(body)
    assert telemetry.metric("messaging.client.sent.messages") == N
    assert telemetry.metric("messaging.client.consumed.messages") == N


@pytest.mark.anyio
async def test_the_consumer_span_continues_the_producers_trace(broker_url, queue, telemetry):
    async with AsyncClient(broker_url, heart_beat=(0, 0)) as client:
        telemetry.instrument(client)
        async with client.subscribe(queue, ack="client-individual") as sub:
            for i in range(N):
                await client.send(queue, b"message %d" % i, receipt=True)
            bodies = []
            for _ in range(N):
                with anyio.fail_after(WAIT):
                    message = await sub.receive()
                assert "traceparent" in message.headers
                bodies.append(message.body)
                await message.ack(receipt=True)
        assert telemetry.metric("stomp.client.settled.messages", **{"messaging.operation.name": "ack"}) == N
    check(telemetry, queue, bodies)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_blocking_clients_consumer_span_continues_the_producers_trace(broker_url, queue, telemetry, backend):
    with Client(broker_url, backend=backend, heart_beat=(0, 0)) as client:
        telemetry.instrument(client)
        with client.subscribe(queue, ack="client-individual") as sub:
            for i in range(N):
                client.send(queue, b"message %d" % i, receipt=True, timeout=WAIT)
            bodies = []
            for _ in range(N):
                message = sub.receive(timeout=WAIT)
                bodies.append(message.body)
                message.ack(receipt=True, timeout=WAIT)
    check(telemetry, queue, bodies)
