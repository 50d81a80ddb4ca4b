"""What every ``stompfast`` subcommand shares: exit codes, errors, masking, status, argument types, connections.

``stompfast bench`` (:mod:`stompfast.loadgen.command`) uses these as much as ``send``,
``listen`` and ``broker`` do, so they live here, with public names, rather than in
either command's module: both import this module, and it imports neither.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Callable

EXIT_OK = 0
# Connection refused, authentication, timeouts, ERROR frames, I/O
EXIT_FAILURE = 1
# Bad arguments, URL or option values (argparse uses 2 too)
EXIT_USAGE = 2
# stompfast bench: a clean run that missed a --slo objective (a CI gate, as k6's thresholds)
EXIT_SLO = 3
# Ctrl-C (128 + SIGINT), as shells report it
EXIT_INTERRUPTED = 130
# SIGTERM (128 + 15): docker stop, systemd, kill
EXIT_TERMINATED = 143
# The reader of stdout went away (128 + SIGPIPE)
EXIT_BROKEN_PIPE = 141

DEFAULT_URL = "stomp://127.0.0.1:61613/"
ENV_URL, ENV_LOGIN, ENV_PASSCODE = "STOMPFAST_URL", "STOMPFAST_LOGIN", "STOMPFAST_PASSCODE"


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
    of a message would make it unreadable and protect nothing). The login of a
    URL shown as ``login:***@`` stays, even when it is the same string as a
    passcode, so every URL is masked alike.
    """
    from .._config import redact_url

    def redact(match: re.Match[str]) -> str:
        word = match[0]
        at = word.rfind("@")
        return redact_url(word) if at > 0 and ("//" in word or ":" in word[:at]) else word

    text = re.sub(r"\S+", redact, text)
    # The login of a URL already masked as ``login:***@`` is kept even when it is
    # the same string as a passcode (guest/guest): every URL shows as
    # ``stomp://login:***@``, not sometimes as ``stomp://***:***@``.
    pieces = _MASKED_USERINFO.split(text)
    for secret in sorted({s for s in secrets if s and len(s) >= 3}, key=len, reverse=True):
        pieces[::2] = [piece.replace(secret, "***") for piece in pieces[::2]]
    return "".join(pieces)


#: a URL's userinfo as masked (``//login:***@``), captured so that re.split keeps it at the odd indices
_MASKED_USERINFO = re.compile(r"(//[^\s:/@]*:\*\*\*@)")


def display_url(
    host: str, port: int, login: str | None, passcode: str | None, vhost: str | None,
    scheme: str = "tcp", path: str = "/",
) -> str:
    """The broker URL to show a person: its own scheme, the passcode always ``***`` (Endpoint.masked_url)."""
    from .._config import Endpoint

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
        if not quiet and isatty(sys.stderr):
            try:
                from rich.console import Console
            # The cli extra is optional: plain text works everywhere
            except ImportError:
                pass
            else:
                self.console = Console(stderr=True, highlight=False, soft_wrap=True)

    def info(self, text: str, style: str = "", force: bool = False) -> None:
        """Print ``text`` unless -q (``force``: even then, for output asked for explicitly, e.g. ``--stats``)."""
        if self.quiet and not force:
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
        if self.console is None or (to_stdout and isatty(sys.stdout)):
            return contextlib.nullcontext()
        return self.console.status(_Dynamic(describe))


# -- client metrics (--stats) ----------------------------------------------------------------


def add_stats_option(group: Any) -> None:
    """``--stats`` (``listen``, ``bench``): the clients' own metrics, live and at the end."""
    group.add_argument(
        "--stats", action="store_true",
        help="show the client's metrics (frames, bytes, acks, receipts and their round trip, losses):"
        " on the live status line, and as a block on stderr at the end (even with -q)",
    )


# -- tracing (--trace) ------------------------------------------------------------------------

#: ``--trace`` alone: the exporter the environment names (``OTEL_TRACES_EXPORTER``; docs/observability.md).
TRACE_FROM_ENV = "env"
TRACE_CHOICES = (TRACE_FROM_ENV, "console", "otlp", "none")


def add_trace_option(group: Any) -> None:
    """``--trace[=EXPORTER]`` (``send``, ``listen``, ``bench``): OpenTelemetry spans for the command's clients."""
    group.add_argument(
        "--trace", nargs="?", const=TRACE_FROM_ENV, default=None, choices=TRACE_CHOICES, metavar="EXPORTER",
        help="trace the client with OpenTelemetry (needs stompfast[otel] and opentelemetry-sdk): SENDs carry"
        " traceparent, spans go to EXPORTER: console (stderr), otlp, none, or env (the default: OTEL_TRACES_EXPORTER,"
        " else otlp when OTEL_EXPORTER_OTLP_ENDPOINT is set, else none); write it as --trace=EXPORTER",
    )


def trace_setup(choice: str | None) -> Callable[[Any], Any] | None:
    """What ``--trace`` asks for, checked before connecting: a function that instruments a client, or None.

    Raises :class:`UsageError` (with the install hint) when OpenTelemetry, its SDK or the
    exporter's package is missing.
    """
    if choice is None:
        return None
    try:
        import stompfast.otel as otel
    except ImportError as exc:
        raise UsageError(f"--trace needs OpenTelemetry ({exc}): pip install 'stompfast[otel]' opentelemetry-sdk") \
            from None
    from ..errors import ConfigurationError

    try:
        provider = otel.tracer_provider_from_environment(None if choice == TRACE_FROM_ENV else choice)
    except ConfigurationError as exc:
        raise UsageError(f"--trace: {exc}") from None

    def instrument(client: Any) -> Any:
        return otel.instrument(client, tracer_provider=provider, metrics=False)

    return instrument


def format_seconds(seconds: Any) -> str:
    """A round trip for a person: ``"-"`` (none), ``"420 us"``, ``"1.28 ms"``, ``"130 ms"``."""
    if seconds is None:
        return "-"
    us = float(seconds) * 1e6
    if us < 1000:
        return f"{us:,.0f} us"
    return f"{us / 1000:,.2f} ms" if us < 100_000 else f"{us / 1000:,.0f} ms"


def stats_line(stats: Mapping[str, Any]) -> str:
    """The clients' metrics on one line (the live status): ``stats`` is ``ClientStats.as_dict()`` or a sum of them."""
    rtt = stats.get("receipt_rtt") or {}
    text = (
        f"in {stats['frames_in']:,} frames ({format_size(stats['bytes_in'])})"
        f"  out {stats['frames_out']:,} ({format_size(stats['bytes_out'])})"
        f"  acks {stats['acks']:,}  receipts {stats['receipts_confirmed']:,}"
    )
    if rtt.get("count"):
        text += f" (p99 {format_seconds(rtt.get('p99'))})"
    if stats["receipts_failed"]:
        text += f", {stats['receipts_failed']:,} failed"
    if stats["connection_losses"] or stats["reconnects"]:
        text += f"  losses {stats['connection_losses']:,}  reconnects {stats['reconnects']:,}"
    if stats["bytes_queued"]:
        text += f"  queued {format_size(stats['bytes_queued'])}"
    return text


def stats_block(stats: Mapping[str, Any], title: str = "client stats") -> list[str]:
    """The clients' metrics at the end, a few aligned lines: messages, acks, receipts, the connection, traffic."""
    rtt = stats.get("receipt_rtt") or {}
    receipts = f"{stats['receipts_confirmed']:,} confirmed, {stats['receipts_failed']:,} failed"
    if rtt.get("count"):
        receipts += f"; round trip p50 {format_seconds(rtt.get('p50'))}, p99 {format_seconds(rtt.get('p99'))}"
    rows = [
        ("messages", f"{stats['messages_sent']:,} sent, {stats['messages_received']:,} received"),
        ("acks / nacks", f"{stats['acks']:,} / {stats['nacks']:,}"),
        ("receipts", receipts),
        ("losses / reconnects", f"{stats['connection_losses']:,} / {stats['reconnects']:,}"
         + (f"  ({plural(stats['errors'], 'ERROR frame')})" if stats["errors"] else "")),
        ("frames in / out", f"{stats['frames_in']:,} / {stats['frames_out']:,}"
         + (f"  ({stats['frames_dropped']:,} dropped with a lost connection)" if stats["frames_dropped"] else "")),
        ("bytes in / out", f"{format_size(stats['bytes_in'])} / {format_size(stats['bytes_out'])}"),
    ]
    clients = stats.get("clients")
    head = f"{title}:" if clients is None else f"{title} ({plural(int(clients), 'connection')}):"
    width = max(len(name) for name, _ in rows)
    return [head] + [f"  {name.ljust(width)}  {value}" for name, value in rows]


class LiveStats:
    """``describe()`` for a live line: the metrics of ``source()`` (a dict), taken at most once a second.

    The live line is redrawn a few times a second (from rich's thread); a snapshot
    of the counters is cheap but need not be taken that often.
    """

    def __init__(self, source: Callable[[], Mapping[str, Any] | None], every: float = 1.0) -> None:
        self.source = source
        self.every = every
        self.taken = -math.inf
        self.text = ""

    def __call__(self) -> str:
        import time

        now = time.monotonic()
        if now - self.taken >= self.every:
            self.taken = now
            stats = self.source()
            self.text = stats_line(stats) if stats else ""
        return self.text


class _Dynamic:
    """A renderable whose text is computed at each redraw (rich's refresh thread calls it)."""

    def __init__(self, describe: Callable[[], str]) -> None:
        self._describe = describe

    def __rich__(self) -> str:
        return self._describe()


def isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


# -- argument types -------------------------------------------------------------------------


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
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
    from .._protocol import SUPPORTED_VERSIONS

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


# -- connection settings -----------------------------------------------------------------------

CONNECTION_HELP = f"""\
connection (every client command; flags win over environment variables):
  the URL is --url, else ${ENV_URL}, else {DEFAULT_URL}
  login/passcode: --login/--passcode, else the --url's, else ${ENV_LOGIN}/${ENV_PASSCODE},
  else the ${ENV_URL}'s, else none are sent (RabbitMQ then uses its default user,
  guest/guest from loopback; ActiveMQ and Artemis accept anonymous clients unless
  configured otherwise). Passcodes are never printed.
"""


def add_connection_options(parser: Any) -> None:
    """The connection options, on ``parser``: an ArgumentParser or anything with its ``add_argument_group``."""
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
        "--connect-timeout", metavar="SECONDS", type=positive_float, default=10.0,
        help="seconds for the TCP connection plus CONNECTED (default 10)",
    )


def add_common_options(parser: Any) -> None:
    """``-q`` and ``--debug``, on ``parser``: an ArgumentParser or anything with its ``add_argument``."""
    parser.add_argument("-q", "--quiet", action="store_true", help="no status lines on stderr (errors still)")
    parser.add_argument(
        "--debug", action="store_true", help="show tracebacks of errors and the client's log (stompfast.*) on stderr"
    )


class Connection:
    """The client settings chosen from flags, the environment and defaults."""

    def __init__(self, args: argparse.Namespace, environ: dict[str, str] | None = None) -> None:
        from .._config import parse_url

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

        # Its scheme chooses TCP, TLS (stomp+ssl://) or WebSocket (ws://)
        self.endpoint = ep
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
            # It would otherwise switch TLS on behind the URL's back
            if not ep.tls:
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
        from .._client import AsyncClient

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


def run_stoppable(fn: Callable[..., Any], *args: Any) -> Any:
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
        # No signal handlers here
        except (NotImplementedError, ValueError, RuntimeError):
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


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def format_size(n: int) -> str:
    if n < 1024:
        return plural(n, "byte")
    for unit in ("KiB", "MiB", "GiB"):  # noqa: B007 (used after the loop)
        n /= 1024  # type: ignore[assignment]
        if n < 1024:
            break
    return f"{n:.1f} {unit}"


