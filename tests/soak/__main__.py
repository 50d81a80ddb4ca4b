"""By hand: ``python -m tests.soak --broker rabbitmq --minutes 10 --messages 1000000 --restarts 3``.

Run from the repository root with the brokers up (``scripts/brokers.sh start``;
URLs from ``STOMPFAST_RABBITMQ_URL`` / ``STOMPFAST_ACTIVEMQ_URL`` or ``--url``).
Prints progress every 10 s, then the one-line summary; exits 1 when a message
confirmed by a receipt was lost, a duplicate is unexplained, RSS grew past the
limit or not everything was confirmed. See tests/soak/harness.py.
"""

from __future__ import annotations

import argparse
import sys

import anyio

from .harness import BROKERS, SoakConfig, run_soak


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__.splitlines()[0])
    p.add_argument("--broker", choices=sorted(BROKERS) + ["inprocess"], default="rabbitmq")
    p.add_argument("--url", help="broker URL (default: the broker's STOMPFAST_*_URL)")
    p.add_argument("--messages", type=int, default=100_000, help="messages to confirm (default 100,000)")
    p.add_argument("--minutes", type=float, default=1.0, help="least duration of the run (default 1)")
    p.add_argument("--producers", type=int, default=2)
    p.add_argument("--consumers", type=int, default=2)
    p.add_argument("--window", type=int, default=200, help="unconfirmed sends per producer (default 200)")
    p.add_argument("--buffer-size", type=int, default=200, help="consumer buffer and prefetch (default 200)")
    p.add_argument("--body-size", type=int, default=100)
    p.add_argument("--reset-every", type=float, default=2.0,
                   help="seconds between fault rounds (jittered 25%%; default 2)")
    p.add_argument("--faults", default="reset",
                   help="comma-separated fault kinds picked at random each round: "
                        "reset, cut, half_close, stall, outage (default reset)")
    p.add_argument("--heart-beat", type=int, default=5000, help="client heart-beat in ms (default 5000)")
    p.add_argument("--restarts", type=int, default=0,
                   help="RabbitMQ restarts (scripts/brokers.sh restart rabbitmq), spread over the run")
    p.add_argument("--max-rss-growth-mb", type=float, default=50.0)
    p.add_argument("--backend", default="asyncio", choices=["asyncio", "uvloop", "trio"])
    p.add_argument("--client", default="async", choices=["async", "sync"],
                   help="AsyncClient tasks, or the blocking Client in threads (default async)")
    p.add_argument("--quiet", action="store_true", help="print the summary line only")
    args = p.parse_args(argv)
    if args.restarts and args.broker != "rabbitmq":
        p.error("--restarts restarts RabbitMQ: use it with --broker rabbitmq")
    config = SoakConfig(
        url=args.url or BROKERS.get(args.broker, ""), broker=args.broker, messages=args.messages,
        seconds=args.minutes * 60, producers=args.producers, consumers=args.consumers, window=args.window,
        buffer_size=args.buffer_size, body_size=args.body_size, reset_every=args.reset_every,
        restarts=args.restarts, client=args.client,
        sync_backend="trio" if args.backend == "trio" else "asyncio", faults=tuple(args.faults.split(",")),
        heart_beat=args.heart_beat,
        max_rss_growth_mb=args.max_rss_growth_mb,
        progress=None if args.quiet else (lambda line: print(line, flush=True)),
    )
    backend, options = {"asyncio": ("asyncio", {}), "uvloop": ("asyncio", {"use_uvloop": True}),
                        "trio": ("trio", {})}[args.backend]

    async def go():
        if args.broker != "inprocess":
            return await run_soak(config)
        from stompfast.testing import Broker

        async with Broker(record=False) as broker:  # no frame log: its memory counts in the RSS
            config.url = broker.url
            config.persistent = False
            return await run_soak(config)

    result = anyio.run(go, backend=backend, backend_options=options)
    print(result.summary(), flush=True)
    problems = result.problems()
    for problem in problems:
        print("FAILED:", problem, file=sys.stderr)
    for line in result.unexplained:
        print("unexplained duplicate:", line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
