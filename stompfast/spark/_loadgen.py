"""``spark.read.format("stomp-loadgen")``: the load generator fanned out over a Spark cluster.

One partition per worker; each runs :func:`stompfast.loadgen.run` (its producers and
consumers, in the executor's Python worker) against the broker on a destination of its
own (``<destinationPrefix>-<worker>``, so each worker's counts are exact) and returns
one stats row with its HdrHistogram encoded and its clients' own metrics as JSON.
:func:`run_cluster_load` runs that on the driver and merges the rows: counts summed,
histograms added (exact cluster-wide latency percentiles), the clients' metrics summed
(their receipt round-trip buckets added), throughput over the cluster's wall-clock span.

Executors need ``stompfast[spark]`` installed and must reach the broker's URL; the
histograms travel in HdrHistogram's V2 encoding (stompfast's own, :mod:`stompfast.loadgen._hdr`).
"""

from __future__ import annotations

import dataclasses
import json
import socket
import time
import uuid
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from ..errors import ConfigurationError
from ..loadgen.slo import judge, parse_objectives
from ._options import get_int

__all__ = ["ClusterLoadResult", "LOADGEN_SCHEMA", "StompLoadgenDataSource", "run_cluster_load"]

LOADGEN_SCHEMA = (
    "worker INT, host STRING, destination STRING, ok BOOLEAN, problems STRING, "
    "sent LONG, confirmed LONG, received LONG, distinct LONG, duplicates LONG, missing LONG, "
    "unexpected LONG, errors LONG, send_msgs_per_s DOUBLE, receive_msgs_per_s DOUBLE, "
    "started_ns LONG, finished_ns LONG, elapsed_s DOUBLE, latency_p50_us DOUBLE, latency_p99_us DOUBLE, "
    "histogram STRING, client_stats STRING"
)

#: LoadConfig fields that cannot be given as options (the split ones are per cluster, see below).
# (``slo``: judged by run_cluster_load on the merged result, not by each task)
_NOT_OPTIONS = {"body", "headers", "processes", "destinations", "slo", "bodies", "link_cuts", "cut_command"}
#: Options a Spark task cannot honour: refused rather than ignored (a failover run cuts the links of one
#: process's proxy; the tasks run in processes of their own)
_REFUSED_OPTIONS = {
    "link_cuts": "a failover run (--cut-links) runs in one stompfast bench, not over Spark tasks",
    "cut_command": "a failover run (--cut-command) runs in one stompfast bench, not over Spark tasks",
}


def _shape_text(shape: Any) -> str:
    from ..loadgen.shape import describe_shape

    return describe_shape(shape)


def _sizes_text(sizes: Any) -> str:
    from ..loadgen.bodies import describe_sizes

    return describe_sizes(sizes)


#: LoadConfig fields that travel as an option in ``stompfast bench``'s text form: field -> (option, its text)
_BENCH_FORMS: Dict[str, Tuple[str, Callable[[Any], str]]] = {
    "rate_shape": ("rate", _shape_text),
    "sizes": ("size", _sizes_text),
    "processing_time": ("processing_time", lambda low_high: f"{low_high[0]!r}..{low_high[1]!r}"),
    "consumer_pauses": ("consumer_pauses", lambda pauses: ",".join(f"{at!r}:{length!r}" for at, length in pauses)),
}


def _config_from_options(options: Dict[str, str]) -> Dict[str, Any]:
    from ..loadgen import LoadConfig
    from ..loadgen.behaviour import parse_pause, parse_processing_time
    from ..loadgen.bodies import parse_sizes
    from ..loadgen.shape import parse_rate

    lowered = {str(k).lower(): str(v) for k, v in options.items()}
    for name, why in _REFUSED_OPTIONS.items():
        if name.replace("_", "") in {k.replace("_", "") for k in lowered}:
            raise ConfigurationError(f"option {name!r}: {why}")
    values: Dict[str, Any] = {}
    for field in dataclasses.fields(LoadConfig):
        if field.name in _NOT_OPTIONS:
            continue
        camel = "".join(p if i == 0 else p.capitalize() for i, p in enumerate(field.name.split("_")))
        text = lowered.get(field.name.lower(), lowered.get(camel.lower()))
        if text is None:
            continue
        default = field.default
        try:
            if field.name == "size":
                # one size, or a distribution as --size takes it
                sizes = parse_sizes(text)
                if len(sizes) == 1 and sizes[0][0] == sizes[0][1]:
                    values["size"] = sizes[0][0]
                else:
                    values["sizes"] = sizes
            elif field.name in ("count", "warmup_messages", "producers", "consumers", "receipt_window",
                                "transaction_size", "buffer_size"):
                values[field.name] = int(text)
            elif field.name == "rate":
                # a constant rate, or a shape of steps and ramps as --rate takes it
                rate, shape = parse_rate(text)
                if shape:
                    values["rate_shape"] = shape
                else:
                    values["rate"] = rate
            elif field.name == "processing_time":
                values[field.name] = parse_processing_time(text)
            elif field.name == "consumer_pauses":
                values[field.name] = tuple(parse_pause(part) for part in text.split(",") if part.strip())
            elif field.name in ("duration", "warmup", "interval", "drain_timeout", "connect_timeout", "nack_share",
                                "start_spread"):
                values[field.name] = float(text)
            elif field.name == "receipts":
                values[field.name] = text.strip().lower() in ("true", "1", "yes", "on")
            elif field.name == "heart_beat":
                cx, cy = (int(x) for x in text.split(","))
                values[field.name] = (cx, cy)
            elif field.name == "versions":
                values[field.name] = tuple(v.strip() for v in text.split(",") if v.strip())
            elif isinstance(default, str) or default is None:
                values[field.name] = text
        except ValueError:
            raise ConfigurationError(f"option {field.name!r}: cannot use {text!r}") from None
    if not values.get("url"):
        raise ConfigurationError("stomp-loadgen needs option 'url': every executor must reach the broker")
    return values


def _split(total: int, parts: int) -> List[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


class StompLoadgenDataSource(DataSource):
    """``format("stomp-loadgen")``: one stats row per worker (option ``workers``, default 2).

    Options are :class:`~stompfast.loadgen.LoadConfig` fields (``url``, ``count``,
    ``duration``, ``size``, ``rate``, ``producers``, ``consumers``, ``receipts``, ``ack``,
    ``processingTime``, ``nackShare``, ``consumerPauses`` (``10s:5s,20s:2s``), ...;
    snake_case or camelCase; ``size``, ``rate`` and ``processingTime`` in the forms
    ``stompfast bench`` takes). ``count`` and ``rate`` (a rate or a shape) are totals for
    the cluster, split over the workers; ``producers``/``consumers`` are per worker.
    ``destinationPrefix`` names the queues (default ``/queue/stompfast-spark-<run>``).
    """

    @classmethod
    def name(cls) -> str:
        return "stomp-loadgen"

    def schema(self) -> str:
        return LOADGEN_SCHEMA

    def reader(self, schema: StructType) -> "StompLoadgenReader":
        return StompLoadgenReader(dict(self.options))


class StompLoadgenReader(DataSourceReader):
    def __init__(self, options: Dict[str, str]) -> None:
        self.values = _config_from_options(options)
        self.workers = get_int(options, "workers", 2) or 2
        prefix = {str(k).lower(): v for k, v in options.items()}.get("destinationprefix")
        self.prefix = prefix or f"/queue/stompfast-spark-{uuid.uuid4().hex[:10]}"
        count = self.values.get("count")
        if count is not None and count < self.workers:
            raise ConfigurationError(f"count ({count}) must be at least the number of workers ({self.workers})")
        from ..loadgen import LoadConfig

        # Fail on the driver, before any task
        LoadConfig(**self._values_for(0)).validate()

    def _values_for(self, worker: int) -> Dict[str, Any]:
        values = dict(self.values)
        if values.get("count") is not None:
            values["count"] = _split(values["count"], self.workers)[worker]
        if values.get("rate") is not None:
            values["rate"] = values["rate"] / self.workers
        if values.get("rate_shape"):
            from ..loadgen.shape import Stage

            values["rate_shape"] = tuple(
                Stage(s.start / self.workers, s.end / self.workers, s.seconds) for s in values["rate_shape"]
            )
        values["destinations"] = (f"{self.prefix}-{worker}",)
        values["processes"] = 1
        return values

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(i) for i in range(self.workers)]

    def read(self, partition: InputPartition) -> Iterator[Tuple[Any, ...]]:
        from ..loadgen import LoadConfig, run

        worker = int(partition.value)
        config = LoadConfig(**self._values_for(worker))
        started = time.time_ns()
        result = run(config)
        finished = time.time_ns()
        c = result.counts
        lat = result.latency_us or {}
        hist = result.histogram
        encoded = hist.encode().decode("ascii") if hist is not None and hist.get_total_count() else None
        yield (
            worker, socket.gethostname(), config.destinations[0], bool(result.ok), "; ".join(result.problems),
            c["sent"], c["confirmed"], c["received"], c["distinct"], c["duplicates"], c["missing"],
            c["unexpected"], c["errors"], result.rates.get("send_msgs_per_s"), result.rates.get("receive_msgs_per_s"),
            started, finished, result.elapsed, lat.get("p50"), lat.get("p99"), encoded,
            json.dumps(result.client_stats, allow_nan=False) if result.client_stats else None,
        )


@dataclasses.dataclass
class ClusterLoadResult:
    """The merged outcome of :func:`run_cluster_load`.

    ``counts``: sums over the workers. ``rates``: ``send``/``receive_msgs_per_s`` is
    the sum of the workers' rates (they run at the same time), ``wall_msgs_per_s``
    received messages over the span from the first worker's start to the last one's
    end. ``latency_us``: percentiles of the merged histogram. ``client_stats``: the
    clients' own metrics summed over every worker (as ``LoadResult.client_stats``).
    ``rows``: the workers'. ``slo``: each objective of the config's ``slo`` judged on the
    merged result (:mod:`stompfast.loadgen.slo`; empty without objectives).
    """

    ok: bool
    problems: List[str]
    counts: Dict[str, int]
    rates: Dict[str, Optional[float]]
    latency_us: Optional[Dict[str, float]]
    rows: List[Dict[str, Any]]
    histogram: Any = dataclasses.field(default=None, repr=False)
    client_stats: Dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    slo: List[Any] = dataclasses.field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return {"ok": self.ok, "problems": self.problems, "counts": self.counts, "rates": self.rates,
                "latency_us": self.latency_us, "client_stats": self.client_stats,
                "slo": [j.to_dict() for j in self.slo],
                "rows": [{k: v for k, v in r.items() if k not in ("histogram", "client_stats")} for r in self.rows]}


def merge_rows(rows: Sequence[Dict[str, Any]]) -> ClusterLoadResult:
    """Aggregate the stats rows of ``stomp-loadgen`` (dicts) into a :class:`ClusterLoadResult`."""
    from ..loadgen.clientstats import merge_records
    from ..loadgen.histogram import histogram_class, new_histogram, percentiles

    keys = ("sent", "confirmed", "received", "distinct", "duplicates", "missing", "unexpected", "errors")
    counts = {k: int(sum(r[k] or 0 for r in rows)) for k in keys}
    total = new_histogram()
    cls = histogram_class()
    for r in rows:
        if r.get("histogram"):
            total.add(cls.decode(r["histogram"].encode("ascii")))
    problems = [f"worker {r['worker']}: {r['problems']}" for r in rows if r["problems"]]
    starts = [r["started_ns"] for r in rows]
    ends = [r["finished_ns"] for r in rows]
    span = (max(ends) - min(starts)) / 1e9 if rows else 0.0

    def total_rate(name: str) -> Optional[float]:
        values = [r[name] for r in rows if r[name]]
        return round(sum(values), 1) if values else None

    rates = {
        "send_msgs_per_s": total_rate("send_msgs_per_s"),
        "receive_msgs_per_s": total_rate("receive_msgs_per_s"),
        "wall_msgs_per_s": round(counts["received"] / span, 1) if span > 0 else None,
        "wall_seconds": round(span, 3),
    }
    return ClusterLoadResult(
        ok=bool(rows) and all(r["ok"] for r in rows), problems=problems, counts=counts, rates=rates,
        latency_us=percentiles(total), rows=[dict(r) for r in rows], histogram=total,
        client_stats=merge_records(json.loads(r["client_stats"]) for r in rows if r.get("client_stats")),
    )


def run_cluster_load(
    spark: Any, config: Any = None, *, workers: Optional[int] = None, **options: Any
) -> ClusterLoadResult:
    """Run the load generator on ``workers`` Spark tasks at once and merge their results.

    ``config`` is a :class:`~stompfast.loadgen.LoadConfig` (its ``url`` is required;
    ``count`` and ``rate`` are cluster totals) and/or ``options`` are the data source's
    options. ``workers`` defaults to ``spark.sparkContext.defaultParallelism``.
    """
    from . import register

    opts: Dict[str, str] = {}
    if config is not None:
        for field in dataclasses.fields(config):
            value = getattr(config, field.name)
            if field.name in _NOT_OPTIONS:
                if field.name in ("body", "headers", "bodies", "link_cuts", "cut_command") and value:
                    raise ConfigurationError(f"run_cluster_load cannot pass LoadConfig.{field.name}")
                continue
            if field.name in _BENCH_FORMS:
                # written as stompfast bench takes it, which is how the options are read
                name, text = _BENCH_FORMS[field.name]
                if any(value):
                    opts[name] = text(value)
                continue
            if value is None:
                continue
            if isinstance(value, tuple):
                value = ",".join(str(v) for v in value)
            opts[field.name] = str(value).lower() if isinstance(value, bool) else str(value)
        if config.destinations:
            opts["destinationPrefix"] = config.destinations[0]
    opts.update({k: str(v) for k, v in options.items()})
    if workers is None:
        workers = spark.sparkContext.defaultParallelism
    opts["workers"] = str(workers)
    objectives = parse_objectives(config.slo, config) if config is not None else []
    register(spark)
    rows = spark.read.format("stomp-loadgen").options(**opts).load().collect()
    result = merge_rows([r.asDict() for r in rows])
    if objectives:
        # Judged once, on every task's messages and one merged histogram
        result.slo = judge(objectives, result, config)
    return result



# Shown as stompfast.spark.X (see the end of _source.py).
ClusterLoadResult.__module__ = StompLoadgenDataSource.__module__ = run_cluster_load.__module__ = "stompfast.spark"
