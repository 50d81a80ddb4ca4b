"""Service-level objectives for ``stompfast bench --slo``: parsed before the run, judged on its result.

An objective is ``METRIC OP VALUE``, e.g. ``p99<5ms``, ``missing==0``,
``rate>=0.98*target``; several are given comma-separated or with ``--slo`` more
than once. The metrics (docs/loadgen.md, "SLO gates"):

- latency, from the run's end-to-end HDR histogram: ``p50``, ``p99``, ``p99.9``, any
  ``p<percentile>``, ``min``, ``mean`` and ``max``; the value takes a unit ``us``,
  ``ms`` (the default) or ``s``;
- counts: ``missing``, ``duplicates``, ``unexpected``, ``errors``, ``sent``,
  ``received``, ``confirmed``;
- rates in messages per second over the measured part of the run: ``rate`` (the
  receive rate, or the send rate of a run without consumers), ``send_rate``,
  ``receive_rate``; the value may be a number or ``F*target`` (``F`` times ``--rate``).

Judging never raises: a metric the run did not measure (no latency without
consumers, no rate without a span) misses its objective and says so, since an
objective that cannot be checked cannot be counted as met.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from ..errors import ConfigurationError

if TYPE_CHECKING:  # pragma: no cover
    from .config import LoadConfig

__all__ = ["Judgement", "Objective", "judge", "parse_objectives"]

COUNT_METRICS = ("missing", "duplicates", "unexpected", "errors", "sent", "received", "confirmed")
RATE_METRICS = ("rate", "send_rate", "receive_rate")
LATENCY_NAMED = ("min", "mean", "max")
# Microseconds per unit of a latency threshold
LATENCY_UNITS = {"us": 1.0, "ms": 1000.0, "s": 1_000_000.0}

_OBJECTIVE = re.compile(
    r"^\s*(?P<metric>[a-z_]+|p\d+(?:\.\d+)?)\s*(?P<op><=|>=|==|!=|<|>)\s*(?P<value>[^\s]+)\s*$"
)
_NUMBER = r"\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?"
_LATENCY_VALUE = re.compile(rf"^(?P<number>{_NUMBER})(?P<unit>us|ms|s)?$")
_RATE_VALUE = re.compile(rf"^(?:(?P<factor>{_NUMBER})\*target|target|(?P<number>{_NUMBER})(?:/s)?)$")
_COUNT_VALUE = re.compile(r"^\d+$")


@dataclasses.dataclass(frozen=True)
class Objective:
    """One objective: ``metric op threshold`` (latency in microseconds; ``factor`` of the target rate, if given)."""

    #: as the user wrote it, spaces removed
    text: str
    metric: str
    op: str
    #: latency in microseconds, a count, or messages per second (None: ``factor`` times the target rate)
    threshold: Optional[float]
    #: ``F*target``: the threshold is F times the run's ``--rate``
    factor: Optional[float] = None

    @property
    def kind(self) -> str:
        """``"latency"``, ``"count"`` or ``"rate"``."""
        if self.metric in COUNT_METRICS:
            return "count"
        if self.metric in RATE_METRICS:
            return "rate"
        return "latency"

    def limit(self, config: "LoadConfig") -> float:
        """The threshold for this run (``F*target`` resolved against ``config.target_rate``)."""
        if self.factor is None:
            assert self.threshold is not None
            return self.threshold
        target = config.target_rate
        assert target is not None
        return self.factor * target


@dataclasses.dataclass(frozen=True)
class Judgement:
    """An objective against a result: the measured value (None: not measured) and whether it was met."""

    objective: Objective
    limit: float
    value: Optional[float]
    ok: bool

    def describe(self) -> str:
        """One line for a person: ``p99<5ms: 7.31 ms (missed)``."""
        o = self.objective
        if self.value is None:
            return f"{o.text}: not measured in this run (missed)"
        return f"{o.text}: {_show(o, self.value)} ({'met' if self.ok else 'missed'})"

    def to_dict(self) -> Dict[str, Any]:
        """The JSON form (``LoadResult.to_dict()["slo"]``); latency in microseconds."""
        o = self.objective
        return {
            "objective": o.text, "metric": o.metric, "op": o.op, "kind": o.kind,
            "threshold": self.limit, "value": self.value, "ok": self.ok,
        }


def parse_objectives(texts: Sequence[str], config: Optional["LoadConfig"] = None) -> List[Objective]:
    """Every objective of ``texts`` (each one or several, comma-separated); ConfigurationError for a bad one.

    With ``config``, objectives the run cannot measure are refused now rather than
    missed at the end: a latency or receive objective without consumers, a
    ``target`` without ``--rate``, ``confirmed`` without receipts.
    """
    objectives: List[Objective] = []
    for text in texts:
        for part in str(text).split(","):
            if not part.strip():
                raise ConfigurationError(f"--slo {text!r}: an empty objective (two commas, or one at an end)")
            objectives.append(_parse_one(part))
    if config is not None:
        for objective in objectives:
            _check_measurable(objective, config)
    return objectives


def _parse_one(text: str) -> Objective:
    match = _OBJECTIVE.match(text)
    compact = re.sub(r"\s+", "", text)
    if match is None:
        raise ConfigurationError(
            f"--slo {text.strip()!r}: not METRIC OP VALUE (e.g. 'p99<5ms', 'missing==0', 'rate>=0.98*target')"
        )
    metric, op, value = match["metric"], match["op"], match["value"]
    if metric in COUNT_METRICS:
        if not _COUNT_VALUE.match(value):
            raise ConfigurationError(f"--slo {compact!r}: {metric} is a count; the value must be a whole number")
        return Objective(compact, metric, op, float(value))
    if metric in RATE_METRICS:
        rate = _RATE_VALUE.match(value)
        if rate is None:
            raise ConfigurationError(
                f"--slo {compact!r}: {metric} is messages per second; the value must be a number or F*target"
            )
        if rate["number"] is not None:
            return Objective(compact, metric, op, float(rate["number"]))
        return Objective(compact, metric, op, None, factor=float(rate["factor"]) if rate["factor"] else 1.0)
    if metric in LATENCY_NAMED or metric.startswith("p"):
        if metric.startswith("p") and not 0 < float(metric[1:]) <= 100:
            raise ConfigurationError(f"--slo {compact!r}: a percentile is above 0 and at most 100")
        latency = _LATENCY_VALUE.match(value)
        if latency is None:
            raise ConfigurationError(
                f"--slo {compact!r}: {metric} is a latency; the value is a number with us, ms (default) or s"
            )
        return Objective(compact, metric, op, float(latency["number"]) * LATENCY_UNITS[latency["unit"] or "ms"])
    known = ", ".join(("pNN", *LATENCY_NAMED, *COUNT_METRICS, *RATE_METRICS))
    raise ConfigurationError(f"--slo {compact!r}: unknown metric {metric!r} (known: {known})")


def _check_measurable(objective: Objective, config: "LoadConfig") -> None:
    if objective.factor is not None and not config.open_loop:
        raise ConfigurationError(f"--slo {objective.text!r}: 'target' is the --rate, and this run has none")
    if not config.consumers and (objective.kind == "latency" or objective.metric in ("received", "receive_rate")):
        raise ConfigurationError(f"--slo {objective.text!r}: a run without consumers measures no {objective.metric}")
    if objective.metric == "confirmed" and not config.receipts:
        raise ConfigurationError(f"--slo {objective.text!r}: only a run with --receipts counts confirmed messages")


def judge(objectives: Sequence[Objective], result: Any, config: Optional["LoadConfig"] = None) -> List[Judgement]:
    """Each objective against ``result``, in the order given.

    ``result`` is a :class:`~.config.LoadResult`, or anything with its ``counts``,
    ``rates``, ``histogram`` and ``latency_us`` (Spark's ``ClusterLoadResult``) and the
    run's ``config`` given apart.
    """
    config = config if config is not None else result.config
    assert config is not None
    judgements = []
    for objective in objectives:
        limit = objective.limit(config) if objective.factor is None or config.open_loop else math.nan
        value = _measured(objective, result, config)
        ok = value is not None and not math.isnan(limit) and _compare(value, objective.op, limit)
        judgements.append(Judgement(objective, limit, value, ok))
    return judgements


def _measured(objective: Objective, result: Any, config: "LoadConfig") -> Optional[float]:
    metric = objective.metric
    if objective.kind == "count":
        return float(result.counts.get(metric, 0))
    if objective.kind == "rate":
        rates = result.rates
        key = {"send_rate": "send_msgs_per_s", "receive_rate": "receive_msgs_per_s"}.get(metric)
        if key is None:
            key = "receive_msgs_per_s" if config.consumers else "send_msgs_per_s"
        value = rates.get(key)
        return None if value is None else float(value)
    histogram = result.histogram
    if histogram is not None and histogram.get_total_count():
        if metric == "min":
            return float(histogram.get_min_value())
        if metric == "max":
            return float(histogram.get_max_value())
        if metric == "mean":
            return float(histogram.get_mean_value())
        return float(histogram.get_value_at_percentile(float(metric[1:])))
    # A result without its histogram (read back from JSON): the named percentiles only
    latency = result.latency_us or {}
    value = latency.get(metric)
    return None if value is None else float(value)


def _compare(value: float, op: str, limit: float) -> bool:
    if op == "<":
        return value < limit
    if op == "<=":
        return value <= limit
    if op == ">":
        return value > limit
    if op == ">=":
        return value >= limit
    if op == "==":
        return value == limit
    return value != limit


def _show(objective: Objective, value: float) -> str:
    if objective.kind == "latency":
        return f"{value / 1000:.3f} ms" if value < 1_000_000 else f"{value / 1_000_000:.3f} s"
    if objective.kind == "rate":
        return f"{value:,.1f} msgs/s"
    return f"{int(value):,}"

