"""``consume`` and ``drain`` on the real brokers, both clients.

Every message is handled once and acked; after a drain nothing is left on the queue for the
next consumer, and a handler running when the drain began has finished and settled its
message first. The in-process twins: tests/test_consume.py, tests/test_sync_consume.py.
"""

from __future__ import annotations

import threading
import time
from typing import List

import anyio
import pytest

from stompfast import AsyncClient, Client

WAIT = 15
N = 60


async def left_on(url: str, queue: str) -> List[bytes]:
    """What a fresh consumer still finds on ``queue`` (auto ack, half a second of quiet ends it)."""
    found: List[bytes] = []
    async with AsyncClient(url, heart_beat=(0, 0)) as client:
        async with client.subscribe(queue) as sub:
            while True:
                with anyio.move_on_after(0.5):
                    found.append((await sub.receive()).body)
                    continue
                return found


@pytest.mark.anyio
async def test_concurrent_handlers_ack_every_message_once_and_drain_leaves_nothing(broker_url, queue):
    seen: List[bytes] = []
    running = peak = 0

    async def handler(message):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.005)
        seen.append(message.body)
        running -= 1

    async with AsyncClient(broker_url, heart_beat=(0, 0)) as client:
        for i in range(N):
            await client.send(queue, b"%d" % i)
        await client.flush()
        consumer = await client.consume(queue, handler, concurrency=4)
        with anyio.fail_after(WAIT):
            while consumer.stats().acked < N:
                await anyio.sleep(0.01)
        report = await client.drain(timeout=WAIT)
    assert sorted(seen) == sorted(b"%d" % i for i in range(N)) and 1 < peak <= 4
    assert report.clean and report.messages_unhandled == 0
    assert await left_on(broker_url, queue) == []


@pytest.mark.anyio
async def test_drain_finishes_the_running_handler_and_its_ack_reaches_the_broker(broker_url, queue):
    started = anyio.Event()

    async def slow(message):
        started.set()
        await anyio.sleep(0.3)

    async with AsyncClient(broker_url, heart_beat=(0, 0)) as client:
        await client.send(queue, b"slow", receipt=True)
        consumer = await client.consume(queue, slow)
        with anyio.fail_after(WAIT):
            await started.wait()
        report = await client.drain(timeout=WAIT)
    assert report.clean and consumer.stats().acked == 1
    assert await left_on(broker_url, queue) == []


def test_the_blocking_consumer_handles_every_message_and_drains(broker_url, queue):
    seen: List[bytes] = []
    lock = threading.Lock()

    def handler(message):
        time.sleep(0.002)
        with lock:
            seen.append(message.body)

    with Client(broker_url, heart_beat=(0, 0)) as client:
        for i in range(N):
            client.send(queue, b"%d" % i)
        client.flush(timeout=WAIT)
        consumer = client.consume(queue, handler, concurrency=3, timeout=WAIT)
        deadline = time.monotonic() + WAIT
        while consumer.stats().acked < N:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        report = client.drain(timeout=WAIT)
    assert sorted(seen) == sorted(b"%d" % i for i in range(N)) and report.clean
    assert anyio.run(left_on, broker_url, queue) == []
