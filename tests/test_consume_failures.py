"""What ``consume`` does when a handler raises: retry with a growing delay, then dead-letter; never lose it.

Against the in-process broker, both clients, async on asyncio, uvloop and trio. The
same promises on RabbitMQ, ActiveMQ Classic and Artemis:
tests/integration/test_consume_failures_brokers.py. The policy's own arithmetic and
the log's rate limit are unit-tested at the end.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any, Dict, List

import anyio
import pytest
from helpers import TIMER_SLACK

from stompfast import AsyncClient, Client, RetryPolicy
from stompfast._retry import FailureLog, dead_letter_destination, dead_letter_headers
from stompfast.errors import ConfigurationError
from stompfast.testing import Broker

pytestmark = [pytest.mark.timeout(60)]

WAIT = 10
JOBS = 200
# Short, exact delays: the tests assert on the schedule, not only the outcome.
FAST = RetryPolicy(attempts=3, initial_delay=0.05, multiplier=2, jitter=0)


def frames(broker: Broker, command: str) -> List[Dict[str, str]]:
    return [dict(f.headers) for f in broker.received if f.command == command]


async def until(predicate: Any, timeout: float = WAIT) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.005)


def until_blocking(predicate: Any, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def every_seventh_fails_once() -> Any:
    """A job function: jobs 0, 7, 14, ... raise on their first run; returns (job, done counter)."""
    tried: set = set()
    done: Counter = Counter()

    def job(body: bytes) -> None:
        number = int(body)
        if number % 7 == 0 and number not in tried:
            tried.add(number)
            raise RuntimeError(f"job {number} failed once")
        done[number] += 1

    return job, done


# -- the async client ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_jobs_that_fail_once_are_each_done_exactly_once_and_nothing_is_nacked():
    job, done = every_seventh_fails_once()

    async def handler(message):
        job(message.body)

    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0)) as client:
            for i in range(JOBS):
                await client.send("/queue/jobs", b"%d" % i)
            consumer = await client.consume("/queue/jobs", handler, concurrency=8, on_error=FAST)
            await until(lambda: consumer.stats().acked == JOBS)
            await consumer.drain()
            stats = consumer.stats()
        assert done == Counter(range(JOBS))
        assert (stats.failed, stats.retried, stats.dead_lettered, stats.nacked) == (29, 29, 0, 0)
        assert not frames(broker, "NACK") and broker.queue_depth("/queue/jobs") == 0


@pytest.mark.anyio
async def test_an_always_failing_job_is_tried_attempts_times_on_schedule_then_dead_lettered(caplog):
    calls: List[float] = []

    async def handler(message):
        calls.append(time.monotonic())
        raise ValueError("poison\nwith a second line")

    caplog.set_level(logging.WARNING, logger="stompfast")
    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0)) as client:
            await client.send("/queue/p", b"body", headers={"x-job": "42"}, content_type="text/plain")
            consumer = await client.consume("/queue/p", handler, on_error=FAST)
            await until(lambda: consumer.stats().dead_lettered == 1)
            await until(lambda: consumer.stats().acked == 1)
            await consumer.drain()
        # exactly the attempts, after the configured delays (0.05 s, then 0.1 s), and no redelivery
        assert len(calls) == 3
        assert calls[1] - calls[0] >= 0.05 - TIMER_SLACK and calls[2] - calls[1] >= 0.1 - TIMER_SLACK
        assert not frames(broker, "NACK") and broker.queue_depth("/queue/p") == 0
        (dead,) = [f for f in frames(broker, "SEND") if f["destination"] == "/queue/p.dlq"]
        assert dead["x-job"] == "42" and dead["content-type"] == "text/plain" and dead["persistent"] == "true"
        assert dead["sf-attempts"] == "3" and dead["sf-original-destination"] == "/queue/p"
        assert dead["sf-error"] == "ValueError: poison with a second line" and dead["sf-original-message-id"]
        assert broker.queue_depth("/queue/p.dlq") == 1
        # every failure logged with its traceback: two retries (WARNING), then the dead letter (ERROR)
        records = [r for r in caplog.records if "handler on '/queue/p' failed" in r.getMessage()]
        assert [r.levelno for r in records] == [logging.WARNING, logging.WARNING, logging.ERROR]
        assert all(r.exc_info and r.exc_info[0] is ValueError for r in records)
        assert "dead-lettering it to '/queue/p.dlq'" in records[-1].getMessage()


@pytest.mark.anyio
async def test_on_error_can_choose_per_error_and_dead_letter_at_once_to_a_named_destination():
    async def handler(message):
        raise KeyError("bad input") if message.body == b"bad" else TimeoutError("downstream")

    def decide(message, exc):
        return "dead-letter" if isinstance(exc, KeyError) else RetryPolicy(
            attempts=2, initial_delay=0.01, dead_letter="/queue/slow-failures")

    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0)) as client:
            await client.send("/queue/c", b"bad")
            await client.send("/queue/c", b"slow")
            consumer = await client.consume("/queue/c", handler, on_error=decide)
            await until(lambda: consumer.stats().acked == 2)
            await consumer.drain()
            assert (consumer.stats().failed, consumer.stats().retried) == (3, 1)
        dead = {f["destination"]: f["sf-attempts"] for f in frames(broker, "SEND") if "sf-attempts" in f}
        assert dead == {"/queue/c.dlq": "1", "/queue/slow-failures": "2"}


@pytest.mark.anyio
async def test_drain_during_a_retry_delay_returns_at_once_and_leaves_the_message_for_the_broker():
    async def handler(message):
        raise RuntimeError("down")

    async with Broker() as broker:
        async with AsyncClient(broker.url, heart_beat=(0, 0)) as client:
            await client.send("/queue/w", b"x")
            consumer = await client.consume("/queue/w", handler, on_error=RetryPolicy(initial_delay=60))
            await until(lambda: consumer.stats().failed == 1)
            with anyio.fail_after(WAIT):
                await consumer.drain()
        assert not frames(broker, "ACK") and not frames(broker, "NACK")
        assert broker.queue_depth("/queue/w") == 1


@pytest.mark.anyio
async def test_a_connection_lost_between_the_dead_letter_and_the_ack_gives_a_duplicate_never_a_loss():
    from stompfast import ReconnectPolicy

    async def handler(message):
        raise RuntimeError("poison")

    async with Broker() as broker:
        policy = ReconnectPolicy(initial_delay=0.01, jitter=0)
        async with AsyncClient(broker.url, heart_beat=(0, 0), reconnect=policy) as client:
            await client.send("/queue/k", b"x", receipt=True)
            consumer = await client.consume("/queue/k", handler, on_error=RetryPolicy(attempts=1))
            publish = consumer.publish
            dropped: List[bool] = []

            async def publish_then_drop(destination, body, headers):
                await publish(destination, body, headers)
                if not dropped:
                    # The dead letter is confirmed; the connection dies before the ACK.
                    dropped.append(True)
                    broker.drop_connections()
                    await until(lambda: client.reconnects == 1)

            consumer.publish = publish_then_drop
            await until(lambda: consumer.stats().dead_lettered == 2 and consumer.stats().acked == 1)
            await consumer.drain()
            assert consumer.stats().stale == 1
        assert broker.queue_depth("/queue/k") == 0 and broker.queue_depth("/queue/k.dlq") == 2


# -- the blocking client ------------------------------------------------------------------------


def test_jobs_that_fail_once_are_each_done_exactly_once_blocking(backend):
    name, options = backend
    job, done = every_seventh_fails_once()
    with Broker.in_thread() as broker:
        with Client(broker.url, heart_beat=(0, 0), backend=name, backend_options=options) as client:
            for i in range(JOBS):
                client.send("/queue/jobs", b"%d" % i)
            consumer = client.consume("/queue/jobs", lambda m: job(m.body), concurrency=8, on_error=FAST)
            until_blocking(lambda: consumer.stats().acked == JOBS)
            consumer.drain()
            stats = consumer.stats()
        assert done == Counter(range(JOBS))
        assert (stats.failed, stats.retried, stats.dead_lettered, stats.nacked) == (29, 29, 0, 0)
        assert not frames(broker, "NACK")


def test_an_always_failing_job_is_dead_lettered_after_its_attempts_blocking(backend):
    name, options = backend
    calls: List[float] = []

    def handler(message):
        calls.append(time.monotonic())
        raise ValueError("poison")

    with Broker.in_thread() as broker:
        with Client(broker.url, heart_beat=(0, 0), backend=name, backend_options=options) as client:
            client.send("/queue/p", b"body", headers={"x-job": "42"})
            consumer = client.consume("/queue/p", handler, on_error=FAST)
            until_blocking(lambda: consumer.stats().acked == 1)
            consumer.drain()
            assert consumer.stats().dead_lettered == 1
        assert len(calls) == 3 and calls[1] - calls[0] >= 0.05 and calls[2] - calls[1] >= 0.1
        (dead,) = [f for f in frames(broker, "SEND") if f["destination"] == "/queue/p.dlq"]
        assert dead["x-job"] == "42" and dead["sf-attempts"] == "3" and dead["sf-error"] == "ValueError: poison"
        assert not frames(broker, "NACK") and broker.queue_depth("/queue/p") == 0


def test_drain_during_a_retry_delay_returns_at_once_blocking(backend):
    name, options = backend
    with Broker.in_thread() as broker:
        with Client(broker.url, heart_beat=(0, 0), backend=name, backend_options=options) as client:
            client.send("/queue/w", b"x")
            consumer = client.consume("/queue/w", lambda m: 1 / 0, on_error=RetryPolicy(initial_delay=60))
            until_blocking(lambda: consumer.stats().failed == 1)
            started = time.monotonic()
            assert consumer.drain(timeout=WAIT) == 0
            assert time.monotonic() - started < WAIT
        assert not frames(broker, "ACK") and not frames(broker, "NACK")


# -- the policy and the log, alone --------------------------------------------------------------


def test_the_delay_grows_to_its_cap_and_jitter_stays_within_its_fraction():
    policy = RetryPolicy(attempts=10, initial_delay=0.5, max_delay=4, multiplier=2, jitter=0)
    assert [policy.delay_after(n) for n in range(1, 7)] == [0.5, 1, 2, 4, 4, 4]
    jittered = RetryPolicy(initial_delay=1, jitter=0.1)
    assert jittered.delay_after(1, rand=lambda: 0.0) == pytest.approx(0.9)
    assert jittered.delay_after(1, rand=lambda: 1.0) == pytest.approx(1.1)
    assert RetryPolicy(attempts=3, initial_delay=1, jitter=0).worst_case() == 3


@pytest.mark.parametrize("kwargs", [
    {"attempts": 0}, {"attempts": True}, {"initial_delay": 0}, {"max_delay": -1}, {"multiplier": 0.5},
    {"jitter": 2}, {"dead_letter": ""},
])
def test_a_bad_retry_policy_is_refused(kwargs):
    with pytest.raises(ConfigurationError):
        RetryPolicy(**kwargs)


def test_the_default_dead_letter_destination_is_a_queue_named_after_the_last_part():
    assert dead_letter_destination("/queue/jobs") == "/queue/jobs.dlq"
    assert dead_letter_destination("/topic/events") == "/queue/events.dlq"
    assert dead_letter_destination("/exchange/amq.direct/key") == "/queue/key.dlq"
    assert dead_letter_destination("plain") == "/queue/plain.dlq"


def test_a_dead_letter_keeps_the_originals_headers_but_not_its_delivery_or_expiry():
    original = {"message-id": "m1", "subscription": "1", "ack": "a1", "destination": "/queue/j", "expires": "5",
                "expiration": "100", "redelivered": "true", "x-job": "1", "content-type": "text/plain"}
    headers = dead_letter_headers(original, "/queue/j", 4, ValueError("x" * 1000))
    assert headers == {
        "x-job": "1", "content-type": "text/plain", "persistent": "true", "sf-original-destination": "/queue/j",
        "sf-original-message-id": "m1", "sf-attempts": "4", "sf-error": ("ValueError: " + "x" * 1000)[:497] + "...",
    }


def test_the_failure_log_keeps_to_its_rate_and_says_what_it_left_out(caplog):
    now = [0.0]
    failures = FailureLog(burst=3, window=10, clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="stompfast")
    for i in range(50):
        failures.failure(logging.WARNING, "failure %d", i, error=RuntimeError(str(i)))
    assert [r.getMessage() for r in caplog.records] == ["failure 0", "failure 1", "failure 2"]
    assert failures.left_out == 47
    now[0] = 10.0
    failures.failure(logging.WARNING, "failure %d", 50, error=RuntimeError("50"))
    assert caplog.records[-1].getMessage() == (
        "failure 50 (47 earlier handler failures were not logged: at most 3 records per 10 s)"
    )
    assert failures.left_out == 0 and caplog.records[-1].exc_info[0] is RuntimeError
