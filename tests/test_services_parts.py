"""The client's services on their own: the Requester and the ConsumerSet, with stand-ins for the client.

Each is built with the callables the client gives it (``send``, the wait for a connection,
the reply-channel factory) or the consumers it holds, so what it decides is tested here
without a connection; tests/test_request_reply.py and tests/test_consume.py test them
through the client (asyncio, uvloop and trio).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Dict, List

import anyio
import pytest

from stompfast._consumer import ConsumerSet
from stompfast._request import ReplyChannel, Requester
from stompfast.errors import ConnectionLostError, RequestTimeout, ServerError

pytestmark = pytest.mark.anyio


class ReplySubscription:
    """Stands for the reply subscription: entering it takes ``opening`` (set by the test), or fails with ``refuse``."""

    def __init__(self, opening: anyio.Event, refuse: Any = None) -> None:
        self.opening = opening
        self.refuse = refuse
        self.entered = 0

    def deliver_to(self, deliver: Any, ended: Any) -> None:
        self.deliver = deliver

    async def __aenter__(self) -> "ReplySubscription":
        self.entered += 1
        await self.opening.wait()
        if self.refuse is not None:
            raise self.refuse
        return self


class Service:
    """A Requester with recording stand-ins for the client's send, wait and reply channel."""

    def __init__(self, refuse_first: Any = None) -> None:
        self.sent: List[Dict[str, Any]] = []
        self.channels: List[ReplyChannel] = []
        self.opening = anyio.Event()
        self.refuse_first = refuse_first
        self.requester = Requester(self.send, self.ensure_open, self.new_channel)

    async def send(self, destination: str, body: Any, **options: Any) -> None:
        self.sent.append(dict(options, destination=destination, body=body))

    async def ensure_open(self) -> None:
        await anyio.lowlevel.checkpoint()

    def new_channel(self) -> ReplyChannel:
        refuse = self.refuse_first if not self.channels else None
        channel = ReplyChannel(f"/temp-queue/r{len(self.channels)}", ReplySubscription(self.opening, refuse))
        self.channels.append(channel)
        return channel

    def answer(self, i: int) -> None:
        """The responder's reply to the i-th request sent."""
        headers = {"correlation-id": self.sent[i]["headers"]["correlation-id"]}
        self.channels[-1].deliver(SimpleNamespace(headers=headers, body=b"reply to " + self.sent[i]["body"]))


async def test_concurrent_first_requests_share_one_reply_channel_and_each_gets_its_own_reply():
    service = Service()
    replies: Dict[int, Any] = {}

    async def ask(i: int) -> None:
        replies[i] = await service.requester.request("/queue/svc", b"q%d" % i, timeout=5, headers=None,
                                                     content_type=None)

    async with anyio.create_task_group() as tg:
        for i in range(3):
            tg.start_soon(ask, i)
        await anyio.sleep(0.01)
        # all three wait for the one channel being opened
        assert len(service.channels) == 1 and service.sent == []
        service.opening.set()
        while len(service.sent) < 3:
            await anyio.sleep(0.001)
        for i in (2, 0, 1):
            service.answer(i)
    assert len(service.channels) == 1
    assert {i: r.body for i, r in replies.items()} == {i: b"reply to q%d" % i for i in range(3)}
    # each request names the channel, a correlation id of its own, and expires with its timeout
    assert {s["headers"]["reply-to"] for s in service.sent} == {"/temp-queue/r0"}
    assert len({s["headers"]["correlation-id"] for s in service.sent}) == 3
    assert {s["ttl"] for s in service.sent} == {5}


async def test_a_channel_that_could_not_be_opened_is_made_again_by_the_next_request():
    service = Service(refuse_first=ServerError("no temp queues"))
    service.opening.set()
    with pytest.raises(ServerError):
        await service.requester.request("/queue/svc", b"q", timeout=1, headers=None, content_type=None)
    assert service.sent == []
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: service.requester.request("/queue/svc", b"q", timeout=5, headers=None,
                                                        content_type=None))
        while not service.sent:
            await anyio.sleep(0.001)
        service.answer(0)
    assert len(service.channels) == 2


async def test_no_reply_is_a_request_timeout_and_a_later_reply_is_counted_late():
    service = Service()
    service.opening.set()
    with pytest.raises(RequestTimeout):
        await service.requester.request("/queue/svc", b"q", timeout=0.05, headers={"x": "1"}, content_type=None)
    assert service.sent[0]["headers"]["x"] == "1"
    service.answer(0)
    assert service.requester.late == 1


async def test_a_lost_connection_fails_the_pending_requests():
    service = Service()
    service.opening.set()
    lost = ConnectionLostError("gone")
    raised: List[BaseException] = []

    async def ask() -> None:
        try:
            await service.requester.request("/queue/svc", b"q", timeout=5, headers=None, content_type=None)
        except ConnectionLostError as exc:
            raised.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask)
        while not service.sent:
            await anyio.sleep(0.001)
        service.requester.fail_all(lost)
    assert [str(e) for e in raised] == ["gone"]


class StubConsumer:
    """Stands for an AsyncConsumer: ``running`` handlers, ``pending`` buffered messages, done when told."""

    def __init__(self, running: int, pending: int, wedged: int = 0) -> None:
        self.running = running
        self.done = anyio.Event()
        self.stopped = False
        self._wedged = wedged
        self.subscription = SimpleNamespace(pending=pending, aclose=self.leave, left=False)

    def stop_taking(self) -> None:
        self.stopped = True

    def wedged(self, limit: float) -> int:
        return self._wedged

    async def leave(self) -> None:
        self.subscription.left = True

    def finish(self) -> None:
        self.running = 0
        self.done.set()


async def test_finish_stops_every_consumer_and_counts_what_was_left_at_the_deadline():
    consumers = ConsumerSet()
    quick, stuck = StubConsumer(running=2, pending=3), StubConsumer(running=1, pending=4)
    consumers.add(quick)  # type: ignore[arg-type]
    consumers.add(stuck)  # type: ignore[arg-type]
    async def finishes_soon() -> None:
        await anyio.sleep(0.01)
        quick.finish()

    async with anyio.create_task_group() as tg:
        tg.start_soon(finishes_soon)
        unfinished, unhandled = await consumers.finish(anyio.current_time() + 0.2)
    assert quick.stopped and stuck.stopped
    # the stuck handler is reported, both subscriptions are left, their buffers counted
    assert (unfinished, unhandled) == (1, 7)
    assert quick.subscription.left and stuck.subscription.left


async def test_handlers_counts_the_live_consumers_and_done_ones_are_forgotten():
    consumers = ConsumerSet()
    done, live = StubConsumer(running=0, pending=0), StubConsumer(running=3, pending=0, wedged=1)
    done.finish()
    consumers.add(done)  # type: ignore[arg-type]
    consumers.add(live)  # type: ignore[arg-type]
    assert consumers.handlers(60.0) == (3, 1)
    assert consumers.live() == [live]
