"""The ``stompfast bench`` command: its options, the table it prints, its exit code.

:func:`add_bench_command` is listed in :data:`stompfast.cli.COMMANDS`; the helpers it
shares with the other subcommands come from :mod:`stompfast.cli.common`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import math
import os
import signal
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import anyio

from ..cli.common import (
    CONNECTION_HELP,
    ENV_URL,
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_SLO,
    TRACE_FROM_ENV,
    Connection,
    Failure,
    Status,
    Stopped,
    UsageError,
    add_common_options,
    add_connection_options,
    add_stats_option,
    add_trace_option,
    isatty,
    mask,
    one_line,
    parse_header,
    plural,
    positive_float,
    positive_int,
    stats_block,
    stats_line,
    trace_setup,
)
from ..errors import ConfigurationError
from .behaviour import parse_pause, parse_processing_time
from .bodies import SizeRange, describe_sizes, parse_sizes
from .config import ACK_MODES, LoadConfig, LoadInterrupted, LoadResult, Progress
from .coordinator import run_load
from .export import write_csv, write_hdr_log
from .plot import PLOT_HINT, write_plot
from .prometheus import MetricsEndpoint, parse_listen
from .search import Attempt, RateSearch, SearchResult, check_search, describe_attempt, held, step_config
from .shape import Stage, describe_shape, parse_duration, parse_rate
from .workload import NotingParser, WorkloadAction

BENCH_EPILOG = f"""\
Without --url (and without ${ENV_URL}) the in-process test broker is started on a free
loopback port and the load runs against it, so a plain 'stompfast bench' works anywhere.

Consumers subscribe before the producers start. Every message carries sf-producer,
sf-seq and sf-ts headers; consumers count every message exactly (duplicates, gaps)
and record end-to-end latency (now - sf-ts) in an HDR histogram. With --rate the
producers send on a fixed schedule and stamp the *intended* send time, so a producer
that falls behind shows it as latency (no coordinated omission); without --rate they
send as fast as they can (closed loop). The run ends when every message arrived, or
--drain-timeout seconds after the producers stopped with nothing new arriving.

Output: a table on stdout (--json: one JSON document instead, nothing else on stdout),
live progress and the verdict on stderr (-q: errors only). The JSON always holds the
clients' own metrics (client_stats: frames, bytes, acks, receipts, losses, summed over
every connection); --stats also shows them on the live line and as a block on stderr
at the end. Exit 0 when every message
arrived exactly once and nothing failed; 1 when messages were lost or duplicated or
errors happened (the verdict says which); 3 when the run was clean but a --slo objective
was missed (the verdict names it); 2 for usage errors. Ctrl-C or SIGTERM stop
the run and print the partial result measured so far, marked as such (exit 130 / 143).
Closed-loop latency includes queueing behind the producers' backlog (use --rate to
measure at a set load). On RabbitMQ the run's own queue is auto-delete: nothing is left.

examples:
  stompfast bench                                      # 100,000 messages or 10 s, in-process broker
  stompfast bench --count 2000 --json > result.json
  stompfast bench --url stomp://guest:guest@127.0.0.1:61613/ -p 2 -c 2 --duration 10
  stompfast bench --rate 5000 --duration 30 --warmup 5s --plot run.png
  stompfast bench --receipts --receipt-window 100 --ack client-individual --size 1024
  stompfast bench -d /topic/prices -c 3 --transaction-size 10 --processes 2

{CONNECTION_HELP}"""


def parse_warmup(text: str) -> Tuple[float, int]:
    """``--warmup``: ``5`` or ``5s`` seconds, ``1000msgs`` messages."""
    raw = text.strip().lower()
    try:
        for suffix in ("messages", "msgs", "msg"):
            if raw.endswith(suffix):
                n = int(raw[: -len(suffix)])
                if n < 0:
                    raise ValueError
                return 0.0, n
        seconds = float(raw[:-1] if raw.endswith("s") else raw)
        if not (seconds >= 0 and math.isfinite(seconds)):
            raise ValueError
        return seconds, 0
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected seconds (5, 2.5s) or a number of messages (1000msgs), got {text!r}"
        ) from None


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def _duration(text: str) -> float:
    """A length of time, as ``--rate`` stages write it (``5ms``, ``2.5s``, ``1m``, ``3``)."""
    try:
        return parse_duration(text)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _processing_time(text: str) -> Tuple[float, float]:
    """``--processing-time``: ``TIME`` or ``LOW..HIGH``."""
    try:
        return parse_processing_time(text)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a share from 0 up to (not including) 1, got {text!r}")
    return value


def _pause(text: str) -> Tuple[float, float]:
    """``--consumer-pause AT:LENGTH``."""
    try:
        return parse_pause(text)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cuts(text: str) -> Tuple[float, ...]:
    """``--cut-links AT,...``: times from the start."""
    cuts = tuple(_duration(part) for part in text.split(",") if part.strip())
    if not cuts or min(cuts) <= 0:
        raise argparse.ArgumentTypeError(f"expected times after the start, e.g. 5s,15s, got {text!r}")
    return cuts


def _sizes(text: str) -> Tuple[SizeRange, ...]:
    """``--size``: one size or a distribution, as :func:`~.bodies.parse_sizes` reads it."""
    try:
        return parse_sizes(text)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _rate_or_shape(text: str) -> Tuple[Optional[float], Tuple[Stage, ...]]:
    """``--rate``: a constant rate, or steps and ramps (``1000:30s,1000..5000:60s``)."""
    try:
        return parse_rate(text)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _default_loop() -> str:
    return "uvloop" if importlib.util.find_spec("uvloop") is not None and sys.platform != "win32" else "asyncio"


def add_bench_command(subparsers: Any) -> None:
    """Add ``stompfast bench`` (listed in :data:`stompfast.cli.COMMANDS`)."""
    parser = subparsers.add_parser(
        "bench",
        help="generate load; measure throughput, latency and delivery",
        description="Run producers and consumers against a broker (default: an in-process one) and report"
        " throughput, end-to-end latency percentiles and exact delivery counts.",
        epilog=BENCH_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # Every option is noted as it is added: they are the keys a workload file may use
    noted: List[argparse.Action] = []
    p = NotingParser(parser, noted)
    p.add_argument("--workload", metavar="FILE.toml", action=WorkloadAction, options=noted,
                   help="read options from a TOML file: each key an option of this command (rate, destinations,"
                   " slo, ...; docs/loadgen.md); options after it override the file's")
    shape = p.add_argument_group("load")
    shape.add_argument("-p", "--producers", metavar="N", type=positive_int, default=1,
                       help="producer connections (default 1)")
    shape.add_argument("--start-spread", metavar="SECONDS", type=_duration, default=0.0,
                       help="each producer starts a random delay up to SECONDS after the run's start (many clients"
                       " at low rates, as IoT fleets connect; default 0: all at once)")
    shape.add_argument("-c", "--consumers", metavar="M", type=_non_negative_int, default=1,
                       help="consumer connections, each subscribed to every destination (default 1; 0: publish only)")
    shape.add_argument("--processes", metavar="P", type=positive_int, default=1,
                       help="spread producers and consumers over P worker processes (default 1: one event loop)")
    shape.add_argument("-d", "--destination", metavar="DEST", dest="destinations", action="append", default=[],
                       help="destination, repeatable, used round-robin (default /queue/stompfast-bench-<random>);"
                       " /topic/ and /exchange/ ones give each consumer a copy")
    msgs = p.add_argument_group("messages")
    msgs.add_argument("-s", "--size", metavar="BYTES|SIZES", type=_sizes, default=None,
                      help="body size in bytes (default 100), or a distribution: LOW..HIGH (uniform) or"
                      " BYTES:WEIGHT,... (weighted; entries may be ranges), e.g. 100:80,10000:20")
    msgs.add_argument("--body-file", metavar="PATH", action="append", default=[],
                      help="send the bytes of PATH as every body; repeated: the files in turn")
    msgs.add_argument("-H", "--header", metavar="NAME:VALUE", dest="headers", action="append",
                      type=parse_header, default=[], help="add a header to every message, e.g. persistent:true")
    stop = p.add_argument_group("how much, how fast")
    stop.add_argument("-n", "--count", metavar="N", type=positive_int,
                      help="messages in total (default: 100,000 or 10 s, whichever comes first)")
    stop.add_argument("--duration", metavar="SECONDS", type=positive_float,
                      help="stop sending after SECONDS (with --count: whichever comes first)")
    stop.add_argument("--rate", metavar="R|SHAPE", type=_rate_or_shape, default=(None, ()),
                      help="open loop: R messages per second in total on a fixed schedule, or a shape of"
                      " steps and ramps, RATE:LENGTH or FROM..TO:LENGTH comma-separated, e.g."
                      " '1000:30s,1000..5000:60s' (the run lasts the shape; default: as fast as possible)")
    stop.add_argument("--warmup", metavar="SECONDS|Nmsgs", type=parse_warmup, default=(0.0, 0),
                      help="leave the first SECONDS (5, 2.5s) or N messages (1000msgs) out of latency and rates")
    stop.add_argument("--drain-timeout", metavar="SECONDS", type=positive_float, default=5.0,
                      help="after the producers stop, give up on missing messages when nothing arrived for"
                      " SECONDS (default 5)")
    delivery = p.add_argument_group("delivery")
    delivery.add_argument("--receipts", action=argparse.BooleanOptionalAction, default=False,
                          help="ask for a RECEIPT for every SEND (or every COMMIT with transactions; default off)")
    delivery.add_argument("--receipt-window", metavar="W", type=positive_int, default=1000,
                          help="with --receipts: at most W unconfirmed messages per producer (default 1000)")
    delivery.add_argument("--ack", choices=ACK_MODES, default="auto", help="consumers' ack mode (default auto)")
    delivery.add_argument("--transaction-size", metavar="K", type=_non_negative_int, default=0,
                          help="producers send in transactions of K messages (default 0: none)")
    delivery.add_argument("--buffer-size", metavar="N", type=positive_int, default=1000,
                          help="consumer buffer, and broker prefetch in the client ack modes (default 1000)")
    behave = p.add_argument_group("consumers")
    behave.add_argument("--processing-time", metavar="TIME|LOW..HIGH", type=_processing_time, default=(0.0, 0.0),
                        help="each consumer holds each message this long before acking it, one at a time"
                        " (5ms; 1ms..10ms: uniform)")
    behave.add_argument("--nack-share", metavar="F", type=_share, default=0.0,
                        help="NACK this share of the deliveries (0.1: one in ten), which the broker requeues;"
                        " needs --ack client-individual and a broker that requeues (RabbitMQ)")
    behave.add_argument("--consumer-delay", metavar="SECONDS", type=_duration, default=None,
                        help="consumers start taking messages SECONDS after the producers (a backlog builds,"
                        " then drains: its drain rate is reported)")
    behave.add_argument("--consumer-pause", metavar="AT:LENGTH", type=_pause, action="append", default=[],
                        help="every consumer stops taking messages for LENGTH at AT (10s:5s), repeatable;"
                        " each pause's backlog and drain rate are reported")
    fail = p.add_argument_group("failover")
    fail.add_argument("--cut-links", metavar="AT,...", type=_cuts, default=(),
                      help="with --rate: reset every connection at these times (5s,15s) through a fault proxy; the"
                      " clients reconnect, and each outage is counted per message: lost, duplicated, reordered,"
                      " delayed, the gap and the latency spike")
    fail.add_argument("--cut-command", metavar="CMD", default=None,
                      help="with --cut-links: run this shell command at each cut instead of resetting the links (a"
                      " broker restart: 'scripts/brokers.sh restart rabbitmq'); the run waits for it, and one that"
                      " fails is an error")
    gates = p.add_argument_group("objectives")
    gates.add_argument("--slo", metavar="OBJECTIVES", action="append", default=[],
                       help="service-level objectives judged on the result, comma-separated or repeated:"
                       " 'p99<5ms,missing==0,rate>=0.98*target'; one missed exits 3 (docs/loadgen.md)")
    gates.add_argument("--find-max-rate", action="store_true",
                       help="search the highest constant rate that holds: runs of --duration (default 10 s) from"
                       " --rate (default 1000), doubling until one fails, then bisecting; a run holds when it is"
                       " clean and meets --slo (default 'p99<100ms,receive_rate>=0.95*target')")
    gates.add_argument("--search-steps", metavar="N", type=_non_negative_int, default=4,
                       help="with --find-max-rate: bisections between the last rate that held and the first that"
                       " failed (default 4)")
    out = p.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="write the complete result as JSON on stdout")
    add_stats_option(out)
    add_trace_option(out)
    out.add_argument("--plot", metavar="FILE.png", help="write throughput and latency over time (needs matplotlib)")
    out.add_argument("--prometheus", metavar="[HOST:]PORT", type=_listen,
                     help="serve the live numbers at http://HOST:PORT/metrics while running (host 127.0.0.1 if"
                     " none; docs/grafana-bench.json is a dashboard over them)")
    out.add_argument("--csv", metavar="FILE", help="write the timeline as CSV, one row per --interval")
    out.add_argument("--hdr-log", metavar="FILE",
                     help="write each interval's latency histogram as an HdrHistogram log (HistogramLogAnalyzer)")
    out.add_argument("--interval", metavar="SECONDS", type=positive_float, default=1.0,
                     help="timeline resolution (default 1)")
    out.add_argument("--loop", choices=("asyncio", "uvloop", "trio"), default=None,
                     help=f"event loop (default {_default_loop()}: uvloop when installed)")
    add_common_options(p)
    add_connection_options(p)
    p.set_defaults(run=run_bench)


def _loop_backend(name: Optional[str]) -> Tuple[str, Dict[str, Any]]:
    name = name or _default_loop()
    if name == "uvloop":
        if importlib.util.find_spec("uvloop") is None:
            raise UsageError("--loop uvloop: uvloop is not installed (pip install 'stompfast[uvloop]')")
        return "asyncio", {"use_uvloop": True}
    if name == "trio" and importlib.util.find_spec("trio") is None:
        raise UsageError("--loop trio: trio is not installed (pip install 'stompfast[trio]')")
    return name, {}


def _describe(config: LoadConfig, destinations: Sequence[str]) -> str:
    count, duration = config.limits()
    limit = " or ".join(x for x in (
        f"{count:,} messages" if count is not None else "",
        f"{duration:g} s" if duration is not None else "",
    ) if x)
    if config.bodies:
        size = f"{len(config.bodies)} bodies in turn ({config.mean_body_bytes:,.0f} bytes on average)"
    elif config.sizes:
        size = f"{describe_sizes(config.sizes)}-byte (mean {config.mean_body_bytes:,.0f})"
    else:
        size = f"{len(config.body) if config.body is not None else config.size}-byte"
    if config.rate_shape:
        pace = f"rate shape {describe_shape(config.rate_shape)} msgs/s (open loop)"
    elif config.rate:
        pace = f"{config.rate:,.0f} msgs/s (open loop)"
    else:
        pace = "as fast as possible (closed loop)"
    extras = []
    if config.receipts:
        extras.append(f"receipts (window {config.receipt_window})")
    if config.transaction_size:
        extras.append(f"transactions of {config.transaction_size}")
    if config.ack != "auto":
        extras.append(f"ack {config.ack}")
    if config.processes > 1:
        extras.append(f"{config.processes} processes")
    if config.processing_time[1]:
        low, high = config.processing_time
        extras.append(f"processing {low * 1000:g}" + (f"..{high * 1000:g}" if high != low else "") + " ms a message")
    if config.nack_share:
        extras.append(f"{config.nack_share:.0%} NACKed")
    for at, length in config.consumer_pauses:
        extras.append(f"consumers paused {length:g} s at {at:g} s")
    if config.link_cuts:
        cuts = ", ".join(f"{at:g} s" for at in config.link_cuts)
        extras.append(f"`{config.cut_command}` run at {cuts}" if config.cut_command else f"links cut at {cuts}")
    where = ", ".join(destinations) if destinations else "a fresh queue"
    return (
        f"{plural(config.producers, 'producer')}, {plural(config.consumers, 'consumer')},"
        f" {size} messages to {where}; {limit}, {pace}" + (f"; {', '.join(extras)}" if extras else "")
    )


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        text = f"{value:,.1f}" if value < 100 else f"{value:,.0f}"
    else:
        text = f"{value:,}"
    return text + unit


def _table_rows(result: LoadResult) -> List[Tuple[str, str]]:
    c, r = result.counts, result.rates
    lat = result.latency_us
    rows = [
        ("broker", f"{result.broker['url']}" + (" (in-process)" if result.broker["in_process"] else "")
         + (f", {result.broker['server']}" if result.broker.get("server") else "")
         + (f", STOMP {result.broker['stomp_version']}" if result.broker.get("stomp_version") else "")),
        ("sent", f"{_fmt(c['sent'])}  ({_fmt(r['send_msgs_per_s'], ' msgs/s')}, {_fmt(r['send_mb_per_s'], ' MB/s')})"
         + (f"  target {_fmt(float(r['target_msgs_per_s'] or 0), ' msgs/s')}" if r.get("target_msgs_per_s") else "")),
        ("confirmed", _fmt(c["confirmed"]) if result.config.receipts else "- (no receipts asked)"),
        ("received", f"{_fmt(c['received'])} of {_fmt(c['expected'])} expected"
         f"  ({_fmt(r['receive_msgs_per_s'], ' msgs/s')})"),
        ("duplicates / missing", f"{_fmt(c['duplicates'])} / {_fmt(c['missing'])}"),
        ("errors", _fmt(c["errors"])),
    ]
    if result.interrupted:
        rows.insert(0, ("INTERRUPTED", f"{result.interrupted} after {result.elapsed:.1f} s: the counts, rates and"
                        " latency are those measured until then"))
    if c["unexpected"]:
        rows.append(("unexpected", _fmt(c["unexpected"])))
    if c["warmup_sent"]:
        rows.append(("warm-up (excluded)", f"{_fmt(c['warmup_sent'])} sent, {_fmt(c['warmup_received'])} received"))
    if lat:
        text = "  ".join(f"{k} {_ms(lat[k])}" for k in ("p50", "p90", "p99", "p99.9", "max"))
        if result.loop == "closed":
            # as fast as possible: the producers outrun the consumers, and each message
            # waits behind the backlog; a reader must not take that for the broker's speed
            rows.append(("latency (closed loop)", text))
            rows.append(("", "includes queueing behind the producers' backlog; --rate R measures at a set load"))
        else:
            rows.append(("latency", text))
    if result.send_lag_us:
        lag = result.send_lag_us
        rows.append(("send lag (behind schedule)", "  ".join(f"{k} {_ms(lag[k])}" for k in ("p50", "p99", "max"))))
    if result.broker.get("cleanup"):
        rows.append(("run's queue", result.broker["cleanup"]))
    for index, judgement in enumerate(result.slo):
        rows.append(("objectives (--slo)" if index == 0 else "", judgement.describe()))
    if c.get("nacked"):
        rows.append(("nacked (redelivered)", _fmt(c["nacked"])))
    for index, outage in enumerate(result.outages):
        rows.append(("failover: per outage" if index == 0 else "", _outage_text(outage)))
    for index, pause in enumerate(result.backlog):
        rows.append(("consumer pauses: backlog" if index == 0 else "", _pause_text(pause)))
    for index, stage in enumerate(result.stages):
        rows.append(("stages: target -> sent / received" if index == 0 else "", _stage_text(stage)))
    return rows


def _outage_text(row: Dict[str, Any]) -> str:
    """One outage of a failover run (or, with ``cut`` None, the time before the first)."""
    when = "before the first cut" if row["cut"] is None else f"cut at {row['cut']:.2f} s"
    run = row.get("command")
    if run is not None:
        status = "ok" if run["returncode"] == 0 else f"exit {run['returncode']}"
        when += f" (command {status} in {run['seconds']:.1f} s)"
    return (
        f"{when}: lost {_fmt(row['lost'])}, duplicated {_fmt(row['duplicated'])}, reordered"
        f" {_fmt(row['reordered'])}, delayed {_fmt(row['delayed'])} (> {_ms(row['delayed_after_us'])}),"
        f" gap {row['gap_s'] * 1000:,.0f} ms, max latency {_ms(row['latency_max_us'])}"
    )


def _pause_text(pause: Dict[str, Any]) -> str:
    """One consumer pause: the backlog it built and how fast it drained."""
    text = (f"{pause['seconds']:g} s at {pause['at']:g} s: {_fmt(pause['backlog_before'])} ->"
            f" {_fmt(pause['peak_backlog'])} messages, ")
    if pause["drain_seconds"] is None:
        return text + "not drained before the run ended"
    return text + f"drained in {pause['drain_seconds']:.2f} s at {_fmt(pause['drain_rate'], ' msgs/s')}"


def _stage_text(stage: Dict[str, Any]) -> str:
    """One stage of a rate shape: its target beside the rates and the p99 latency measured in it."""
    lat = stage["latency_us"]
    return (
        f"{stage['stage']:<18} {_fmt(stage['target_rate'])} -> {_fmt(stage['send_rate'])} /"
        f" {_fmt(stage['receive_rate'])} msgs/s" + (f", p99 {_ms(lat['p99'])}" if lat else "")
    )


def _ms(us: float) -> str:
    if us < 1000:
        return f"{us:,.0f} us"
    return f"{us / 1000:,.2f} ms" if us < 100_000 else f"{us / 1000:,.0f} ms"


def _print_table(result: LoadResult, title: str) -> None:
    rows = _table_rows(result)
    console = None
    if isatty(sys.stdout):
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            pass
        else:
            console = Console(highlight=False)
    if console is not None:
        table = Table(title=title, show_header=False, title_justify="left")
        table.add_column(style="bold")
        table.add_column()
        for name, value in rows:
            table.add_row(name, value)
        console.print(table)
        return
    width = max(len(name) for name, _ in rows)
    print(title)
    for name, value in rows:
        print(f"  {name.ljust(width)}  {value}")
    sys.stdout.flush()


def _progress_line(p: Progress, with_stats: bool = False) -> str:
    if p.phase == "connecting":
        return "connecting and subscribing..."
    if with_stats and p.client_stats:
        return _progress_line(p) + "  |  " + stats_line(p.client_stats)
    expected = f" of {p.expected:,}" if p.expected is not None else ""
    text = (
        f"{p.elapsed:6.1f} s  sent {p.sent:,} ({p.send_rate:,.0f}/s)  received {p.received:,}{expected}"
        f" ({p.receive_rate:,.0f}/s)  errors {p.errors}"
    )
    return text + ("  draining" if p.phase == "draining" else "")


def run_bench(args: argparse.Namespace, ctx: Dict[str, Any]) -> int:
    """``stompfast bench``: run the load, print the result, exit 0 (clean) or 1 (lost messages, errors)."""
    _check_usage(args)
    # --trace: OpenTelemetry and the exporter are there (each worker makes its own)
    trace_setup(args.trace)
    env_url = os.environ.get(ENV_URL) or None
    in_process = not args.url and not env_url
    conn = Connection(args)
    ctx["secrets"] = conn.secrets
    if not in_process:
        ctx["url"] = conn.url
    config = _load_config(args, conn, None if in_process else (args.url or env_url))
    backend, backend_options = _loop_backend(args.loop)
    status = Status(args.quiet)
    target = "the in-process broker" if in_process else conn.url
    if args.find_max_rate:
        return _run_search(config, args, status, target, conn.secrets, backend, backend_options)
    status.info(f"stompfast bench: {_describe(config, config.destinations)}; against {target}", "dim")
    endpoint = MetricsEndpoint(*args.prometheus) if args.prometheus else None
    if endpoint is not None:
        status.info(f"metrics at {endpoint.url}", "dim")
    try:
        result, caught = _run_with_progress(config, status, args.quiet, args.stats, backend, backend_options,
                                            endpoint.update if endpoint is not None else None)
        if endpoint is not None and result is not None:
            endpoint.finish(result)
    finally:
        if endpoint is not None:
            endpoint.close()
    stopped = Stopped(caught[0]) if caught else None
    if result is None:
        # stopped before the load started, or by a second signal: there is nothing to report
        assert stopped is not None
        status.info(f"stompfast bench: {stopped.name} before a result: nothing was measured", "yellow")
        return stopped.code
    if stopped is not None:
        result.interrupted = stopped.name
    _print_result(result, args.json, conn.secrets)
    if args.plot:
        _plot(result, args.plot, status)
    for path, write in ((args.csv, write_csv), (args.hdr_log, write_hdr_log)):
        if path:
            _export(result, path, write, status)
    _print_notes(result, args.stats, status, conn.secrets)
    return _verdict(result, stopped, status, conn.secrets)


def _run_search(
    config: LoadConfig, args: argparse.Namespace, status: Status, target: str, secrets: Sequence[str],
    backend: str, backend_options: Any,
) -> int:
    """``--find-max-rate``: one run per rate as :class:`~.search.RateSearch` says; the table (or JSON) of them.

    Exit 0 when a rate held, 3 (an objective missed) when none did, a signal's code when stopped.
    """
    import json

    try:
        check_search(config)
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None
    search = RateSearch(config.rate or 1000.0, args.search_steps)
    first = step_config(config, search.start)
    report = SearchResult(first.slo, first.duration or 0.0, [])
    status.info(
        f"stompfast bench --find-max-rate: runs of {report.step_seconds:g} s from {search.start:,.0f} msgs/s against"
        f" {target}; a rate holds when the run is clean and meets {', '.join(report.criterion)}", "dim",
    )
    stopped: Optional[Stopped] = None
    while (rate := search.next_rate()) is not None:
        step = step_config(config, rate)
        status.info(f"stompfast bench: {_describe(step, step.destinations)}", "dim")
        result, caught = _run_with_progress(step, status, args.quiet, False, backend, backend_options, None)
        if caught:
            stopped = Stopped(caught[0])
            report.interrupted = stopped.name
        if result is None:
            break
        attempt = Attempt(rate, held(result) and not caught, result)
        report.attempts.append(attempt)
        status.info(describe_attempt(attempt), "green" if attempt.held else "yellow")
        if caught:
            break
        search.record(rate, attempt.held)
    best, failed = report.best, report.first_failed
    if args.json:
        print(json.dumps(_masked(report.to_dict(), secrets), indent=2, allow_nan=False), flush=True)
    else:
        print(f"stompfast bench --find-max-rate: runs of {report.step_seconds:g} s; a rate holds when the run is"
              f" clean and meets {', '.join(report.criterion)}", flush=True)
        for attempt in report.attempts:
            print("  " + mask(describe_attempt(attempt), secrets), flush=True)
        if stopped is not None:
            print(f"search stopped ({stopped.name}): highest rate that held so far:"
                  f" {f'{best:,.0f} msgs/s' if best is not None else 'none'}", flush=True)
        elif best is not None:
            print(f"maximum sustainable rate: {best:,.0f} msgs/s"
                  + (f" (the next tried, {failed:,.0f} msgs/s, failed)" if failed else " (none tried failed)"),
                  flush=True)
    if stopped is not None:
        status.info(f"stompfast bench: {stopped.name}: search stopped; highest rate that held so far:"
                    f" {f'{best:,.0f} msgs/s' if best else 'none'}", "yellow")
        return stopped.code
    if best is None:
        print(f"stompfast bench: NO RATE HELD down to {min(a.rate for a in report.attempts):,.0f} msgs/s"
              f" ({', '.join(report.criterion)})", file=sys.stderr, flush=True)
        return EXIT_SLO
    return EXIT_OK


def _listen(text: str) -> Tuple[str, int]:
    """``--prometheus [HOST:]PORT``, checked by argparse (a usage error, exit 2)."""
    try:
        return parse_listen(text)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _check_usage(args: argparse.Namespace) -> None:
    """Refuse, before any I/O, what cannot run here: --plot without matplotlib, two bodies."""
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        raise UsageError(PLOT_HINT)
    if args.size is not None and args.body_file:
        raise UsageError("give --size or --body-file, not both")
    if args.find_max_rate and (args.plot or args.csv or args.hdr_log or args.prometheus):
        raise UsageError("--find-max-rate reports its runs in a table (or --json); --plot, --csv, --hdr-log and"
                         " --prometheus describe one run")


def _load_config(args: argparse.Namespace, conn: Connection, url: Optional[str]) -> LoadConfig:
    """The run's :class:`LoadConfig` from the options, checked (``url`` None: the in-process broker)."""
    files = [_read_body(path) for path in args.body_file]
    fixed = args.size is None or (len(args.size) == 1 and args.size[0][0] == args.size[0][1])
    warmup, warmup_messages = args.warmup
    config = LoadConfig(
        url=url,
        login=conn.login,
        passcode=conn.passcode,
        virtual_host=conn.vhost,
        versions=conn.versions,
        heart_beat=conn.heart_beat,
        connect_timeout=conn.connect_timeout,
        producers=args.producers,
        start_spread=args.start_spread,
        consumers=args.consumers,
        processes=args.processes,
        destinations=tuple(args.destinations),
        size=args.size[0][0] if args.size is not None and fixed else 100,
        sizes=() if fixed else args.size,
        body=files[0] if len(files) == 1 else None,
        bodies=tuple(files) if len(files) > 1 else (),
        headers=dict(args.headers) or None,
        count=args.count,
        duration=args.duration,
        rate=args.rate[0],
        rate_shape=args.rate[1],
        receipts=args.receipts,
        receipt_window=args.receipt_window,
        ack=args.ack,
        transaction_size=args.transaction_size,
        buffer_size=args.buffer_size,
        processing_time=args.processing_time,
        nack_share=args.nack_share,
        link_cuts=args.cut_links,
        cut_command=args.cut_command,
        consumer_pauses=tuple(([(0.0, args.consumer_delay)] if args.consumer_delay else []) + args.consumer_pause),
        warmup=warmup,
        warmup_messages=warmup_messages,
        interval=args.interval,
        drain_timeout=args.drain_timeout,
        trace=args.trace is not None,
        trace_exporter=None if args.trace in (None, TRACE_FROM_ENV) else args.trace,
        slo=tuple(args.slo),
    )
    try:
        config.validate()
    except ConfigurationError as exc:
        raise UsageError(str(exc)) from None
    return config


def _read_body(path: str) -> bytes:
    """``--body-file``: the bytes every message carries."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise Failure(f"cannot read {path}: {exc.strerror or exc}") from exc


def _run_with_progress(
    config: LoadConfig, status: Status, quiet: bool, stats: bool, backend: str, backend_options: Dict[str, Any],
    publish: Optional[Callable[[Progress], None]] = None,
) -> Tuple[Optional[LoadResult], List[int]]:
    """Run the load with its progress on stderr; return the result and the signal numbers caught.

    The result is None when a signal stopped the run before the load started, or a
    second signal cut it short. The progress is a live line on a terminal with rich,
    otherwise a plain line a second (the first one a second into the run), and nothing
    with ``quiet``. ``publish`` gets every snapshot too (``--prometheus``).
    """
    latest: List[Progress] = [Progress("connecting", 0.0)]
    plain = not quiet and status.console is None
    printed = [0.0]
    # the clients' metrics go on the progress line on a terminal only; a log gets them once, at the end
    live_stats = stats and isatty(sys.stderr)

    def on_progress(p: Progress) -> None:
        latest[0] = p
        if publish is not None:
            publish(p)
        if plain and p.phase != "connecting" and p.elapsed - printed[0] >= 1.0:
            printed[0] = p.elapsed
            print(_progress_line(p, live_stats), file=sys.stderr, flush=True)

    caught: List[int] = []
    with status.live(lambda: _progress_line(latest[0], live_stats), to_stdout=False):
        try:
            result = anyio.run(_run_stoppable, config, on_progress, caught, backend=backend,
                               backend_options=backend_options)
        except LoadInterrupted:
            result = None
    return result, caught


def _print_result(result: LoadResult, as_json: bool, secrets: Sequence[str]) -> None:
    """The result on stdout: the JSON document (secrets masked), or the table under a title describing the run."""
    import json

    if as_json:
        print(json.dumps(_masked(result.to_dict(), secrets), indent=2, allow_nan=False), flush=True)
        return
    title = "stompfast bench: " + _describe(result.config, result.broker["destinations"])
    if result.interrupted:
        title = f"stompfast bench [{result.interrupted}: partial result]: " + title[len("stompfast bench: "):]
    _print_table(result, title)


def _plot(result: LoadResult, path: str, status: Status) -> None:
    """``--plot``: throughput and latency over time written to ``path``."""
    try:
        write_plot(result, path)
    except OSError as exc:
        raise Failure(f"cannot write {path}: {exc.strerror or exc}") from exc
    status.info(f"plot written to {path}", "dim")


def _export(result: LoadResult, path: str, write: Callable[[LoadResult, Any], None], status: Status) -> None:
    """``--csv`` or ``--hdr-log``: ``write(result, file)`` into ``path``."""
    try:
        with open(path, "w", encoding="utf-8", newline="") as out:
            write(result, out)
    except OSError as exc:
        raise Failure(f"cannot write {path}: {exc.strerror or exc}") from exc
    status.info(f"{path} written", "dim")


def _print_notes(result: LoadResult, stats: bool, status: Status, secrets: Sequence[str]) -> None:
    """The run's warnings on stderr, then with ``stats`` the clients' metrics.

    The metrics are printed with -q too: they were asked for.
    """
    for warning in result.warnings:
        status.info(f"warning: {mask(warning, secrets)}", "yellow")
    if stats and result.client_stats:
        for line in stats_block(result.client_stats):
            status.info(line, force=True)


def _verdict(result: LoadResult, stopped: Optional[Stopped], status: Status, secrets: Sequence[str]) -> int:
    """The verdict's line on stderr, and the exit code: the signal's for a stopped run, else 0 when ``ok``, else 1."""
    c = result.counts
    config = result.config
    if stopped is not None:
        status.info(
            f"stompfast bench: {stopped.name} after {result.elapsed:.1f} s: partial result: {c['sent']:,} sent,"
            f" {c['received']:,} received" + (f", {c['confirmed']:,} confirmed" if config.receipts else "")
            + f", {c['errors']:,} errors; every connection was closed cleanly",
            "yellow",
        )
        return stopped.code
    missed = [j for j in result.slo if not j.ok]
    if result.ok and not missed:
        status.info(
            f"OK: {c['sent']:,} sent, {c['received']:,} received"
            + (", every message exactly once" if config.consumers else "")
            + (", all confirmed" if config.receipts else "") + ", no errors"
            + (f", {plural(len(result.slo), 'objective')} met" if result.slo else ""),
            "green",
        )
        return EXIT_OK
    if missed:
        # Printed even when the run also failed: a CI log should show every objective it missed.
        text = "; ".join(j.describe() for j in missed)
        print(f"stompfast bench: SLO MISSED: {text}", file=sys.stderr, flush=True)
    if not result.ok:
        text = "; ".join(mask(p, secrets) for p in result.problems)
        print(f"stompfast bench: FAILED: {one_line(text, 1000)}", file=sys.stderr, flush=True)
        return EXIT_FAILURE
    return EXIT_SLO


async def _run_stoppable(
    config: LoadConfig, progress: Callable[[Progress], Any], caught: List[int],
) -> Optional[LoadResult]:
    """:func:`run_load`, where SIGINT (Ctrl-C) or SIGTERM ends the run early with a partial result.

    The first signal sets ``run_load``'s ``stop``: the load stops, what arrived is
    counted and every connection is closed (send and listen stop the same way). A
    second one cancels at once (None). Each signal number goes into ``caught``. Where
    signals cannot be received (Windows), Ctrl-C stays KeyboardInterrupt.
    """
    stop = anyio.Event()
    try:
        receiver = anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM)
        signals = receiver.__enter__()
    # No signal handlers here
    except (NotImplementedError, ValueError, RuntimeError):
        return await run_load(config, progress)
    result: Optional[LoadResult] = None
    try:
        async with anyio.create_task_group() as tg:
            async def watch() -> None:
                async for signum in signals:
                    caught.append(signum)
                    if stop.is_set():
                        tg.cancel_scope.cancel()
                        return
                    stop.set()

            tg.start_soon(watch)
            result = await run_load(config, progress, stop=stop)
            tg.cancel_scope.cancel()
    finally:
        receiver.__exit__(None, None, None)
    return result


def _masked(data: Any, secrets: Sequence[str]) -> Any:
    """``data`` with every string passed through :func:`stompfast.cli.common.mask` (error texts may quote URLs)."""
    if isinstance(data, str):
        return mask(data, secrets)
    if isinstance(data, dict):
        return {k: _masked(v, secrets) for k, v in data.items()}
    if isinstance(data, list):
        return [_masked(v, secrets) for v in data]
    return data
