"""Spark + STOMP throughput, in one run, next to what bounds it (docs/spark.md, "Throughput").

    python bench/spark_throughput.py --url stomp://guest:guest@127.0.0.1:61613/ [-n 200000] [--size 100]

Prints rows/s for:

* **Spark's own ceiling**: an in-memory Python streaming source with the stomp
  source's schema, ``--batch`` rows a micro-batch, rows as tuples and as one
  ``pyarrow.RecordBatch`` (the data is built once: only Spark's cost is measured);
* **the broker's ceiling**: ``AsyncClient`` draining the same backlog in ``auto``
  mode (no acks: the socket's rate), and in the mode the source acks in on that broker
  (``client``: one cumulative ACK per 10,000 messages or whenever the buffer runs dry;
  ``client-individual`` on ActiveMQ: an ACK per message), what the broker does for an
  at-least-once consumer; publishing confirmed as the sink confirms on that broker
  (with its window), and without receipts;
* **Spark's write ceiling**: the same rows written into a Python Arrow sink that
  discards them (the sink's path without the broker);
* **our streaming read** of the backlog (``readStream.format("stomp")`` into the
  ``noop`` sink), with default options and tuned (``--batch``), each checked exact:
  N rows and nothing left on the queue;
* **our write** of N rows (``write.format("stomp")``, every message confirmed) with
  default options, next to a plain stomp.py ``foreachPartition`` writer (nothing
  confirmed), each checked by draining the queue.

Streaming rates are steady state (from the end of the first micro-batch to the end of
the last, from the query's progress reports); start-up (query start to the end of the
first batch) is printed apart. Writes are timed per job after a warm-up job (the
Python workers are up); the tasks' own sending time is printed too. The read
ceiling is the lower of Spark's Arrow rate and the broker's ``auto`` rate; the
write ceiling is the lower of the discarding sink and the broker's confirmed publish;
the ratios printed are the targets docs/spark.md states. ``--quick`` runs a short profile (CI smoke).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client_compare import listener_pid  # noqa: E402  (the broker's pid, from /proc)

#: Seconds a finished read runs on so that its last batch is acked, and the quiet that
#: ends the check for messages left behind (a broker may take a moment to requeue).
SETTLE = 3.0
EXACT_QUIET = 5.0

#: The process listening on the broker URL's port, set by main(): its CPU is the broker's.
BROKER_PID: Optional[int] = None


def _steady(query: Any, n: int, timeout: float, t0: float) -> Tuple[float, float, int, int]:
    """Wait until ``n`` rows went through ``query`` (started at ``t0``); (start-up s, steady rows/s, rows, batches)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = sum(p["numInputRows"] for p in query.recentProgress)
        if rows >= n:
            break
        if not query.isActive:
            # Failed (its exception is Spark's log): what it did before counts, as NOT EXACT
            lines = str(query.exception()).splitlines()
            why = [line for line in lines if "stompfast.errors." in line] or lines[-1:]
            print(f"    the query ended after {rows:,} rows: {why[-1].strip()}", flush=True)
            break
        time.sleep(0.1)
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in progress)
    if not progress:
        return float("nan"), 0.0, 0, 0

    def end(p: Dict[str, Any]) -> float:
        from datetime import datetime, timezone

        start = datetime.strptime(p["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
        return start.timestamp() + p["durationMs"]["triggerExecution"] / 1000

    first_end = end(progress[0])
    startup = first_end - t0
    if len(progress) < 2:
        return startup, float("nan"), rows, len(progress)
    steady_rows = sum(p["numInputRows"] for p in progress[1:])
    return startup, steady_rows / (end(progress[-1]) - first_end), rows, len(progress)


class Cpu:
    """CPU seconds used between two points, by whom: the broker, this run's Spark JVM, this run's Python, others.

    Read from /proc (Linux): our JVM and Python workers are this process's descendants,
    the broker is the process listening on the URL's port (``BROKER_PID``); "others" is
    the machine's busy time minus those (another user's load on a shared machine shows up there).
    """

    def __init__(self) -> None:
        self.start = self._snapshot()
        self.t = time.monotonic()

    @staticmethod
    def _snapshot() -> Dict[str, float]:
        ticks = os.sysconf("SC_CLK_TCK")
        procs = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat") as f:
                    stat = f.read()
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            procs[int(name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks, cmd)
        mine = {os.getpid()}
        changed = True
        while changed:
            changed = False
            for pid, (ppid, _, _) in procs.items():
                if ppid in mine and pid not in mine:
                    mine.add(pid)
                    changed = True
        out = {"broker": 0.0, "spark JVM": 0.0, "our Python": 0.0}
        for pid, (_, cpu, cmd) in procs.items():
            if pid == BROKER_PID:
                out["broker"] += cpu
            elif pid in mine:
                out["spark JVM" if b"java" in cmd.split(b"\0")[0] else "our Python"] += cpu
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:9]]
        out["busy"] = (sum(values) - values[3] - values[4]) / ticks
        return out

    def report(self) -> str:
        end, wall = self._snapshot(), time.monotonic() - self.t
        used = {k: (end[k] - self.start[k]) / wall for k in end}
        used["others"] = max(0.0, used.pop("busy") - sum(used.values()))
        cores = os.cpu_count() or 1
        parts = ", ".join(f"{k} {v:.2f}" for k, v in used.items())
        return f"cpu (cores busy on average, of {cores}): {parts}, idle {max(0.0, cores - sum(used.values())):.2f}"


def publish(url: str, q: str, n: int, size: int) -> None:
    from stompfast import Client

    with Client(url) as c:
        for i in range(n):
            c.send(q, (b"%010d" % i) + b"x" * (size - 10))
        c.flush(timeout=120)


def drain_count(url: str, q: str, quiet: float = 1.0) -> int:
    """Consume (auto mode) what is on ``q``; how many."""
    from stompfast import Client, ReceiveTimeout

    got = 0
    with Client(url) as c, c.subscribe(q, ack="auto", buffer_size=5000) as sub:
        while True:
            try:
                got += len(sub.receive_batch(5000, timeout=quiet))
            except ReceiveTimeout:
                return got


def broker_drain(url: str, q: str, n: int, ack: str) -> float:
    """AsyncClient draining ``n`` messages of ``q``: steady rows/s (from the first message)."""
    import anyio

    from stompfast import AsyncClient

    result = {}

    async def run() -> None:
        size = 10000 if ack == "auto" else 100000
        async with AsyncClient(url) as c, c.subscribe(q, ack=ack, buffer_size=size) as sub:
            got = first = unacked = 0
            t = 0.0
            last = None
            while got < n:
                batch = await sub.receive_batch(10000)
                if not got:
                    t, first = time.perf_counter(), len(batch)
                got += len(batch)
                unacked += len(batch)
                last = batch[-1]
                # A cumulative ACK per 10,000, or sooner when nothing more is buffered: a
                # broker with a prefetch limit (ActiveMQ's is a few hundred) sends no more until then.
                if ack == "client-individual":
                    for message in batch:
                        await message.ack()
                elif ack == "client" and (unacked >= 10000 or not sub.pending):
                    await c.ack(last)
                    unacked = 0
            if ack == "client" and last is not None:
                await c.ack(last)
            result["rate"] = (got - first) / (time.perf_counter() - t)

    anyio.run(run)
    return result["rate"]


def broker_publish(url: str, q: str, n: int, size: int, connections: int, every: int, window: int) -> float:
    """AsyncClient publishing ``n`` messages over ``connections`` connections, confirmed as the sink confirms.

    A receipt on every ``every``-th SEND (1: on each; 0: none) and on the last, at most
    ``window`` messages sent and not confirmed per connection: the sink's ``receiptWindow``.
    """
    from collections import deque

    import anyio

    from stompfast import AsyncClient

    body = b"x" * size

    async def one(count: int) -> None:
        async with AsyncClient(url) as c:
            receipts: Any = deque()
            limit = max(1, window // every) if every else 0
            for i in range(1, count + 1):
                wants = bool(every) and i % every == 0
                receipt = await c.send(q, body, receipt=wants, wait=False)
                if wants:
                    receipts.append(receipt)
                    if len(receipts) > limit:
                        await receipts.popleft().wait()
            while receipts:
                await receipts.popleft().wait()
            await c.flush()

    async def run() -> None:
        async with anyio.create_task_group() as tg:
            for i in range(connections):
                tg.start_soon(one, n // connections + (1 if i < n % connections else 0))

    t = time.perf_counter()
    anyio.run(run)
    return n / (time.perf_counter() - t)


def memory_source(batch: int, arrow: bool) -> Any:
    """An in-memory streaming source with the stomp schema: ``batch`` rows per read, built once."""
    import datetime

    from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader

    from stompfast.spark._source import READ_SCHEMA, messages_to_arrow

    class Fake:
        __slots__ = ("body", "headers", "message_id", "subscription")

        def __init__(self, i: int) -> None:
            self.headers = {"destination": "/queue/x", "message-id": f"m-{i}", "subscription": "0",
                            "ack": f"a-{i}", "content-length": "100"}
            self.message_id = f"m-{i}"
            self.subscription = "0"
            self.body = b"x" * 100

    class Reader(SimpleDataSourceStreamReader):
        def initialOffset(self) -> dict:
            return {"n": 0}

        def read(self, start: dict) -> Any:
            fakes = [Fake(i) for i in range(batch)]
            if arrow:
                data: Any = [messages_to_arrow(fakes)]
            else:
                now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
                data = [(f.headers["destination"], f.message_id, f.subscription, dict(f.headers), f.body, now)
                        for f in fakes]
            return iter(data), {"n": start["n"] + batch}

        def readBetweenOffsets(self, start: dict, end: dict) -> Any:
            return iter([])

    class Source(DataSource):
        @classmethod
        def name(cls) -> str:
            return "memory-arrow" if arrow else "memory-tuples"

        def schema(self) -> Any:
            return READ_SCHEMA

        def simpleStreamReader(self, schema: Any) -> Any:
            return Reader()

    return Source


def discard_sink() -> Any:
    """A Python Arrow sink that reads every batch the job hands it and keeps nothing: Spark's write ceiling.

    The stomp sink's path without the broker: the same rows, the same Python workers,
    the same Arrow batches; only the sending is left out.
    """
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    class Writer(DataSourceArrowWriter):
        def write(self, iterator: Any) -> Any:
            rows = 0
            for batch in iterator:
                for body in batch.column("body").to_pylist():
                    rows += len(body) > 0
            return WriterCommitMessage()

    class Sink(DataSource):
        @classmethod
        def name(cls) -> str:
            return "discard"

        def writer(self, schema: Any, overwrite: bool) -> Any:
            return Writer()

    return Sink


def broker_modes(url: str) -> Tuple[str, int, str]:
    """What the stomp sink and source do on this broker with default options.

    (the sink's confirmation mode, a receipt every N SENDs, the source's ack mode)
    """
    from stompfast import Client
    from stompfast.spark._sink import IN_ORDER_SERVERS
    from stompfast.spark._source import _default_ack

    with Client(url) as c:
        server = c.server or ""
    confirm, every = ("every", 100) if server.startswith(IN_ORDER_SERVERS) else ("receipt", 1)
    return confirm, every, _default_ack(server)


def run_stream(spark: Any, fmt: str, options: Dict[str, str], n: int, timeout: float,
               usage: Optional[List[str]] = None) -> Tuple[float, float, int, int]:
    """Run a streaming query into the noop sink until ``n`` rows; append the CPU report to ``usage``."""
    reader = spark.readStream.format(fmt)
    for k, v in options.items():
        reader = reader.option(k, v)
    cpu = Cpu()
    t0 = time.time()
    query = reader.load().writeStream.format("noop").trigger(processingTime="0 seconds").start()
    try:
        result = _steady(query, n, timeout, t0)
        if usage is not None:  # before stop(): the reader's Python process ends with the query
            usage.append(cpu.report())
        # The source acks a committed batch at the next trigger's read: stopped before it,
        # the last batch would go back to the queue and the exactness check count it as left
        time.sleep(SETTLE)
        return result
    finally:
        query.stop()


def stomppy_write(spark: Any, df: Any, url: str, q: str) -> float:
    from stompfast._config import parse_url

    ep = parse_url(url)
    host, port, login, passcode = ep.host, ep.port, ep.login, ep.passcode

    def send_partition(rows: Any) -> None:
        import stomp

        conn = stomp.Connection([(host, port)], vhost="/")
        conn.connect(login, passcode, wait=True)
        # Without it Artemis routes a SEND to a new address as multicast, with no queue
        # bound: every message would be dropped (stompfast's own sends carry it there).
        routing = {"destination-type": "ANYCAST"}
        for row in rows:
            conn.send(q, bytes(row.body), headers=routing)
        conn.disconnect()

    t = time.perf_counter()
    df.foreachPartition(send_partition)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=os.environ.get("STOMPFAST_RABBITMQ_URL", "stomp://guest:guest@127.0.0.1:61613/"))
    ap.add_argument("-n", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--batch", type=int, default=50_000, help="rows per micro-batch (ceiling and tuned read)")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--tuned", action="append", default=[],
                    help="source options for a tuned read, k=v,k=v (repeatable; maxMessagesPerBatch=--batch"
                    " is implied)")
    ap.add_argument("--write-tuned", action="append", default=[],
                    help="sink options for a tuned write, k=v,k=v (repeatable)")
    ap.add_argument("--quick", action="store_true", help="a short profile: -n 20000, --batch 10000")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: ceiling,broker,read,write")
    args = ap.parse_args()
    if args.quick:
        args.n, args.batch = min(args.n, 20_000), min(args.batch, 10_000)
    skip = set(filter(None, args.skip.split(",")))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession, functions as F

    from stompfast.spark import register

    n, url = args.n, args.url
    global BROKER_PID
    from stompfast._config import parse_url

    BROKER_PID = listener_pid(parse_url(url).port)
    confirm, every, source_ack = broker_modes(url)
    window = 2000  # the sink's default receiptWindow
    timeout = max(120.0, n / 1000)
    results: Dict[str, float] = {}
    lines: List[str] = []

    def show(label: str, rate: float, extra: str = "") -> None:
        results[label] = rate
        line = f"{label:<58} {rate:>10,.0f} rows/s  {extra}"
        lines.append(line)
        print(line, flush=True)

    with contextlib.ExitStack() as stack:
        spark = (SparkSession.builder.master(args.master).appName("stompfast-bench")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", str(args.partitions))
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        stack.callback(spark.stop)
        register(spark)
        print(f"# {args.master}, {n:,} messages of {args.size} B, broker {url}, batch {args.batch:,}", flush=True)

        if "ceiling" not in skip:
            for arrow in (False, True):
                spark.dataSource.register(memory_source(args.batch, arrow))
                fmt = "memory-arrow" if arrow else "memory-tuples"
                startup, rate, rows, batches = run_stream(spark, fmt, {}, n, timeout)
                show(f"spark ceiling: in-memory source, {'Arrow ' if arrow else 'tuples'}, {args.batch:,}/batch",
                     rate, f"(start-up {startup:.1f} s, {batches} batches)")

        if "broker" not in skip:
            # auto: the socket's rate; then the mode the source acks in on this broker
            for ack in ("auto", source_ack):
                q = f"/queue/sf-bench-{uuid.uuid4().hex[:8]}"
                publish(url, q, n, args.size)
                show(f"broker ceiling: AsyncClient drain, ack={ack}", broker_drain(url, q, n, ack))
            for confirmed in (True, False):
                q = f"/queue/sf-bench-{uuid.uuid4().hex[:8]}"
                rate = broker_publish(url, q, n, args.size, args.partitions, every if confirmed else 0, window)
                drain_count(url, q)
                how = f"confirm={confirm} (receipt every {every}), window {window}" if confirmed else "no receipts"
                show(f"broker ceiling: AsyncClient publish, {args.partitions} conns, {how}", rate)

        if "read" not in skip:
            q = f"/queue/sf-bench-{uuid.uuid4().hex[:8]}"  # warm: the JVM's and the reader's code paths
            publish(url, q, 20_000, args.size)
            run_stream(spark, "stomp", {"url": url, "destination": q}, 20_000, timeout)
            drain_count(url, q)
            variants: List[Tuple[str, Dict[str, str]]] = [("defaults", {})]
            for extra in args.tuned or [""]:
                tuned = {"maxMessagesPerBatch": str(args.batch)}
                tuned.update(dict(kv.split("=", 1) for kv in filter(None, extra.split(","))))
                variants.append((",".join(f"{k}={v}" for k, v in tuned.items()), tuned))
            for label, options in variants:
                q = f"/queue/sf-bench-{uuid.uuid4().hex[:8]}"
                publish(url, q, n, args.size)
                usage: List[str] = []
                startup, rate, rows, batches = run_stream(
                    spark, "stomp", {"url": url, "destination": q, **options}, n, timeout, usage)
                left = drain_count(url, q, quiet=EXACT_QUIET)
                exact = "exact" if rows == n and left == 0 else f"NOT EXACT: {rows} rows, {left} left"
                show(f"stomp read ({label})", rate,
                     f"(start-up {startup:.1f} s, {batches} batches{'' if batches > 1 else ': no steady state'},"
                     f" {exact})")
                print(f"    {usage[0]}", flush=True)

        if "write" not in skip:
            df = (spark.range(n, numPartitions=args.partitions)
                  .select(F.concat(F.lpad(F.col("id").cast("string"), 10, "0"),
                                   F.lit("x" * (args.size - 10))).cast("binary").alias("body"))
                  .cache())
            df.count()
            df.write.format("noop").mode("overwrite").save()  # warm: the Python workers are up
            spark.dataSource.register(discard_sink())
            df.write.format("discard").mode("append").save()  # warm
            t = time.perf_counter()
            df.write.format("discard").mode("append").save()
            show("spark ceiling: the same rows into a Python sink that discards them", n / (time.perf_counter() - t))
            small = spark.range(1000, numPartitions=args.partitions).select(F.lit(b"w").alias("body"))
            warm = f"/queue/sf-bench-{uuid.uuid4().hex[:8]}"  # warm: stompfast and stomp.py imported there
            small.write.format("stomp").option("url", url).option("destination", warm).mode("append").save()
            stomppy_write(spark, small, url, warm)
            drain_count(url, warm)
            writes: List[Tuple[str, Dict[str, str]]] = [("defaults", {})]
            for extra in args.write_tuned:
                writes.append((extra, dict(kv.split("=", 1) for kv in extra.split(","))))
            for label, options in writes:
                q = f"/queue/sf-bench-{uuid.uuid4().hex[:8]}"
                w = df.write.format("stomp").option("url", url).option("destination", q).mode("append")
                for k, v in options.items():
                    w = w.option(k, v)
                cpu = Cpu()
                t = time.perf_counter()
                w.save()
                seconds = time.perf_counter() - t
                usage = cpu.report()
                left = drain_count(url, q)
                show(f"stomp write ({label}, every message confirmed)", n / seconds,
                     "(exact)" if left == n else f"(NOT EXACT: {left} on the queue)")
                print(f"    {usage}", flush=True)
            q = f"/queue/sf-bench-{uuid.uuid4().hex[:8]}"
            cpu = Cpu()
            seconds = stomppy_write(spark, df, url, q)
            usage = cpu.report()
            left = drain_count(url, q)
            show("stomp.py foreachPartition write (nothing confirmed)", n / seconds,
                 "(all there)" if left == n else f"({left} on the queue)")
            print(f"    {usage}", flush=True)

    print("\n# targets (docs/spark.md, Throughput)")
    read_bounds = [v for k, v in results.items()
                   if (k.startswith("spark ceiling: in-memory") and "Arrow" in k)
                   or (k.startswith("broker ceiling") and "ack=auto" in k)]
    read_ceiling: Optional[float] = min(read_bounds, default=None)
    if read_ceiling:
        print(f"read ceiling (lower of Spark's Arrow source and the broker's auto drain): {read_ceiling:,.0f} rows/s")
        for k, v in results.items():
            if k.startswith("stomp read"):
                print(f"  {k}: {v / read_ceiling:.2f} of the ceiling (target >= 0.80 with defaults)")
    write_bounds = [v for k, v in results.items()
                    if k.startswith("spark ceiling: the same rows")
                    or (k.startswith("broker ceiling") and "confirm=" in k)]
    write_ceiling: Optional[float] = min(write_bounds, default=None)
    if write_ceiling:
        print(f"write ceiling (lower of the discarding Python sink and the broker's confirmed publish):"
              f" {write_ceiling:,.0f} rows/s")
        for k, v in results.items():
            if k.startswith("stomp write"):
                print(f"  {k}: {v / write_ceiling:.2f} of the ceiling (target >= 0.90 with defaults)")
    stomppy = results.get("stomp.py foreachPartition write (nothing confirmed)")
    if stomppy:
        for k, v in results.items():
            if k.startswith("stomp write"):
                print(f"  {k}: {v / stomppy:.2f}x the stomp.py writer, which confirms nothing")


if __name__ == "__main__":
    main()
