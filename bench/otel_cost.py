"""What tracing costs per message: the async client's CPU with stompfast.otel off, metrics only, and tracing on.

    python bench/otel_cost.py              # 20,000 messages a round, 3 rounds per mode (about a minute)
    python bench/otel_cost.py --quick      # a smoke run

The broker (``stompfast broker``, the in-process test broker) runs in a process of
its own, so the CPU measured (``time.process_time`` of this process: every thread,
the span processor's included) is the client's alone. Each round, in one process
and one event loop (asyncio), per mode:

* publish: N plain SENDs (bytes, no receipt), then ``flush()``;
* consume: N messages taken from a ``client-individual`` subscription, each acked.

Modes: ``off`` (no instrumentation: the client as it is), ``metrics`` (instrumented with
``tracing=False``: observable instruments only, nothing on the path), ``tracing``
(the SDK's TracerProvider with a BatchSpanProcessor and an exporter that drops the
spans: every span is made, ended and handed to the processor; export itself not
counted), ``tracing-noop`` (the API without an SDK: non-recording spans, the context
still injected and extracted). The rounds of the modes alternate; the best round of
each counts (the machines are shared). Printed: µs of CPU per message and the ratio
to ``off``.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Sequence, Tuple

import anyio

from stompfast import AsyncClient


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_broker() -> Tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "stompfast", "broker", "--port", str(port), "-q",
                             "--max-bytes", "1G"], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"stomp://127.0.0.1:{port}/"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("the broker did not start")


def setups() -> Dict[str, Callable[[AsyncClient], Any]]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.trace import NoOpTracerProvider

    import stompfast.otel as otel

    class Drop(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop(), max_queue_size=65536, max_export_batch_size=4096))
    meters = MeterProvider()
    return {
        "off": lambda client: None,
        "metrics": lambda client: otel.instrument(client, tracing=False, meter_provider=meters),
        "tracing": lambda client: otel.instrument(client, tracer_provider=provider, metrics=False),
        "tracing-noop": lambda client: otel.instrument(client, tracer_provider=NoOpTracerProvider(), metrics=False),
    }


async def one_round(url: str, setup: Callable[[AsyncClient], Any], n: int, queue: str) -> Tuple[float, float]:
    """CPU seconds of publishing and of consuming ``n`` messages."""
    body = b"x" * 100
    async with AsyncClient(url, heart_beat=(0, 0)) as client:
        setup(client)
        async with client.subscribe(queue, ack="client-individual", buffer_size=1000) as sub:
            started = time.process_time()
            send = client.send
            for _ in range(n):
                await send(queue, body)
            await client.flush()
            published = time.process_time() - started
            started = time.process_time()
            for _ in range(n):
                message = await sub.receive()
                await message.ack()
            await client.flush()
            consumed = time.process_time() - started
    return published, consumed


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=20_000, help="messages per round (default 20,000)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2,000 messages, 1 round")
    args = parser.parse_args(argv)
    n, rounds = (2_000, 1) if args.quick else (args.n, args.rounds)
    modes = setups()
    best: Dict[str, List[float]] = {mode: [float("inf"), float("inf")] for mode in modes}
    proc, url = start_broker()
    try:
        for r in range(rounds):
            for mode, setup in modes.items():
                pub, con = anyio.run(one_round, url, setup, n, f"/queue/otel-cost-{os.getpid()}-{r}-{mode}")
                best[mode] = [min(best[mode][0], pub), min(best[mode][1], con)]
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"stompfast.otel cost, {n:,} messages x {rounds} round(s), asyncio, 100-byte bodies; CPU of the client"
          " process (µs per message) and the ratio to off")
    print(f"{'mode':<14}{'publish':>10}{'ratio':>8}{'consume+ack':>14}{'ratio':>8}")
    off_pub, off_con = best["off"]
    for mode, (pub, con) in best.items():
        print(f"{mode:<14}{pub / n * 1e6:>10.2f}{pub / off_pub:>8.2f}{con / n * 1e6:>14.2f}{con / off_con:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
