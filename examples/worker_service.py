"""A worker service: N handlers at once, retries then a dead letter on failure, a graceful drain on SIGTERM.

    python examples/worker_service.py

What a service run by an orchestrator looks like: ``client.consume`` runs the handler
for up to 8 jobs at once (a handler that returns acks its job; one that raises is logged
and tried again after a growing delay, and after five failures put on ``/queue/work.dlq``,
the same on every broker), ``client.health()`` answers the readiness probe,
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
    failed_once = set()

    async def handle(job):
        await anyio.sleep(0.01)
        if job.text.endswith("13") and job.text not in failed_once:
            failed_once.add(job.text)
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
    print(f"{len(done)} jobs done by 8 handlers: {stats.acked} acked, {stats.retried} retried,"
          f" {stats.dead_lettered} dead-lettered; drained cleanly: {report.clean}")


if __name__ == "__main__":
    with broker_url() as url:
        anyio.run(main, url)
