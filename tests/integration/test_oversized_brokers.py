"""A MESSAGE over the client's max_frame_bytes from a real broker (issue 21, item 4).

Both brokers put ``content-length`` on a MESSAGE when the SEND had one (stompfast
always sends it), so the client skips the body unread, hands the subscription an
OversizedMessage to ack away, keeps the connection, and the next message comes as
usual. Before the fix the scanner failed the connection and, with reconnecting
on, the broker redelivered the same message on every new one.
"""

from __future__ import annotations

import anyio
import pytest

from stompfast import AsyncClient, Client, MessageTooLargeError, OversizedMessage

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

WAIT = 10
LIMIT = 64 * 1024
BIG = b"y" * (300 * 1024)


def check(skipped, queue: str) -> None:
    assert isinstance(skipped, OversizedMessage) and skipped.oversized
    # the broker's MESSAGE carried content-length: that is what made the skip possible
    assert skipped.headers["content-length"] == str(len(BIG))
    assert skipped.size == len(BIG)
    with pytest.raises(MessageTooLargeError) as info:
        _ = skipped.body
    exc = info.value
    assert (exc.size, exc.limit, exc.destination) == (len(BIG), LIMIT, queue)
    assert exc.message_id == skipped.message_id and exc.ack_id == skipped.ack_id
    assert exc.subscription == skipped.subscription and exc.skipped_message is skipped


@pytest.mark.anyio
@pytest.mark.parametrize("ack", ["client-individual", "auto"])
@pytest.mark.parametrize("reconnect", [False, True], ids=["no-reconnect", "reconnect"])
async def test_oversized_message_between_two_good_ones(broker, broker_url, queue, ack, reconnect):
    async with AsyncClient(broker_url, heart_beat=(0, 0), reconnect=reconnect, max_frame_bytes=LIMIT) as consumer:
        async with AsyncClient(broker_url, heart_beat=(0, 0), reconnect=False) as producer:
            async with consumer.subscribe(queue, ack=ack) as sub:
                for body in (b"first", BIG, b"third"):
                    await producer.send(queue, body, receipt=True)
                with anyio.fail_after(WAIT):
                    first = await sub.receive()
                    assert first.body == b"first"
                    if ack != "auto":
                        await first.ack()
                    skipped = await sub.receive()
                    check(skipped, queue)
                    if ack != "auto":
                        await skipped.ack(receipt=True)  # acked away: the broker forgets it
                    third = await sub.receive()
                    assert third.body == b"third" and not third.oversized
                    if ack != "auto":
                        await third.ack(receipt=True)
                    elif broker == "artemis":
                        # Artemis acknowledges an auto message in a task after the delivery: leaving
                        # before it runs puts the message back (docs/brokers.md, Auto acknowledgement on
                        # Artemis; CI saw "third" again once in about ten runs)
                        await anyio.sleep(0.1)
            assert consumer.is_connected and consumer.error is None
            assert consumer.stats().reconnects == 0
        # nothing is left on the queue: the oversized message is not redelivered
        async with AsyncClient(broker_url, heart_beat=(0, 0), reconnect=False) as checker:
            async with checker.subscribe(queue, ack="client-individual") as again:
                with anyio.move_on_after(1):
                    leftover = await again.receive()
                    pytest.fail(f"redelivered: {leftover!r}")


def test_sync_oversized_message_nacked_on_activemq_acked_on_rabbitmq(broker, broker_url, queue):
    # NACK: ActiveMQ dead-letters the message, RabbitMQ requeues it at once (it
    # would come back): there, ack it away.
    with Client(broker_url, heart_beat=(0, 0), reconnect=False, max_frame_bytes=LIMIT) as c:
        with c.subscribe(queue, ack="client-individual") as sub:
            for body in (b"first", BIG, b"third"):
                c.send(queue, body, receipt=True)
            first = sub.receive(timeout=WAIT)
            assert first.body == b"first"
            first.ack()
            skipped = sub.receive(timeout=WAIT)
            check(skipped, queue)
            if broker == "activemq":
                skipped.nack(receipt=True)
            else:
                skipped.ack(receipt=True)
            third = sub.receive(timeout=WAIT)
            assert third.body == b"third"
            third.ack(receipt=True)
        assert c.stats().reconnects == 0 and c.error is None
