"""Message options on the real brokers, both clients: ttl, priority, persistent, selector, request expiry.

Each broker reads these its own way (docs/brokers.md): a time to live is ``expiration`` in
ms on RabbitMQ and ``expires`` in epoch ms on ActiveMQ Classic and Artemis, each ignoring
the other's; RabbitMQ ignores a ``selector``. stompfast writes what the connected broker
reads, so the same call does the same thing on all three, or is refused where it cannot.
"""

from __future__ import annotations

import time
from typing import List

import anyio
import pytest

from stompfast import AsyncClient, Client, ConfigurationError, ReceiveTimeout, RequestTimeout

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

WAIT = 10
# Long enough for the broker to deliver what it would deliver, when nothing is expected
QUIET = 1.0


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


def aclient(url: str, **kwargs) -> AsyncClient:
    return AsyncClient(url, heart_beat=(0, 0), **kwargs)


def client(url: str, backend: str, **kwargs) -> Client:
    return Client(url, backend=backend, heart_beat=(0, 0), **kwargs)


async def bodies_within(sub, seconds: float, until: bytes = b"") -> List[bytes]:
    """The bodies ``sub`` delivers within ``seconds``, stopping early after ``until``."""
    got: List[bytes] = []
    with anyio.move_on_after(seconds):
        async for message in sub:
            got.append(message.body)
            if message.body == until:
                break
    return got


# -- ttl -------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_an_expired_message_is_not_delivered(broker, broker_url, queue):
    async with aclient(broker_url) as c:
        await c.send(queue, b"expires", ttl=0.5)
        await c.send(queue, b"expires-confirmed", ttl=0.5, receipt=True)
        await c.send(queue, b"kept", receipt=True)
        await anyio.sleep(1.2)
        async with c.subscribe(queue) as sub:
            got = await bodies_within(sub, WAIT, until=b"kept")
            # and nothing after it
            got += await bodies_within(sub, QUIET)
    assert got == [b"kept"], broker


@pytest.mark.anyio
async def test_a_message_within_its_ttl_is_delivered(broker, broker_url, queue):
    async with aclient(broker_url) as c:
        await c.send(queue, b"lives", ttl=30, receipt=True)
        async with c.subscribe(queue) as sub:
            message = await sub.receive()
    assert message.body == b"lives"
    if broker == "rabbitmq":
        assert message.headers["expiration"] == "30000"
    else:
        # an absolute time, by the broker's clock (the same machine here)
        assert abs(int(message.headers["expires"]) - (time.time() + 30) * 1000) < 5000


def test_the_blocking_client_s_expired_messages_are_not_delivered(broker, broker_url, queue, backend):
    with client(broker_url, backend) as c:
        # queued (written by the loop) and confirmed
        c.send(queue, b"expires", ttl=0.5)
        c.send(queue, b"expires-confirmed", ttl=0.5, receipt=True, timeout=WAIT)
        c.send(queue, b"kept", receipt=True, timeout=WAIT)
        time.sleep(1.2)
        with c.subscribe(queue) as sub:
            assert sub.receive(timeout=WAIT).body == b"kept"
            with pytest.raises(ReceiveTimeout):
                sub.receive(timeout=QUIET)


# -- request expiry ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_request_that_timed_out_is_not_processed_by_a_later_responder(broker, broker_url, queue):
    async with aclient(broker_url) as requester:
        with pytest.raises(RequestTimeout):
            await requester.request(queue, b"too late", timeout=0.5)
        await anyio.sleep(0.7)
        async with aclient(broker_url) as responder, responder.subscribe(queue) as sub:
            # the responder takes what is queued; a marker proves it is subscribed and reading
            await requester.send(queue, b"marker", receipt=True)
            got = await bodies_within(sub, WAIT, until=b"marker")
            got += await bodies_within(sub, QUIET)
    assert got == [b"marker"], broker


def test_the_blocking_client_s_timed_out_request_is_gone(broker, broker_url, queue, backend):
    with client(broker_url, backend) as requester:
        with pytest.raises(RequestTimeout):
            requester.request(queue, b"too late", timeout=0.5)
        time.sleep(0.7)
        with client(broker_url, backend) as responder, responder.subscribe(queue) as sub:
            requester.send(queue, b"marker", receipt=True, timeout=WAIT)
            assert sub.receive(timeout=WAIT).body == b"marker"
            with pytest.raises(ReceiveTimeout):
                sub.receive(timeout=QUIET)


# -- selector ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_selector_filters_or_is_refused(broker, broker_url, queue):
    async with aclient(broker_url) as c:
        if broker == "rabbitmq":
            # RabbitMQ would ignore it and deliver every message: refused by the call, nothing sent
            with pytest.raises(ConfigurationError, match="ignores STOMP selectors"):
                c.subscribe(queue, selector="region = 'EU'")
            with pytest.raises(ConfigurationError, match="ignores STOMP selectors"):
                c.subscribe(queue, headers={"selector": "region = 'EU'"})
            with pytest.raises(ConfigurationError, match="ignores STOMP selectors"):
                await c.consume(queue, _no_handler, headers={"selector": "region = 'EU'"})
            # the connection is fine: a subscription without one works
            async with c.subscribe(queue) as sub:
                await c.send(queue, b"all", receipt=True)
                assert (await sub.receive()).body == b"all"
            return
        async with c.subscribe(queue, selector="region = 'EU'") as sub:
            await c.send(queue, b"us", headers={"region": "US"}, receipt=True)
            await c.send(queue, b"eu", headers={"region": "EU"}, receipt=True)
            got = await bodies_within(sub, WAIT, until=b"eu")
            got += await bodies_within(sub, QUIET)
        assert got == [b"eu"]
        # the US one stays queued for a subscriber without the selector
        async with c.subscribe(queue) as sub:
            assert (await sub.receive()).body == b"us"


async def _no_handler(message) -> None:
    raise AssertionError("never called")


def test_the_blocking_client_s_selector(broker, broker_url, queue, backend):
    with client(broker_url, backend) as c:
        if broker == "rabbitmq":
            with pytest.raises(ConfigurationError, match="ignores STOMP selectors"):
                c.subscribe(queue, selector="region = 'EU'")
            with pytest.raises(ConfigurationError, match="ignores STOMP selectors"):
                c.subscribe(queue, headers={"selector": "region = 'EU'"})
            return
        with c.subscribe(queue, selector="region = 'EU'") as sub:
            c.send(queue, b"us", headers={"region": "US"})
            c.send(queue, b"eu", headers={"region": "EU"}, receipt=True, timeout=WAIT)
            assert sub.receive(timeout=WAIT).body == b"eu"
            with pytest.raises(ReceiveTimeout):
                sub.receive(timeout=QUIET)


# -- persistent, priority ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_persistent_reaches_the_broker_and_is_the_default_for_queues(broker, broker_url, queue):
    async with aclient(broker_url) as c:
        await c.send(queue, b"default")
        await c.send(queue, b"persistent", persistent=True)
        await c.send(queue, b"transient", persistent=False, receipt=True)
        async with c.subscribe(queue) as sub:
            seen = {}
            for _ in range(3):
                message = await sub.receive()
                seen[message.body] = message.headers.get("persistent")
    # what each broker reports back in the MESSAGE (measured: ActiveMQ Classic and RabbitMQ
    # leave the header out of a non-persistent message, Artemis says false)
    transient = "false" if broker == "artemis" else None
    assert seen == {b"default": "true", b"persistent": "true", b"transient": transient}


@pytest.mark.anyio
async def test_the_client_option_persistent_false_sends_none(broker, broker_url, queue):
    async with aclient(broker_url, persistent=False) as c:
        await c.send(queue, b"x", receipt=True)
        async with c.subscribe(queue) as sub:
            message = await sub.receive()
    assert message.headers.get("persistent") in (None, "false")


def test_the_blocking_client_s_persistent(broker, broker_url, queue, backend):
    with client(broker_url, backend) as c:
        c.send(queue, b"queued", persistent=True)
        c.send(queue, b"confirmed", persistent=True, priority=7, receipt=True, timeout=WAIT)
        with c.subscribe(queue) as sub:
            messages = [sub.receive(timeout=WAIT) for _ in range(2)]
    # (Artemis delivers the priority 7 one first)
    by_body = {m.body: m.headers for m in messages}
    assert {body: h.get("persistent") for body, h in by_body.items()} == {b"queued": "true", b"confirmed": "true"}
    assert by_body[b"confirmed"]["priority"] == "7"


@pytest.mark.anyio
async def test_priority_is_honoured_by_default_on_artemis_only(broker, broker_url, queue):
    async with aclient(broker_url) as c:
        for priority in (1, 9, 5):
            await c.send(queue, b"%d" % priority, priority=priority)
        await c.send(queue, b"4", receipt=True)
        async with c.subscribe(queue) as sub:
            order = [(await sub.receive()).body for _ in range(4)]
    if broker == "artemis":
        assert order == [b"9", b"5", b"4", b"1"]
    else:
        # RabbitMQ: only on a queue declared with x-max-priority; ActiveMQ Classic: only
        # with prioritizedMessages in its destination policy (docs/brokers.md)
        assert order == [b"1", b"9", b"5", b"4"]


@pytest.mark.anyio
async def test_bad_options_send_nothing(broker, broker_url, queue):
    async with aclient(broker_url) as c:
        with pytest.raises(ConfigurationError):
            await c.send(queue, b"bad", ttl=-1)
        with pytest.raises(ConfigurationError):
            await c.send(queue, b"bad", priority=10, receipt=True)
        with pytest.raises(ConfigurationError):
            await c.send(queue, b"bad", ttl=5, headers={"expires": "0"})
        with pytest.raises(ConfigurationError):
            await c.request(queue, b"bad", timeout=1, headers={"expiration": "5"})
        await c.send(queue, b"good", receipt=True)
        async with c.subscribe(queue) as sub:
            got = await bodies_within(sub, WAIT, until=b"good")
            got += await bodies_within(sub, QUIET)
    assert got == [b"good"]
