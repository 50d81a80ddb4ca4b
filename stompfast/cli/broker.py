"""``stompfast broker``: the in-process test broker on a TCP port, until Ctrl-C."""

from __future__ import annotations

import argparse
import re
from typing import Any

from .common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    Failure,
    Status,
    Stopped,
    add_common_options,
    format_size,
    parse_heart_beat,
    run_stoppable,
)

_SIZE = re.compile(r"(?P<n>\d+)\s*(?:(?P<unit>[KMG])i?B?|B?)", re.IGNORECASE)


def _byte_size(text: str) -> int:
    """A positive number of bytes: ``65536``, ``64K``, ``256M``, ``1GiB`` (K, M and G are powers of 1024)."""
    m = _SIZE.fullmatch(text.strip())
    value = 0
    if m:
        value = int(m["n"])
        if m["unit"]:
            value <<= 10 * ("KMG".index(m["unit"].upper()) + 1)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive size such as 65536, 64K, 256M or 1G, got {text!r}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 65536:
        raise argparse.ArgumentTypeError(f"expected a TCP port from 0 to 65535, got {text!r}")
    return value


def _user(text: str) -> tuple[str, str]:
    login, sep, passcode = text.partition(":")
    if not sep or not login:
        raise argparse.ArgumentTypeError("expected LOGIN:PASSCODE")
    return login, passcode


BROKER_EPILOG = """\
Runs stompfast's in-process test broker (stompfast.testing.Broker) on a TCP port until
Ctrl-C, then exits 0. It serves /queue/... and /topic/... destinations on STOMP
1.0-1.2 with receipts, transactions, heart-beats and the three ack modes. Nothing is
persisted: it is for trying things out and for tests, not for production.

Memory: the messages it holds (queued, or delivered and not yet acked) may count up
to --max-bytes (default 256M; each counts its body, destination and headers plus 256
bytes). At that limit it holds producers, as RabbitMQ does: a connection's next SEND
is not read, and its receipt not sent, until consumers have taken messages; other
connections go on. --when-full error refuses such a SEND with an ERROR frame
("Memory limit reached") and closes that connection instead, like ActiveMQ's
sendFailIfNoSpace.

The URL to connect to is printed on stdout (with --port 0, the free port chosen);
a hint goes to stderr.

examples:
  stompfast broker                                  # stomp://127.0.0.1:61613/
  stompfast broker --port 0                         # any free port; read it from stdout
  stompfast broker --port 61620 --user app:s3cret   # refuse other logins (Bad CONNECT)
  stompfast broker --max-bytes 16M --when-full error   # refuse SENDs beyond 16 MiB held
"""


def add_broker_command(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "broker",
        help="run the in-process test broker",
        description="Run stompfast's in-process STOMP broker for demos and tests.",
        epilog=BROKER_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=_port, default=61613, help="TCP port (default 61613; 0 picks a free one)")
    p.add_argument(
        "--user", metavar="LOGIN:PASSCODE", dest="users", action="append", type=_user, default=[],
        help="accept only these credentials (repeatable; default: accept any login)",
    )
    p.add_argument(
        "--heart-beat", metavar="SX,SY", type=parse_heart_beat, default=(0, 0),
        help="heart-beat milliseconds offered in CONNECTED (default 0,0: none)",
    )
    p.add_argument(
        "--max-bytes", metavar="SIZE", type=_byte_size, default=None,
        help="how much the held messages may count, e.g. 64M or 1G (default 256M; see below)",
    )
    p.add_argument(
        "--when-full", choices=("block", "error"), default="block",
        help="at --max-bytes: hold producers until consumers catch up (block, the default)"
        " or answer their SENDs with ERROR (error)",
    )
    add_common_options(p)
    p.set_defaults(run=run_broker)


def run_broker(args: argparse.Namespace, ctx: dict[str, Any]) -> int:
    ctx["secrets"] = [passcode for _, passcode in args.users]
    status = Status(args.quiet)
    try:
        run_stoppable(_broker, args, status)
    except Stopped as exc:
        status.info(f"broker stopped: {exc.name}")
        return EXIT_OK if exc.code == EXIT_INTERRUPTED else exc.code
    except KeyboardInterrupt:
        status.info("broker stopped")
    return EXIT_OK


async def _broker(args: argparse.Namespace, status: Status) -> None:
    import anyio

    from ..testing import Broker
    from ..testing._broker import DEFAULT_MAX_BYTES

    broker = Broker(
        args.host, args.port, users=dict(args.users) if args.users else None, heart_beat=args.heart_beat,
        record=False, max_bytes=args.max_bytes or DEFAULT_MAX_BYTES, when_full=args.when_full,
    )
    try:
        await broker.__aenter__()
    except OSError as exc:
        raise Failure(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from exc
    try:
        print(broker.url, flush=True)
        who = f"logins {', '.join(sorted(dict(args.users)))}" if args.users else "any login"
        full = "holds producers" if args.when_full == "block" else "refuses SENDs"
        status.info(
            f"stompfast test broker listening on {broker.url} ({who}; nothing persisted; at"
            f" {format_size(broker.max_bytes or 0)} of messages it {full}); Ctrl-C stops it"
        )
        status.info(f"  try: stompfast send --url {broker.url} /queue/demo hello", "dim")
        await anyio.sleep_forever()
    finally:
        await broker.__aexit__(None, None, None)


