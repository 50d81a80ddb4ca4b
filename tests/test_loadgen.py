"""The load generator (stompfast.loadgen) and ``stompfast bench``, against the in-process broker.

The library API runs on asyncio, asyncio+uvloop and trio (``anyio_backend``); with no
URL it starts its own in-process broker in the test's event loop. Counting must be
exact: every message sent is received once (twice on a topic with two consumers),
whatever the receipts, ack mode, transactions or number of connections. Failures
(a dropped connection, a foreign message) must show in the counts and the verdict.
The command is run as installed (subprocesses) for the JSON, exit-code and
process-mode checks. Real brokers: tests/integration/test_loadgen_brokers.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time

import anyio
import pytest

from stompfast import cli, loadgen
from stompfast.loadgen import LoadConfig, LoadResult, histogram, run_load
from stompfast.loadgen.command import parse_warmup
from stompfast.testing import Broker

pytestmark = pytest.mark.timeout(120)

N = 2000


def _executable() -> str:
    found = shutil.which("stompfast", path=os.path.dirname(sys.executable)) or shutil.which("stompfast")
    if not found:
        pytest.fail("the stompfast command is not installed: pip install -e '.[test]'")
    return found


def bench(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    """``stompfast bench ARGS`` as installed, without the caller's STOMPFAST_* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STOMPFAST_")}
    return subprocess.run(
        [_executable(), "bench", *args], stdin=subprocess.DEVNULL, capture_output=True, env=env,
        timeout=timeout, check=False,
    )


def assert_exact(result: LoadResult, sent: int, copies: int = 1) -> None:
    c = result.counts
    assert result.problems == [] and result.ok, result.problems
    assert c["sent"] == sent
    assert c["expected"] == sent * copies
    assert c["received"] == c["distinct"] == sent * copies
    assert c["duplicates"] == c["missing"] == c["unexpected"] == c["errors"] == 0
    assert result.latency_us is not None
    assert result.latency_us["count"] == sent * copies - c["warmup_received"]
    assert 0 <= result.latency_us["p50"] <= result.latency_us["p99"] <= result.latency_us["max"]
    assert sum(row["sent"] for row in result.timeline) == sent
    assert sum(row["received"] for row in result.timeline) == sent * copies


# -- the library API, every backend --------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("ack", ["auto", "client", "client-individual"])
@pytest.mark.parametrize("receipts", [False, True], ids=["no-receipts", "receipts"])
async def test_counts_exactly_per_ack_mode_and_receipts(ack: str, receipts: bool) -> None:
    result = await run_load(LoadConfig(count=N, ack=ack, receipts=receipts, receipt_window=50, buffer_size=100))
    assert_exact(result, N)
    assert result.counts["confirmed"] == (N if receipts else 0)
    assert result.broker["in_process"] and result.broker["stomp_version"] == "1.2"


@pytest.mark.anyio
@pytest.mark.parametrize("receipts", [False, True], ids=["no-receipts", "receipts"])
async def test_transactions_count_exactly(receipts: bool) -> None:
    # 2,001 is not a multiple of 7: the last transaction is a short one
    result = await run_load(LoadConfig(count=2001, producers=2, transaction_size=7, receipts=receipts,
                                       ack="client-individual"))
    assert_exact(result, 2001)
    assert result.counts["confirmed"] == (2001 if receipts else 0)


@pytest.mark.anyio
async def test_several_producers_consumers_and_destinations() -> None:
    queues = ("/queue/lg-a", "/queue/lg-b")
    result = await run_load(LoadConfig(count=3 * N + 1, producers=3, consumers=2, destinations=queues))
    assert_exact(result, 3 * N + 1)
    assert result.broker["destinations"] == list(queues)


@pytest.mark.anyio
async def test_a_topic_with_two_consumers_receives_everything_twice() -> None:
    result = await run_load(LoadConfig(count=N, consumers=2, destinations=("/topic/lg-prices",)))
    assert_exact(result, N, copies=2)


@pytest.mark.anyio
async def test_queue_and_topic_together() -> None:
    # each producer alternates between the two: half the messages go to each
    result = await run_load(LoadConfig(count=N, consumers=3, destinations=("/queue/lg-q", "/topic/lg-t")))
    c = result.counts
    assert result.ok, result.problems
    assert c["expected"] == N // 2 + 3 * (N // 2) == c["received"] == c["distinct"]


@pytest.mark.anyio
async def test_warmup_is_counted_but_not_measured() -> None:
    result = await run_load(LoadConfig(count=N, warmup_messages=500, size=10))
    assert_exact(result, N)
    c = result.counts
    assert c["warmup_sent"] == c["warmup_received"] == 500
    assert result.latency_us["count"] == N - 500


@pytest.mark.anyio
async def test_duration_limits_a_closed_loop_run() -> None:
    result = await run_load(LoadConfig(duration=0.5, count=10_000_000, consumers=1))
    assert result.ok, result.problems
    assert 0 < result.counts["sent"] < 10_000_000
    assert result.counts["received"] == result.counts["sent"]
    assert result.rates["send_seconds"] < 5


@pytest.mark.anyio
async def test_fixed_rate_holds_its_schedule() -> None:
    """2,000 msgs/s for 3 s: the achieved send rate is within 5% of the target.

    The rate is measured on the send schedule (first to last measured send), and a
    producer that falls behind catches up, so event-loop hiccups on a loaded machine
    show as send lag and latency, not as a lower rate.
    """
    result = await run_load(LoadConfig(rate=2000, duration=3, count=None, producers=2))
    assert_exact(result, 6000)
    achieved = result.rates["send_msgs_per_s"]
    assert abs(achieved - 2000) <= 100, achieved
    assert result.rates["target_msgs_per_s"] == 2000
    assert result.send_lag_us is not None and result.send_lag_us["count"] == 6000
    # the intended times span 3 s, so the sends do too, give or take the last catch-up
    assert 2.9 <= result.rates["send_seconds"] <= 3.2


class _CountingClient:
    def __init__(self) -> None:
        self.sent = 0

    async def send(self, destination: str, body: bytes, headers: dict) -> None:
        self.sent += 1


class _StampingClient:
    """Records, for every SEND, how long after its intended time (the sf-ts header) it was handed over."""

    def __init__(self) -> None:
        self.after_due_ns: list = []

    async def send(self, destination: str, body: bytes, headers: dict) -> None:
        self.after_due_ns.append(time.time_ns() - int(headers[loadgen.H_TS]))


@pytest.mark.anyio
async def test_a_fixed_rate_producer_never_sends_a_message_before_it_is_due() -> None:
    """uvloop's millisecond timers wake a sleep up to 1 ms early: the producer sleeps again.

    A message sent before its intended time would make its latency, measured from that
    time, read shorter than it was.
    """
    from stompfast.loadgen.plan import plan_workers
    from stompfast.loadgen.producer import ProducerState, send_all
    from stompfast.loadgen.timeline import Recorder

    config = LoadConfig(rate=500, duration=0.4, count=None)
    (worker,) = plan_workers(config, "stomp://127.0.0.1:61613", ["/queue/a"], "run")
    ps = ProducerState(worker.producers[0], 1)
    client = _StampingClient()
    t0 = time.time_ns()
    await send_all(ps, client, t0, worker, Recorder(t0, 10**9))
    assert len(client.after_due_ns) == 200
    # 100 us for the two clocks the schedule is read on (monotonic for sleeping, wall for stamps)
    assert min(client.after_due_ns) >= -100_000, min(client.after_due_ns)


@pytest.mark.anyio
async def test_a_fixed_rate_producer_that_starts_late_reports_the_rate_of_its_schedule() -> None:
    """A producer whose schedule began 0.4 s before it could send catches up in a burst.

    Its send rate is measured from when its first message was due, so the late start
    shows as send lag; measured from its first actual send, 1,000 msgs/s would read as
    about 1,670.
    """
    from stompfast.loadgen.plan import plan_workers
    from stompfast.loadgen.producer import ProducerState, send_all
    from stompfast.loadgen.timeline import Recorder

    config = LoadConfig(rate=1000, duration=1, count=None)
    (worker,) = plan_workers(config, "stomp://127.0.0.1:61613", ["/queue/a"], "run")
    ps = ProducerState(worker.producers[0], 1)
    client = _CountingClient()
    t0 = time.time_ns() - 400_000_000
    await send_all(ps, client, t0, worker, Recorder(t0, 10**9))
    assert client.sent == ps.measured == 1000
    assert ps.first is not None and ps.last is not None
    assert ps.first - t0 < 2_000_000
    # 999 steps of 1 ms from the first intended time to the last send, which is never early
    # (100 us for the two clocks the schedule is read on)
    span = ps.last - ps.first
    assert 999_000_000 - 100_000 <= span <= 1_052_000_000, span
    assert ps.lag.get_max_value() >= 390_000


@pytest.mark.anyio
async def test_a_dropped_connection_shows_as_errors_and_missing_messages() -> None:
    async with Broker() as broker:

        async def drop_later() -> None:
            await anyio.sleep(0.6)
            broker.drop_connections()

        async with anyio.create_task_group() as tg:
            tg.start_soon(drop_later)
            result = await run_load(LoadConfig(url=broker.url, rate=1000, duration=2, count=None,
                                               heart_beat=(0, 0), drain_timeout=0.5))
    c = result.counts
    assert not result.ok
    assert c["errors"] >= 1 and result.errors
    assert c["sent"] < 2000  # the producer died with its connection
    assert c["distinct"] + c["missing"] == c["expected"] == c["sent"]
    assert any("error" in p for p in result.problems)


@pytest.mark.anyio
async def test_foreign_messages_are_reported_apart() -> None:
    async with Broker() as broker:
        broker.publish("/queue/lg-reused", b"left over", headers={"sf-producer": "someone-else.0", "sf-seq": "0"})
        broker.publish("/queue/lg-reused", b"no headers at all")
        result = await run_load(LoadConfig(url=broker.url, count=100, destinations=("/queue/lg-reused",)))
    c = result.counts
    assert c["unexpected"] == 2 and c["received"] == 102 and c["distinct"] == 100
    assert c["missing"] == c["duplicates"] == 0
    assert result.ok and any("not sent by this run" in w for w in result.warnings)


@pytest.mark.anyio
async def test_progress_is_reported() -> None:
    seen = []
    result = await run_load(LoadConfig(rate=1000, duration=1, count=None), progress=seen.append)
    assert result.ok
    assert {p.phase for p in seen} >= {"connecting", "running"}
    assert max(p.sent for p in seen) == 1000 == seen[-1].sent
    assert all(p.target_rate == 1000 for p in seen)
    stats = [p.client_stats for p in seen if p.client_stats is not None]  # about once a second
    assert stats and all(s["clients"] == 2 for s in stats)  # the producer's and the consumer's connections
    sent = [s["messages_sent"] for s in stats]
    assert sent == sorted(sent) and sent[-1] <= 1000


@pytest.mark.anyio
async def test_result_document_is_complete_json() -> None:
    config = LoadConfig(count=500, passcode="hunter22", login="bob", rate=5000, warmup=0.01)
    result = await run_load(config)
    doc = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert doc["schema"] == "stompfast.loadgen/1" and doc["ok"] is True
    for key in ("config", "broker", "counts", "rates", "latency_us", "send_lag_us", "timeline", "errors",
                "versions", "machine", "problems", "warnings", "started_at", "elapsed_s", "client_stats"):
        assert key in doc, key
    assert "hunter22" not in json.dumps(doc)
    assert doc["config"]["passcode_set"] is True and "passcode" not in doc["config"]
    for key in ("p50", "p90", "p99", "p99.9", "max", "count", "mean"):
        assert key in doc["latency_us"]
    row = doc["timeline"][0]
    for key in ("t", "seconds", "sent", "received", "confirmed", "errors", "send_rate", "receive_rate",
                "latency_us"):
        assert key in row
    assert doc["versions"]["stompfast"] and doc["versions"]["backend"] in ("asyncio", "asyncio+uvloop", "trio")
    assert doc["machine"]["cpus"] >= 1
    assert doc["client_stats"]["messages_sent"] == doc["counts"]["sent"] == 500
    assert doc["client_stats"]["messages_received"] == doc["counts"]["received"] == 500


def test_configuration_is_checked_before_any_io() -> None:
    for bad in (dict(producers=0), dict(ack="sometimes"), dict(rate=-1), dict(count=0), dict(size=-1),
                dict(count=1, producers=2), dict(interval=0), dict(destinations=("",))):
        with pytest.raises(ValueError):
            LoadConfig(**bad).validate()
    assert LoadConfig().limits() == (100_000, 10.0)
    assert LoadConfig(count=5).limits() == (5, None)
    assert LoadConfig(duration=2).limits() == (None, 2)


def test_process_mode_counts_exactly() -> None:
    """Two worker processes (spawned): counts and histograms merged exactly."""
    result = loadgen.run(LoadConfig(count=4001, producers=2, consumers=3, processes=2,
                                    destinations=("/queue/lg-proc", "/topic/lg-proc"), receipts=True))
    # 2,001 messages to the queue (once each) and 2,000 to the topic (three copies each)
    c = result.counts
    assert result.ok, result.problems
    assert c["sent"] == c["confirmed"] == 4001
    assert c["expected"] == 2001 + 3 * 2000 == c["received"] == c["distinct"]
    assert result.latency_us["count"] == c["received"]


# -- the command --------------------------------------------------------------------------------


def test_bench_json_as_installed_command() -> None:
    done = bench("--count", "2000", "--json")
    assert done.returncode == 0, done.stderr.decode()
    doc = json.loads(done.stdout)  # nothing but the JSON document on stdout
    assert doc["ok"] is True
    assert doc["counts"]["sent"] == doc["counts"]["received"] == 2000
    assert doc["broker"]["in_process"] is True
    assert doc["config"]["count"] == 2000 and doc["config"]["url"] is None
    assert doc["rates"]["send_msgs_per_s"] > 0 and doc["latency_us"]["p99"] > 0
    assert "OK:" in done.stderr.decode()


def test_bench_process_mode_as_installed_command() -> None:
    done = bench("--count", "3000", "-p", "2", "-c", "2", "--processes", "2", "--ack", "client-individual",
                 "--json", "-q")
    assert done.returncode == 0, done.stderr.decode()
    doc = json.loads(done.stdout)
    assert doc["counts"]["received"] == doc["counts"]["distinct"] == 3000
    assert doc["counts"]["duplicates"] == doc["counts"]["missing"] == 0
    assert done.stderr == b""  # -q: nothing for a person


def test_bench_json_has_the_clients_metrics_merged_over_two_processes() -> None:
    """Each worker sums its clients' client.stats(); the coordinator sums the workers' (receipt buckets too)."""
    done = bench("--count", "3000", "-p", "2", "-c", "2", "--processes", "2", "--ack", "client-individual",
                 "--receipts", "--receipt-window", "100", "--json", "--stats")
    assert done.returncode == 0, done.stderr.decode()
    doc = json.loads(done.stdout)
    stats, counts = doc["client_stats"], doc["counts"]
    assert doc["ok"] and counts["sent"] == counts["received"] == 3000
    assert stats["clients"] == 4  # 2 producers and 2 consumers, one connection each
    assert stats["messages_sent"] == counts["sent"] and stats["messages_received"] == counts["received"]
    assert stats["acks"] == 3000 and stats["nacks"] == 0  # client-individual: one ACK per message
    # a receipt per SEND, per SUBSCRIBE and per DISCONNECT; every one came
    assert stats["receipts_confirmed"] == 3000 + 2 + 4 and stats["receipts_failed"] == 0
    assert stats["connection_losses"] == stats["reconnects"] == stats["errors"] == stats["frames_dropped"] == 0
    assert stats["bytes_queued"] == stats["receipts_pending"] == stats["buffered"] == 0
    assert stats["frames_in"] >= 3000 + 3006 and stats["bytes_out"] > 3000 * 100
    rtt = stats["receipt_rtt"]
    assert rtt["count"] == 3006 and rtt["buckets"][-1][1] <= 3006
    assert 0 < rtt["p50"] <= rtt["p90"] <= rtt["p99"]
    # --stats: the same numbers at the end, on stderr (the JSON alone on stdout)
    err = done.stderr.decode()
    assert "client stats (4 connections):" in err and "3,000 sent, 3,000 received" in err
    assert "3,006 confirmed, 0 failed; round trip p50 " in err


def test_client_stats_records_merge_associatively() -> None:
    from stompfast import ClientStats
    from stompfast._stats import RttHistogram
    from stompfast.loadgen.clientstats import merge_records, stats_record

    records = []
    for seconds in (0.0001, 0.002, 0.03):
        h = RttHistogram()
        for _ in range(10):
            h.record(seconds)
        records.append(stats_record(ClientStats(messages_sent=10, acks=1, buffered={"1": 2, "2": 1},
                                                receipt_rtt=h.summary())))
    flat = merge_records(records)
    nested = merge_records([merge_records(records[:2]), records[2]])
    assert flat == nested
    assert flat["clients"] == 3 and flat["messages_sent"] == 30 and flat["buffered"] == 9
    rtt = flat["receipt_rtt"]  # the upper bound of the bucket holding the quantile (~1.5x wide)
    assert rtt["count"] == 30 and 0.002 <= rtt["p50"] <= 0.003 and 0.03 <= rtt["p90"] <= 0.045
    assert json.loads(json.dumps(flat, allow_nan=False)) == flat
    assert merge_records([])["receipt_rtt"] == {"count": 0, "sum": 0.0, "mean": 0.0, "p50": None, "p90": None,
                                                 "p99": None, "buckets": []}


# -- merging the workers' final reports (merge.py), no broker ------------------------------------


def _bits(*seqs: int) -> bytes:
    """A worker's bitmap of the sequence numbers it saw (bit n: sf-seq n)."""
    value = 0
    for seq in seqs:
        value |= 1 << seq
    return value.to_bytes(max(seqs) // 8 + 1 if seqs else 1, "little")


def _final(sent_by: dict, seen: dict, received_by_group: dict, **counts: int) -> dict:
    """The fields of a worker's final report that the counts are merged from."""
    fields = dict(confirmed=0, unexpected=0, errors=0, warmup_sent=0, warmup_received=0)
    fields.update(counts)
    return dict(sent_by=sent_by, seen=seen, received_by_group=received_by_group,
                received=sum(received_by_group.values()) + fields["unexpected"], **fields)


def test_a_queue_read_from_two_workers_is_counted_exactly() -> None:
    from stompfast.loadgen.merge import _merge_counts

    # one producer sent sf-seq 0..9; the queue's consumers sit in two workers, both saw 4 and 5
    first = _final({"r.0": [10]}, {"q0": {"r.0": _bits(0, 1, 2, 3, 4, 5)}}, {"q0": 6}, confirmed=10)
    second = _final({}, {"q0": {"r.0": _bits(4, 5, 6, 7, 8)}}, {"q0": 5}, errors=1)
    counts = _merge_counts([first, second], ["/queue/a"], consumers=2)
    assert counts == {"sent": 10, "confirmed": 10, "expected": 10, "received": 11, "nacked": 0, "distinct": 9,
                      "duplicates": 2, "missing": 1, "unexpected": 0, "errors": 1, "warmup_sent": 0,
                      "warmup_received": 0}


def test_a_topic_is_due_once_per_consumer_and_a_queue_once() -> None:
    from stompfast.loadgen.merge import _due_groups, _merge_counts

    assert _due_groups([False, True], consumers=2) == [("q0", 0), ("t1.0", 1), ("t1.1", 1)]
    assert _due_groups([False, True], consumers=0) == []
    # 3 messages to the queue, 2 to the topic; the second topic consumer lost sf-seq 1, and a
    # bit beyond what the producer sent to the topic (a leftover) is not counted
    seen = {"q0": {"p.0": _bits(0, 1, 2)}, "t1.0": {"p.0": _bits(0, 1, 7)}, "t1.1": {"p.0": _bits(0)}}
    report = _final({"p.0": [3, 2]}, seen, {"q0": 3, "t1.0": 2, "t1.1": 1}, unexpected=1)
    counts = _merge_counts([report], ["/queue/a", "/topic/b"], consumers=2)
    assert (counts["sent"], counts["expected"], counts["distinct"], counts["missing"]) == (5, 3 + 2 * 2, 6, 1)
    assert counts["duplicates"] == 0 and counts["unexpected"] == 1 and counts["received"] == 7
    # publish only: nothing is expected, so nothing is missing
    alone = _merge_counts([_final({"p.0": [3, 2]}, {}, {})], ["/queue/a", "/topic/b"], consumers=0)
    assert (alone["sent"], alone["expected"], alone["distinct"], alone["missing"]) == (5, 0, 0, 0)


def test_the_verdict_names_each_problem() -> None:
    from stompfast.loadgen.merge import _problems

    config = LoadConfig(count=10, receipts=True, drain_timeout=2)
    clean = dict(sent=10, confirmed=10, expected=10, missing=0, duplicates=0, errors=0)
    assert _problems(config, {}, clean, []) == []
    lost = {**clean, "missing": 3}
    assert _problems(config, {"drained": False}, lost, []) == [
        "3 of 10 expected messages never arrived (nothing arrived for the 2 s drain timeout)"]
    assert _problems(config, {}, lost, []) == ["3 of 10 expected messages never arrived (after the 2 s drain timeout)"]
    stopped = {"interrupted": True, "t0": 0, "stopped_wall": 1_500_000_000}
    assert _problems(config, stopped, lost, []) == [
        "interrupted after 1.5 s: a partial result",
        "3 of 10 expected messages had not arrived when the run was stopped"]
    failed = {**clean, "confirmed": 4, "duplicates": 2, "errors": 4}
    assert _problems(config, {}, failed, ["a", "b", "c", "d"]) == [
        "2 messages arrived more than once", "4 errors: a; b; c"]
    assert _problems(config, {}, {**clean, "confirmed": 4}, []) == ["only 4 of 10 messages were confirmed by a receipt"]
    assert _problems(LoadConfig(count=10), {}, {**clean, "sent": 0, "expected": 0, "confirmed": 0}, []) == [
        "no message was sent"]


def test_the_timeline_fills_empty_intervals_and_cuts_the_last_one_at_the_end() -> None:
    from stompfast.loadgen.merge import _timeline_rows
    from stompfast.loadgen.timeline import Timeline

    timeline = Timeline()
    # intervals 0 and 2 of 0.5 s; the run ended 0.25 s into interval 2
    timeline.add([(0, 100, 90, 0, 0, 0, None), (2, 50, 60, 0, 1, 0, None)])
    rows = _timeline_rows(LoadConfig(interval=0.5), timeline, t0=10**9, end=10**9 + 1_250_000_000)
    assert [(r["t"], r["seconds"], r["sent"], r["received"], r["errors"]) for r in rows] == [
        (0.0, 0.5, 100, 90, 0), (0.5, 0.5, 0, 0, 0), (1.0, 0.25, 50, 60, 1)]
    assert rows[0]["send_rate"] == 200.0 and rows[2]["receive_rate"] == 240.0
    assert all(r["latency_us"] is None for r in rows)
    assert _timeline_rows(LoadConfig(), Timeline(), t0=0, end=1) == []


# -- a producer's way out (producer.py), with a client that only records ---------------------------


class _RecordingTransaction:
    """A transaction that logs BEGIN, COMMIT and ABORT, and fails where it is told to."""

    def __init__(self, log: list, fail_at_send: int, fail_commit: bool) -> None:
        self.log = log
        self.fail_at_send = fail_at_send
        self.fail_commit = fail_commit

    async def __aenter__(self) -> "_RecordingTransaction":
        self.log.append("begin")
        return self

    async def send(self, destination: str, body: bytes, headers: dict) -> None:
        self.log.append(f"send {headers['sf-seq']}")
        if int(headers["sf-seq"]) == self.fail_at_send:
            raise ConnectionError("connection lost")

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self.log.append(("abort", exc))
            return
        self.log.append("commit")
        if self.fail_commit:
            raise ConnectionError("commit refused")


class _RecordingClient:
    def __init__(self, fail_at_send: int = -1, fail_commit_after: int = -1) -> None:
        self.log: list = []
        self.fail_at_send = fail_at_send
        self.fail_commit_after = fail_commit_after

    async def send(self, destination: str, body: bytes, headers: dict) -> None:
        raise AssertionError("with transactions every message is sent in one")

    def transaction(self, *, receipt: bool) -> _RecordingTransaction:
        fail_commit = self.log.count("begin") == self.fail_commit_after
        return _RecordingTransaction(self.log, self.fail_at_send, fail_commit)


async def _send_in_transactions(client: _RecordingClient, count: int) -> "object":
    from stompfast.loadgen.plan import plan_workers
    from stompfast.loadgen.producer import ProducerState, send_all
    from stompfast.loadgen.timeline import Recorder

    config = LoadConfig(count=count, transaction_size=4, receipts=True)
    (worker,) = plan_workers(config, "stomp://127.0.0.1:61613", ["/queue/a"], "run")
    ps = ProducerState(worker.producers[0], 1)
    with pytest.raises(ConnectionError):
        await send_all(ps, client, 0, worker, Recorder(0, 10**9))
    return ps


@pytest.mark.anyio
async def test_a_send_failing_in_a_transaction_aborts_it_and_counts_what_went_before() -> None:
    client = _RecordingClient(fail_at_send=5)
    ps = await _send_in_transactions(client, count=10)
    *before, (what, exc) = client.log
    assert before == ["begin", "send 0", "send 1", "send 2", "send 3", "commit", "begin", "send 4", "send 5"]
    assert what == "abort" and isinstance(exc, ConnectionError) and str(exc) == "connection lost"
    # messages 0..4 were handed to the client; only the first transaction's 4 were committed
    assert (ps.sent, ps.confirmed, ps.by_dest) == (5, 4, [5])


@pytest.mark.anyio
async def test_a_failed_last_commit_is_raised_and_not_aborted_again() -> None:
    client = _RecordingClient(fail_commit_after=1)
    ps = await _send_in_transactions(client, count=6)
    assert client.log == ["begin", "send 0", "send 1", "send 2", "send 3", "commit", "begin", "send 4", "send 5",
                          "commit"]
    assert (ps.sent, ps.confirmed) == (6, 4)


# -- following a run (coordinator.py), no broker ---------------------------------------------------


def test_the_drain_ends_when_all_arrived_no_consumer_is_left_or_nothing_new_came() -> None:
    from stompfast.loadgen.coordinator import _Drain

    drain = _Drain(timeout=2.0)
    # the first call starts the timeout, a new message at 12.0 starts it again
    assert not drain.over(10.0, 5, 10, consumers_alive=1)
    assert not drain.over(11.5, 5, 10, consumers_alive=1)
    assert not drain.over(12.0, 6, 10, consumers_alive=1)
    assert not drain.over(14.0, 6, 10, consumers_alive=1)
    assert drain.over(14.1, 6, 10, consumers_alive=1)
    assert _Drain(timeout=2.0).over(0.0, 10, 10, consumers_alive=1)
    assert _Drain(timeout=2.0).over(0.0, 3, 10, consumers_alive=0)


def test_what_is_expected_counts_a_copy_per_consumer_on_a_topic() -> None:
    from stompfast.loadgen.coordinator import _copies, _expected

    destinations = ["/queue/a", "/topic/b"]
    assert _copies(LoadConfig(consumers=3), destinations) == [1, 3]
    assert _copies(LoadConfig(consumers=0), destinations) == [0, 0]
    # two workers' producers: 5 messages to the queue, 1 to the topic
    assert _expected([{"sent_by_dest": [2, 1]}, {"sent_by_dest": [3, 0]}], [1, 3]) == 5 + 3


def test_live_progress_reports_rates_over_the_last_second_every_quarter_second() -> None:
    from stompfast.loadgen.coordinator import _LiveProgress
    from stompfast.loadgen.timeline import Timeline

    seen = []
    live = _LiveProgress(LoadConfig(rate=500.0), [], seen.append, t0=0, timeline=Timeline())
    live.update(100.0, [{"sent": 0, "received": 0}], None, last=False)
    # 0.1 s after the last report: not reported
    live.update(100.1, [{"sent": 50, "received": 0}], None, last=False)
    live.update(100.5, [{"sent": 250, "received": 200, "errors": 1}], None, last=False)
    # history older than a second is dropped: the rates are over 100.5 .. 101.6
    live.update(101.6, [{"sent": 800, "received": 750, "confirmed": 3}], 900, last=False)
    # the last report goes out however soon it comes
    live.update(101.7, [{"sent": 800, "received": 800}], 900, last=True)
    assert [(p.phase, p.sent, p.received, p.expected) for p in seen] == [
        ("running", 0, 0, None), ("running", 250, 200, None), ("draining", 800, 750, 900),
        ("draining", 800, 800, 900)]
    assert (seen[0].send_rate, seen[1].send_rate, seen[1].receive_rate) == (0.0, 500.0, 400.0)
    assert (seen[2].send_rate, seen[2].receive_rate) == pytest.approx((500.0, 500.0))
    assert seen[1].errors == 1 and seen[2].confirmed == 3
    assert all(p.target_rate == 500.0 and p.client_stats is None for p in seen)


def test_bench_table_and_plot(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "run.png"
    done = bench("--rate", "3000", "--duration", "1.5", "--warmup", "0.2s", "--plot", str(png),
                 "-d", "/topic/lg-plot", "-c", "2")
    assert done.returncode == 0, done.stderr.decode()
    table = done.stdout.decode()
    for word in ("sent", "received", "duplicates / missing", "latency", "p99.9", "send lag"):
        assert word in table
    assert png.read_bytes().startswith(b"\x89PNG")


def test_bench_usage_errors_exit_2(tmp_path) -> None:
    body = tmp_path / "body.bin"
    body.write_bytes(b"\x00\x01")
    for args in (["--size", "10", "--body-file", str(body)], ["--warmup", "soon"], ["--loop", "gevent"],
                 ["--count", "1", "-p", "2"], ["--rate", "0"]):
        done = bench(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert b"Traceback" not in done.stderr


def test_bench_refused_connection_exits_1_and_masks_the_passcode() -> None:
    done = bench("--url", "stomp://bob:sup3rsecret@127.0.0.1:1/", "--count", "10", "--connect-timeout", "2")
    assert done.returncode == 1
    err = done.stderr.decode()
    assert "sup3rsecret" not in err and "could not connect" in err and "Traceback" not in err


def test_bench_exits_1_when_messages_are_lost(capsys: pytest.CaptureFixture[str]) -> None:
    with Broker.in_thread() as broker:
        timer = threading.Timer(0.7, broker.drop_connections)
        timer.start()
        try:
            code = cli.main(["bench", "--url", broker.url, "--rate", "1000", "--duration", "2",
                             "--drain-timeout", "0.5", "--heart-beat", "0,0", "--json", "--loop", "asyncio"])
        finally:
            timer.cancel()
    out, err = capsys.readouterr()
    assert code == 1
    doc = json.loads(out)
    assert doc["ok"] is False and doc["counts"]["errors"] >= 1
    assert "FAILED" in err


def test_the_verdict_line_and_exit_code_of_each_outcome(capsys: pytest.CaptureFixture[str]) -> None:
    import dataclasses
    import signal

    from stompfast.cli.common import Status, Stopped
    from stompfast.loadgen.command import _verdict

    clean = loadgen.run(LoadConfig(count=200, receipts=True))
    assert _verdict(clean, None, Status(), []) == 0
    assert capsys.readouterr().err == (
        "OK: 200 sent, 200 received, every message exactly once, all confirmed, no errors\n")
    # a failure is said even with -q, with the secrets in its problems masked
    failed = dataclasses.replace(clean, ok=False, problems=["refused by hunter22", "3 messages arrived more than once"])
    assert _verdict(failed, None, Status(quiet=True), ["hunter22"]) == 1
    assert capsys.readouterr().err == (
        "stompfast bench: FAILED: refused by ***; 3 messages arrived more than once\n")
    assert _verdict(failed, Stopped(signal.SIGTERM), Status(), []) == 143
    err = capsys.readouterr().err
    assert err.startswith("stompfast bench: terminated (SIGTERM) after ") and err.endswith(
        " s: partial result: 200 sent, 200 received, 200 confirmed, 0 errors; every connection was closed cleanly\n")


def test_bench_runs_without_hdrhistogram() -> None:
    # the histograms are stompfast's own (stompfast/loadgen/_hdr.py): hdrhistogram, whose
    # ctypes structures CPython 3.14 deprecates, is not needed (tests/test_hdr.py: no warning)
    code = (
        "import sys; sys.modules['hdrh'] = None; sys.modules['hdrh.histogram'] = None\n"
        "from stompfast.cli import main; sys.exit(main(['bench', '--count', '10', '--json', '-q']))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode()
    doc = json.loads(done.stdout)
    assert doc["latency_us"]["count"] == 10 and "hdrhistogram" not in doc["versions"]


def test_bench_is_one_line_in_the_command_list() -> None:
    assert "stompfast.loadgen:add_bench_command" in cli.COMMANDS
    text = cli.build_parser().format_help()
    assert "bench" in text
    sub = subprocess.run([_executable(), "bench", "--help"], capture_output=True, timeout=30, check=False)
    help_text = sub.stdout.decode()
    for word in ("--rate", "--receipt-window", "--transaction-size", "--processes", "--json", "--plot",
                 "coordinated omission", "STOMPFAST_URL", "examples:"):
        assert word in help_text, word


def test_warmup_argument() -> None:
    assert parse_warmup("5") == (5.0, 0)
    assert parse_warmup("2.5s") == (2.5, 0)
    assert parse_warmup("1000msgs") == (0.0, 1000)
    assert parse_warmup("10messages") == (0.0, 10)


def _reference_histograms() -> list:
    """Empty latency histograms to record the values into: ours, and hdrhistogram's when it is installed."""
    import warnings

    out = [histogram.new_histogram()]
    with warnings.catch_warnings():
        # hdrhistogram's ctypes structures: deprecated by CPython 3.14
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            from hdrh.histogram import HdrHistogram
        except ImportError:
            return out
    out.append(HdrHistogram(1, histogram.MAX_LATENCY_US, histogram.SIGNIFICANT_FIGURES))
    return out


def test_inlined_histogram_index_matches_hdrhistogram() -> None:
    """Consumers count latencies by HdrHistogram's own bucket index and fold them once per interval."""
    import random

    rng = random.Random(7)
    values = [0, 1, 2, 1023, 1024, 2047, 2048, 2049, 4095, 4096, 10**6, histogram.MAX_LATENCY_US]
    values += [rng.randint(0, histogram.MAX_LATENCY_US) for _ in range(5000)]
    values += [int(rng.lognormvariate(7, 2)) % histogram.MAX_LATENCY_US for _ in range(5000)]
    counts = [0] * histogram.COUNTS_LEN
    for value in values:
        counts[histogram.latency_index(value)] += 1
    folded = histogram.fold(counts)
    for reference in _reference_histograms():
        for value in values:
            assert reference.record_value(value)
        assert folded.get_total_count() == reference.get_total_count() == len(values)
        for p in (0, 1, 50, 90, 99, 99.9, 99.99, 100):
            assert folded.get_value_at_percentile(p) == reference.get_value_at_percentile(p)
        assert folded.get_min_value() == reference.get_min_value()
        assert folded.get_max_value() == reference.get_max_value()
        assert folded.get_mean_value() == reference.get_mean_value()
        assert histogram.percentiles(folded) == histogram.percentiles(reference)
        assert list(folded.counts) == list(reference.counts)


# -- stopping early, and what latency means --------------------------------------------------------


@pytest.mark.anyio
async def test_a_stopped_run_returns_what_it_measured() -> None:
    stop = anyio.Event()

    def progress(p: loadgen.Progress) -> None:
        if p.received >= 3000:
            stop.set()

    result = await run_load(LoadConfig(count=100_000_000, buffer_size=100), progress, stop=stop)
    c = result.counts
    assert result.interrupted == "stopped" and not result.ok
    assert result.problems[0].startswith("interrupted after ") and "partial result" in result.problems[0]
    assert 3000 <= c["received"] == c["distinct"] <= c["sent"] < 100_000_000
    assert c["duplicates"] == c["errors"] == 0 and c["missing"] == c["sent"] - c["received"]
    assert result.latency_us is not None and result.latency_us["count"] == c["received"]
    assert result.to_dict()["interrupted"] == "stopped"


@pytest.mark.anyio
async def test_a_run_stopped_before_the_load_started_measured_nothing() -> None:
    stop = anyio.Event()
    stop.set()
    with pytest.raises(loadgen.LoadInterrupted):
        await run_load(LoadConfig(count=N), stop=stop)


def _popen_bench(*args: str, new_session: bool = False) -> subprocess.Popen:
    """``stompfast bench ARGS`` in the background, able to receive Ctrl-C (see test_cli.popen)."""
    import signal

    env = {k: v for k, v in os.environ.items() if not k.startswith("STOMPFAST_")}
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored:  # a child would inherit the ignored SIGINT and never see Ctrl-C
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(
            [_executable(), "bench", *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=env, start_new_session=new_session,
        )
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


def _wait_until_running(proc: subprocess.Popen) -> list:
    """The stderr lines up to the first progress line that shows messages received."""
    assert proc.stderr is not None
    lines = []
    while True:
        line = proc.stderr.readline().decode()
        assert line, f"bench ended before it ran: {lines}"
        lines.append(line)
        if " s  sent " in line and "received 0 " not in line:
            return lines


@pytest.mark.parametrize("signame,code,as_json", [
    ("SIGINT", cli.EXIT_INTERRUPTED, False),
    ("SIGTERM", cli.EXIT_TERMINATED, True),
])
def test_bench_stopped_by_a_signal_prints_its_partial_result(signame: str, code: int, as_json: bool) -> None:
    import signal

    # (objectives, one of them missed: the signal's exit code still wins, and they are judged on what was measured)
    proc = _popen_bench("--count", "100000000", "--slo", "errors==0,p50<1us", *(["--json"] if as_json else []))
    _wait_until_running(proc)
    proc.send_signal(getattr(signal, signame))
    out, err = proc.communicate(timeout=60)
    word = "interrupted (Ctrl-C)" if signame == "SIGINT" else "terminated (SIGTERM)"
    assert proc.returncode == code, err
    assert b"Traceback" not in err
    assert f"stompfast bench: {word} after ".encode() in err and b"partial result" in err
    if as_json:
        doc = json.loads(out)
        assert doc["interrupted"] == word and doc["ok"] is False
        assert 0 < doc["counts"]["received"] <= doc["counts"]["sent"] < 100_000_000
        assert [(o["objective"], o["ok"]) for o in doc["slo"]] == [("errors==0", True), ("p50<1us", False)]
    else:
        text = out.decode()
        assert text.startswith(f"stompfast bench [{word}: partial result]: ")
        assert "INTERRUPTED" in text and "received" in text
        assert "errors==0: 0 (met)" in text and "p50<1us:" in text


def test_bench_over_two_processes_interrupted_by_ctrl_c_still_counts() -> None:
    # Ctrl-C reaches the whole process group: the workers must leave the stop to the
    # coordinator and report what they counted, not die of it
    import signal

    proc = _popen_bench("--count", "100000000", "--processes", "2", "--json", new_session=True)
    _wait_until_running(proc)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == cli.EXIT_INTERRUPTED, err
    doc = json.loads(out)
    assert doc["interrupted"] == "interrupted (Ctrl-C)" and doc["counts"]["errors"] == 0
    assert 0 < doc["counts"]["received"] <= doc["counts"]["sent"]


def test_closed_loop_latency_is_labelled_as_including_the_backlog() -> None:
    from stompfast.loadgen.command import _table_rows

    closed = loadgen.run(LoadConfig(count=N))
    doc = closed.to_dict()
    assert doc["loop"] == "closed" and "backlog" in doc["latency_note"]
    rows = dict(_table_rows(closed))
    assert "latency" not in rows and "latency (closed loop)" in rows
    assert any("backlog" in value for name, value in _table_rows(closed) if name == "")
    opened = loadgen.run(LoadConfig(count=500, rate=5000))
    assert opened.to_dict()["loop"] == "open" and "backlog" not in opened.latency_note
    assert "latency" in dict(_table_rows(opened))
