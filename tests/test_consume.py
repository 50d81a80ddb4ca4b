"""``AsyncClient.consume``, ``health`` and ``drain`` against the in-process broker (asyncio, uvloop, trio).

A consumer runs ``concurrency`` handlers at a time over one subscription and settles each
message by what its handler did; ``drain`` finishes what is in flight and reports what it
could not; ``health`` says whether the client is really working. The real brokers:
tests/integration/test_consume_brokers.py.
"""

from __future__ import annotations

from typing import Any, List

import anyio
import pytest

from stompfast import AsyncClient, ConfigurationError, Nack, RetryPolicy
from stompfast.testing import Broker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

WAIT = 5


def make(broker: Broker, **kwargs: Any) -> AsyncClient:
    kwargs.setdefault("heart_beat", (0, 0))
    kwargs.setdefault("reconnect", False)
    return AsyncClient(broker.url, **kwargs)


def frames(broker: Broker, command: str) -> List[dict]:
    return [dict(f.headers) for f in broker.received if f.command == command]


async def until(predicate: Any, timeout: float = WAIT) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.005)


async def test_one_worker_handles_in_order_and_acks_each_message():
    seen: List[bytes] = []

    async def handler(message):
        seen.append(message.body)

    async with Broker() as broker:
        async with make(broker) as client:
            for i in range(20):
                await client.send("/queue/c1", b"%d" % i)
            consumer = await client.consume("/queue/c1", handler)
            assert consumer.subscription.buffer_size == 2
            await until(lambda: consumer.stats().acked == 20)
            stats = consumer.stats()
            assert (stats.handled, stats.nacked, stats.failed, stats.running) == (20, 0, 0, 0)
            report = await client.drain(timeout=WAIT)
        assert seen == [b"%d" % i for i in range(20)]
        assert len(frames(broker, "ACK")) == 20
        assert report.clean and report.handlers_unfinished == 0
        assert not client.is_connected


async def test_at_most_concurrency_handlers_run_at_once_and_all_are_acked():
    running = peak = 0

    async def handler(message):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.01)
        running -= 1

    async with Broker() as broker:
        async with make(broker) as client:
            for i in range(40):
                await client.send("/queue/c4", b"%d" % i)
            consumer = await client.consume("/queue/c4", handler, concurrency=4)
            await until(lambda: consumer.stats().acked == 40)
            await consumer.drain()
    assert peak == 4


async def test_a_handler_that_raises_is_settled_as_on_error_says():
    async def fail(message):
        raise ValueError(f"bad {message.body!r}")

    async with Broker() as broker:
        async with make(broker) as client:
            decisions = {b"0": "ack", b"1": Nack({"requeue": "false"}), b"2": "nack"}

            async def decide(message, exc):
                assert isinstance(exc, ValueError)
                return decisions[message.body]

            for i in range(3):
                await client.send("/queue/e", b"%d" % i)
            consumer = await client.consume("/queue/e", fail, on_error=decide)
            # (the in-process broker redelivers every NACKed message at once, requeue:false or not)
            await until(lambda: consumer.stats().acked == 1 and consumer.stats().nacked >= 2)
            await consumer.drain()
            stats = consumer.stats()
            assert stats.failed == stats.handled == stats.acked + stats.nacked
        nacks = frames(broker, "NACK")
        assert {n.get("requeue") for n in nacks} == {"false", None}


async def test_stop_ends_the_consumer_with_the_handlers_error_and_nack_is_the_brokers_nack():
    async def fail(message):
        raise ValueError("poison")

    async with Broker() as broker:
        async with make(broker) as client:
            await client.send("/queue/s", b"x")
            consumer = await client.consume("/queue/s", fail, on_error="stop")
            with anyio.fail_after(WAIT), pytest.raises(ValueError, match="poison"):
                await consumer.wait()
            # the message was left unsettled
            assert consumer.stats().failed == 1 and not frames(broker, "NACK") and not frames(broker, "ACK")
            await consumer.stop()
            await client.send("/queue/n", b"y")
            nacking = await client.consume("/queue/n", fail, on_error="nack")
            await until(lambda: nacking.stats().nacked >= 1)
            await nacking.drain()


async def test_drain_lets_running_handlers_finish_and_reports_what_could_not():
    release = anyio.Event()
    finished: List[bytes] = []

    async def slow(message):
        await release.wait()
        finished.append(message.body)

    async with Broker() as broker:
        async with make(broker) as client:
            for i in range(3):
                await client.send("/queue/d", b"%d" % i)
            consumer = await client.consume("/queue/d", slow, concurrency=2)
            await until(lambda: consumer.stats().running == 2)

            async def release_soon():
                await anyio.sleep(0.1)
                release.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(release_soon)
                report = await client.drain(timeout=WAIT)
        assert sorted(finished) == [b"0", b"1"] and report.handlers_unfinished == 0
        # the third was buffered (prefetch 4) and never handed to a handler: unsettled
        assert report.messages_unhandled == 1 and len(frames(broker, "ACK")) == 2

        async with make(broker) as client:
            await client.send("/queue/d2", b"stuck")
            forever = anyio.Event()

            async def stuck(message):
                await forever.wait()

            await client.consume("/queue/d2", stuck)
            await until(lambda: client.health().handlers_running == 1)
            report = await client.drain(timeout=0.2)
        assert report.handlers_unfinished == 1 and not report.clean


async def test_health_is_ready_only_while_connected_and_no_handler_is_wedged():
    forever = anyio.Event()

    async def stuck(message):
        await forever.wait()

    async with Broker(heart_beat=(100, 100)) as broker:
        client = make(broker, heart_beat=(100, 100))
        assert not client.health().ready and client.health().state == "not connected"
        async with client:
            health = client.health()
            assert health.ready and health.connected and health.heartbeat_interval == 0.1
            await client.send("/queue/h", b"x")
            await client.consume("/queue/h", stuck)
            await until(lambda: client.health().handlers_running == 1)
            await anyio.sleep(0.15)
            wedged = client.health(handler_limit=0.1)
            assert wedged.handlers_wedged == 1 and not wedged.ready and wedged.heartbeats_ok
            assert client.health(handler_limit=60).ready
            forever.set()
        assert not client.health().connected and not client.health().ready


async def test_auto_mode_settles_nothing_but_still_retries_and_dead_letters():
    seen: List[bytes] = []

    async def handler(message):
        seen.append(message.body)
        if message.body == b"1":
            raise ValueError("ignored in auto mode")

    async with Broker() as broker:
        async with make(broker) as client:
            for i in range(3):
                await client.send("/queue/a", b"%d" % i)
            retry = RetryPolicy(attempts=2, initial_delay=0.01, jitter=0)
            consumer = await client.consume("/queue/a", handler, ack="auto", on_error=retry)
            await until(lambda: consumer.stats().dead_lettered == 1)
            await consumer.drain()
            assert sorted(seen) == [b"0", b"1", b"1", b"2"]
            assert (consumer.stats().failed, consumer.stats().retried) == (2, 1)
        assert not frames(broker, "ACK") and not frames(broker, "NACK")
        (dead,) = [f for f in frames(broker, "SEND") if f["destination"] == "/queue/a.dlq"]
        assert dead["sf-attempts"] == "2"


async def test_bad_options_are_refused_before_anything_is_sent():
    async def handler(message):
        pass

    def sync_handler(message):
        pass

    async with Broker() as broker:
        async with make(broker) as client:
            for kwargs in (
                {"concurrency": 0}, {"concurrency": 2, "ack": "client"}, {"prefetch": 1, "concurrency": 2},
                {"ack": "sometimes"}, {"on_error": "requeue"},
            ):
                with pytest.raises(ConfigurationError):
                    await client.consume("/queue/x", handler, **kwargs)
            with pytest.raises(ConfigurationError, match="async"):
                await client.consume("/queue/x", sync_handler)
        assert not frames(broker, "SUBSCRIBE")


async def test_a_consumer_goes_on_across_a_reconnect_and_never_acks_on_the_new_link_what_the_old_one_delivered():
    from stompfast import ReconnectPolicy

    seen: List[bytes] = []
    gate = anyio.Event()

    async def handler(message):
        if message.body == b"hold":
            # running while the link is lost: its ACK would name the lost session
            await gate.wait()
        seen.append(message.body)

    policy = ReconnectPolicy(initial_delay=0.01, max_delay=0.05, jitter=0)
    async with Broker() as broker:
        async with make(broker, reconnect=policy) as client:
            await client.send("/queue/r", b"hold")
            consumer = await client.consume("/queue/r", handler)
            await until(lambda: consumer.stats().running == 1)
            broker.drop_connections()
            await until(lambda: client.reconnects == 1 and client.is_connected)
            gate.set()
            # the held message was stale (not acked); the broker redelivers it on the new link
            await until(lambda: consumer.stats().stale == 1 and consumer.stats().acked == 1)
            for i in range(5):
                await client.send("/queue/r", b"after %d" % i)
            await until(lambda: consumer.stats().acked == 6)
            report = await client.drain(timeout=WAIT)
        assert seen.count(b"hold") == 2 and [b for b in seen if b != b"hold"] == [b"after %d" % i for i in range(5)]
        assert report.clean


async def test_next_buffered_takes_without_waiting_and_the_message_acks():
    async with Broker() as broker:
        async with make(broker) as client:
            async with client.subscribe("/queue/nb", ack="client-individual") as sub:
                assert sub.next_buffered() is None
                await client.send("/queue/nb", b"one", receipt=True)
                await until(lambda: sub.pending == 1)
                message = sub.next_buffered()
                assert message is not None and message.body == b"one" and sub.pending == 0
                assert sub.next_buffered() is None
                await message.ack(receipt=True)
        assert len(frames(broker, "ACK")) == 1
