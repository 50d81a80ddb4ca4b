"""``request()`` and ``reply()`` against the in-process broker, both clients (asyncio, uvloop, trio).

A responder answers with ``reply(message, body)``; each request gets the reply carrying its own
correlation id, also when many are pending at once; a request without a reply in time raises
RequestTimeout and its late reply is dropped and counted; a lost connection fails the pending
requests. The real brokers: tests/integration/test_request_reply_brokers.py.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from stompfast import (
    AsyncClient,
    Client,
    ClientClosedError,
    ConnectionLostError,
    LocalProtocolError,
    ReconnectPolicy,
    RequestTimeout,
)
from stompfast.testing import Broker

WAIT = 5


def make(broker: Broker, **kwargs: Any) -> AsyncClient:
    kwargs.setdefault("heart_beat", (0, 0))
    kwargs.setdefault("reconnect", False)
    return AsyncClient(broker.url, **kwargs)


async def echo_upper(client: AsyncClient, destination: str, **consume: Any):
    async def answer(message):
        await client.reply(message, message.body.upper())

    return await client.consume(destination, answer, **consume)


@pytest.mark.anyio
async def test_concurrent_requests_each_get_their_own_reply():
    async with Broker() as broker:
        async with make(broker) as responder, make(broker) as requester:
            await echo_upper(responder, "/queue/rpc", concurrency=4)
            replies = {}

            async def ask(i: int) -> None:
                replies[i] = await requester.request("/queue/rpc", b"hello %d" % i, timeout=WAIT)

            with anyio.fail_after(WAIT):
                async with anyio.create_task_group() as tg:
                    for i in range(20):
                        tg.start_soon(ask, i)
            assert {i: m.body for i, m in replies.items()} == {i: b"HELLO %d" % i for i in range(20)}
            assert len({m.headers["correlation-id"] for m in replies.values()}) == 20
            assert requester.stats().late_replies == 0


@pytest.mark.anyio
async def test_a_request_without_a_reply_times_out_and_its_late_reply_is_counted():
    async with Broker() as broker:
        async with make(broker) as responder, make(broker) as requester:
            held = []

            async def hold(message):
                held.append(message)

            await responder.consume("/queue/slow", hold)
            with pytest.raises(RequestTimeout) as caught:
                await requester.request("/queue/slow", b"?", timeout=0.2)
            assert caught.value.destination == "/queue/slow" and caught.value.timeout == 0.2
            assert held and held[0].headers["correlation-id"] == caught.value.correlation_id
            await responder.reply(held[0], b"too late", receipt=True)
            with anyio.fail_after(WAIT):
                while requester.stats().late_replies < 1:
                    await anyio.sleep(0.01)
            # the channel goes on: the next request is answered
            await echo_upper(responder, "/queue/rpc2")
            assert (await requester.request("/queue/rpc2", b"again", timeout=WAIT)).body == b"AGAIN"


@pytest.mark.anyio
async def test_reply_needs_a_reply_to_and_a_lost_connection_fails_pending_requests():
    async with Broker() as broker:
        async with make(broker) as client:
            async with client.subscribe("/queue/plain") as sub:
                await client.send("/queue/plain", b"no reply-to")
                with anyio.fail_after(WAIT):
                    message = await sub.receive()
                with pytest.raises(LocalProtocolError, match="reply-to"):
                    await client.reply(message, b"?")

        policy = ReconnectPolicy(initial_delay=0.01, max_delay=0.05, jitter=0)
        async with make(broker, reconnect=policy) as requester:
            failure = []

            async def ask() -> None:
                try:
                    await requester.request("/queue/nobody", b"?", timeout=WAIT)
                except ConnectionLostError as exc:
                    failure.append(exc)

            with anyio.fail_after(WAIT):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(ask)
                    while broker.consumers("/queue/nobody") == 0 and not broker.queue_depth("/queue/nobody"):
                        await anyio.sleep(0.01)
                    broker.drop_connections()
            assert len(failure) == 1
            # after the reconnect a request works again (the reply destination is re-established)
            async with make(broker) as responder:
                await echo_upper(responder, "/queue/back")
                with anyio.fail_after(WAIT):
                    while not requester.is_connected:
                        await anyio.sleep(0.01)
                assert (await requester.request("/queue/back", b"x", timeout=WAIT)).body == b"X"


@pytest.mark.anyio
async def test_a_cancelled_request_leaves_nothing_pending_and_closing_fails_the_waiting_ones():
    """Replies are matched in the reader: a request cancelled by its caller is forgotten (its reply
    counts late), and one still waiting when the client closes raises ClientClosedError."""
    async with Broker() as broker:
        async with make(broker) as responder, make(broker) as requester:
            held = []

            async def hold(message):
                held.append(message)

            await responder.consume("/queue/held", hold)
            with anyio.move_on_after(0.2) as scope:
                await requester.request("/queue/held", b"?", timeout=WAIT)
            assert scope.cancelled_caught
            with anyio.fail_after(WAIT):
                while not held:
                    await anyio.sleep(0.01)
            await responder.reply(held[0], b"nobody waits", receipt=True)
            with anyio.fail_after(WAIT):
                while requester.stats().late_replies < 1:
                    await anyio.sleep(0.01)

            failure = []

            async def ask() -> None:
                try:
                    await requester.request("/queue/held", b"?", timeout=WAIT)
                except ClientClosedError as exc:
                    failure.append(exc)

            with anyio.fail_after(WAIT):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(ask)
                    while len(held) < 2:
                        await anyio.sleep(0.01)
                    await requester.aclose()
            assert len(failure) == 1


def test_the_blocking_client_requests_and_replies(stomp_broker_thread: Broker):
    url = stomp_broker_thread.url
    with Client(url, heart_beat=(0, 0)) as responder, Client(url, heart_beat=(0, 0)) as requester:
        responder.consume("/queue/srpc", lambda m: responder.reply(m, m.body[::-1]), concurrency=2, timeout=WAIT)
        assert requester.request("/queue/srpc", b"abc", timeout=WAIT).body == b"cba"
        with pytest.raises(RequestTimeout):
            requester.request("/queue/nobody-home", b"?", timeout=0.2)
