"""The ``stompfast`` command: send, listen (alias subscribe), broker and bench.

Theory of operation
-------------------
``main()`` builds an :mod:`argparse` parser from :data:`COMMANDS`, a list of
``"module:function"`` names; each function adds one subcommand to the parser and
sets its ``run`` callable. A subcommand that lives in a module of its own (the
load generator's ``bench``, in :mod:`stompfast.loadgen`) is therefore one more line
in that list, and its module is imported only when the parser is built.

Layout: :mod:`.common` holds what every subcommand shares (exit codes, errors,
masking, status lines, argument types, connection options: the load generator's
``bench`` imports it too); :mod:`.send`, :mod:`.listen` and :mod:`.broker` hold one
subcommand each; this module builds the parser and turns failures into exit codes.

Client subcommands run on :class:`~stompfast.AsyncClient` under ``anyio.run``
(asyncio). Data (message bodies, JSON lines, the broker's URL) goes to stdout;
everything meant for a person (confirmations, summaries, errors) goes to stderr,
so pipelines stay clean.

Failures never show a traceback (``--debug`` does): ``main`` turns each into one
line on stderr and an exit code: 2 for usage and configuration errors, 1 for
failures at run time (refused connection, authentication, timeouts, ERROR
frames, files), 130 for Ctrl-C, 143 for SIGTERM, and 141 (quietly, as SIGPIPE would) when
stdout's reader went away (``listen ... | head -1``), even when the BrokenPipeError
arrives inside an exception group (``listen`` raises one itself when it sees its pipe's
reader leave while it waits: ``stompfast.cli.pipe``). Passcodes are masked in everything printed.

``rich`` (the ``cli`` extra) is optional: when it is installed and stderr is a
terminal, status lines are styled and ``listen`` shows a live counter while its
output goes to a file or a pipe; without it the same text is printed plainly.
"""


from __future__ import annotations

import argparse
import builtins
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

# the names the subcommands' modules define, importable from here as before the split
from .broker import (
    add_broker_command as add_broker_command,
    run_broker as run_broker,
)
from .common import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED as EXIT_TERMINATED,
    EXIT_USAGE,
    Connection as Connection,
    Failure,
    Status as Status,
    UsageError,
    display_url as display_url,
    mask,
    one_line,
    parse_header as parse_header,
    parse_heart_beat as parse_heart_beat,
    parse_versions as parse_versions,
)
from .listen import (
    add_listen_command as add_listen_command,
    message_record as message_record,
    run_listen as run_listen,
)
from .send import (
    add_send_command as add_send_command,
    run_send as run_send,
)

__all__ = ["COMMANDS", "EXIT_FAILURE", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "build_parser", "main"]

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


# -- main ---------------------------------------------------------------------------------------

MAIN_EPILOG = f"""\
exit codes: 0 done; 1 failed at run time (connection refused, authentication,
timeout, ERROR from the broker, files); 2 usage or configuration error (bad option,
bad URL); 130 interrupted (Ctrl-C); 143 terminated (SIGTERM: docker stop, systemd);
141 stdout closed by its reader (e.g. | head -1).
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
    from .. import __version__

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


def _exception_groups() -> tuple[type[BaseException], ...]:
    """The exception group classes of this Python: the builtin one (3.11+), the backport's (anyio's on 3.9/3.10)."""
    groups: list[type[BaseException]] = []
    builtin = getattr(builtins, "BaseExceptionGroup", None)
    if builtin is not None:
        groups.append(builtin)
    try:
        backport = getattr(importlib.import_module("exceptiongroup"), "BaseExceptionGroup", None)
    # 3.11+ without the backport installed: the builtin is all there is
    except ImportError:
        backport = None
    if backport is not None and backport not in groups:
        groups.append(backport)
    return tuple(groups)


def is_broken_pipe(exc: BaseException) -> bool:
    """True when ``exc`` is a BrokenPipeError, or an exception group holding one at any depth.

    Once stdout's reader has left, whatever else the group holds (a cancelled sibling, a
    failed DISCONNECT) followed from it: a shell tool would have died of SIGPIPE there.
    """
    if isinstance(exc, BrokenPipeError):
        return True
    if isinstance(exc, _exception_groups()):
        return any(is_broken_pipe(inner) for inner in getattr(exc, "exceptions", ()))
    return False


def _left_by_reader() -> int:
    """Stop quietly because stdout's reader left (e.g. ``| head -1``): exit 141, as SIGPIPE would."""
    # Point stdout at /dev/null: the interpreter flushes sys.stdout once more at exit, and
    # what is still in its buffer would otherwise fail again and print "Exception ignored
    # ... BrokenPipeError" on stderr.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
    return EXIT_BROKEN_PIPE


def describe_error(exc: BaseException, url: str | None = None, cafile: str | None = None) -> tuple[int, str]:
    """The exit code and the one-line message for a failure."""
    from ..errors import (
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
    # The client's own log: connects, losses, reconnects (never a passcode)
    if getattr(args, "debug", False):
        import logging

        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger("stompfast").addHandler(handler)
        logging.getLogger("stompfast").setLevel(logging.DEBUG)
    try:
        # argparse's attributes are Any
        code: int = args.run(args, ctx)
        return code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BaseException as group:
        # A write to stdout raised inside a task group (listen's, run_stoppable's)
        # arrives wrapped in an exception group, so it is looked for inside groups too.
        if is_broken_pipe(group):
            return _left_by_reader()
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
