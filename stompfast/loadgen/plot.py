"""``stompfast bench --plot``: throughput and latency over time, drawn with matplotlib."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from .config import LoadResult

PLOT_HINT = "--plot needs matplotlib: pip install 'stompfast[plot]' (or pip install matplotlib)"


def write_plot(result: LoadResult, path: str) -> None:
    """Write throughput and latency over time as a PNG (or any format matplotlib knows by the suffix).

    Raises:
        ImportError: matplotlib is not installed (the message says how to install it).
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(PLOT_HINT) from exc
    rows = result.timeline

    def steps(pairs: List[Tuple[Dict[str, Any], float]]) -> Tuple[List[float], List[float]]:
        # one step per interval, drawn over the interval's whole width (the last may be short)
        xs = [row["t"] for row, _ in pairs]
        ys = [y for _, y in pairs]
        if pairs:
            xs.append(pairs[-1][0]["t"] + pairs[-1][0]["seconds"])
            ys.append(ys[-1])
        return xs, ys

    fig = Figure(figsize=(10, 7), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    top.plot(*steps([(row, row["send_rate"]) for row in rows]), label="sent/s", drawstyle="steps-post",
             linewidth=3, alpha=0.6)
    top.plot(*steps([(row, row["receive_rate"]) for row in rows]), label="received/s", drawstyle="steps-post")
    if result.config.rate:
        top.axhline(result.config.rate, linestyle=":", color="grey", label="target rate")
    top.set_ylabel("messages per second")
    top.set_ylim(bottom=0)
    top.grid(True, alpha=0.3)
    top.legend(loc="lower right")
    for key, style in (("p50", "-"), ("p99", "--"), ("max", ":")):
        points = [(row, row["latency_us"][key] / 1000) for row in rows if row["latency_us"]]
        if points:
            bottom.plot(*steps(points), style, label=key, drawstyle="steps-post")
    bottom.set_yscale("log")
    bottom.set_ylabel("end-to-end latency (ms)")
    bottom.set_xlabel("seconds since the producers started")
    bottom.grid(True, which="both", alpha=0.3)
    if any(row["latency_us"] for row in rows):
        bottom.legend(loc="upper right")
    if result.config.warmup:
        for ax in (top, bottom):
            ax.axvspan(0, result.config.warmup, color="grey", alpha=0.15, label="warm-up")
    c = result.counts
    fig.suptitle(
        f"stompfast bench: {result.config.producers} producer(s), {result.config.consumers} consumer(s),"
        f" {c['sent']:,} sent, {c['received']:,} received"
        + ("" if result.ok else "  [" + "; ".join(result.problems)[:80] + "]")
    )
    fig.savefig(path, dpi=100)
