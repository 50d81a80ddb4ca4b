"""``stompfast send``: one message, or ``--count`` copies, with pipelined receipts."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import deque
from typing import Any, Callable

from .common import (
    CONNECTION_HELP,
    EXIT_OK,
    Connection,
    Failure,
    Status,
    Stopped,
    UsageError,
    add_common_options,
    add_connection_options,
    add_trace_option,
    format_size,
    isatty,
    parse_header,
    plural,
    positive_int,
    run_stoppable,
    trace_setup,
)

#: ``send``: receipts outstanding at most (the Spark sink's ``receiptWindow`` default).
DEFAULT_RECEIPT_WINDOW = 1000


def _is_device(stream: Any) -> bool:
    """True when ``stream`` is a character device such as /dev/null (not a pipe, socket or file)."""
    import stat

    try:
        return stat.S_ISCHR(os.fstat(stream.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):
        return False


SEND_EPILOG = f"""\
The body comes from BODY, from --file PATH, or from stdin (BODY '-' or --file -, or
no BODY while stdin is a pipe or file). A BODY argument is sent as UTF-8 text with
content-type text/plain;charset=utf-8; file and stdin bodies are sent byte for byte
(binary is fine) with no content-type unless --content-type gives one.

By default every SEND asks for a receipt and the command exits 0 only once the broker
confirmed each message (RabbitMQ: after it has taken responsibility for it); a line
saying so goes to stderr unless -q. Receipts are pipelined: at most --receipt-window
messages (default {DEFAULT_RECEIPT_WINDOW}) are unconfirmed at once, so memory stays flat
at any --count. --no-receipt sends without waiting (the broker still confirms the
DISCONNECT, which follows the messages).

examples:
  stompfast send /queue/orders 'hello'
  stompfast send /queue/orders --file order.json --content-type application/json
  gzip -c report.csv | stompfast send /queue/reports -H content-encoding:gzip
  stompfast send /topic/prices '42.0' -H symbol:ACME -H persistent:true --count 100
  STOMPFAST_URL=stomp://guest:guest@mq.example:61613/ stompfast send /queue/a hi
  stompfast send /queue/orders 'hello' --trace=console   # a span per message, on stderr

{CONNECTION_HELP}"""


def add_send_command(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "send",
        help="send a message to a destination",
        description="Send one message (or --count copies of it) to DESTINATION.",
        epilog=SEND_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("destination", metavar="DESTINATION", help="e.g. /queue/orders or /topic/prices")
    p.add_argument("body", metavar="BODY", nargs="?", help="the message text ('-' reads stdin)")
    p.add_argument("-f", "--file", metavar="PATH", help="read the body from PATH ('-' is stdin)")
    p.add_argument(
        "-H", "--header", metavar="NAME:VALUE", dest="headers", action="append", type=parse_header, default=[],
        help="add a header (repeatable)",
    )
    p.add_argument("--content-type", metavar="TYPE", help="the content-type header, e.g. application/json")
    p.add_argument(
        "--receipt", action=argparse.BooleanOptionalAction, default=True,
        help="wait until the broker confirms each message (default: on)",
    )
    p.add_argument("-n", "--count", metavar="N", type=positive_int, default=1, help="send the body N times")
    p.add_argument(
        "--json", action="store_true",
        help="print a JSON summary on stdout: destination, url, count, sent, confirmed, body_bytes, seconds,"
        " stopped (also when stopped by Ctrl-C or SIGTERM)",
    )
    p.add_argument(
        "--receipt-window", metavar="N", type=positive_int, default=DEFAULT_RECEIPT_WINDOW,
        help=f"at most N messages sent and not yet confirmed; at N, wait for the oldest"
        f" (default {DEFAULT_RECEIPT_WINDOW})",
    )
    add_trace_option(p)
    add_common_options(p)
    add_connection_options(p)
    p.set_defaults(run=run_send)


def _read_body(args: argparse.Namespace) -> tuple[str | bytes, str]:
    """The body and a word on where it came from."""
    if args.body is not None and args.file is not None:
        raise UsageError("give the body as BODY or with --file, not both")
    source = args.file if args.file is not None else args.body
    if source == "-" or (source is None and not isatty(sys.stdin)):
        if sys.stdin is None:
            raise UsageError("no stdin to read the body from")
        data = sys.stdin.buffer.read()
        if not data and source is None and _is_device(sys.stdin):
            # nothing from /dev/null or the like: cron, systemd and `docker run` without -i
            # when BODY was forgotten; an empty pipe or file, or '-', still sends an empty body
            raise UsageError(
                "no body: stdin is empty and not a pipe or a file (give BODY, --file PATH, or '' for an"
                " empty message)"
            )
        return data, "stdin"
    if args.file is not None:
        try:
            with open(args.file, "rb") as f:
                return f.read(), args.file
        except OSError as exc:
            raise Failure(f"cannot read {args.file}: {exc.strerror or exc}") from exc
    if args.body is None:
        raise UsageError(
            "no body: give BODY, --file PATH, or pipe it on stdin ('-' reads the terminal until Ctrl-D; '' is empty)"
        )
    try:
        args.body.encode("utf-8")
    # Undecodable bytes in argv: send them as they were given
    except UnicodeEncodeError:
        return os.fsencode(args.body), "argument"
    return args.body, "argument"


def run_send(args: argparse.Namespace, ctx: dict[str, Any]) -> int:
    conn = Connection(args)
    ctx["secrets"], ctx["url"], ctx["cafile"] = conn.secrets, conn.url, conn.cafile
    body, _ = _read_body(args)
    traced = trace_setup(args.trace)
    status = Status(args.quiet)
    headers = dict(args.headers)
    size = len(body.encode("utf-8") if isinstance(body, str) else body)
    tally = _SendTally()
    started = time.monotonic()
    code, stopped = EXIT_OK, None
    with status.live(lambda: f"{args.destination}: {tally.line(args)}", to_stdout=False):
        try:
            run_stoppable(_send, conn, args, body, headers, tally, traced)
        except Stopped as exc:
            code, stopped = exc.code, exc
    elapsed = time.monotonic() - started
    if args.json:
        print(json.dumps({
            "destination": args.destination, "url": conn.url, "count": args.count, "sent": tally.sent,
            "confirmed": tally.confirmed if args.receipt else None, "body_bytes": size, "seconds": round(elapsed, 6),
            "stopped": stopped.name if stopped else None,
        }), flush=True)
    if stopped is not None:
        status.info(f"{stopped.name}: {tally.line(args)} to {args.destination} at {conn.url} in {elapsed:.2f} s;"
                    " the connection was closed cleanly", "yellow")
        return code
    what = plural(args.count, "message") + (f" of {format_size(size)}" if args.count > 1 else f" ({format_size(size)})")
    how = "confirmed by the broker" if args.receipt else "no receipt asked"
    status.info(f"sent {what} to {args.destination} at {conn.url} in {elapsed:.2f} s, {how}", "green")
    return EXIT_OK


class _SendTally:
    """What ``send`` got done, for its progress line and for the summary when stopped."""

    def __init__(self) -> None:
        # Handed to the client (written, or queued to be)
        self.sent = 0
        # Receipts come back
        self.confirmed = 0

    def line(self, args: argparse.Namespace) -> str:
        sent = f"sent {self.sent:,} of {args.count:,}"
        return f"{sent}, {self.confirmed:,} confirmed by the broker" if args.receipt else f"{sent} (no receipts)"


async def _send(
    conn: Connection, args: argparse.Namespace, body: str | bytes, headers: dict[str, str], tally: _SendTally,
    traced: Callable[[Any], Any] | None = None,
) -> None:
    client = conn.client()
    if traced is not None:
        # --trace: a PRODUCER span per message, its context in the SEND's headers
        traced(client)
    async with client:
        if not args.receipt:
            for _ in range(args.count):
                await client.send(args.destination, body, headers=headers or None, content_type=args.content_type)
                tally.sent += 1
            return
        # A window of receipts in flight, oldest first: memory stays flat at any --count.
        window: deque[Any] = deque()
        limit = args.receipt_window
        for _ in range(args.count):
            while window and (len(window) >= limit or window[0].done()):
                # Raises what made it fail (e.g. ServerError)
                await window.popleft().wait()
                tally.confirmed += 1
            window.append(
                await client.send(
                    args.destination, body, headers=headers or None, content_type=args.content_type,
                    receipt=True, wait=False,
                )
            )
            tally.sent += 1
        while window:
            await window.popleft().wait()
            tally.confirmed += 1


