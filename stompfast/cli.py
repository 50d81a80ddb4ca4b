"""The ``stompfast`` command: send, listen (alias subscribe), broker and bench.

Theory of operation
-------------------
``main()`` builds an :mod:`argparse` parser from :data:`COMMANDS`, a list of
``"module:function"`` names; each function adds one subcommand to the parser and
sets its ``run`` callable. A subcommand that lives in a module of its own (the
load generator's ``bench``, in :mod:`stompfast.loadgen`) is therefore one more line
in that list, and its module is imported only when the parser is built.

Client subcommands run on :class:`~stompfast.AsyncClient` under ``anyio.run``
(asyncio). Data (message bodies, JSON lines, the broker's URL) goes to stdout;
everything meant for a person (confirmations, summaries, errors) goes to stderr,
so pipelines stay clean.

Failures never show a traceback (``--debug`` does): ``main`` turns each into one
line on stderr and an exit code: 2 for usage and configuration errors, 1 for
failures at run time (refused connection, authentication, timeouts, ERROR
frames, files), 130 for Ctrl-C. Passcodes are masked in everything printed.

``rich`` (the ``cli`` extra) is optional: when it is installed and stderr is a
terminal, status lines are styled and ``listen`` shows a live counter while its
output goes to a file or a pipe; without it the same text is printed plainly.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import importlib
import json
import math
import os
import re
import sys
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, Callable

__all__ = ["COMMANDS", "EXIT_FAILURE", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "build_parser", "main"]

EXIT_OK = 0
EXIT_FAILURE = 1  # connection refused, authentication, timeouts, ERROR frames, I/O
EXIT_USAGE = 2  # bad arguments, URL or option values (argparse uses 2 too)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as shells report it
EXIT_TERMINATED = 143  # SIGTERM (128 + 15): docker stop, systemd, kill
EXIT_BROKEN_PIPE = 141  # the reader of stdout went away (128 + SIGPIPE)

DEFAULT_URL = "stomp://127.0.0.1:61613/"
#: ``send``: receipts outstanding at most (the Spark sink's ``receiptWindow`` default).
DEFAULT_RECEIPT_WINDOW = 1000
ENV_URL, ENV_LOGIN, ENV_PASSCODE = "STOMPFAST_URL", "STOMPFAST_LOGIN", "STOMPFAST_PASSCODE"
RICH_HINT = "pip install 'stompfast[cli]' for styled status output and live progress"

#: The subcommands, in ``--help`` order: ``"module:function"`` names of functions that
#: take the subparsers object and add one subcommand (setting ``run`` with
#: ``set_defaults``). Adding a subcommand from another module is one line here.
COMMANDS: list[str] = [
    "stompfast.cli:add_send_command",
    "stompfast.cli:add_listen_command",
    "stompfast.cli:add_broker_command",
    "stompfast.loadgen:add_bench_command",
]


class UsageError(Exception):
    """A mistake in the command line found after parsing (exit 2)."""


class Failure(Exception):
    """A run-time failure already described for a person (exit 1)."""


# -- masking ----------------------------------------------------------------------------

def mask(text: str, secrets: Sequence[str | None] = ()) -> str:
    """``text`` with every passcode in a URL and every known secret replaced by ``***``.

    URLs go through :func:`stompfast._config.redact_url` (the one redaction of
    URLs as written, even ones too broken to parse): every word with an ``@``
    after a ``//`` or a ``:`` has its userinfo replaced by ``***``. Secrets
    shorter than 3 characters are masked only inside URLs (replacing every ``e``
    of a message would make it unreadable and protect nothing).
    """
    from ._config import redact_url

    def redact(match: re.Match[str]) -> str:
        word = match[0]
        at = word.rfind("@")
        return redact_url(word) if at > 0 and ("//" in word or ":" in word[:at]) else word

    text = re.sub(r"\S+", redact, text)
    for secret in sorted({s for s in secrets if s and len(s) >= 3}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def display_url(
    host: str, port: int, login: str | None, passcode: str | None, vhost: str | None,
    scheme: str = "tcp", path: str = "/",
) -> str:
    """The broker URL to show a person: its own scheme, the passcode always ``***`` (Endpoint.masked_url)."""
    from ._config import Endpoint

    return Endpoint(host, port, scheme=scheme, login=login, passcode=passcode, virtual_host=vhost,
                    path=path).masked_url()


def one_line(text: str, limit: int = 500) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- status output (stderr) ---------------------------------------------------------------


class Status:
    """Lines for a person on stderr: styled with rich when it is installed and stderr is a terminal."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.console: Any = None
        if not quiet and _isatty(sys.stderr):
            try:
                from rich.console import Console
            except ImportError:  # the cli extra is optional: plain text works everywhere
                pass
            else:
                self.console = Console(stderr=True, highlight=False, soft_wrap=True)

    def info(self, text: str, style: str = "") -> None:
        if self.quiet:
            return
        if self.console is not None:
            self.console.print(text, style=style or None, markup=False)
        else:
            print(text, file=sys.stderr, flush=True)

    def live(self, describe: Callable[[], str], to_stdout: bool = True) -> Any:
        """A live one-line status showing ``describe()``, redrawn a few times a second.

        Only with rich, and not while the data itself goes to stdout on a terminal
        (the two would garble each other); otherwise a context manager that does nothing.
        """
        if self.console is None or (to_stdout and _isatty(sys.stdout)):
            return contextlib.nullcontext()
        return self.console.status(_Dynamic(describe))


class _Dynamic:
    """A renderable whose text is computed at each redraw (rich's refresh thread calls it)."""

    def __init__(self, describe: Callable[[], str]) -> None:
        self._describe = describe

    def __rich__(self) -> str:
        return self._describe()


def _is_device(stream: Any) -> bool:
    """True when ``stream`` is a character device such as /dev/null (not a pipe, socket or file)."""
    import stat

    try:
        return stat.S_ISCHR(os.fstat(stream.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):
        return False


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


# -- argument types -------------------------------------------------------------------------


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return value


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


def parse_heart_beat(text: str) -> tuple[int, int]:
    """``"CX,CY"`` milliseconds (``0`` = never) as a pair of ints."""
    parts = text.split(",")
    try:
        if len(parts) != 2:
            raise ValueError
        cx, cy = int(parts[0]), int(parts[1])
        if cx < 0 or cy < 0:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected two milliseconds as CX,CY (e.g. 10000,10000; 0 = never), got {text!r}"
        ) from None
    return cx, cy


def parse_versions(text: str) -> tuple[str, ...]:
    """``"1.1,1.2"`` as a tuple of STOMP versions to offer."""
    from ._protocol import SUPPORTED_VERSIONS

    versions = tuple(v.strip() for v in text.split(",") if v.strip())
    bad = [v for v in versions if v not in SUPPORTED_VERSIONS]
    if not versions or bad:
        raise argparse.ArgumentTypeError(
            f"expected STOMP versions from {','.join(SUPPORTED_VERSIONS)} separated by commas, got {text!r}"
        )
    return versions


def parse_header(text: str) -> tuple[str, str]:
    """``"name:value"`` (split at the first colon) as a pair."""
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected a header as NAME:VALUE, got {text!r}")
    return name.strip(), value


def _user(text: str) -> tuple[str, str]:
    login, sep, passcode = text.partition(":")
    if not sep or not login:
        raise argparse.ArgumentTypeError("expected LOGIN:PASSCODE")
    return login, passcode


# -- connection settings -----------------------------------------------------------------------

_CONNECTION_HELP = f"""\
connection (every client command; flags win over environment variables):
  the URL is --url, else ${ENV_URL}, else {DEFAULT_URL}
  login/passcode: --login/--passcode, else the --url's, else ${ENV_LOGIN}/${ENV_PASSCODE},
  else the ${ENV_URL}'s, else none are sent (RabbitMQ then uses its default user,
  guest/guest from loopback; ActiveMQ and Artemis accept anonymous clients unless
  configured otherwise). Passcodes are never printed.
"""


def _add_connection_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("connection options")
    group.add_argument(
        "--url", metavar="URL",
        help=f"stomp://[LOGIN[:PASSCODE]@]HOST[:PORT][/VHOST]; stomp+ssl:// for TLS, ws:// or wss:// for"
        f" WebSocket (env {ENV_URL}; default {DEFAULT_URL})",
    )
    group.add_argument(
        "--cafile", metavar="PEM",
        help="TLS URLs only: trust the CA certificates in this file instead of the system's"
        " (certificates are still verified)",
    )
    group.add_argument(
        "--cert", metavar="PEM",
        help="TLS URLs only: present this client certificate (mutual TLS; the key in it or in --key)",
    )
    group.add_argument("--key", metavar="PEM", help="the private key of --cert, when it is in a file of its own")
    group.add_argument("--login", metavar="LOGIN", help=f"login (env {ENV_LOGIN})")
    group.add_argument(
        "--passcode", metavar="PASSCODE",
        help=f"passcode (env {ENV_PASSCODE}, which keeps it out of the process list)",
    )
    group.add_argument(
        "--vhost", metavar="VHOST",
        help="virtual host, sent as CONNECT's host header (default '/': works on RabbitMQ, ActiveMQ, Artemis)",
    )
    group.add_argument(
        "--versions", metavar="LIST", type=parse_versions,
        help="STOMP versions to offer, e.g. 1.2 or 1.1,1.2 (default 1.0,1.1,1.2; the broker picks)",
    )
    group.add_argument(
        "--heart-beat", metavar="CX,CY", type=parse_heart_beat, default=(10000, 10000),
        help="heart-beat milliseconds we can send, we want to receive (default 10000,10000; 0 = never)",
    )
    group.add_argument(
        "--connect-timeout", metavar="SECONDS", type=_positive_float, default=10.0,
        help="seconds for the TCP connection plus CONNECTED (default 10)",
    )


def _add_common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-q", "--quiet", action="store_true", help="no status lines on stderr (errors still)")
    parser.add_argument(
        "--debug", action="store_true", help="show tracebacks of errors and the client's log (stompfast.*) on stderr"
    )


class Connection:
    """The client settings chosen from flags, the environment and defaults."""

    def __init__(self, args: argparse.Namespace, environ: dict[str, str] | None = None) -> None:
        from ._config import parse_url

        env = os.environ if environ is None else environ
        env_url = env.get(ENV_URL) or None
        #: every passcode seen anywhere, for masking (even ones that lost)
        self.secrets: list[str] = []
        for candidate in (args.passcode, env.get(ENV_PASSCODE)):
            if candidate:
                self.secrets.append(candidate)
        flag_ep = env_ep = None
        try:
            if args.url:
                flag_ep = parse_url(args.url)
                if flag_ep.passcode:
                    self.secrets.append(flag_ep.passcode)
            elif env_url:
                env_ep = parse_url(env_url)
                if env_ep.passcode:
                    self.secrets.append(env_ep.passcode)
            else:
                env_ep = parse_url(DEFAULT_URL)
        except Exception as exc:
            where = "--url" if args.url else f"${ENV_URL}"
            raise UsageError(f"{where}: {exc}") from exc
        ep = flag_ep or env_ep
        assert ep is not None

        def pick(flag: str | None, from_flag_url: str | None, var: str, from_env_url: str | None) -> str | None:
            for value in (flag, from_flag_url, env.get(var) or None, from_env_url):
                if value is not None:
                    return value
            return None

        self.endpoint = ep  # its scheme chooses TCP, TLS (stomp+ssl://) or WebSocket (ws://)
        self.host = ep.host
        self.port = ep.port
        self.login = pick(args.login, flag_ep.login if flag_ep else None, ENV_LOGIN, env_ep.login if env_ep else None)
        self.passcode = pick(
            args.passcode, flag_ep.passcode if flag_ep else None, ENV_PASSCODE, env_ep.passcode if env_ep else None
        )
        self.vhost = args.vhost if args.vhost is not None else ep.virtual_host
        self.versions = args.versions
        self.heart_beat = args.heart_beat
        self.connect_timeout = args.connect_timeout
        self.cafile = getattr(args, "cafile", None)
        self.cert = getattr(args, "cert", None)
        self.key = getattr(args, "key", None)
        for flag, path in (("--cafile", self.cafile), ("--cert", self.cert), ("--key", self.key)):
            if path is None:
                continue
            if not ep.tls:  # it would otherwise switch TLS on behind the URL's back
                raise UsageError(
                    f"{flag} is for TLS: use a stomp+ssl:// or wss:// URL (this one is {ep.masked_url()})"
                )
            if not os.path.isfile(path):
                raise UsageError(f"{flag}: no such file: {path}")
        if self.key is not None and self.cert is None:
            raise UsageError("--key needs --cert (the client certificate it belongs to)")
        self.ssl_context = self._tls_context()

    def _tls_context(self) -> Any:
        """The SSLContext the TLS flags ask for (None: the client's default, the system's CAs)."""
        if self.cafile is None and self.cert is None:
            return None
        import ssl

        try:
            ctx = ssl.create_default_context(cafile=self.cafile)
        except ssl.SSLError as exc:
            raise UsageError(
                f"--cafile {self.cafile}: not a PEM file of CA certificates ({exc.reason or exc})"
            ) from None
        if self.cert is not None:
            try:
                ctx.load_cert_chain(self.cert, self.key)
            except ssl.SSLError as exc:
                what = f"--cert {self.cert}" + (f" / --key {self.key}" if self.key else "")
                raise UsageError(f"{what}: not a PEM certificate with its private key ({exc.reason or exc})") from None
        return ctx

    @property
    def url(self) -> str:
        """The URL to show (its own scheme and path, the passcode masked)."""
        ep = self.endpoint
        return display_url(self.host, self.port, self.login, self.passcode, self.vhost, ep.scheme, ep.path)

    def client(self) -> Any:
        from ._client import AsyncClient

        kwargs: dict[str, Any] = {}
        if self.versions:
            kwargs["versions"] = self.versions
        if self.ssl_context is not None:
            kwargs["ssl"] = self.ssl_context
        return AsyncClient(
            self.endpoint,
            login=self.login,
            passcode=self.passcode,
            virtual_host=self.vhost,
            heart_beat=self.heart_beat,
            connect_timeout=self.connect_timeout,
            **kwargs,
        )


def _run_async(fn: Callable[..., Any], *args: Any) -> Any:
    import anyio

    return anyio.run(fn, *args)


class Stopped(Exception):
    """A command was stopped by SIGINT (Ctrl-C) or SIGTERM; it left its connection cleanly first."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def code(self) -> int:
        import signal

        return EXIT_TERMINATED if self.signum == signal.SIGTERM else EXIT_INTERRUPTED

    @property
    def name(self) -> str:
        import signal

        return "terminated (SIGTERM)" if self.signum == signal.SIGTERM else "interrupted (Ctrl-C)"


def _run_stoppable(fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(*args)`` in an event loop; SIGINT or SIGTERM cancels it and raises :class:`Stopped`.

    The cancellation unwinds ``fn`` like any other: ``async with client`` sends
    DISCONNECT and waits for its receipt (bounded by ``disconnect_timeout``), so a
    stopped command still leaves the broker cleanly, and the caller prints what was
    done. Where signals cannot be received (Windows), Ctrl-C stays KeyboardInterrupt.
    """
    import signal

    import anyio

    caught: list[int] = []

    async def main() -> Any:
        try:
            receiver = anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM)
            signals = receiver.__enter__()
        except (NotImplementedError, ValueError, RuntimeError):  # no signal handlers here
            return await fn(*args)
        try:
            result = None
            async with anyio.create_task_group() as tg:
                async def watch() -> None:
                    async for signum in signals:
                        caught.append(signum)
                        tg.cancel_scope.cancel()
                        return

                tg.start_soon(watch)
                result = await fn(*args)
                tg.cancel_scope.cancel()
            return result
        finally:
            receiver.__exit__(None, None, None)

    result = anyio.run(main)
    if caught:
        raise Stopped(caught[0])
    return result


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _size(n: int) -> str:
    if n < 1024:
        return _plural(n, "byte")
    for unit in ("KiB", "MiB", "GiB"):  # noqa: B007 (used after the loop)
        n /= 1024  # type: ignore[assignment]
        if n < 1024:
            break
    return f"{n:.1f} {unit}"


# -- send ---------------------------------------------------------------------------------------

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

{_CONNECTION_HELP}"""


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
    p.add_argument("-n", "--count", metavar="N", type=_positive_int, default=1, help="send the body N times")
    p.add_argument(
        "--json", action="store_true",
        help="print a JSON summary on stdout: destination, url, count, sent, confirmed, body_bytes, seconds,"
        " stopped (also when stopped by Ctrl-C or SIGTERM)",
    )
    p.add_argument(
        "--receipt-window", metavar="N", type=_positive_int, default=DEFAULT_RECEIPT_WINDOW,
        help=f"at most N messages sent and not yet confirmed; at N, wait for the oldest"
        f" (default {DEFAULT_RECEIPT_WINDOW})",
    )
    _add_common_options(p)
    _add_connection_options(p)
    p.set_defaults(run=run_send)


def _read_body(args: argparse.Namespace) -> tuple[str | bytes, str]:
    """The body and a word on where it came from."""
    if args.body is not None and args.file is not None:
        raise UsageError("give the body as BODY or with --file, not both")
    source = args.file if args.file is not None else args.body
    if source == "-" or (source is None and not _isatty(sys.stdin)):
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
    except UnicodeEncodeError:  # undecodable bytes in argv: send them as they were given
        return os.fsencode(args.body), "argument"
    return args.body, "argument"


def run_send(args: argparse.Namespace, ctx: dict[str, Any]) -> int:
    conn = Connection(args)
    ctx["secrets"], ctx["url"], ctx["cafile"] = conn.secrets, conn.url, conn.cafile
    body, _ = _read_body(args)
    status = Status(args.quiet)
    headers = dict(args.headers)
    size = len(body.encode("utf-8") if isinstance(body, str) else body)
    tally = _SendTally()
    started = time.monotonic()
    code, stopped = EXIT_OK, None
    with status.live(lambda: f"{args.destination}: {tally.line(args)}", to_stdout=False):
        try:
            _run_stoppable(_send, conn, args, body, headers, tally)
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
    what = _plural(args.count, "message") + (f" of {_size(size)}" if args.count > 1 else f" ({_size(size)})")
    how = "confirmed by the broker" if args.receipt else "no receipt asked"
    status.info(f"sent {what} to {args.destination} at {conn.url} in {elapsed:.2f} s, {how}", "green")
    return EXIT_OK


class _SendTally:
    """What ``send`` got done, for its progress line and for the summary when stopped."""

    def __init__(self) -> None:
        self.sent = 0  # handed to the client (written, or queued to be)
        self.confirmed = 0  # receipts come back

    def line(self, args: argparse.Namespace) -> str:
        sent = f"sent {self.sent:,} of {args.count:,}"
        return f"{sent}, {self.confirmed:,} confirmed by the broker" if args.receipt else f"{sent} (no receipts)"


async def _send(
    conn: Connection, args: argparse.Namespace, body: str | bytes, headers: dict[str, str], tally: _SendTally
) -> None:
    async with conn.client() as client:
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
                await window.popleft().wait()  # raises what made it fail (e.g. ServerError)
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


# -- listen -------------------------------------------------------------------------------------

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

Acknowledgement: the default --ack client acknowledges each message after it has been
written (and flushed), and asks the broker for no more unacknowledged messages than
it needs (at most --count), so a message is never lost when the command stops early:
whatever was received but not written is redelivered. --ack auto is cheaper but the
broker counts a message as consumed as soon as it sends it, including ones the
command drops when it stops at --count, --timeout or Ctrl-C.

Stopping: after --count messages; after --timeout SECONDS without a message (counted
from the subscription and from each message); after --duration SECONDS in total; or
Ctrl-C. The first three exit 0, Ctrl-C exits 130. A summary goes to stderr unless -q.

examples:
  stompfast listen /queue/orders
  stompfast listen /queue/orders --count 1 --timeout 5        # wait up to 5 s for one
  stompfast listen /queue/orders --json | jq .headers
  stompfast listen /queue/orders --timeout 2 --output orders/   # drain into files
  stompfast subscribe /topic/prices --headers --ack auto

{_CONNECTION_HELP}"""


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
    stop = p.add_argument_group("acknowledgement and stopping")
    stop.add_argument(
        "--ack", choices=("auto", "client", "client-individual"), default="client",
        help="ack mode (default client: each message is acked once written)",
    )
    stop.add_argument("-n", "--count", metavar="N", type=_positive_int, help="stop after N messages")
    stop.add_argument(
        "-t", "--timeout", metavar="SECONDS", type=_positive_float,
        help="stop after SECONDS without a message (idle time)",
    )
    stop.add_argument("--duration", metavar="SECONDS", type=_positive_float, help="stop after SECONDS in total")
    p.add_argument(
        "-s", "--subscribe-header", metavar="NAME:VALUE", dest="sub_headers", action="append", type=parse_header,
        default=[], help="add a SUBSCRIBE header, e.g. selector:... or prefetch-count:10 (repeatable)",
    )
    _add_common_options(p)
    _add_connection_options(p)
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
    """Records separated by newlines on a binary stream (stdout, or a file opened for append)."""

    def __init__(self, stream: Any, close: bool) -> None:
        self.stream = stream
        self._close = close

    def write(self, record: bytes, message: Any, n: int) -> None:
        self.stream.write(record + b"\n")
        self.stream.flush()

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
    def __init__(self) -> None:
        self.messages = 0
        self.bytes = 0
        self.started = time.monotonic()
        self.reason = ""


def run_listen(args: argparse.Namespace, ctx: dict[str, Any]) -> int:
    conn = Connection(args)
    ctx["secrets"], ctx["url"], ctx["cafile"] = conn.secrets, conn.url, conn.cafile
    status = Status(args.quiet)
    sink = _open_sink(args)
    tally = _Tally()
    code = EXIT_OK
    try:
        _run_stoppable(_listen, conn, args, sink, status, tally)
    except Stopped as exc:
        tally.reason = exc.name
        code = exc.code
    except KeyboardInterrupt:
        tally.reason = "interrupted"
        code = EXIT_INTERRUPTED
    finally:
        sink.close()
    if tally.reason:  # it subscribed: say how it went
        elapsed = time.monotonic() - tally.started
        status.info(
            f"received {_plural(tally.messages, 'message')} ({_size(tally.bytes)}) from {args.destination}"
            f" in {elapsed:.1f} s: {tally.reason}",
            "yellow" if code else "green",
        )
    return code


async def _listen(conn: Connection, args: argparse.Namespace, sink: Any, status: Status, tally: _Tally) -> None:
    import anyio

    from .errors import StaleMessageError

    # in the client modes this is also the prefetch: never hold more than --count unacked
    buffer_size = min(args.count, 1000) if args.count else 1000
    ack = args.ack != "auto"
    async with conn.client() as client, client.subscribe(
        args.destination, ack=args.ack, buffer_size=buffer_size, headers=dict(args.sub_headers) or None
    ) as sub:
        tally.started = time.monotonic()
        tally.reason = "interrupted"
        stops = []
        if args.count:
            stops.append(f"after {_plural(args.count, 'message')}")
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
        def progress() -> str:
            return f"{args.destination}: {_plural(tally.messages, 'message')} ({_size(tally.bytes)})"

        with status.live(progress, to_stdout=args.output is None):
            with anyio.move_on_after(args.duration) as total:
                while args.count is None or tally.messages < args.count:
                    if args.timeout:
                        with anyio.move_on_after(args.timeout) as idle:
                            message = await sub.receive()
                        if idle.cancelled_caught:
                            tally.reason = f"nothing for {args.timeout:g} s"
                            break
                    else:
                        message = await sub.receive()
                    tally.messages += 1
                    tally.bytes += len(message.body)
                    sink.write(message_record(message, args.json, args.headers), message, tally.messages)
                    if ack:
                        try:
                            await message.ack()
                        except StaleMessageError:
                            pass  # delivered before a reconnect: the broker sends it again
                else:
                    tally.reason = f"{_plural(args.count, 'message')} received"
            if total.cancelled_caught:
                tally.reason = f"{args.duration:g} s elapsed"


# -- broker -------------------------------------------------------------------------------------

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
    _add_common_options(p)
    p.set_defaults(run=run_broker)


def run_broker(args: argparse.Namespace, ctx: dict[str, Any]) -> int:
    ctx["secrets"] = [passcode for _, passcode in args.users]
    status = Status(args.quiet)
    try:
        _run_stoppable(_broker, args, status)
    except Stopped as exc:
        status.info(f"broker stopped: {exc.name}")
        return EXIT_OK if exc.code == EXIT_INTERRUPTED else exc.code
    except KeyboardInterrupt:
        status.info("broker stopped")
    return EXIT_OK


async def _broker(args: argparse.Namespace, status: Status) -> None:
    import anyio

    from .testing import Broker
    from .testing._broker import DEFAULT_MAX_BYTES

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
            f" {_size(broker.max_bytes or 0)} of messages it {full}); Ctrl-C stops it"
        )
        status.info(f"  try: stompfast send --url {broker.url} /queue/demo hello", "dim")
        await anyio.sleep_forever()
    finally:
        await broker.__aexit__(None, None, None)


# -- main ---------------------------------------------------------------------------------------

MAIN_EPILOG = f"""\
exit codes: 0 done; 1 failed at run time (connection refused, authentication,
timeout, ERROR from the broker, files); 2 usage or configuration error (bad option,
bad URL); 130 interrupted (Ctrl-C); 143 terminated (SIGTERM: docker stop, systemd).
A stopped send or listen closes its connection cleanly (DISCONNECT) and says what it did.

examples:
  stompfast broker --port 0 &                  # a test broker; prints its URL
  stompfast send /queue/demo 'hello'
  stompfast listen /queue/demo --count 1 --json
  stompfast bench                              # load test against an in-process broker

'stompfast COMMAND --help' shows each command's options and examples.
Docs: https://github.com/stompfast/stompfast/blob/main/docs/cli.md
({RICH_HINT}.)
"""


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The argument parser with every subcommand of :data:`COMMANDS`."""
    from . import __version__

    parser = argparse.ArgumentParser(
        prog=prog or "stompfast",
        description="Send, receive and serve STOMP messages from the command line.",
        epilog=MAIN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for name in COMMANDS:
        module, _, function = name.partition(":")
        getattr(importlib.import_module(module), function)(subparsers)
    return parser


def _leaf(exc: BaseException) -> BaseException:
    """The single exception inside (nested) exception groups, if there is just one."""
    while True:
        inner = getattr(exc, "exceptions", None)
        if isinstance(inner, tuple) and len(inner) == 1 and isinstance(inner[0], BaseException):
            exc = inner[0]
        else:
            return exc


def describe_error(exc: BaseException, url: str | None = None, cafile: str | None = None) -> tuple[int, str]:
    """The exit code and the one-line message for a failure."""
    from .errors import (
        AuthenticationError,
        ConfigurationError,
        ConnectError,
        LocalProtocolError,
        ServerError,
        StompError,
    )

    if isinstance(exc, UsageError):
        return EXIT_USAGE, str(exc)
    if isinstance(exc, Failure):
        return EXIT_FAILURE, str(exc)
    if isinstance(exc, (ConfigurationError, LocalProtocolError)):
        return EXIT_USAGE, str(exc)
    at = f" at {url}" if url else ""
    if isinstance(exc, AuthenticationError):
        return EXIT_FAILURE, f"the broker{at} refused the session (login, passcode or virtual host): {exc}"
    if isinstance(exc, ServerError):
        return EXIT_FAILURE, f"the broker{at} sent ERROR: {exc}"
    if isinstance(exc, ConnectError):
        hint = ""
        if type(exc).__name__ == "TLSError":
            if cafile:
                hint = f" (the broker's certificate is not signed by a CA of {cafile}, or does not name this host)"
            else:
                hint = " (for a private CA: --cafile PEM)"
        elif isinstance(exc.__cause__, ConnectionRefusedError) or "refused" in str(exc).lower():
            hint = " (is a STOMP broker listening there? 'stompfast broker' runs a test one)"
        return EXIT_FAILURE, f"{exc}{hint}"
    if isinstance(exc, StompError):
        return EXIT_FAILURE, str(exc) or type(exc).__name__
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return EXIT_FAILURE, f"{where}{exc.strerror or exc}"
    return EXIT_FAILURE, f"unexpected {type(exc).__name__}: {exc} (--debug shows the traceback)"


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    ctx: dict[str, Any] = {"secrets": []}
    if getattr(args, "debug", False):  # the client's own log: connects, losses, reconnects (never a passcode)
        import logging

        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger("stompfast").addHandler(handler)
        logging.getLogger("stompfast").setLevel(logging.DEBUG)
    try:
        return args.run(args, ctx)
    except BrokenPipeError:
        # stdout's reader left (e.g. `| head -1`): stop quietly; point stdout at
        # /dev/null so that the interpreter's final flush does not complain
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BaseException as group:
        exc = _leaf(group)
        if isinstance(exc, KeyboardInterrupt):
            return EXIT_INTERRUPTED
        if isinstance(exc, SystemExit):
            raise exc from None
        if not isinstance(exc, Exception):
            raise
        code, text = describe_error(exc, ctx.get("url"), ctx.get("cafile"))
        if getattr(args, "debug", False):
            import traceback

            traceback.print_exception(type(group), group, group.__traceback__)
        print(f"{parser.prog}: error: {one_line(mask(text, ctx['secrets']))}", file=sys.stderr, flush=True)
        return code
