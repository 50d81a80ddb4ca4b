"""Durable subscriptions (``subscribe(..., durable=name)`` with ``client_id``) on the three real brokers.

Each test gives its subscription a fresh topic, client id and name, and deletes it at
the end (``forget=True``), so that nothing is left on the brokers. What each broker
does was measured with raw sockets first (docs/brokers.md): all three keep the
subscription and its messages while the subscriber is away, and all three delete it on
the UNSUBSCRIBE the client writes for ``forget=True``.
"""

from __future__ import annotations

import uuid
from typing import List, Tuple

import anyio
import pytest

from stompfast import AsyncClient, Client, ConfigurationError, ReceiveTimeout


@pytest.fixture
def durable_broker(broker: str, broker_url: str) -> Tuple[str, str]:
    """``(name, url)`` of a real broker that answers STOMP: every broker of the ``broker`` fixture."""
    return broker, broker_url


def _fresh() -> Tuple[str, str, str]:
    """A topic, a client id and a durable name no other test uses."""
    tag = uuid.uuid4().hex[:12]
    return f"/topic/stompfast-durable-{tag}", f"stompfast-app-{tag}", f"reader-{tag}"


async def _send(url: str, topic: str, bodies: List[bytes]) -> None:
    async with AsyncClient(url) as producer:
        for body in bodies:
            await producer.send(topic, body, receipt=True)


async def _take(sub, n: int, quiet: float) -> List[bytes]:
    """``n`` messages (acked), then whatever else comes within ``quiet`` seconds."""
    got: List[bytes] = []
    with anyio.fail_after(15):
        while len(got) < n:
            message = await sub.receive()
            got.append(message.body)
            await message.ack()
    with anyio.move_on_after(quiet):
        while True:
            message = await sub.receive()
            got.append(message.body)
            await message.ack()
    return got


@pytest.mark.anyio
async def test_a_durable_subscription_keeps_what_is_sent_while_away_until_it_is_forgotten(durable_broker):
    name, url = durable_broker
    topic, client_id, reader = _fresh()
    # subscribe, then leave normally: leaving the block must not delete it
    async with AsyncClient(url, client_id=client_id) as client:
        async with client.subscribe(topic, durable=reader, ack="client-individual") as sub:
            assert sub.id == reader and sub.durable == reader
    await _send(url, topic, [b"away-0", b"away-1", b"away-2"])
    async with AsyncClient(url, client_id=client_id) as client:
        async with client.subscribe(topic, durable=reader, ack="client-individual") as sub:
            assert await _take(sub, 3, quiet=1.0) == [b"away-0", b"away-1", b"away-2"]
            await sub.aclose(forget=True)
            assert sub.closed
    # deleted: what is sent now is kept for nobody (measured the same on all three brokers)
    await _send(url, topic, [b"gone-0", b"gone-1"])
    async with AsyncClient(url, client_id=client_id) as client:
        async with client.subscribe(topic, durable=reader, ack="client-individual") as sub:
            assert await _take(sub, 0, quiet=1.5) == []
            await sub.aclose(forget=True)


@pytest.mark.anyio
async def test_a_plain_subscription_keeps_nothing_while_away(durable_broker):
    # the control of the test above: without durable= the messages sent while away are lost
    name, url = durable_broker
    topic, client_id, _ = _fresh()
    async with AsyncClient(url, client_id=client_id) as client:
        async with client.subscribe(topic, ack="client-individual"):
            pass
    await _send(url, topic, [b"lost"])
    async with AsyncClient(url, client_id=client_id) as client:
        async with client.subscribe(topic, ack="client-individual") as sub:
            assert await _take(sub, 0, quiet=1.0) == []


@pytest.mark.anyio
async def test_durable_without_client_id_is_refused_where_the_broker_needs_one(durable_broker):
    name, url = durable_broker
    topic, _, reader = _fresh()
    async with AsyncClient(url) as client:
        if name == "rabbitmq":
            # RabbitMQ keys the durable queue by destination and id only: no client identity needed
            async with client.subscribe(topic, durable=reader) as sub:
                await sub.aclose(forget=True)
        else:
            # refused by the call, before anything is sent (ActiveMQ would take it under the
            # connection's random id, where no later connection finds it; Artemis answers ERROR)
            with pytest.raises(ConfigurationError, match="client_id"):
                client.subscribe(topic, durable=reader)
            await client.send(topic, b"still up", receipt=True)


@pytest.mark.anyio
async def test_forget_needs_a_durable_subscription(durable_broker):
    name, url = durable_broker
    topic, client_id, _ = _fresh()
    async with AsyncClient(url, client_id=client_id) as client:
        async with client.subscribe(topic) as sub:
            with pytest.raises(ConfigurationError, match="not durable"):
                await sub.aclose(forget=True)
            assert not sub.closed


def test_the_blocking_client_keeps_and_forgets_a_durable_subscription(durable_broker):
    name, url = durable_broker
    topic, client_id, reader = _fresh()
    with Client(url, client_id=client_id) as client:
        with client.subscribe(topic, durable=reader, ack="client-individual") as sub:
            assert sub.durable == reader
    with Client(url) as producer:
        for i in range(3):
            producer.send(topic, b"away-%d" % i, receipt=True).result(10)
    with Client(url, client_id=client_id) as client:
        with client.subscribe(topic, durable=reader, ack="client-individual") as sub:
            got = []
            for _ in range(3):
                message = sub.receive(timeout=15)
                got.append(message.body)
                message.ack()
            assert got == [b"away-0", b"away-1", b"away-2"]
            with pytest.raises(ReceiveTimeout):
                sub.receive(timeout=1.0)
            sub.close(forget=True)
    with Client(url) as producer:
        producer.send(topic, b"gone", receipt=True).result(10)
    with Client(url, client_id=client_id) as client:
        with client.subscribe(topic, durable=reader) as sub:
            with pytest.raises(ReceiveTimeout):
                sub.receive(timeout=1.5)
            sub.close(forget=True)
