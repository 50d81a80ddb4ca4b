"""Reconnect against a real broker that is actually stopped and restarted mid-test.

RabbitMQ is bounced with ``scripts/brokers.sh restart rabbitmq`` (``rabbitmqctl
stop_app`` + ``start_app``: every listener closes, every connection drops, durable
queues and persistent messages survive). A producer and a ``client-individual``
consumer run across the restart; counted end to end, every message published
arrives at least once. Duplicates are allowed (an ack the broker never saw, or a
SEND whose receipt was lost with the connection and was sent again by the
application) and reported; losses are not.

Only RabbitMQ: the private ActiveMQ these tests use is non-persistent, so a
restart empties it by design.
"""

from __future__ import annotations

import os
import subprocess
import sys

import anyio
import pytest
from brokerenv import rabbitmq_node

from stompfast import AsyncClient, ConnectionLostError, ReconnectPolicy, StaleMessageError

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

SCRIPT = os.environ.get(
    "STOMPFAST_BROKERS_SCRIPT",
    os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "brokers.sh"),
)
N = 400
POLICY = ReconnectPolicy(initial_delay=0.2, max_delay=1.0, jitter=0.1)


def restart_rabbitmq() -> None:
    node = rabbitmq_node()
    done = subprocess.run(["bash", SCRIPT, "restart", node], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"brokers.sh restart {node} failed: {done.stdout}{done.stderr}")


@pytest.fixture
def rabbitmq_url(broker: str, broker_url: str) -> str:
    if broker != "rabbitmq":
        pytest.skip("the private ActiveMQ of these tests is non-persistent: a restart empties it by design")
    if sys.platform != "linux":
        pytest.skip("needs scripts/brokers.sh")
    return broker_url


async def publish(client: AsyncClient, queue: str, bodies, stats) -> None:
    """Publish each body with a receipt; re-send the ones whose receipt the restart took."""
    for body in bodies:
        while True:
            try:
                await client.send(queue, body, headers={"persistent": "true"}, receipt=True)
                break
            except ConnectionLostError:
                stats["resent"] += 1  # unconfirmed: maybe stored, maybe not; send again


async def test_consumer_keeps_going_across_a_real_rabbitmq_restart_and_nothing_is_lost(rabbitmq_url, queue):
    bodies = [f"msg-{i:05d}".encode() for i in range(N)]
    stats = {"resent": 0, "stale_acks": 0, "duplicates": 0}
    consumer_events, producer_events = [], []
    seen = set()
    restarted = anyio.Event()
    async with AsyncClient(
        rabbitmq_url, heart_beat=(2000, 2000), reconnect=POLICY, on_event=consumer_events.append
    ) as consumer, AsyncClient(
        rabbitmq_url, heart_beat=(2000, 2000), reconnect=POLICY, on_event=producer_events.append
    ) as producer:
        async with consumer.subscribe(queue, ack="client-individual", buffer_size=20) as sub:
            await publish(producer, queue, bodies[: N // 2], stats)

            async def restart_when_a_quarter_is_in() -> None:
                while len(seen) < N // 4:
                    await anyio.sleep(0.01)
                await anyio.to_thread.run_sync(restart_rabbitmq)
                restarted.set()
                await publish(producer, queue, bodies[N // 2 :], stats)

            with anyio.fail_after(150):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(restart_when_a_quarter_is_in)
                    async for message in sub:
                        if message.body in seen:
                            stats["duplicates"] += 1
                        seen.add(message.body)
                        if len(seen) < N // 4 + 40:
                            await anyio.sleep(0.002)  # slow enough that the restart hits mid-stream
                        try:
                            await message.ack()
                        except StaleMessageError:
                            stats["stale_acks"] += 1  # delivered before the restart: it comes again
                        if len(seen) == N and restarted.is_set():
                            break
            await consumer.flush()  # the last acks reached the broker
    assert seen == set(bodies), f"lost {len(set(bodies) - seen)} messages; {stats}"
    assert consumer.reconnects >= 1 and producer.reconnects >= 1
    assert [e.kind for e in consumer_events].count("disconnected") >= 1
    print(f"restart: {stats}, consumer events {[e.kind for e in consumer_events]}")
