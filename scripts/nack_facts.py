"""What each broker does with a NACKed message, persistent or not: the facts docs/brokers.md states.

    eval "$(bash scripts/brokers.sh env)"; python scripts/nack_facts.py

For each broker whose STOMPFAST_*_URL is set, and for a non-persistent and a
persistent message: NACK it once, then say whether it came back on the same
subscription, to a fresh consumer of its queue, or into the broker's dead-letter
queue (RabbitMQ: none without a queue argument; ActiveMQ Classic: ActiveMQ.DLQ;
Artemis: DLQ), or nowhere.
"""

from __future__ import annotations

import os
import uuid
from typing import List, Optional

import anyio

from stompfast import AsyncClient

BROKERS = {"rabbitmq": None, "activemq": "/queue/ActiveMQ.DLQ", "artemis": "/queue/DLQ"}


async def find(url: str, queue: str, body: bytes, quiet: float = 1.5) -> int:
    """How many copies of ``body`` a fresh consumer of ``queue`` finds (the others are left unacked)."""
    found = 0
    async with AsyncClient(url, heart_beat=(0, 0)) as client:
        async with client.subscribe(queue, ack="client-individual", buffer_size=100) as sub:
            while True:
                with anyio.move_on_after(quiet):
                    message = await sub.receive()
                    if message.body == body:
                        found += 1
                        await message.ack()
                    continue
                break
        await client.flush()
    return found


async def nack_once(url: str, persistent: bool, dlq: Optional[str]) -> str:
    queue = f"/queue/stompfast-test-nack-{uuid.uuid4().hex[:8]}"
    body = uuid.uuid4().hex.encode()
    seen: List[str] = []
    async with AsyncClient(url, heart_beat=(0, 0)) as client:
        await client.send(queue, body, headers={"persistent": "true" if persistent else "false"}, receipt=True)
        async with client.subscribe(queue, ack="client-individual") as sub:
            message = await sub.receive()
            await message.nack()
            await client.flush()
            with anyio.move_on_after(2):
                again = await sub.receive()
                seen.append("redelivered at once" + (" (redelivered:true)" if again.redelivered else ""))
                await again.ack()
    if not seen:
        if await find(url, queue, body):
            seen.append("back on its queue for the next consumer")
        elif dlq and await find(url, dlq, body):
            seen.append(f"in {dlq}")
        else:
            seen.append("nowhere: discarded")
    return seen[0]


async def main() -> None:
    for name, dlq in BROKERS.items():
        url = os.environ.get(f"STOMPFAST_{name.upper()}_URL")
        if not url:
            print(f"{name}: skipped (STOMPFAST_{name.upper()}_URL is not set)")
            continue
        for persistent in (False, True):
            outcome = await nack_once(url, persistent, dlq)
            print(f"{name}: a {'persistent' if persistent else 'non-persistent'} message NACKed once: {outcome}")


if __name__ == "__main__":
    anyio.run(main)
