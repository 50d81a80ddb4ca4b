"""The Supervisor alone: the broker list, backoff, re-establishing a lost link and giving up, no client, no socket.

It is built with stand-ins for what the client gives it (``connect``, ``reopened``,
``give_up``) and fake links; its events go to a recording ``on_event`` hook. Delays are a
millisecond so that every path runs in a moment (asyncio, uvloop and trio).
"""

from __future__ import annotations

from typing import Any, List, Optional

import anyio
import pytest

from stompfast._config import Endpoint
from stompfast._link import Lost
from stompfast._reconnect import ConnectionEvent, ReconnectPolicy
from stompfast._stats import Counters
from stompfast._supervisor import Supervisor
from stompfast.errors import ConnectError, ConnectionLostError

pytestmark = pytest.mark.anyio

WAIT = 5
A, B = Endpoint("a.example", 61613), Endpoint("b.example", 61613)


def quick(**options: Any) -> ReconnectPolicy:
    return ReconnectPolicy(initial_delay=0.001, max_delay=0.001, jitter=0.0, **options)


class FakeLink:
    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.protocol = type("P", (), {"version": "1.2", "server": "fake"})()
        self.closed = False

    async def aclose(self) -> None:
        self.closed = True


class Client:
    """The client's side: which brokers answer, what it was told."""

    def __init__(self, answering: List[Endpoint], policy: ReconnectPolicy, endpoints=(A, B)) -> None:
        self.answering = answering
        self.calls: List[tuple] = []
        self.events: List[ConnectionEvent] = []
        self.given_up: List[BaseException] = []
        self.open = True
        self.counters = Counters()
        self.supervisor = Supervisor(
            tuple(endpoints), policy, self.events.append, counters=self.counters, connect=self.connect,
            reopened=lambda: self.open, give_up=self.given_up.append,
        )

    async def connect(self, endpoint: Endpoint, first: bool) -> Any:
        self.calls.append((endpoint.host, first))
        if endpoint not in self.answering:
            raise ConnectionLostError(f"{endpoint.host} refused")
        self.supervisor.attach()
        return FakeLink(endpoint)

    def kinds(self) -> List[str]:
        return [e.kind for e in self.events]


async def test_establish_tries_the_brokers_in_order_until_one_answers():
    client = Client([B], quick())
    assert await client.supervisor.establish(first=True) == 0
    assert client.calls == [("a.example", True), ("b.example", True)]
    assert client.kinds() == ["connecting", "connect_failed", "connecting", "connected"]
    assert client.events[-1].url == B.url


async def test_establish_raises_one_error_naming_every_broker_when_the_attempts_run_out():
    client = Client([], quick(connect_attempts=2))
    with pytest.raises(ConnectError) as info:
        await client.supervisor.establish(first=True)
    assert "a.example" in str(info.value) and "b.example" in str(info.value)
    # two rounds of both brokers, with a backoff between them
    assert len(client.calls) == 4 and client.kinds().count("reconnecting") == 1
    # one broker: its own error, not a summary
    single = Client([], quick(connect_attempts=1), endpoints=(A,))
    with pytest.raises(ConnectionLostError, match="a.example refused"):
        await single.supervisor.establish(first=True)


async def test_a_lost_link_is_closed_reported_and_re_established_and_senders_wake():
    client = Client([A], quick())
    supervisor = client.supervisor
    await supervisor.establish(first=True)
    async with anyio.create_task_group() as tg:
        supervisor.start(tg)
        old = FakeLink(A)
        error = ConnectionLostError("the broker went away")
        supervisor.link_lost(old, Lost(error, dropped_frames=2, dropped_messages=3), was_up=True)
        with anyio.fail_after(WAIT):
            await supervisor.wait_up()
        supervisor.stop()
    assert old.closed and client.counters.reconnects == 1
    lost = next(e for e in client.events if e.kind == "disconnected")
    assert lost.error is error and lost.dropped_frames == 2 and lost.dropped_messages == 3
    assert client.calls[-1] == ("a.example", False)
    assert client.kinds()[-3:] == ["reconnecting", "connecting", "connected"]


async def test_with_no_attempt_left_it_gives_up_with_the_last_error_and_wakes_waiting_senders():
    client = Client([A], quick(max_attempts=2), endpoints=(A,))
    supervisor = client.supervisor
    await supervisor.establish(first=True)
    client.answering.clear()
    async with anyio.create_task_group() as tg:
        supervisor.start(tg)
        supervisor.link_lost(FakeLink(A), Lost(ConnectionLostError("gone")), was_up=True)
        with anyio.fail_after(WAIT):
            await supervisor.wait_up()
    assert len(client.given_up) == 1 and "a.example refused" in str(client.given_up[0])
    assert client.kinds()[-1] == "gave_up" and client.counters.reconnects == 0
    assert supervisor.scope is not None and supervisor.scope.cancel_called


async def test_a_client_that_began_to_close_meanwhile_keeps_the_teardown():
    client = Client([A], quick(), endpoints=(A,))
    supervisor = client.supervisor
    await supervisor.establish(first=True)
    client.open = False
    async with anyio.create_task_group() as tg:
        supervisor.start(tg)
        supervisor.link_lost(FakeLink(A), Lost(ConnectionLostError("gone")), was_up=True)
        with anyio.fail_after(WAIT):
            while client.counters.reconnects == 0:
                await anyio.sleep(0.002)
        # run() returned without waking senders: the client's close does that
        assert supervisor.up is not None and not supervisor.up.is_set()
        supervisor.stop()


async def test_an_on_event_hook_that_raises_is_logged_and_ignored(caplog: Any):
    def hook(event: ConnectionEvent) -> Optional[None]:
        raise RuntimeError("the hook broke")

    supervisor = Supervisor((A,), quick(), hook, counters=Counters(), connect=Client([A], quick()).connect,
                            reopened=lambda: True, give_up=lambda exc: None)
    supervisor.emit("connecting", A, attempt=1)
    assert "on_event hook raised" in caplog.text
