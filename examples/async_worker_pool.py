"""An async service: one subscription, a pool of workers handling messages concurrently.

    python examples/async_worker_pool.py

The subscription's buffer (buffer_size) bounds what is taken from the broker, and the
memory stream bounds what waits for a worker: a slow pool slows the broker down, it
never piles messages up. Runs on asyncio (add backend="trio" to anyio.run for trio).
"""

from __future__ import annotations

import anyio
from _where import broker_url
from anyio.streams.memory import MemoryObjectReceiveStream

from stompfast import AsyncClient, Message

WORKERS = 8


async def handle(message: Message) -> None:
    await anyio.sleep(0.001)  # stands in for real work (a database write, an HTTP call)


async def worker(inbox: MemoryObjectReceiveStream, done: list) -> None:
    async with inbox:
        async for message in inbox:
            await handle(message)
            await message.ack()
            done.append(message.message_id)


async def main(url: str, n: int = 500) -> int:
    done: list = []
    async with AsyncClient(url) as client:
        for i in range(n):
            await client.send("/queue/jobs", f"job {i}")
        await client.flush()  # every send confirmed
        async with client.subscribe("/queue/jobs", ack="client-individual", buffer_size=100) as sub:
            send, receive = anyio.create_memory_object_stream(WORKERS)
            async with anyio.create_task_group() as tg:
                for _ in range(WORKERS):
                    tg.start_soon(worker, receive.clone(), done)
                receive.close()
                async with send:
                    for _ in range(n):
                        await send.send(await sub.receive())
    return len(done)


if __name__ == "__main__":
    with broker_url() as url:
        print(f"{anyio.run(main, url)} jobs handled by {WORKERS} workers")
