"""``request()`` / ``reply()`` on the real brokers, both clients.

Each broker gets the reply destination it offers (docs/brokers.md): RabbitMQ a
``/temp-queue/`` it subscribes itself, ActiveMQ a ``/temp-queue/`` the client subscribes,
Artemis a topic of the client's own. Concurrent requests each get their own reply; the
``correlation-id`` survives the trip both ways.
"""

from __future__ import annotations

import anyio
import pytest

from stompfast import AsyncClient, Client, RequestTimeout

WAIT = 15


@pytest.mark.anyio
async def test_concurrent_requests_are_answered_on_every_broker(broker, broker_url, queue):
    async with AsyncClient(broker_url, heart_beat=(0, 0)) as responder, AsyncClient(
        broker_url, heart_beat=(0, 0)
    ) as requester:

        async def answer(message):
            await responder.reply(message, message.body.upper())

        await responder.consume(queue, answer, concurrency=4)
        replies = {}

        async def ask(i: int) -> None:
            replies[i] = await requester.request(queue, b"hello %d" % i, timeout=WAIT)

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                for i in range(10):
                    tg.start_soon(ask, i)
        assert {i: m.body for i, m in replies.items()} == {i: b"HELLO %d" % i for i in range(10)}
        assert len({m.headers["correlation-id"] for m in replies.values()}) == 10
        if broker == "rabbitmq":
            assert replies[0].subscription == "/temp-queue/stompfast-replies"
        with pytest.raises(RequestTimeout):
            await requester.request(queue + "-nobody", b"?", timeout=0.3)
        await responder.drain(timeout=WAIT)


def test_the_blocking_client_requests_on_every_broker(broker_url, queue):
    with Client(broker_url, heart_beat=(0, 0)) as responder, Client(broker_url, heart_beat=(0, 0)) as requester:
        responder.consume(queue, lambda m: responder.reply(m, m.body[::-1]), timeout=WAIT)
        assert [requester.request(queue, b"abc%d" % i, timeout=WAIT).body for i in range(3)] == [
            b"0cba", b"1cba", b"2cba"
        ]
