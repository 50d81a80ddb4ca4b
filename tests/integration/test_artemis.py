"""ActiveMQ Artemis on loopback: the differences docs/brokers.md lists, each shown on the live broker.

``scripts/brokers.sh start`` runs Artemis 2.40 with two STOMP acceptors: the stock one
as ``artemis create`` writes it (no prefixes: new addresses are MULTICAST) and one with
``anycastPrefix=/queue/;multicastPrefix=/topic/``. Each risk is shown twice where it
can be: with what stompfast does (it passes) and with what it did before (the broken
behaviour, through ``routing_headers=False`` or the old header), so a test that cannot
fail is not mistaken for a fix.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from typing import Any, List

import anyio
import pytest

from stompfast import AsyncClient, Client, ConnectionLostError, LocalProtocolError, Message, ReconnectPolicy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

WAIT = 10  # seconds any single broker round trip may take before the test fails
QUIET = 1.0  # seconds with nothing arriving that count as "nothing more comes"


def client(url: str, **kwargs: Any) -> AsyncClient:
    kwargs.setdefault("heart_beat", (0, 0))
    kwargs.setdefault("reconnect", False)
    return AsyncClient(url, **kwargs)


def name(kind: str) -> str:
    return f"/{kind}/stompfast-artemis-{uuid.uuid4().hex[:12]}"


async def drain(sub: Any) -> List[Message]:
    """Everything the subscription receives until it has been quiet for QUIET seconds."""
    got: List[Message] = []
    while True:
        with anyio.move_on_after(QUIET):
            got.append(await sub.receive())
            continue
        return got


# -- the broker is recognised ---------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
async def test_artemis_is_recognised_by_its_server_header_except_on_1_0(artemis_url, version):
    async with client(artemis_url, versions=[version]) as c:
        assert c.version == version
        if version == "1.0":
            # Artemis sends no server header on 1.0: it cannot be told from another broker
            assert c.server is None
        else:
            assert c.server.startswith("ActiveMQ-Artemis/")


# -- routing: /queue/ is a queue, /topic/ a topic ---------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("routing_headers", [True, False], ids=["routing", "no-routing"])
async def test_a_queue_keeps_what_was_sent_before_its_consumer(artemis_url, routing_headers):
    queue = name("queue")
    async with client(artemis_url, routing_headers=routing_headers) as c:
        for i in range(3):
            await c.send(queue, b"%d" % i, receipt=True)
        async with c.subscribe(queue) as sub:
            got = await drain(sub)
    if routing_headers:
        assert [m.body for m in got] == [b"0", b"1", b"2"]
    else:
        # the stock acceptor's default: a MULTICAST address, what was sent before is gone
        assert got == []


@pytest.mark.anyio
@pytest.mark.parametrize("routing_headers", [True, False], ids=["routing", "no-routing"])
async def test_two_consumers_of_a_queue_share_its_messages(artemis_url, routing_headers):
    queue = name("queue")
    async with client(artemis_url, routing_headers=routing_headers) as c:
        async with c.subscribe(queue) as a, c.subscribe(queue) as b:
            for i in range(4):
                await c.send(queue, b"%d" % i, receipt=True)
            got_a, got_b = await drain(a), await drain(b)
    if routing_headers:
        assert sorted(m.body for m in got_a + got_b) == [b"0", b"1", b"2", b"3"]
        assert got_a and got_b
    else:
        assert len(got_a) == len(got_b) == 4  # each consumer got every message: a topic


@pytest.mark.anyio
async def test_a_topic_is_a_topic(artemis_url):
    topic = name("topic")
    async with client(artemis_url) as c:
        await c.send(topic, b"before", receipt=True)
        async with c.subscribe(topic) as a, c.subscribe(topic) as b:
            await c.send(topic, b"after", receipt=True)
            got_a, got_b = await drain(a), await drain(b)
    assert [m.body for m in got_a] == [m.body for m in got_b] == [b"after"]


@pytest.mark.anyio
async def test_the_prefixed_acceptor_agrees(artemis_prefix_url):
    queue, topic = name("queue"), name("topic")
    async with client(artemis_prefix_url) as c:
        await c.send(queue, b"q", receipt=True)
        await c.send(topic, b"lost", receipt=True)
        async with c.subscribe(queue) as q, c.subscribe(topic) as t:
            await c.send(topic, b"t", receipt=True)
            assert [m.body for m in await drain(q)] == [b"q"]
            assert [m.body for m in await drain(t)] == [b"t"]


@pytest.mark.anyio
async def test_headers_the_caller_passes_win(artemis_url):
    # a /queue/ name made MULTICAST on purpose: two subscribers each get the message
    queue = name("queue")
    async with client(artemis_url) as c:
        sub_headers = {"subscription-type": "MULTICAST"}
        async with c.subscribe(queue, headers=sub_headers) as a, c.subscribe(queue, headers=sub_headers) as b:
            await c.send(queue, b"x", headers={"destination-type": "MULTICAST"}, receipt=True)
            assert [m.body for m in await drain(a)] == [m.body for m in await drain(b)] == [b"x"]


# -- flow control: a window in bytes ----------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("header", [None, "activemq.prefetchSize"], ids=["stompfast", "classic-header"])
async def test_the_prefetch_is_a_window_in_bytes(artemis_url, header):
    # 50 queued messages, a client-individual subscription of buffer_size 20 that acks
    # nothing: how many arrive? ActiveMQ Classic's header (20, read by Artemis as 20
    # bytes) lets one through; stompfast's consumer-window-size lets the buffer fill.
    queue = name("queue")
    async with client(artemis_url) as c:
        for _ in range(50):
            await c.send(queue, b"x" * 100)
        await c.flush()
        headers = {header: "20"} if header else None
        async with c.subscribe(queue, ack="client-individual", buffer_size=20, headers=headers) as sub:
            await anyio.sleep(QUIET)
            arrived = sub.pending
            for m in await drain(sub):
                await m.ack()
    if header is None:
        assert arrived >= 20
    else:
        assert arrived == 1


# -- transactions: ACK is not transactional on Artemis ----------------------------------------


@pytest.mark.anyio
async def test_an_ack_in_a_transaction_is_refused_and_the_message_can_be_acked_after(artemis_url):
    queue = name("queue")
    async with client(artemis_url) as c:
        async with c.subscribe(queue, ack="client-individual") as sub:
            await c.send(queue, b"x", receipt=True)
            with anyio.fail_after(WAIT):
                message = await sub.receive()
            async with c.transaction() as tx:
                with pytest.raises(LocalProtocolError, match="Artemis"):
                    await tx.ack(message)
                with pytest.raises(LocalProtocolError, match="Artemis"):
                    await message.nack(transaction=tx.id)
                await tx.send(queue + "-out", b"sent in the transaction")
            assert message.settled is None  # refused before anything was sent
            await message.ack(receipt=True)
        async with c.subscribe(queue + "-out") as out:
            assert [m.body for m in await drain(out)] == [b"sent in the transaction"]


def test_the_blocking_client_refuses_a_transactional_ack_too(artemis_url):
    queue = name("queue")
    with Client(artemis_url, heart_beat=(0, 0), reconnect=False) as c:
        with c.subscribe(queue, ack="client-individual") as sub:
            c.send(queue, b"x", receipt=True, timeout=WAIT)
            message = sub.receive(timeout=WAIT)
            with c.transaction() as tx:
                with pytest.raises(LocalProtocolError, match="Artemis"):
                    tx.ack(message, timeout=WAIT)
            message.ack(receipt=True, timeout=WAIT)


# -- reconnect across a restart of the broker -------------------------------------------------


SCRIPT = os.environ.get(
    "STOMPFAST_BROKERS_SCRIPT", os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "brokers.sh")
)


def restart_artemis() -> None:
    done = subprocess.run(["bash", SCRIPT, "restart", "artemis"], capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        raise RuntimeError(f"brokers.sh restart artemis failed: {done.stdout}{done.stderr}")


@pytest.mark.anyio
async def test_a_consumer_and_a_producer_come_back_after_artemis_restarts(artemis_url):
    # The private Artemis is non-persistent: what was queued at the restart is gone by
    # design. What must hold: both clients reconnect by themselves, the subscription is
    # re-established (with its routing header), and what is sent afterwards arrives.
    queue = name("queue")
    events: List[Any] = []
    policy = ReconnectPolicy(initial_delay=0.2, max_delay=1.0, jitter=0.1)
    async with AsyncClient(artemis_url, heart_beat=(1000, 1000), reconnect=policy, on_event=events.append) as c:
        async with c.subscribe(queue, ack="client-individual") as sub:
            await c.send(queue, b"before", receipt=True)
            with anyio.fail_after(WAIT):
                await (await sub.receive()).ack()
            await anyio.to_thread.run_sync(restart_artemis)
            with anyio.fail_after(60):
                while True:
                    try:
                        await c.send(queue, b"after", receipt=True)
                        break
                    except ConnectionLostError:
                        await anyio.sleep(0.2)  # the restart took this receipt: send again
                message = await sub.receive()
            assert message.body == b"after"
            await message.ack(receipt=True)
    assert c.reconnects >= 1
    assert "disconnected" in [e.kind for e in events]


# -- heart-beats: Artemis drops a silent client after about two intervals --------------------


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_blocking_consumer_that_sleeps_keeps_its_connection(artemis_url, backend):
    # Artemis derives its connection TTL from the client's heart-beat (measured: a client
    # asking for 500,500 that falls silent is dropped after 2-3 s). The blocking client
    # beats from its own loop thread, so an application thread that sleeps between
    # messages for several TTLs must not lose the connection.
    queue = name("queue")
    with Client(artemis_url, heart_beat=(500, 500), reconnect=False, backend=backend) as c:
        assert c.heart_beat[0] > 0 and c.heart_beat[1] > 0
        with c.subscribe(queue, ack="client-individual") as sub:
            c.send(queue, b"one", receipt=True, timeout=WAIT)
            sub.receive(timeout=WAIT).ack()
            time.sleep(4)  # the application is busy: no call into the client
            c.send(queue, b"two", receipt=True, timeout=WAIT)
            message = sub.receive(timeout=WAIT)
            assert message.body == b"two"
            message.ack(receipt=True, timeout=WAIT)
        assert c.is_connected and c.error is None and c.stats().reconnects == 0
