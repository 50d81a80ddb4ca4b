"""Subscribing to a deep queue on real brokers: auto mode (no prefetch), small buffers, the CLI.

In ``auto`` mode the broker applies no prefetch and pushes the whole queue at once,
so a subscription's buffer fills in the first read and the reader stops (TCP
backpressure). If the SUBSCRIBE's RECEIPT came behind those messages, nothing
could drain the buffer (the subscriber gets the subscription once it is
confirmed): the client takes the subscription's first MESSAGE as its
confirmation too (issue 21, item 8). RabbitMQ 3.10 and ActiveMQ Classic as
installed here send the RECEIPT before the first MESSAGE (probed by hand, a raw
socket, dozens of runs, also while a producer kept the queue filling), so these
tests pass with or without that rule: what they pin is that a deep queue is
delivered whole, in order, with nothing failing, on every buffer size, with the
blocking client and through ``stompfast listen``. The late RECEIPT itself is
reproduced with the in-process broker (``delay_receipts``) in tests/test_client.py,
tests/test_sync.py and tests/test_cli.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Dict, List, Optional

import anyio
import pytest

from stompfast import AsyncClient, Client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

WAIT = 10  # seconds any single broker round trip may take before the test fails
DEPTH = 3000  # messages put on the queue before subscribing: several reads' worth
BODY = 200  # bytes per message (600 KB in all)


def body(i: int) -> bytes:
    return b"%05d" % i + b"." * (BODY - 5)


async def fill(url: str, queue: str, n: int = DEPTH) -> None:
    async with AsyncClient(url, heart_beat=(0, 0), reconnect=False) as c:
        for i in range(n):
            await c.send(queue, body(i))
        with anyio.fail_after(WAIT * 3):
            await c.flush()


def fill_blocking(url: str, queue: str, n: int = DEPTH) -> None:
    anyio.run(fill, url, queue, n)


@pytest.mark.anyio
@pytest.mark.parametrize("buffer_size", [None, 5])
async def test_auto_subscription_to_a_deep_queue_delivers_it_whole(broker_url, queue, buffer_size):
    await fill(broker_url, queue)
    kwargs: Dict[str, Any] = {} if buffer_size is None else {"buffer_size": buffer_size}
    async with AsyncClient(broker_url, heart_beat=(0, 0), reconnect=False) as c:
        with anyio.fail_after(WAIT):
            sub = await c.subscribe(queue, **kwargs).__aenter__()
        try:
            got: List[bytes] = []
            with anyio.fail_after(WAIT * 3):
                while len(got) < DEPTH:
                    got.extend(m.body for m in await sub.receive_batch(500))
            assert got == [body(i) for i in range(DEPTH)]
            with anyio.fail_after(WAIT):
                await c.flush()
            stats = c.stats()
            assert stats.receipts_failed == 0 and stats.receipts_pending == 0
        finally:
            await sub.aclose()


@pytest.mark.anyio
async def test_client_individual_with_a_prefetch_above_buffer_size(broker_url, queue):
    # The broker may send 500 unacked messages into a buffer of 5: the reader stops on
    # it as in auto mode, and the subscription still opens and drains.
    await fill(broker_url, queue, 1000)
    headers = {"prefetch-count": "500", "activemq.prefetchSize": "500"}
    async with AsyncClient(broker_url, heart_beat=(0, 0), reconnect=False) as c:
        with anyio.fail_after(WAIT):
            sub = await c.subscribe(queue, ack="client-individual", headers=headers, buffer_size=5).__aenter__()
        try:
            with anyio.fail_after(WAIT * 3):
                for i in range(1000):
                    message = await sub.receive()
                    assert message.body == body(i)
                    await message.ack()
            with anyio.fail_after(WAIT):
                await c.flush()
            assert c.stats().receipts_failed == 0
        finally:
            await sub.aclose()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("buffer_size", [None, 5])
def test_blocking_auto_subscription_to_a_deep_queue(broker_url, queue, backend, buffer_size):
    fill_blocking(broker_url, queue)
    kwargs: Dict[str, Any] = {} if buffer_size is None else {"buffer_size": buffer_size}
    with Client(broker_url, backend=backend, heart_beat=(0, 0), reconnect=False) as c:
        with c.subscribe(queue, timeout=WAIT, **kwargs) as sub:
            got: List[bytes] = []
            while len(got) < DEPTH:
                got.extend(m.body for m in sub.receive_batch(500, timeout=WAIT))
            assert got == [body(i) for i in range(DEPTH)]
            c.flush(timeout=WAIT)
            assert c.stats().receipts_failed == 0


def listen(url: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOMPFAST_")}
    return subprocess.run(
        [sys.executable, "-m", "stompfast", "listen", "--url", url, *args],
        stdin=subprocess.DEVNULL, capture_output=True, timeout=45, env=env,
    )


@pytest.mark.parametrize("count", [5, None])
def test_cli_listen_auto_on_a_deep_queue(broker_url, queue, count: Optional[int]):
    fill_blocking(broker_url, queue)
    if count:
        # --count 5: a buffer of 5 messages, flooded by the first read
        got = listen(broker_url, queue, "--ack", "auto", "--count", str(count))
        expected = count
    else:
        # no --count: the default buffer (1000), the whole queue, then 2 s idle
        got = listen(broker_url, queue, "--ack", "auto", "--timeout", "2")
        expected = DEPTH
    try:
        assert got.returncode == 0, got.stderr.decode()
        assert got.stdout == b"".join(body(i) + b"\n" for i in range(expected))
        assert f"received {expected} messages".encode() in got.stderr
    finally:
        # the brokers are shared: leave nothing on them
        anyio.run(drain, broker_url, queue)


async def drain(url: str, queue: str) -> None:
    async with AsyncClient(url, heart_beat=(0, 0), reconnect=False) as c:
        async with c.subscribe(queue) as sub:
            while True:
                with anyio.move_on_after(1) as idle:
                    await sub.receive_batch(1000)
                if idle.cancelled_caught:
                    return
