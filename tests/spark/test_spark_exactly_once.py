"""The source's exactly-once mode: the batch log alone, and the reader killed at each step of a batch.

The reader is driven as Spark drives it (``read`` on the driver, ``readBetweenOffsets`` when
a planned batch is replayed, ``commit``), into a sink that is idempotent per batch (as the
file sink and a ``foreachBatch`` upsert are), and its first life ends at one step of a
batch: before the log write, after it (before the acks), after the sink wrote the batch
(before Spark's commit), after the commit. A second reader on the same log then runs to
the end. On every broker the sink must hold every message exactly once, and the broker
nothing.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List, Tuple

import pytest

pa = pytest.importorskip("pyarrow")

from stompfast.errors import ConfigurationError  # noqa: E402
from stompfast.spark._log import BatchLog, DedupKey, LogEntryMissing, _ArrowStore  # noqa: E402

from .test_spark_source import wait_until  # noqa: E402

pytestmark = [pytest.mark.timeout(120)]


def rows(n: int, start: int = 0) -> Any:
    from stompfast.spark._source import messages_to_arrow

    class Delivery:
        def __init__(self, i: int) -> None:
            self.headers = {"destination": "/queue/q", "x-id": f"k{i}"}
            self.message_id = f"m{i}"
            self.subscription = "stompfast-0-0"
            self.body = f"b{i}".encode()

    return messages_to_arrow([Delivery(i) for i in range(start, start + n)])


def test_a_logged_batch_comes_back_the_same_by_its_start_and_by_its_offsets(tmp_path: Any) -> None:
    log = BatchLog(str(tmp_path / "log"))
    assert log.find(0) is None and log.acked_end() == 0
    three = rows(3)
    written = log.write(0, 3, three)
    assert written > 0
    end, batch = log.find(0)
    assert end == 3 and batch.equals(three) and log.read(0, 3).equals(three)
    with pytest.raises(LogEntryMissing, match="3..5"):
        log.read(3, 5)
    # a half-written entry (a temporary file) is never taken for a batch
    (tmp_path / "log" / "batches" / ".00000000000000000003-00000000000000000005.arrow.x.tmp").write_bytes(b"half")
    assert log.find(3) is None


def test_the_keys_of_unacked_batches_and_what_pruning_keeps(tmp_path: Any) -> None:
    log = BatchLog(str(tmp_path))
    log.write(0, 3, rows(3))
    log.write(3, 5, rows(2, start=3))
    by_header = DedupKey("header:x-id")
    assert log.unacked_keys(by_header.of_rows) == {"k0", "k1", "k2", "k3", "k4"}
    log.mark_acked(3)
    assert log.unacked_keys(by_header.of_rows) == {"k3", "k4"}
    assert log.unacked_keys(DedupKey("message-id").of_rows) == {"m3", "m4"}
    # committed through 5, acks confirmed through 3: only 0..3 may go
    assert log.prune(5) == 1 and log.find(0) is None and log.find(3) is not None
    log.mark_acked(5)
    assert log.prune(5) == 1 and log.find(3) is None
    assert os.listdir(tmp_path / "acked") == [f"{5:020d}"]


def test_a_log_on_a_pyarrow_file_system(tmp_path: Any) -> None:
    # s3://, gs:// and hdfs:// go through pyarrow.fs; its local file system takes the same path
    store = _ArrowStore(f"file://{tmp_path}")
    store.put("batches", "a", b"x")
    assert store.get("batches", "a") == b"x" and store.get("batches", "b") is None
    assert store.names("batches") == ["a"] and store.names("nothing") == []
    store.delete("batches", "a")
    assert store.names("batches") == []


def test_dedup_key_option() -> None:
    class Delivery:
        message_id = "m1"
        headers = {"x-id": "k1"}

    assert DedupKey("message-id").of_message(Delivery()) == "m1"
    assert DedupKey("header:x-id").of_message(Delivery()) == "k1"
    assert DedupKey("header:other").of_message(Delivery()) is None
    for bad in ("x-id", "header:", "id"):
        with pytest.raises(ConfigurationError, match="dedupKey"):
            DedupKey(bad)


class Crash(Exception):
    """The driver dies here."""


STEPS = ("before-log", "after-log", "after-sink", "after-commit")
N = 500


def publish(url: str, queue: str, n: int) -> List[bytes]:
    from stompfast import Client

    bodies = [f"e{i}".encode() for i in range(n)]
    with Client(url) as client:
        for i, body in enumerate(bodies):
            client.send(queue, body, headers={"x-id": f"id-{i}"}, receipt=True, wait=False)
        client.flush(timeout=30)
    return bodies


@pytest.mark.spark
@pytest.mark.parametrize("step", STEPS)
def test_the_reader_killed_at_each_step_of_a_batch_delivers_each_message_once(
    target: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, step: str,
) -> None:
    kill_and_restart(target, tmp_path, monkeypatch, step, "header:x-id")


@pytest.mark.spark
def test_message_id_recognises_a_redelivery_on_activemq_and_is_refused_elsewhere(
    target: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from stompfast.spark._source import StompStreamReader

    if target.name == "activemq":
        kill_and_restart(target, tmp_path, monkeypatch, "after-log", "message-id")
        return
    reader = StompStreamReader({"url": target.url, "destination": target.queue(), "exactlyOnce": "true",
                                "logLocation": str(tmp_path), "dedupKey": "message-id"})
    with pytest.raises(ConfigurationError, match="new message-id"):
        reader.read(reader.initialOffset())
    reader.stop()


def kill_and_restart(target: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, step: str, dedup: str) -> None:
    """Publish N, read into the sink with a first reader killed at ``step``, finish with a second one; check."""
    from stompfast.spark import _source
    from stompfast.spark._source import StompStreamReader

    queue = target.queue()
    sent = publish(target.url, queue, N)
    options = {"url": target.url, "destination": queue, "exactlyOnce": "true", "logLocation": str(tmp_path / "log"),
               "dedupKey": dedup, "maxMessagesPerBatch": "200", "pollTimeout": "1", "batchLinger": "0.3"}
    # an idempotent sink: a batch written again replaces itself
    sink: Dict[Tuple[int, int], List[bytes]] = {}

    def take(batch_iter: Any) -> List[bytes]:
        return [row["body"] for batch in batch_iter for row in batch.to_pylist()]

    first = StompStreamReader(options)
    with monkeypatch.context() as patch:
        if step == "before-log":
            patch.setattr(_source.BatchLog, "write", lambda *a: (_ for _ in ()).throw(Crash()))
        if step == "after-log":
            patch.setattr(_source._ReaderRuntime, "send_acks", lambda *a: (_ for _ in ()).throw(Crash()))
        try:
            batch_iter, end = first.read({"seq": 0})
            sink[(0, end["seq"])] = take(batch_iter)
            if step == "after-commit":
                first.commit(end)
        except Crash:
            end = None
        finally:
            # the driver is gone: its connections close, nothing more is acked
            first.stop()
    committed = end["seq"] if step == "after-commit" else 0
    second = StompStreamReader(options)
    try:
        if step == "after-sink":
            # Spark wrote the offsets and the sink, not the commit: it replays the batch on an executor
            sink[(0, end["seq"])] = take(second.readBetweenOffsets({"seq": 0}, end))
            second.commit(end)
            committed = end["seq"]
        # until every message is in the sink, then two empty reads: a duplicate would come now
        deadline = time.monotonic() + 60
        idle = 0
        while idle < 2:
            batch_iter, end = second.read({"seq": committed})
            got = take(batch_iter)
            if end["seq"] == committed:
                full = sum(len(rows) for rows in sink.values()) >= N
                idle += 1 if full or time.monotonic() > deadline else 0
                continue
            sink[(committed, end["seq"])] = got
            second.commit(end)
            committed = end["seq"]
        # the acks are confirmed in the background, and the log pruned as Spark commits
        wait_until(lambda: BatchLog(str(tmp_path / "log")).acked_end() == committed, 30, "the acks confirmed")
        second.commit(end)
    finally:
        second.stop()
    delivered = [body for key in sorted(sink) for body in sink[key]]
    assert sorted(delivered) == sorted(sent), (step, len(delivered), len(set(delivered)))
    assert target.drain(queue) == []
    # what is left in the log: nothing Spark could still ask for
    assert BatchLog(str(tmp_path / "log")).find(0) is None


@pytest.mark.spark
def test_exactly_once_options_are_checked() -> None:
    from stompfast.spark._source import StompStreamReader

    with pytest.raises(ConfigurationError, match="needs 'dedupKey'"):
        StompStreamReader({"url": "stomp://x/", "destination": "/queue/a", "exactlyOnce": "true",
                           "logLocation": "/tmp/x"})
    with pytest.raises(ConfigurationError, match="needs 'logLocation'"):
        StompStreamReader({"url": "stomp://x/", "destination": "/queue/a", "exactlyOnce": "true"})
    with pytest.raises(ConfigurationError, match="only used with exactlyOnce"):
        StompStreamReader({"url": "stomp://x/", "destination": "/queue/a", "logLocation": "/tmp/x"})
    with pytest.raises(ConfigurationError, match="dedupKey"):
        StompStreamReader({"url": "stomp://x/", "destination": "/queue/a", "dedupKey": "nope"})


def killing_source(step: str, flag: str) -> Any:
    """A ``stomp`` source whose log fails the query once, at ``step``, on the first batch after the first.

    Defined in a function so that Spark ships the classes to its Python workers by value.
    """
    from stompfast.spark._log import BatchLog as Log
    from stompfast.spark._source import StompDataSource, StompStreamReader

    class KillingLog(Log):
        def write(self, start: int, end: int, batch: Any) -> int:
            due = start > 0 and not os.path.exists(flag)
            if due and step == "before-log":
                open(flag, "w").close()
                raise RuntimeError("killed before the log write")
            written = super().write(start, end, batch)
            if due and step == "after-log":
                open(flag, "w").close()
                raise RuntimeError("killed after the log write, before the acks")
            return written

    class KillingSource(StompDataSource):
        @classmethod
        def name(cls) -> str:
            return "stomp-killing"

        def simpleStreamReader(self, schema: Any) -> Any:
            reader = StompStreamReader(self.options)
            reader.log = KillingLog(reader.log.location)
            return reader

    return KillingSource


#: Every step on the in-process broker, and each real broker at one (about 12 s a query; every
#: step on every broker is run at the reader level above, and was run once as whole queries)
QUERY_CASES = [("inprocess", step) for step in STEPS] + [
    ("rabbitmq", "after-commit"), ("activemq", "after-sink"), ("artemis", "after-log"),
]


@pytest.mark.spark
@pytest.mark.timeout(300)
@pytest.mark.parametrize("target, step", QUERY_CASES, indirect=["target"])
def test_a_spark_query_failed_at_each_step_of_a_batch_writes_each_message_once(
    spark: Any, target: Any, spark_tmp: str, step: str,
) -> None:
    """A whole query, with a sink idempotent per batch: it fails once at ``step`` and restarts from its checkpoint."""
    import uuid

    queue = target.queue()
    sent = publish(target.url, queue, N)
    base = os.path.join(spark_tmp, uuid.uuid4().hex)
    out, ckpt, flag = (os.path.join(base, x) for x in ("out", "ckpt", "failed-once"))
    os.makedirs(out)
    spark.dataSource.register(killing_source(step, flag))

    def sink(df: Any, batch_id: int) -> None:
        if step == "after-commit" and batch_id == 2 and not os.path.exists(flag):
            # batch 1 is committed; batch 2 is planned (its offsets written) and fails before its write
            open(flag, "w").close()
            raise RuntimeError("killed after the commit of batch 1")
        # idempotent per batch: a batch written again replaces itself, whole (os.replace)
        bodies = [bytes(r.body).decode() for r in df.select("body").collect()]
        path = os.path.join(out, f"batch-{batch_id}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(bodies, f)
        os.replace(path + ".tmp", path)
        if step == "after-sink" and batch_id == 1 and not os.path.exists(flag):
            open(flag, "w").close()
            raise RuntimeError("killed after the sink wrote batch 1")

    def start() -> Any:
        return (spark.readStream.format("stomp-killing").option("url", target.url).option("destination", queue)
                .option("exactlyOnce", "true").option("logLocation", os.path.join(base, "log"))
                .option("dedupKey", "header:x-id").option("pollTimeout", "0.3").option("batchLinger", "0.2")
                .option("maxMessagesPerBatch", "150").load()
                .writeStream.foreachBatch(sink).option("checkpointLocation", ckpt)
                .trigger(processingTime="0.3 seconds").start())

    def written() -> List[bytes]:
        bodies: List[bytes] = []
        for name in os.listdir(out):
            if name.endswith(".json"):
                with open(os.path.join(out, name)) as f:
                    bodies.extend(body.encode() for body in json.load(f))
        return bodies

    query = start()
    with pytest.raises(Exception, match="killed"):
        query.awaitTermination(90)
    assert os.path.exists(flag)
    query = start()
    try:
        wait_until(lambda: len(written()) >= N, 90, f"{N} rows after the restart")
        # a few more triggers: a duplicate would show up now
        time.sleep(2)
    finally:
        query.stop()
    assert sorted(written()) == sorted(sent)
    assert target.drain(queue) == []
