"""A worker service: N handlers at once, NACK on failure, a graceful drain on SIGTERM.

    python examples/worker_service.py

What a service run by an orchestrator looks like: ``client.consume`` runs the handler
for up to 8 jobs at once (a handler that returns acks its job; one that raises NACKs
it, and the broker hands it out again), ``client.health()`` answers the readiness probe,
and SIGTERM (or Ctrl-C) drains: no new job is taken, the running ones finish and are
acked, then the client disconnects. Here the service sends itself SIGTERM once every
job is done; in production the orchestrator does.
"""

from __future__ import annotations

import os
import signal

import anyio
from _where import broker_url

from stompfast import AsyncClient

JOBS = 200


async def main(url: str) -> None:
    done = set()

    async def handle(job):
        await anyio.sleep(0.01)
        if job.text.endswith("13") and not job.redelivered:
            raise RuntimeError("a flaky job")
        done.add(job.text)
        if len(done) == JOBS:
            os.kill(os.getpid(), signal.SIGTERM)

    async with AsyncClient(url) as client:
        for i in range(JOBS):
            await client.send("/queue/work", f"job {i}")
        workers = await client.consume("/queue/work", handle, concurrency=8)
        assert client.health().ready
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _signum in signals:
                break
        report = await client.drain(timeout=20)
    stats = workers.stats()
    print(f"{len(done)} jobs done by 8 handlers: {stats.acked} acked, {stats.nacked} nacked and redone;"
          f" drained cleanly: {report.clean}")


if __name__ == "__main__":
    with broker_url() as url:
        anyio.run(main, url)
