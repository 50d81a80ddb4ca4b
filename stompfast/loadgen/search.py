"""The maximum sustainable rate: the highest constant rate at which a run still meets its criterion.

:class:`RateSearch` decides which rate to try next (double from the start rate until
a run fails, halve until one holds if the first fails, then bisect between the
highest that held and the lowest that failed); :func:`find_max_rate` drives it with
one complete run per rate (a fresh queue each, so that one run's backlog never
weighs on the next), and ``stompfast bench --find-max-rate`` does the same from the
command line. A run *holds* when it is clean (nothing lost, duplicated or refused, no
error) and meets every objective of the criterion: the run's ``slo``, or
:data:`DEFAULT_CRITERION` when it has none.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import anyio

from ..errors import ConfigurationError
from .config import LoadConfig, LoadResult
from .coordinator import run_load

#: What a rate must meet to hold when the run names no objectives: the p99 of end-to-end
#: latency under 100 ms, and the consumers keeping up with at least 95% of the target.
DEFAULT_CRITERION: Tuple[str, ...] = ("p99<100ms", "receive_rate>=0.95*target")
#: Seconds each rate is run when the configuration gives no ``duration``.
DEFAULT_STEP_SECONDS = 10.0
#: Halvings tried below a start rate that failed before the search gives up.
MAX_HALVINGS = 8


@dataclasses.dataclass
class Attempt:
    """One rate tried: the run's result and whether it held."""

    rate: float
    held: bool
    result: LoadResult

    def to_dict(self) -> Dict[str, Any]:
        lat = self.result.latency_us
        return {
            "rate": self.rate,
            "held": self.held,
            "send_msgs_per_s": self.result.rates.get("send_msgs_per_s"),
            "receive_msgs_per_s": self.result.rates.get("receive_msgs_per_s"),
            "latency_us": {k: lat[k] for k in ("p50", "p99", "max")} if lat else None,
            "missed": [j.describe() for j in self.result.slo if not j.ok],
            "problems": list(self.result.problems),
            "interrupted": self.result.interrupted,
        }


class RateSearch:
    """Which rate to try next, from the outcomes so far (no I/O: the driver runs each rate).

    From ``start``: while every rate held, the next is twice the highest; while every
    rate failed, half the lowest (at most :data:`MAX_HALVINGS` times); once one held
    and one failed, ``refine`` bisections between the highest that held and the lowest
    that failed. Rates are whole messages per second.
    """

    def __init__(self, start: float, refine: int = 4, ceiling: Optional[float] = None) -> None:
        if not start > 0:
            raise ConfigurationError(f"the search's start rate must be above 0, not {start!r}")
        if type(refine) is not int or refine < 0:
            raise ConfigurationError(f"refine must be an int >= 0, not {refine!r}")
        self.start = float(start)
        self.refine = refine
        self.ceiling = ceiling
        #: the highest rate that held, and the lowest that failed (None: none yet)
        self.best: Optional[float] = None
        self.failed: Optional[float] = None
        self._tried = 0
        self._bisections = 0

    def next_rate(self) -> Optional[float]:
        """The rate to try next, or None when the search is over."""
        if self._tried == 0:
            return self.start
        if self.failed is None:
            assert self.best is not None
            rate = self.best * 2
            if self.ceiling is not None and rate > self.ceiling:
                return None if self.best >= self.ceiling else float(self.ceiling)
            return rate
        if self.best is None:
            rate = float(int(self.failed / 2))
            return rate if rate >= 1 and self._tried <= MAX_HALVINGS else None
        if self._bisections >= self.refine:
            return None
        rate = float(int((self.best + self.failed) / 2))
        return rate if self.best < rate < self.failed else None

    def record(self, rate: float, held: bool) -> None:
        """Note the outcome of a run at ``rate``."""
        if self.best is not None and self.failed is not None:
            self._bisections += 1
        self._tried += 1
        if held:
            self.best = rate if self.best is None else max(self.best, rate)
        else:
            self.failed = rate if self.failed is None else min(self.failed, rate)


@dataclasses.dataclass
class SearchResult:
    """The outcome of a search: every attempt in order, the highest rate that held, the criterion."""

    criterion: Tuple[str, ...]
    step_seconds: float
    attempts: List[Attempt]
    #: None for a search that ended on its own; else why it was stopped (as ``LoadResult.interrupted``)
    interrupted: Optional[str] = None

    @property
    def best(self) -> Optional[float]:
        """The highest rate that held (None: none did)."""
        held = [a.rate for a in self.attempts if a.held]
        return max(held) if held else None

    @property
    def first_failed(self) -> Optional[float]:
        """The lowest rate above ``best`` that failed (None: none failed)."""
        best = self.best or 0.0
        # a run stopped early neither held nor failed
        failed = [a.rate for a in self.attempts if not a.held and a.rate > best and a.result.interrupted is None]
        return min(failed) if failed else None

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready dict (``schema: "stompfast.loadgen.search/1"``)."""
        return {
            "schema": "stompfast.loadgen.search/1",
            "criterion": list(self.criterion),
            "step_seconds": self.step_seconds,
            "max_sustainable_rate": self.best,
            "first_failed_rate": self.first_failed,
            "interrupted": self.interrupted,
            "attempts": [a.to_dict() for a in self.attempts],
        }


def step_config(config: LoadConfig, rate: float) -> LoadConfig:
    """The configuration of the run at ``rate``: constant, ``duration`` long, judged on the criterion."""
    return dataclasses.replace(
        config, rate=rate, rate_shape=(), count=None, duration=config.duration or DEFAULT_STEP_SECONDS,
        slo=tuple(config.slo) or DEFAULT_CRITERION,
    )


def check_search(config: LoadConfig) -> None:
    """Raise ConfigurationError for a configuration a search cannot use (a shape; no consumer)."""
    if config.rate_shape:
        raise ConfigurationError("a rate search runs constant rates: give its start as a plain --rate, not a shape")
    if not config.consumers:
        raise ConfigurationError("a rate search needs consumers: it judges what they receive")
    step_config(config, config.rate or 1000.0).validate()


def held(result: LoadResult) -> bool:
    """Whether a run held: clean, every objective met, not stopped early."""
    return result.ok and result.slo_met is not False and result.interrupted is None


async def find_max_rate(
    config: LoadConfig, *, start: Optional[float] = None, refine: int = 4, ceiling: Optional[float] = None,
    on_attempt: Optional[Callable[[Attempt], Any]] = None, stop: Optional[anyio.Event] = None,
) -> SearchResult:
    """Search the highest constant rate at which runs of ``config`` hold (module docstring).

    ``start``: the first rate (default ``config.rate``, else 1,000 msgs/s); each run lasts
    ``config.duration`` (default 10 s) on a fresh queue unless ``config.destinations``
    are given. ``on_attempt`` is called after each run; setting ``stop`` ends the run
    under way early (its partial result does not count as held) and the search with it.
    """
    check_search(config)
    search = RateSearch(start or config.rate or 1000.0, refine, ceiling)
    report = SearchResult(tuple(config.slo) or DEFAULT_CRITERION, config.duration or DEFAULT_STEP_SECONDS, [])
    while (rate := search.next_rate()) is not None:
        result = await run_load(step_config(config, rate), stop=stop)
        attempt = Attempt(rate, held(result), result)
        report.attempts.append(attempt)
        if on_attempt is not None:
            on_attempt(attempt)
        if result.interrupted is not None:
            report.interrupted = result.interrupted
            break
        search.record(rate, attempt.held)
    return report


def describe_attempt(attempt: Attempt) -> str:
    """One line: the rate, held or not, what was received, the p99, what was missed."""
    r = attempt.result
    receive = r.rates.get("receive_msgs_per_s")
    lat = r.latency_us
    missed: Sequence[str] = [j.describe() for j in r.slo if not j.ok] + list(r.problems)
    verdict = "held  " if attempt.held else "STOPPED" if r.interrupted is not None else "FAILED"
    return (
        f"{attempt.rate:>12,.0f} msgs/s  {verdict}"
        f"  received {receive or 0:,.0f}/s" + (f"  p99 {lat['p99'] / 1000:,.2f} ms" if lat else "")
        + (f"  ({'; '.join(missed)})" if missed and not attempt.held and r.interrupted is None else "")
    )
