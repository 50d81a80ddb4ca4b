"""NACK headers on a real broker: RabbitMQ dead-letters a message NACKed with ``requeue:false``.

RabbitMQ redelivers a NACKed message by default; with ``requeue:false`` it goes to the queue's
dead-letter exchange (here the default exchange, routed to a second queue) instead
(docs/brokers.md). Both clients; the in-process twin is tests/test_settle_headers.py.
"""

from __future__ import annotations

import anyio
import pytest

from stompfast import AsyncClient, Client

WAIT = 10


def dead_letter_args(queue: str) -> dict:
    # RabbitMQ declares a /queue/ destination with the x- arguments of the SUBSCRIBE or
    # SEND that names it first; every frame naming it must then carry the same ones.
    return {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": queue.rsplit("/", 1)[1] + "-dead"}


@pytest.fixture
def rabbitmq_url(broker: str, broker_url: str) -> str:
    if broker != "rabbitmq":
        pytest.skip("requeue:false is RabbitMQ's NACK header")
    return broker_url


@pytest.mark.anyio
async def test_a_nack_with_requeue_false_dead_letters_and_a_plain_nack_redelivers(rabbitmq_url, queue):
    args = dead_letter_args(queue)
    async with AsyncClient(rabbitmq_url, heart_beat=(0, 0)) as client:
        async with client.subscribe(queue + "-dead") as dead, client.subscribe(
            queue, ack="client-individual", buffer_size=1, headers=args
        ) as sub:
            await client.send(queue, b"once", headers=args, receipt=True)
            with anyio.fail_after(WAIT):
                first = await sub.receive()
                await first.nack()
                again = await sub.receive()
                assert again.body == b"once" and again.headers.get("redelivered") == "true"
                await again.nack(headers={"requeue": "false"})
                dead_letter = await dead.receive()
            assert dead_letter.body == b"once" and dead_letter.headers.get("x-first-death-reason") == "rejected"
            with anyio.move_on_after(0.5):
                unexpected = await sub.receive()
                pytest.fail(f"a message NACKed with requeue:false came back: {unexpected!r}")


def test_the_blocking_client_dead_letters_with_requeue_false(rabbitmq_url, queue):
    args = dead_letter_args(queue)
    with Client(rabbitmq_url, heart_beat=(0, 0)) as client:
        with client.subscribe(queue + "-dead") as dead, client.subscribe(
            queue, ack="client-individual", buffer_size=1, headers=args
        ) as sub:
            client.send(queue, b"once", headers=args, receipt=True, timeout=WAIT)
            sub.receive(timeout=WAIT).nack(headers={"requeue": "false"}, timeout=WAIT)
            assert dead.receive(timeout=WAIT).body == b"once"
