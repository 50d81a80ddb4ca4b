"""Reconnect and failover against the in-process broker, with faults injected.

Runs on asyncio, asyncio+uvloop and trio. The real-broker restart test is in
tests/integration/test_reconnect_brokers.py.
"""

from __future__ import annotations

import random
from functools import partial

import anyio
import pytest

from stompfast import (
    AsyncClient,
    AuthenticationError,
    ClientClosedError,
    ConfigurationError,
    ConnectError,
    ConnectionEvent,
    ConnectionLostError,
    HeartbeatTimeout,
    ReconnectPolicy,
    ServerError,
    StaleMessageError,
    TransactionError,
)
from stompfast._config import parse_urls
from stompfast.testing import Broker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

WAIT = 5
FAST = ReconnectPolicy(initial_delay=0.01, max_delay=0.05, jitter=0)


def make(url, events=None, policy=FAST, **kwargs) -> AsyncClient:
    kwargs.setdefault("heart_beat", (0, 0))
    return AsyncClient(url, reconnect=policy, on_event=None if events is None else events.append, **kwargs)


def kinds(events):
    return [e.kind for e in events]


async def wait_until(predicate, timeout=WAIT):
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.005)


async def next_message(sub):
    with anyio.fail_after(WAIT):
        return await sub.receive()


# -- policy and URLs ---------------------------------------------------------------------


def test_backoff_grows_caps_and_jitters():
    policy = ReconnectPolicy(initial_delay=0.1, max_delay=1.0, multiplier=2, jitter=0)
    assert [policy.delay(n) for n in (1, 2, 3, 4, 5, 6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    jittery = ReconnectPolicy(initial_delay=1.0, max_delay=1.0, jitter=0.5)
    rng = random.Random(7)
    samples = [jittery.delay(3, rng) for _ in range(500)]
    assert min(samples) >= 0.5 and max(samples) <= 1.5
    assert max(samples) - min(samples) > 0.5  # actually spread, not constant


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"connect_attempts": -1},
        {"initial_delay": 0},
        {"multiplier": 0.5},
        {"jitter": 2},
        {"max_attempts": True},
    ],
)
def test_bad_policy_is_a_configuration_error(kwargs):
    with pytest.raises(ConfigurationError):
        ReconnectPolicy(**kwargs)


def test_failover_url_form_and_options():
    url = (
        "failover:(stomp://u:secret@a:61613,tcp://b:61614)?randomize=false&initialReconnectDelay=50"
        "&maxReconnectDelay=2000&maxReconnectAttempts=4&startupMaxReconnectAttempts=2&backOffMultiplier=3"
    )
    client = AsyncClient(url)
    assert [(e.host, e.port) for e in client.endpoints] == [("a", 61613), ("b", 61614)]
    policy = client._supervisor.policy
    assert (policy.initial_delay, policy.max_delay, policy.multiplier) == (0.05, 2.0, 3.0)
    assert (policy.max_attempts, policy.connect_attempts, policy.randomize) == (4, 2, False)
    assert "secret" not in repr(client.endpoints) and "secret" not in client.endpoints[0].url
    unlimited = AsyncClient("failover:(stomp://a,stomp://b)?maxReconnectAttempts=-1&useExponentialBackOff=false")
    assert unlimited._supervisor.policy.max_attempts is None and unlimited._supervisor.policy.multiplier == 1.0


@pytest.mark.parametrize(
    "url",
    ["failover:(stomp://a", "failover:()", "failover:(stomp://a)?bogus=1", "failover:(stomp://a)?randomize=maybe",
     "failover:(http://a)", []],
)
def test_bad_failover_urls_are_refused(url):
    with pytest.raises(ConfigurationError):
        parse_urls(url) if not isinstance(url, str) else AsyncClient(url)


def test_a_list_of_urls_and_keyword_overrides():
    client = AsyncClient(["stomp://a:1", "stomp://b:2"], login="me", passcode="pw", virtual_host="v")
    assert [(e.host, e.port, e.login, e.virtual_host) for e in client.endpoints] == [
        ("a", 1, "me", "v"), ("b", 2, "me", "v")
    ]
    with pytest.raises(ConfigurationError):
        AsyncClient(["stomp://a:1", "stomp://b:2"], port=3)
    with pytest.raises(ConfigurationError):
        AsyncClient("stomp://a", reconnect="yes")


# -- first connect -------------------------------------------------------------------------


async def test_first_connect_fails_over_past_a_broker_that_answers_connect_with_error():
    events = []
    async with Broker() as bad, Broker() as good:
        bad.answer_connect_with_error("go away", n=None)
        async with make([bad.url, good.url], events) as c:
            assert c.endpoint.port == good.port
            assert c.session in good.sessions
        assert kinds(events)[:4] == ["connecting", "connect_failed", "connecting", "connected"]
        assert isinstance(events[1].error, AuthenticationError)
        assert "go away" in str(events[1].error)
        assert events[3].url == f"stomp://guest@127.0.0.1:{good.port}/" or str(good.port) in events[3].url


async def test_first_connect_is_one_pass_by_default_not_an_endless_retry():
    async with Broker() as first, Broker() as second:
        first.refuse_connections()
        second.refuse_connections()
        with anyio.fail_after(WAIT):
            with pytest.raises(ConnectError) as info:
                async with make([first.url, second.url]):
                    pass
        message = str(info.value)
        assert str(first.port) in message and str(second.port) in message  # says why, per broker


async def test_a_single_broker_keeps_its_own_error_type():
    async with Broker() as broker:
        broker.answer_connect_with_error("bad credentials", n=None)
        with pytest.raises(AuthenticationError):
            async with make(broker.url):
                pass


async def test_connect_attempts_retry_the_first_connect_with_backoff():
    events = []
    async with Broker() as broker:
        broker.refuse_connections(2)
        policy = ReconnectPolicy(connect_attempts=3, initial_delay=0.01, jitter=0)
        async with make(broker.url, events, policy=policy) as c:
            assert c.is_connected
        assert kinds(events).count("connect_failed") == 2
        assert [e.delay for e in events if e.kind == "reconnecting"] == [0.01, 0.02]


# -- losing an established session ----------------------------------------------------------


async def test_resubscribe_to_a_deep_queue_whose_receipt_comes_late_does_not_stall_the_reconnect():
    # After a reconnect the client re-sends every SUBSCRIBE and waits for their
    # confirmation before the link counts as up. An auto subscription to a deep queue
    # that nobody consumes meanwhile: the broker delivers before it confirms, the reader
    # stops at once, and before a MESSAGE counted as the confirmation the
    # re-subscription waited for the RECEIPT behind them until connect_timeout or
    # stall_timeout (10 s), failing the attempt.
    events = []
    async with Broker() as broker:
        # 6 MB: more than the socket buffers of the first link take, so the queue stays deep
        for i in range(6000):
            broker.publish("/queue/deep", b"%04d" % i + b"." * 996)
        async with make(broker.url, events) as c:
            async with c.subscribe("/queue/deep", buffer_size=10) as sub:
                await wait_until(lambda: sub.pending >= 10)
                broker.delay_receipts(3.0)
                broker.drop_connections()
                # a reader stopped by the full buffer sees the loss only once it reads again:
                # consume until it has, then no more
                with anyio.fail_after(WAIT):
                    while "disconnected" not in kinds(events):
                        await sub.receive()
                # well before the RECEIPT (3 s)
                await wait_until(lambda: c.reconnects == 1, timeout=2)
                assert broker.stats.frames_out.get("RECEIPT", 0) == 1  # only the first SUBSCRIBE's
                broker.delay_receipts(0)
                last = b""
                while last != b"5999":  # auto mode: what the lost link carried is gone, the rest comes
                    last = (await next_message(sub)).body[:4]
                with anyio.fail_after(WAIT):
                    await c.flush()


async def test_dropped_link_is_reestablished_and_subscriptions_come_back():
    events = []
    async with Broker() as broker:
        async with make(broker.url, events) as c:
            async with c.subscribe("/queue/a", ack="client-individual") as sub:
                for i in range(4):
                    broker.publish("/queue/a", f"m{i}")
                first = await next_message(sub)
                await first.ack(receipt=True)
                held = await next_message(sub)  # received, not acked when the link dies
                broker.drop_connections()
                await wait_until(lambda: c.reconnects == 1)
                assert c.is_connected
                with pytest.raises(StaleMessageError):
                    await held.ack()
                broker.publish("/queue/a", "m4")
                seen = set()
                while len(seen) < 4:  # m1 (redelivered), m2, m3, m4
                    message = await next_message(sub)
                    seen.add(message.text)
                    await message.ack()
                assert seen == {"m1", "m2", "m3", "m4"}
                await c.flush()
                assert broker.queue_depth("/queue/a") == 0 and broker.unacked("/queue/a") == 0
        disconnected = [e for e in events if e.kind == "disconnected"]
        assert len(disconnected) == 1 and isinstance(disconnected[0].error, ConnectionLostError)
        assert kinds(events)[-1] == "connected" and events[-1].reconnected


async def test_pending_receipts_fail_with_the_loss_and_are_never_resent():
    async with Broker() as broker:
        async with make(broker.url) as c:
            broker.withhold_receipts()
            receipt = await c.send("/queue/r", b"once", receipt=True, wait=False)
            await wait_until(lambda: any(f.body == b"once" for f in broker.received))
            broker.drop_connections()
            with anyio.fail_after(WAIT):
                with pytest.raises(ConnectionLostError):
                    await receipt
            broker.clear_faults()
            await wait_until(lambda: c.reconnects == 1)
            await c.send("/queue/r", b"after", receipt=True)
            assert [f.body for f in broker.received if f.command == "SEND"] == [b"once", b"after"]


async def test_send_during_an_outage_waits_for_the_new_connection():
    async with Broker() as broker:
        async with make(broker.url) as c:
            broker.refuse_connections(3)
            broker.drop_connections()
            await wait_until(lambda: not c.is_connected)
            with anyio.fail_after(WAIT):
                await c.send("/queue/w", b"late", receipt=True)
            assert c.reconnects == 1
            assert broker.queue_depth("/queue/w") == 1


async def test_auto_subscription_keeps_buffered_messages_client_mode_drops_them():
    events = []
    async with Broker() as broker:
        async with make(broker.url, events) as c:
            async with c.subscribe("/queue/auto") as auto, c.subscribe("/queue/cli", ack="client") as cli:
                for i in range(3):
                    broker.publish("/queue/auto", f"a{i}")
                    broker.publish("/queue/cli", f"c{i}")
                await wait_until(lambda: auto.pending == 3 and cli.pending == 3)
                broker.drop_connections()
                await wait_until(lambda: c.reconnects == 1)
                assert auto.pending == 3  # consumed on the broker's side: kept
                got = sorted([(await next_message(cli)).text for _ in range(3)])
                assert got == ["c0", "c1", "c2"]  # redelivered, not duplicated
                assert cli.pending == 0
        lost = [e for e in events if e.kind == "disconnected"][0]
        assert lost.dropped_messages == 3


async def test_open_transaction_is_aborted_and_its_owner_told():
    async with Broker() as broker:
        async with make(broker.url) as c:
            with pytest.raises(TransactionError) as info:
                async with c.transaction() as tx:
                    await tx.send("/queue/t", b"in tx")
                    await c.flush()
                    broker.drop_connections()
                    await wait_until(lambda: c.reconnects == 1)
                    await tx.send("/queue/t", b"more")
            assert isinstance(info.value.__cause__, ConnectionLostError)
            assert broker.queue_depth("/queue/t") == 0
            async with c.transaction() as tx:  # a new one works on the new connection
                await tx.send("/queue/t", b"ok")
            assert broker.queue_depth("/queue/t") == 1


async def test_error_frame_mid_session_reconnects_and_reports_it():
    events = []
    async with Broker() as broker:
        async with make(broker.url, events) as c:
            broker.send_error("maintenance")
            await wait_until(lambda: c.reconnects == 1)
            await c.send("/queue/e", b"x", receipt=True)
        error = [e for e in events if e.kind == "disconnected"][0].error
        assert isinstance(error, ServerError) and "maintenance" in str(error)


async def test_heartbeat_timeout_reconnects():
    events = []
    async with Broker(heart_beat=(100, 100)) as broker:
        async with make(broker.url, events, heart_beat=(100, 100), heartbeat_tolerance=2) as c:
            broker.stop_heartbeats()
            await wait_until(lambda: "disconnected" in kinds(events))
            broker.clear_faults()
            await wait_until(lambda: c.reconnects >= 1)
            await c.send("/queue/h", b"x", receipt=True)
        assert isinstance([e for e in events if e.kind == "disconnected"][0].error, HeartbeatTimeout)


async def run_broker(started, stop, **kwargs):
    """A broker that lives in its own task until ``stop`` is set (a broker that can die mid-test)."""
    async with Broker(**kwargs) as broker:
        started.append(broker)
        await stop.wait()


async def test_broker_restarted_on_the_same_port():
    async with anyio.create_task_group() as tg:
        brokers, stop_first = [], anyio.Event()
        tg.start_soon(run_broker, brokers, stop_first)
        await wait_until(lambda: brokers)
        first = brokers[0]
        async with make(first.url) as client:
            async with client.subscribe("/queue/restart", ack="client-individual") as sub:
                stop_first.set()
                await wait_until(lambda: not client.is_connected)
                stop_second = anyio.Event()
                tg.start_soon(partial(run_broker, brokers, stop_second, port=first.port))
                await wait_until(lambda: len(brokers) == 2)
                await wait_until(lambda: client.reconnects == 1)
                assert brokers[1].consumers("/queue/restart") == 1
                brokers[1].publish("/queue/restart", b"after restart")
                message = await next_message(sub)
                assert message.body == b"after restart"
                await message.ack(receipt=True)
        stop_second.set()


async def test_gives_up_after_max_attempts_and_fails_everything():
    events = []
    policy = ReconnectPolicy(max_attempts=2, initial_delay=0.01, jitter=0)
    async with Broker() as broker:
        async with make(broker.url, events, policy=policy) as c:
            async with c.subscribe("/queue/g") as sub:
                broker.refuse_connections()
                broker.drop_connections()
                with anyio.fail_after(WAIT):
                    with pytest.raises(ConnectError):
                        await sub.receive()
                with pytest.raises(ConnectError):
                    await c.send("/queue/g", b"x")
        assert kinds(events).count("gave_up") == 1
        assert kinds(events).count("connect_failed") == 2


async def test_failover_to_the_second_broker_when_the_first_dies():
    events = []
    async with Broker() as first, Broker() as second:
        async with make([first.url, second.url], events) as c:
            assert c.endpoint.port == first.port
            async with c.subscribe("/queue/f") as sub:
                first.refuse_connections()
                first.drop_connections()
                await wait_until(lambda: c.reconnects == 1)
                assert c.endpoint.port == second.port
                assert second.consumers("/queue/f") == 1
                second.publish("/queue/f", b"from second")
                assert (await next_message(sub)).body == b"from second"


async def test_a_raising_event_hook_does_not_break_the_client(caplog):
    def hook(event: ConnectionEvent) -> None:
        raise RuntimeError("hook bug")

    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0), reconnect=FAST, on_event=hook) as c:
            broker.drop_connections()
            await wait_until(lambda: c.reconnects == 1)
            await c.send("/queue/x", b"x", receipt=True)
    assert "hook bug" in caplog.text


async def test_closing_during_an_outage_is_prompt():
    async with Broker() as broker:
        async with make(broker.url, policy=ReconnectPolicy(initial_delay=5, jitter=0)) as c:
            broker.drop_connections()
            await wait_until(lambda: not c.is_connected)
            with anyio.fail_after(2):
                await c.aclose()
        with pytest.raises(ClientClosedError):
            await c.send("/queue/x", b"x")


async def test_an_ack_during_the_outage_is_stale_not_a_connection_error():
    async with Broker() as broker:
        async with make(broker.url, policy=ReconnectPolicy(initial_delay=0.5, jitter=0)) as c:
            async with c.subscribe("/queue/s", ack="client-individual") as sub:
                broker.publish("/queue/s", b"x")
                message = await next_message(sub)
                broker.drop_connections()
                await wait_until(lambda: not c.is_connected)  # lost, not yet re-established
                with pytest.raises(StaleMessageError):
                    await message.ack()
                await wait_until(lambda: c.reconnects == 1)
                again = await next_message(sub)  # redelivered on the new connection
                assert again.body == b"x"
                await again.ack(receipt=True)


async def test_an_eof_reaching_the_reader_after_the_link_was_taken_down_reconnects_not_closes(monkeypatch):
    # The race the ActiveMQ soak on trio found: the writer (or the heart-beat watch) fails the link, and in
    # the same instant the reader wakes with the EOF that was already on its way. The reader saw the
    # protocol CLOSED by that loss, took it for our own close, and failed the client for good with
    # ClientClosedError: every later send raised at once. The EOF of a link already down is no news.
    async with Broker() as broker:
        async with make(broker.url) as c:
            await c.send("/queue/eof", b"x", receipt=True)  # (the reader task is running, in a receive)
            transport = c._link.transport
            trip = anyio.Event()
            if c._link.inbox.push:  # asyncio: the transport calls back; a link taken down makes no callback after it
                c._fail(ConnectionLostError("the writer's link failed"))
                transport._protocol.eof_received()
                transport._protocol.connection_lost(None)
            else:
                original = type(transport).receive

                async def receive(self, max_bytes):
                    if self is not transport:
                        return await original(self, max_bytes)
                    await trip.wait()
                    c._fail(ConnectionLostError("the writer's link failed"))  # another task, first...
                    return b""  # ...then the reader wakes with the EOF, no checkpoint between

                monkeypatch.setattr(type(transport), "receive", receive)
                await c.send("/queue/eof", b"y", receipt=True)  # the reader reads its RECEIPT, then waits on us
                trip.set()
            await wait_until(lambda: c.reconnects == 1)
            await c.send("/queue/eof", b"after", receipt=True)
            assert c.is_connected
            sent = [f.body for f in broker.received if f.command == "SEND"]
            assert sent == ([b"x", b"after"] if c._link.inbox.push else [b"x", b"y", b"after"])


async def test_a_send_refused_by_a_failed_client_still_yields_to_the_loop():
    # A retry loop around send() on a client that failed for good must not starve the other tasks:
    # the refusal comes after a checkpoint (what the ActiveMQ soak on trio tripped over).
    ran = []
    async with Broker() as broker:
        c = make(broker.url, policy=ReconnectPolicy(enabled=False))
        async with c:
            broker.drop_connections()
            await wait_until(lambda: c.error is not None)
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: _append(ran))
                for _ in range(3):  # no await of our own between the refusals
                    with pytest.raises(ConnectionLostError):
                        await c.send("/queue/x", b"x")
                assert ran == [1]  # (inside the group: leaving it would wait for the task anyway)


async def _append(ran):
    ran.append(1)
