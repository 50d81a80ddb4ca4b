"""A failing handler on RabbitMQ, ActiveMQ Classic and Artemis: the same outcome on each, nothing lost.

The broker's own NACK differs (RabbitMQ requeues at once, ActiveMQ Classic drops a
non-persistent message, Artemis discards any: docs/brokers.md), so ``consume``'s
default retries and dead-letters by itself. These tests run it with default broker
settings: jobs that fail once are each done once; a job that always fails is tried
``attempts`` times and then found in its dead-letter queue, with its headers; a
connection cut between the dead letter and the ACK gives a duplicate, never a loss.
The in-process twins: tests/test_consume_failures.py.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import List
from urllib.parse import urlsplit

import anyio
import pytest
from helpers import TIMER_SLACK
from test_consume_failures import FAST, JOBS, every_seventh_fails_once

from stompfast import AsyncClient, Client, Message, ReconnectPolicy, RetryPolicy
from stompfast.testing import FaultProxy

pytestmark = [pytest.mark.timeout(120)]

WAIT = 30


async def taken_from(url: str, queue: str, quiet: float = 1.0) -> List[Message]:
    """Every message a fresh consumer finds on ``queue`` (acked; ``quiet`` seconds without one ends it)."""
    found: List[Message] = []
    async with AsyncClient(url, heart_beat=(0, 0)) as client:
        async with client.subscribe(queue, ack="client-individual") as sub:
            while True:
                with anyio.move_on_after(quiet):
                    message = await sub.receive()
                    await message.ack()
                    found.append(message)
                    continue
                await client.flush()
                return found


@pytest.mark.anyio
async def test_jobs_that_fail_once_are_each_done_exactly_once(broker_url, queue):
    job, done = every_seventh_fails_once()

    async def handler(message):
        job(message.body)

    async with AsyncClient(broker_url, heart_beat=(0, 0)) as client:
        for i in range(JOBS):
            await client.send(queue, b"%d" % i)
        await client.flush()
        consumer = await client.consume(queue, handler, concurrency=8, on_error=FAST)
        with anyio.fail_after(WAIT):
            while consumer.stats().acked < JOBS:
                await anyio.sleep(0.01)
        await client.drain(timeout=WAIT)
    stats = consumer.stats()
    assert done == Counter(range(JOBS))
    assert (stats.failed, stats.retried, stats.dead_lettered, stats.nacked) == (29, 29, 0, 0)
    assert await taken_from(broker_url, queue) == []


@pytest.mark.anyio
async def test_an_always_failing_job_is_tried_attempts_times_then_found_in_its_dead_letter_queue(broker_url, queue):
    calls: List[float] = []

    async def handler(message):
        calls.append(time.monotonic())
        raise ValueError("poison")

    async with AsyncClient(broker_url, heart_beat=(0, 0)) as client:
        await client.send(queue, b"the job", headers={"x-job": "42"}, receipt=True)
        consumer = await client.consume(queue, handler, on_error=FAST)
        with anyio.fail_after(WAIT):
            while consumer.stats().acked < 1:
                await anyio.sleep(0.01)
        await client.drain(timeout=WAIT)
    assert len(calls) == 3 and consumer.stats().dead_lettered == 1
    assert calls[1] - calls[0] >= 0.05 - TIMER_SLACK and calls[2] - calls[1] >= 0.1 - TIMER_SLACK
    assert await taken_from(broker_url, queue) == []
    (dead,) = await taken_from(broker_url, f"{queue}.dlq")
    assert dead.body == b"the job" and dead.headers["x-job"] == "42"
    assert dead.headers["sf-attempts"] == "3" and dead.headers["sf-error"] == "ValueError: poison"
    assert dead.headers["sf-original-destination"] == queue


@pytest.mark.anyio
async def test_a_connection_cut_between_the_dead_letter_and_the_ack_gives_a_duplicate_never_a_loss(
    broker_url, queue
):
    # What happened when, so that a run that times out says at which step it stopped.
    steps: List[str] = []

    async def handler(message):
        steps.append(f"handler called on connection {client.reconnects}")
        raise RuntimeError("poison")

    target = urlsplit(broker_url)
    async with FaultProxy((target.hostname or "127.0.0.1", target.port or 61613)) as proxy:
        policy = ReconnectPolicy(initial_delay=0.05, jitter=0)
        async with AsyncClient(proxy.rewrite(broker_url), heart_beat=(0, 0), reconnect=policy) as client:
            await client.send(queue, b"x", receipt=True)
            consumer = await client.consume(queue, handler, on_error=RetryPolicy(attempts=1))
            publish = consumer.publish
            cut: List[bool] = []

            async def publish_then_cut(destination, body, headers):
                await publish(destination, body, headers)
                steps.append("dead letter confirmed")
                if not cut:
                    # The dead letter is confirmed; the connection dies before the ACK.
                    cut.append(True)
                    proxy.reset_all()
                    steps.append("connection reset")
                    with anyio.move_on_after(WAIT):
                        while client.reconnects < 1:
                            await anyio.sleep(0.01)
                    steps.append(f"reconnects: {client.reconnects}")

            def state() -> str:
                return f"steps {steps}, {consumer.stats()}, {proxy.stats}, client error {client.error!r}"

            consumer.publish = publish_then_cut
            with anyio.move_on_after(WAIT):
                while consumer.stats().acked < 1:
                    await anyio.sleep(0.01)
            assert consumer.stats().acked == 1, state()
            await client.drain(timeout=WAIT)
    assert consumer.stats().dead_lettered == 2 and consumer.stats().stale == 1, state()
    assert await taken_from(broker_url, queue) == []
    assert [m.body for m in await taken_from(broker_url, f"{queue}.dlq")] == [b"x", b"x"]


def test_the_blocking_consumer_retries_and_dead_letters_the_same_way(broker_url, queue):
    job, done = every_seventh_fails_once()

    def handler(message):
        if message.body == b"poison":
            raise ValueError("poison")
        job(message.body)

    with Client(broker_url, heart_beat=(0, 0)) as client:
        for i in range(JOBS):
            client.send(queue, b"%d" % i)
        client.send(queue, b"poison", receipt=True)
        consumer = client.consume(queue, handler, concurrency=8, on_error=FAST)
        deadline = time.monotonic() + WAIT
        while consumer.stats().acked < JOBS + 1:
            assert time.monotonic() < deadline, consumer.stats()
            time.sleep(0.01)
        client.drain(timeout=WAIT)
    stats = consumer.stats()
    assert done == Counter(range(JOBS))
    assert (stats.failed, stats.retried, stats.dead_lettered, stats.nacked) == (29 + 3, 29 + 2, 1, 0)
    assert anyio.run(taken_from, broker_url, queue) == []
    (dead,) = anyio.run(taken_from, broker_url, f"{queue}.dlq")
    assert dead.body == b"poison" and dead.headers["sf-attempts"] == "3"


@pytest.mark.anyio
async def test_asking_for_the_brokers_nack_where_it_loses_the_message_is_said_at_the_start(
    broker, broker_url, queue, caplog
):
    async def handler(message):
        pass  # pragma: no cover

    async with AsyncClient(broker_url, heart_beat=(0, 0)) as client:
        consumer = await client.consume(queue, handler, on_error="nack")
        await consumer.drain()
    said = [r.getMessage() for r in caplog.records if "on_error='nack'" in r.getMessage()]
    if broker == "rabbitmq":
        # RabbitMQ requeues a NACKed message: nothing is lost, nothing to say
        assert said == []
    else:
        (text,) = said
        assert "discards a NACKed" in text and "RetryPolicy()" in text
