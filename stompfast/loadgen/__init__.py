"""Load generation: producers and consumers against a STOMP broker, counted exactly, with end-to-end latency.

::

    from stompfast.loadgen import LoadConfig, run, run_load

    result = run(LoadConfig(producers=2, consumers=2, count=50_000, receipts=True))
    print(result.counts["received"], result.latency_us["p99"], result.ok)

    result = await run_load(LoadConfig(url="stomp://127.0.0.1:61613/", rate=5000, duration=10))

The ``stompfast bench`` command (:func:`add_bench_command`, registered in
:data:`stompfast.cli.COMMANDS`) is a thin shell around :func:`run_load`; docs/loadgen.md
documents every option, the JSON result and how latency is measured.

Theory of operation
-------------------
A run is planned as ``W`` *workers* (``W = processes``), each holding some producer and
some consumer connections as tasks of one event loop. With ``processes=1`` the only
worker is a task of the caller's event loop; otherwise each worker is a process of its
own (``multiprocessing``, spawn) talking to the coordinator over a pipe. The
*coordinator* (the caller's loop, which also runs the in-process broker when no URL is
given) drives every run through the same phases and messages::

    worker: connect consumers, SUBSCRIBE (confirmed), connect producers  -> "ready"
    coord:  every worker ready -> "go" with a start time t0 a little in the future
    worker: producers send from t0; every 50 ms                            -> "progress"
            (counters; the timeline intervals that ended, histograms encoded)
    coord:  producers done everywhere, then every expected message seen (or nothing
            new for ``drain_timeout`` s)                                   -> "stop"
    worker: consumers stop, buffered messages are still counted, DISCONNECT -> "final"
            (per-group bitmaps of sequence numbers seen, error texts)
    coord:  merges: histograms added, counts summed, bitmaps OR-ed -> LoadResult

Every message carries three headers: ``sf-producer`` (run id and producer number),
``sf-seq`` (a sequence number per producer and destination, from 0) and ``sf-ts`` (the
send time in wall-clock nanoseconds; in fixed-rate mode the *intended* send time);
``sf-w:1`` marks warm-up messages. A consumer keeps, per *group* and producer, a bitmap
of the sequence numbers it saw. A group is a queue destination (every consumer shares
it: each message is due once), or one consumer's subscription to a topic (each consumer
gets every message). So ``distinct`` = set bits, ``duplicates`` = received - distinct,
``missing`` = sent - distinct, exactly, even across processes (bitmaps are OR-ed and the
overlap counted). Messages without our run id are ``unexpected`` (leftovers of another
run in a reused queue).

Latency is ``consumer wall clock at receipt - sf-ts`` (same machine, one clock),
recorded in microseconds in an HDR histogram per timeline interval (:mod:`._hdr`:
HdrHistogram's layout and wire format in pure Python, 3 significant figures); the
run's histogram is the sum of the intervals'. In fixed-rate (open-loop) mode each
producer sends message ``i`` at ``t0 + (i + phase) / rate`` and stamps that intended
time, so a producer that falls behind (a stalled broker, a slow event loop) catches up
in a burst and the delay shows in the latency: no coordinated omission. In closed-loop
mode (no rate) producers send as fast as the client takes messages and stamp the
actual send time. Under a rate shape (steps and ramps, :mod:`.shape`) message ``i`` is
due when the shape's running total of messages reaches ``i + phase``.

Layout: one module per job; every name listed here is importable from this package.

* :mod:`.config`: :class:`LoadConfig`, :class:`Progress`, :class:`LoadResult`, the
  message headers, :func:`is_fanout`
* :mod:`.plan`: producers and consumers spread over the workers
* :mod:`.histogram`: HdrHistogram helpers (``latency_index``, ``fold``, ``percentiles``)
* :mod:`._hdr`: the HDR histogram itself (:class:`HdrHistogram`, what ``LoadResult.histogram``
  is: hdrhistogram's results and HdrHistogram's V2 wire format, no third-party package)
* :mod:`.timeline`: per-interval counts and histograms (``Recorder`` in a worker,
  ``Timeline`` in the coordinator)
* :mod:`.producer`: the send loop; :mod:`.worker`: one worker's connections and the
  consumers' counting
* :mod:`.links`: coordinator <-> worker, in one event loop or over a process's pipe
* :mod:`.coordinator`: :func:`run_load` and :func:`run`, which start and drive the workers
* :mod:`.merge`: the workers' final reports into a :class:`LoadResult`
* :mod:`.slo`: objectives; :mod:`.bodies`: size distributions and several bodies;
  :mod:`.behaviour`: consumers' processing time, NACK share and pauses;
  :mod:`.shape`: rate steps and ramps (:class:`Stage`);
  :mod:`.search`: the maximum sustainable rate (:func:`find_max_rate`); :mod:`.workload`:
  ``--workload`` files; :mod:`.failover`: ``--cut-links`` and its outages
* :mod:`.plot`: :func:`write_plot`; :mod:`.command`: ``stompfast bench``
"""

from __future__ import annotations

from ._hdr import HdrHistogram as HdrHistogram
from .command import BENCH_EPILOG as BENCH_EPILOG, add_bench_command, run_bench
from .config import (
    DEFAULT_COUNT as DEFAULT_COUNT,
    DEFAULT_DURATION as DEFAULT_DURATION,
    H_PRODUCER as H_PRODUCER,
    H_SEQ as H_SEQ,
    H_TS as H_TS,
    H_WARMUP as H_WARMUP,
    LoadConfig,
    LoadInterrupted,
    LoadResult,
    Progress,
    is_fanout,
)
from .coordinator import run, run_load
from .histogram import (
    COUNTS_LEN as COUNTS_LEN,
    HALF_COUNT as HALF_COUNT,
    HALF_MAGNITUDE as HALF_MAGNITUDE,
    MAX_LATENCY_US as MAX_LATENCY_US,
    SIGNIFICANT_FIGURES as SIGNIFICANT_FIGURES,
    SUB_MASK as SUB_MASK,
    latency_index as latency_index,
)
from .plot import PLOT_HINT as PLOT_HINT, write_plot
from .search import SearchResult, find_max_rate
from .shape import Stage

__all__ = [
    "LoadConfig",
    "LoadInterrupted",
    "LoadResult",
    "Progress",
    "SearchResult",
    "Stage",
    "add_bench_command",
    "find_max_rate",
    "is_fanout",
    "run",
    "run_bench",
    "run_load",
    "write_plot",
]
