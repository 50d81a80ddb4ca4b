"""``stompfast listen`` (alias ``subscribe``): write the messages of a destination to stdout, a file or a directory."""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import sys
import time
from typing import Any

from .common import (
    CONNECTION_HELP,
    EXIT_INTERRUPTED,
    EXIT_OK,
    Connection,
    Failure,
    LiveStats,
    Status,
    Stopped,
    add_common_options,
    add_connection_options,
    add_stats_option,
    add_trace_option,
    format_size,
    parse_header,
    plural,
    positive_float,
    positive_int,
    run_stoppable,
    stats_block,
    trace_setup,
)
from .pipe import output_pipe

LISTEN_EPILOG = f"""\
Output (stdout unless --output):
  default   each body as it arrived (bytes untouched), followed by a newline
  --headers each message's headers as NAME:VALUE lines, a blank line, then the body
  --json    one JSON object per line: destination, message_id, subscription, headers,
            body and body_encoding ("utf-8", or "base64" when the body is not UTF-8)
  --output DIR   one file per message in DIR (created if needed; a path ending in '/'
            or an existing directory): NNNNNN-<message-id>, holding the body (or the
            JSON object with --json, name ending .json); nothing is overwritten
  --output FILE  append to FILE what stdout would have shown

Acknowledgement: the default --ack client acknowledges a message once its reader has
it: written and flushed to a file or terminal; into a pipe (Linux), read out of the
pipe by the reader, and the next message is written only then. It asks the broker for
no more unacknowledged messages than it needs (at most --count), so whatever was
received and not taken when the command stops is redelivered: `listen Q | head -1`
consumes exactly the message head reads. Other systems ack a pipe's line once written,
so lines still in the pipe when its reader exits are lost: add --count N there.
--ack auto is cheaper but the broker counts a message as consumed as soon as it sends
it, including ones the command drops when it stops at --count, --timeout or Ctrl-C.

Stopping: after --count messages; after --timeout SECONDS without a message (counted
from the subscription and from each message); after --duration SECONDS in total; or
Ctrl-C. The first three exit 0, Ctrl-C exits 130. A summary goes to stderr unless -q.
A pipe's reader that leaves stops the command at once (Linux), also while it waits for
a message: exit 141, nothing on stderr.

--stats: the client's metrics (frames and bytes in and out, acks, receipts and their
round trip, connection losses and reconnects) on the live line, and a block on stderr
at the end (also with -q).

--trace[=EXPORTER]: a CONSUMER span per message (OpenTelemetry), a child of the span of the
SEND that produced it when the message carries a traceparent; its ACK an event on it.

examples:
  stompfast listen /queue/orders
  stompfast listen /queue/orders --count 1 --timeout 5        # wait up to 5 s for one
  stompfast listen /queue/orders --json | jq .headers
  stompfast listen /queue/orders --timeout 2 --output orders/   # drain into files
  stompfast subscribe /topic/prices --headers --ack auto

{CONNECTION_HELP}"""


def add_listen_command(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "listen",
        aliases=["subscribe"],
        help="print the messages of a destination",
        description="Subscribe to DESTINATION and write each message it delivers.",
        epilog=LISTEN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("destination", metavar="DESTINATION", help="e.g. /queue/orders or /topic/prices")
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="one JSON object per message (see below)")
    out.add_argument("--headers", action="store_true", help="print each message's headers before its body")
    out.add_argument("-o", "--output", metavar="DIR|FILE", help="write to files in DIR, or append to FILE")
    add_stats_option(out)
    add_trace_option(out)
    stop = p.add_argument_group("acknowledgement and stopping")
    stop.add_argument(
        "--ack", choices=("auto", "client", "client-individual"), default="client",
        help="ack mode (default client: each message is acked once its reader has it; see below)",
    )
    stop.add_argument("-n", "--count", metavar="N", type=positive_int, help="stop after N messages")
    stop.add_argument(
        "-t", "--timeout", metavar="SECONDS", type=positive_float,
        help="stop after SECONDS without a message (idle time)",
    )
    stop.add_argument("--duration", metavar="SECONDS", type=positive_float, help="stop after SECONDS in total")
    p.add_argument(
        "-s", "--subscribe-header", metavar="NAME:VALUE", dest="sub_headers", action="append", type=parse_header,
        default=[], help="add a SUBSCRIBE header, e.g. selector:... or prefetch-count:10 (repeatable)",
    )
    add_common_options(p)
    add_connection_options(p)
    p.set_defaults(run=run_listen)


def message_record(message: Any, as_json: bool, with_headers: bool) -> bytes:
    """What ``listen`` writes for one message, without the separating newline."""
    body: bytes = message.body
    if as_json:
        try:
            text, encoding = body.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            text, encoding = base64.b64encode(body).decode("ascii"), "base64"
        record = {
            "destination": message.destination,
            "message_id": message.message_id,
            "subscription": message.subscription,
            "headers": dict(message.headers),
            "body": text,
            "body_encoding": encoding,
        }
        return json.dumps(record, ensure_ascii=False).encode("utf-8")
    if with_headers:
        head = "".join(f"{name}:{value}\n" for name, value in message.frame.header_list)
        return head.encode("utf-8", "surrogateescape") + b"\n" + body
    return body


class _StreamSink:
    """Records separated by newlines on a binary stream (stdout, or a file opened for append).

    When the stream is a pipe (Linux), a record counts as taken once the reader has read it
    out of the pipe, and the reader's leaving is noticed while the command waits.
    """

    def __init__(self, stream: Any, close: bool) -> None:
        self.stream = stream
        self._close = close
        self._pipe = output_pipe(stream)

    def write(self, record: bytes, message: Any, n: int) -> None:
        self.stream.write(record + b"\n")
        self.stream.flush()

    async def taken(self) -> None:
        """Return once what was written is the reader's: read out of the pipe, or written to a file or terminal."""
        if self._pipe is not None:
            await self._pipe.taken()

    async def watch(self) -> None:
        """Raise BrokenPipeError when a pipe's reader leaves; return at once for anything else."""
        if self._pipe is not None:
            await self._pipe.watch()

    def close(self) -> None:
        if self._close:
            self.stream.close()


class _DirectorySink:
    """One file per message."""

    _unsafe = re.compile(r"[^A-Za-z0-9._-]+")

    def __init__(self, path: str, suffix: str) -> None:
        self.path = path
        self.suffix = suffix

    def write(self, record: bytes, message: Any, n: int) -> None:
        ident = self._unsafe.sub("_", message.message_id or "")[:80].strip("._")
        base = os.path.join(self.path, f"{n:06d}-{ident}" if ident else f"{n:06d}")
        for attempt in range(1000):
            name = f"{base}{'' if attempt == 0 else f'.{attempt}'}{self.suffix}"
            try:
                with open(name, "xb") as f:
                    f.write(record)
                return
            except FileExistsError:
                continue
        raise Failure(f"cannot find a free file name for {base}{self.suffix}")

    async def taken(self) -> None:
        """A file written is taken: nothing to wait for."""

    async def watch(self) -> None:
        """No reader to watch."""

    def close(self) -> None:
        pass


def _open_sink(args: argparse.Namespace) -> Any:
    target = args.output
    if target is None:
        return _StreamSink(sys.stdout.buffer, close=False)
    try:
        if os.path.isdir(target) or target.endswith(("/", os.sep)):
            os.makedirs(target, exist_ok=True)
            return _DirectorySink(target, ".json" if args.json else "")
        return _StreamSink(open(target, "ab"), close=True)
    except OSError as exc:
        raise Failure(f"cannot write to {target}: {exc.strerror or exc}") from exc


class _Tally:
    def __init__(self, traced: Any = None) -> None:
        # --trace: instruments the client
        self.traced = traced
        self.messages = 0
        self.bytes = 0
        self.started = time.monotonic()
        self.reason = ""
        # The client's metrics at the end (--stats)
        self.stats: dict[str, Any] | None = None


def run_listen(args: argparse.Namespace, ctx: dict[str, Any]) -> int:
    conn = Connection(args)
    ctx["secrets"], ctx["url"], ctx["cafile"] = conn.secrets, conn.url, conn.cafile
    traced = trace_setup(args.trace)
    status = Status(args.quiet)
    sink = _open_sink(args)
    tally = _Tally(traced)
    code = EXIT_OK
    try:
        try:
            run_stoppable(_listen, conn, args, sink, status, tally)
        except Stopped as exc:
            tally.reason = exc.name
            code = exc.code
        except KeyboardInterrupt:
            tally.reason = "interrupted"
            code = EXIT_INTERRUPTED
        finally:
            sink.close()
    except BaseException:
        # What the client did before it failed, above the error
        _print_stats(args, status, tally)
        raise
    # It subscribed: say how it went
    if tally.reason:
        elapsed = time.monotonic() - tally.started
        status.info(
            f"received {plural(tally.messages, 'message')} ({format_size(tally.bytes)}) from {args.destination}"
            f" in {elapsed:.1f} s: {tally.reason}",
            "yellow" if code else "green",
        )
    _print_stats(args, status, tally)
    return code


def _print_stats(args: argparse.Namespace, status: Status, tally: _Tally) -> None:
    """``--stats``: the client's metrics at the end, on stderr (asked for: also with -q)."""
    if args.stats and tally.stats is not None:
        for line in stats_block(tally.stats):
            status.info(line, force=True)


async def _listen(conn: Connection, args: argparse.Namespace, sink: Any, status: Status, tally: _Tally) -> None:
    # in the client modes this is also the prefetch: never hold more than --count unacked
    buffer_size = min(args.count, 1000) if args.count else 1000
    client = conn.client()
    if tally.traced is not None:
        # --trace: a CONSUMER span per message, a child of the producer's
        tally.traced(client)
    try:
        await _receive(client, conn, args, sink, status, tally, buffer_size)
    finally:
        # After DISCONNECT: every frame counted
        tally.stats = client.stats().as_dict()


async def _receive(
    client: Any, conn: Connection, args: argparse.Namespace, sink: Any, status: Status, tally: _Tally,
    buffer_size: int,
) -> None:
    import anyio

    async with client, client.subscribe(
        args.destination, ack=args.ack, buffer_size=buffer_size, headers=dict(args.sub_headers) or None
    ) as sub:
        tally.started = time.monotonic()
        tally.reason = "interrupted"
        stops = []
        if args.count:
            stops.append(f"after {plural(args.count, 'message')}")
        if args.timeout:
            stops.append(f"after {args.timeout:g} s idle")
        if args.duration:
            stops.append(f"after {args.duration:g} s")
        stops.append("on Ctrl-C")
        status.info(
            f"listening on {args.destination} at {conn.url} (STOMP {client.version}, ack {args.ack});"
            f" stopping {' or '.join(stops)}",
            "dim",
        )
        live_stats = LiveStats(lambda: client.stats().as_dict()) if args.stats else None

        def progress() -> str:
            text = f"{args.destination}: {plural(tally.messages, 'message')} ({format_size(tally.bytes)})"
            return f"{text}  |  {live_stats()}" if live_stats is not None else text

        with status.live(progress, to_stdout=args.output is None):
            try:
                async with anyio.create_task_group() as tg:
                    # A pipe's reader that leaves while the command waits stops it (exit 141)
                    tg.start_soon(sink.watch)
                    await _take_messages(client, sub, args, sink, tally)
                    tg.cancel_scope.cancel()
            except anyio.get_cancelled_exc_class():
                # SIGTERM or Ctrl-C: leave gracefully (pending receipts awaited, DISCONNECT), bounded.
                with anyio.CancelScope(shield=True):
                    await client.drain(timeout=client.disconnect_timeout)
                raise


async def _take_messages(client: Any, sub: Any, args: argparse.Namespace, sink: Any, tally: _Tally) -> None:
    """Hand messages over until --count, --timeout or --duration stops the command; say which in ``tally``."""
    import anyio

    with anyio.move_on_after(args.duration) as total:
        while args.count is None or tally.messages < args.count:
            if args.timeout:
                with anyio.move_on_after(args.timeout) as idle:
                    message = await sub.receive()
                if idle.cancelled_caught:
                    tally.reason = f"nothing for {args.timeout:g} s"
                    return
            else:
                message = await sub.receive()
            await _hand_over(client, message, args, sink, tally)
        tally.reason = f"{plural(args.count, 'message')} received"
    if total.cancelled_caught:
        tally.reason = f"{args.duration:g} s elapsed"


async def _hand_over(client: Any, message: Any, args: argparse.Namespace, sink: Any, tally: _Tally) -> None:
    """Write one message, wait until the reader has taken it (a pipe: read it), then ack it.

    A message in hand is finished even when a signal or --duration stops the command
    meanwhile: it is written, and acked if the reader takes it within ``disconnect_timeout``,
    so what the reader took is not redelivered and what it did not take is. A reader that
    leaves first raises BrokenPipeError and the message stays unacked.
    """
    import anyio

    tally.messages += 1
    tally.bytes += len(message.body)
    sink.write(message_record(message, args.json, args.headers), message, tally.messages)
    if args.ack == "auto":
        # The broker counted it as consumed when it sent it: nothing to wait for
        return
    try:
        await sink.taken()
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True), anyio.move_on_after(client.disconnect_timeout):
            await sink.taken()
            await _ack(message)
        raise
    with anyio.CancelScope(shield=True), anyio.move_on_after(client.disconnect_timeout):
        await _ack(message)


async def _ack(message: Any) -> None:
    from ..errors import StaleMessageError

    try:
        await message.ack()
    except StaleMessageError:
        # Delivered before a reconnect: the broker sends it again
        pass
