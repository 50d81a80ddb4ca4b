"""The in-process broker's memory limit: producer flow control, the ERROR mode, the accounting."""

from __future__ import annotations

import anyio
import pytest
from rawstomp import RawClient, ack_headers

from stompfast import AsyncClient, ServerError
from stompfast.testing import Broker
from stompfast.testing._broker import DEFAULT_MAX_BYTES, MESSAGE_OVERHEAD

pytestmark = pytest.mark.anyio

QUEUE = "/queue/mem"
LIMIT = 4096


def body(i: int) -> bytes:
    return b"%03d" % i + b"." * 97  # 100 bytes, numbered so that order shows


#: what one of these messages counts (a SEND's receipt, destination and content-length are not copied)
SIZE = len(body(0)) + len(QUEUE) + MESSAGE_OVERHEAD
#: SENDs accepted before the broker is full: one is admitted while the total is below the limit
ADMITTED = -(-LIMIT // SIZE)


async def connect(broker):
    return await RawClient.connected(broker.port, "1.2")


async def receipts_for(c: RawClient, seconds: float) -> list:
    """The receipt ids that arrive within ``seconds``."""
    await c.read_for(seconds)
    got = [f.headers["receipt-id"] for f in c.frames if f.command == "RECEIPT"]
    c.frames.clear()
    return got


@pytest.mark.stomp_broker(max_bytes=LIMIT)
@pytest.mark.parametrize("ack", ["auto", "client-individual"])
async def test_a_full_broker_holds_the_producer_until_a_consumer_drains(stomp_broker, ack):
    broker, n = stomp_broker, 3 * ADMITTED
    async with await connect(broker) as producer:
        for i in range(n):
            await producer.send("SEND", {"destination": QUEUE, "receipt": f"r-{i}"}, body(i))
        await broker.wait_for(lambda: broker.stats.producers_blocked == 1)
        # held: only the SENDs accepted before the limit are confirmed, and no more come
        assert await receipts_for(producer, 0.3) == [f"r-{i}" for i in range(ADMITTED)]
        stats = broker.stats
        assert stats.producers_blocked == 1 and stats.frames_in["SEND"] == ADMITTED
        assert stats.stored_messages == ADMITTED == broker.queue_depth(QUEUE)
        assert LIMIT <= stats.stored_bytes == ADMITTED * SIZE < LIMIT + SIZE
        # the broker serves its other connections meanwhile: a consumer drains and unblocks it
        async with await connect(broker) as consumer:
            await consumer.receipt("SUBSCRIBE", {"id": "0", "destination": QUEUE, "ack": ack},
                                   rid="sub", keep_messages=True)
            got = []
            peak = 0
            while len(got) < n:
                message = await consumer.expect("MESSAGE")
                got.append(message.body)
                peak = max(peak, broker.stats.stored_bytes)
                if ack != "auto":
                    await consumer.send("ACK", ack_headers("1.2", message))
            assert got == [body(i) for i in range(n)]  # nothing lost, order kept
            assert peak < LIMIT + SIZE
            rest = []
            with anyio.fail_after(5):
                while len(rest) < n - ADMITTED:
                    rest += await receipts_for(producer, 0.05)
            assert rest == [f"r-{i}" for i in range(ADMITTED, n)]
            await consumer.sync()  # its last ACK was handled
            stats = broker.stats
            assert (stats.stored_bytes, stats.stored_messages, stats.producers_blocked) == (0, 0, 0)


@pytest.mark.stomp_broker(max_bytes=LIMIT)
async def test_acks_of_a_client_consumer_unblock_the_producer_not_deliveries(stomp_broker):
    """Unacked deliveries still count: the producer waits for the ACKs, which another connection sends."""
    broker = stomp_broker
    async with await connect(broker) as producer, await connect(broker) as consumer:
        await consumer.receipt("SUBSCRIBE", {"id": "0", "destination": QUEUE, "ack": "client"}, rid="sub")
        for i in range(ADMITTED + 1):
            await producer.send("SEND", {"destination": QUEUE, "receipt": f"r-{i}"}, body(i))
        messages = await consumer.messages(ADMITTED)
        await broker.wait_for(lambda: broker.stats.producers_blocked == 1)
        assert await receipts_for(producer, 0.2) == [f"r-{i}" for i in range(ADMITTED)]
        assert broker.unacked(QUEUE) == ADMITTED and broker.stats.stored_messages == ADMITTED
        await consumer.send("ACK", ack_headers("1.2", messages[0]))  # client mode: this one only
        assert await receipts_for(producer, 0.2) == [f"r-{ADMITTED}"]
        assert (await consumer.expect("MESSAGE")).body == body(ADMITTED)
        await consumer.send("ACK", ack_headers("1.2", messages[-1]))  # and every earlier one
        await consumer.sync()
        assert broker.stats.stored_messages == 1  # the last one, delivered and unacked


@pytest.mark.stomp_broker(max_bytes=LIMIT)
async def test_a_held_async_client_completes_once_another_client_consumes(stomp_broker):
    broker, n = stomp_broker, 2 * ADMITTED
    confirmed = []

    async def produce(client: AsyncClient) -> None:
        for i in range(n):
            await client.send(QUEUE, body(i), receipt=True)
            confirmed.append(i)

    async with AsyncClient(broker.url) as producer, anyio.create_task_group() as tg:
        tg.start_soon(produce, producer)
        await broker.wait_for(lambda: broker.stats.producers_blocked == 1)
        await anyio.sleep(0.2)
        assert confirmed == list(range(ADMITTED))  # its send(receipt=True) waits
        async with AsyncClient(broker.url) as consumer, consumer.subscribe(QUEUE, ack="client-individual") as sub:
            got = []
            for _ in range(n):
                message = await sub.receive()
                got.append(message.body)
                await message.ack()
        assert got == [body(i) for i in range(n)]
        with anyio.fail_after(5):
            while len(confirmed) < n:
                await anyio.sleep(0.01)
    assert confirmed == list(range(n))


@pytest.mark.stomp_broker(max_bytes=LIMIT)
async def test_a_held_producer_is_dropped_cleanly(stomp_broker):
    broker = stomp_broker
    async with await connect(broker) as producer:
        for i in range(ADMITTED + 1):
            await producer.send("SEND", {"destination": QUEUE, "receipt": f"r-{i}"}, body(i))
        await broker.wait_for(lambda: broker.stats.producers_blocked == 1)
        broker.drop_connections()
        await producer.expect_closed()
    await broker.wait_for(lambda: broker.connections == 0 and broker.stats.producers_blocked == 0)
    assert broker.queue_depth(QUEUE) == ADMITTED  # the held SEND went with its connection
    assert broker.errors == []


@pytest.mark.stomp_broker(max_bytes=LIMIT, when_full="error")
async def test_error_mode_refuses_the_send_that_finds_the_broker_full(stomp_broker):
    broker = stomp_broker
    async with await connect(broker) as producer:
        for i in range(ADMITTED):
            await producer.receipt("SEND", {"destination": QUEUE}, body(i), rid=f"r-{i}")
        await producer.send("SEND", {"destination": QUEUE, "receipt": "too-much"}, body(ADMITTED))
        error = await producer.expect_error("Memory limit reached", receipt_id="too-much")
        assert f"its limit is {LIMIT}" in error.body.decode()
    stats = broker.stats
    assert stats.sends_refused == 1 and stats.producers_blocked == 0
    assert stats.stored_messages == ADMITTED == broker.queue_depth(QUEUE)
    async with AsyncClient(broker.url) as client:  # the client library reports it as a ServerError
        with pytest.raises(ServerError, match="Memory limit reached"):
            await client.send(QUEUE, b"x", receipt=True)
    assert broker.purge(QUEUE) == ADMITTED and broker.stats.stored_bytes == 0
    async with AsyncClient(broker.url) as client:  # room again: accepted
        await client.send(QUEUE, b"x", receipt=True)


@pytest.mark.stomp_broker(max_bytes=LIMIT)
async def test_a_commit_waits_for_room_and_held_sends_are_not_counted(stomp_broker):
    broker = stomp_broker
    async with await connect(broker) as producer:
        await producer.send("BEGIN", {"transaction": "t"})
        for i in range(2 * ADMITTED):  # held in the transaction: not counted, never blocked
            await producer.send("SEND", {"destination": QUEUE, "transaction": "t"}, body(i))
        await producer.sync("s1")
        assert broker.stats.stored_bytes == 0
        await producer.receipt("COMMIT", {"transaction": "t"}, rid="c1")  # one transaction past the limit
        assert broker.stats.stored_messages == 2 * ADMITTED
        await producer.send("BEGIN", {"transaction": "u"})
        await producer.send("SEND", {"destination": QUEUE, "transaction": "u"}, body(0))
        await producer.send("COMMIT", {"transaction": "u", "receipt": "c2"})
        await broker.wait_for(lambda: broker.stats.producers_blocked == 1)
        assert await receipts_for(producer, 0.2) == []
        broker.purge(QUEUE)
        assert await receipts_for(producer, 0.5) == ["c2"]
        assert broker.queue_depth(QUEUE) == 1


@pytest.mark.parametrize("when_full", ["block", "error"])
async def test_publish_is_admitted_like_a_send_and_refused_when_full(anyio_backend, when_full):
    async with Broker(max_bytes=LIMIT, when_full=when_full) as broker:
        for i in range(ADMITTED):
            broker.publish(QUEUE, body(i))
        with pytest.raises(RuntimeError, match=f"Memory limit reached: .* its limit is {LIMIT} "):
            broker.publish(QUEUE, body(ADMITTED))
        stats = broker.stats
        assert stats.stored_messages == ADMITTED == broker.queue_depth(QUEUE)
        assert LIMIT <= stats.stored_bytes == ADMITTED * SIZE < LIMIT + SIZE
        assert broker.purge(QUEUE) == ADMITTED
        broker.publish(QUEUE, body(0))  # room again: accepted
        assert broker.queue_depth(QUEUE) == 1


def test_publish_from_another_thread_is_refused_when_full() -> None:
    with Broker.in_thread(max_bytes=LIMIT) as broker:
        for i in range(ADMITTED):
            broker.publish(QUEUE, body(i))
        with pytest.raises(RuntimeError, match="Memory limit reached"):
            broker.publish(QUEUE, body(ADMITTED))
        assert broker.queue_depth(QUEUE) == ADMITTED


async def test_every_way_out_releases_what_a_message_counted(anyio_backend):
    """ACK (client, client-individual), NACK (drop), auto delivery, purge, ended topic subscriptions."""
    async with Broker(nack="drop") as broker:
        async with await connect(broker) as c:
            await c.receipt("SUBSCRIBE", {"id": "t", "destination": "/topic/t", "ack": "client"}, rid="st")
            await c.receipt("SUBSCRIBE", {"id": "t2", "destination": "/topic/t", "ack": "client",
                                          "prefetch-count": "1"}, rid="st2")
            broker.publish("/topic/t", b"topic-1")
            broker.publish("/topic/t", b"topic-2", headers={"x-h": "v"})
            for i in range(6):
                broker.publish(QUEUE, body(i), headers={"x-n": str(i)})
            broker.publish("/queue/auto", b"a1")
            broker.publish("/queue/auto", b"a2")
            assert broker.stats.stored_messages == 2 * 2 + 6 + 2
            await c.receipt("SUBSCRIBE", {"id": "q", "destination": QUEUE, "ack": "client-individual"},
                            rid="sq", keep_messages=True)
            await c.receipt("SUBSCRIBE", {"id": "a", "destination": "/queue/auto"}, rid="sa", keep_messages=True)
            frames = [await c.recv() for _ in range(2 + 1 + 6 + 2)]  # t2 holds one copy back (prefetch)
            by_sub = {sub: [f for f in frames if f.headers["subscription"] == sub] for sub in ("t", "q")}
            assert broker.stats.stored_messages == 2 * 2 + 6  # the auto ones left once sent
            await c.send("ACK", ack_headers("1.2", by_sub["t"][1]))  # client mode: both copies of t
            await c.send("ACK", ack_headers("1.2", by_sub["q"][0]))
            await c.send("NACK", ack_headers("1.2", by_sub["q"][1]))  # dropped
            await c.sync()
            assert broker.stats.stored_messages == 2 + 4
            await c.receipt("UNSUBSCRIBE", {"id": "t2"}, rid="ut2")  # its unacked and its held-back copy
            await c.receipt("UNSUBSCRIBE", {"id": "q"}, rid="uq")  # four unacked go back to the queue
            assert broker.stats.stored_messages == 4 == broker.queue_depth(QUEUE)
            assert broker.purge(QUEUE) == 4
        stats = broker.stats
        assert (stats.stored_bytes, stats.stored_messages) == (0, 0)


def test_limits_are_checked() -> None:
    assert Broker().max_bytes == DEFAULT_MAX_BYTES == 256 * 1024 * 1024
    assert Broker(max_bytes=None).max_bytes is None
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="max_bytes"):
            Broker(max_bytes=bad)
    with pytest.raises(ValueError, match="when_full"):
        Broker(when_full="drop")
