"""spark.readStream.format("stomp"): every message lands in the sink and is acked afterwards."""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any, Callable

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.timeout(120)]


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.3)


def parquet_count(spark: Any, path: str) -> int:
    if not os.path.exists(os.path.join(path, "_spark_metadata")):
        return 0
    from stompfast.spark._source import READ_SCHEMA

    return spark.read.schema(READ_SCHEMA).parquet(path).count()


def start_stream(spark: Any, url: str, destination: str, out: str, ckpt: str, **options: str) -> Any:
    reader = (spark.readStream.format("stomp").option("url", url).option("destination", destination)
              .option("pollTimeout", "0.2"))
    for k, v in options.items():
        reader = reader.option(k, v)
    return (reader.load().writeStream.format("parquet").option("path", out)
            .option("checkpointLocation", ckpt).trigger(processingTime="0.5 seconds").start())


def test_stream_reads_exactly_n_and_acks_all(spark: Any, target: Any, spark_tmp: str) -> None:
    n = 500
    q = target.queue()
    target.publish(q, [f"m{i}".encode() for i in range(n)])
    base = os.path.join(spark_tmp, uuid.uuid4().hex)
    out = os.path.join(base, "out")
    query = start_stream(spark, target.url, q, out, os.path.join(base, "ckpt"), maxMessagesPerBatch="200")
    try:
        wait_until(lambda: parquet_count(spark, out) >= n, 60, f"{n} rows in the sink")
        # The idle stream acks its last batch too (eager ack in the next read): nothing is left.
        assert target.wait_depth(q, 0) in (0, None)
        # Each batch's figures are in the query's progress, on its end offset
        ends = [p["sources"][0]["endOffset"] for p in query.recentProgress if p["numInputRows"]]
        ends = [json.loads(e) if isinstance(e, str) else e for e in ends]
        assert ends and sum(e["batch"]["messages"] for e in ends) == n, ends
    finally:
        query.stop()
    df = spark.read.parquet(out)
    assert df.count() == n
    bodies = sorted(bytes(r.body) for r in df.select("body").collect())
    assert bodies == sorted(f"m{i}".encode() for i in range(n))
    row = df.first()
    assert row.destination == q and row.message_id and row.subscription and row.received_at
    assert isinstance(row.headers, dict)
    assert target.drain(q) == []


def test_failed_query_restarted_from_checkpoint_loses_nothing(spark: Any, target: Any, spark_tmp: str) -> None:
    n = 400
    q = target.queue()
    target.publish(q, [f"r{i}".encode() for i in range(n)])
    base = os.path.join(spark_tmp, uuid.uuid4().hex)
    out, ckpt, flag = (os.path.join(base, x) for x in ("out", "ckpt", "failed-once"))
    os.makedirs(base)

    def sink(df: Any, batch_id: int) -> None:
        df.write.mode("append").parquet(out)  # written, then the batch fails: at-least-once
        if batch_id == 1 and not os.path.exists(flag):
            open(flag, "w").close()
            raise RuntimeError("injected failure in batch 1")

    def start() -> Any:
        return (spark.readStream.format("stomp").option("url", target.url).option("destination", q)
                .option("pollTimeout", "0.2").option("maxMessagesPerBatch", "100").load()
                .writeStream.foreachBatch(sink).option("checkpointLocation", ckpt)
                .trigger(processingTime="0.5 seconds").start())

    from stompfast.spark._source import READ_SCHEMA

    def distinct() -> int:
        if not os.path.exists(out):
            return 0
        return spark.read.schema(READ_SCHEMA).parquet(out).select("body").distinct().count()

    query = start()
    with pytest.raises(Exception, match="injected failure"):
        query.awaitTermination(60)
    assert os.path.exists(flag)
    query = start()
    try:
        wait_until(lambda: distinct() >= n, 60, f"{n} distinct rows after the restart")
        assert target.wait_depth(q, 0) in (0, None)
    finally:
        query.stop()
    bodies = {bytes(r.body) for r in spark.read.parquet(out).select("body").collect()}
    assert bodies == {f"r{i}".encode() for i in range(n)}
    assert target.drain(q) == []


def test_idle_stream_acks_its_last_batch(spark: Any, broker_thread: Any, spark_tmp: str) -> None:
    """One small batch, then nothing: commit() for it never comes, the next read acks it."""
    q = f"/queue/idle-{uuid.uuid4().hex[:8]}"
    base = os.path.join(spark_tmp, uuid.uuid4().hex)
    out = os.path.join(base, "out")
    query = start_stream(spark, broker_thread.url, q, out, os.path.join(base, "ckpt"))
    try:
        wait_until(lambda: broker_thread.consumers(q) == 1, 30, "the stream to subscribe")
        broker_thread.publish(q, b"only-one")
        wait_until(lambda: parquet_count(spark, out) == 1, 30, "the row in the sink")
        wait_until(lambda: broker_thread.unacked(q) == 0, 10, "the last batch to be acked while idle")
        assert broker_thread.queue_depth(q) == 0
    finally:
        query.stop()


def test_read_returns_one_arrow_batch_of_what_is_buffered(spark: Any, broker_thread: Any) -> None:
    """A backlog comes back as one RecordBatch per read (not a row at a time); an empty read returns promptly."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    from stompfast.spark._source import ARROW_READ_SCHEMA, READ_SCHEMA, StompStreamReader

    assert ARROW_READ_SCHEMA.equals(to_arrow_schema(READ_SCHEMA, timezone="UTC"))  # what PySpark checks
    q = f"/queue/arrow-{uuid.uuid4().hex[:8]}"
    for i in range(3000):
        broker_thread.publish(q, f"a{i}".encode(), headers={"x-i": str(i)})
    reader = StompStreamReader({"url": broker_thread.url, "destination": q, "pollTimeout": "2",
                                "maxMessagesPerBatch": "2500", "batchLinger": "0.5"})
    try:
        it, end = reader.read(reader.initialOffset())
        batches = list(it)
        assert len(batches) == 1 and isinstance(batches[0], pa.RecordBatch)
        batch = batches[0]
        assert batch.num_rows == 2500 and end["seq"] == 2500  # the limit, not a small fixed count
        # the batch's figures ride on its end offset (the query's progress shows it)
        figures = dict(end["batch"])
        # (the rest of the backlog may still be on its way into the buffer)
        assert 0 <= figures.pop("buffered") <= 500
        assert figures == {"messages": 2500, "bytes": sum(len(f"a{i}") for i in range(2500)), "redelivered": 0,
                           "acked": 0, "unacked": 2500}
        rows = batch.to_pylist()
        assert [r["body"] for r in rows[:2]] == [b"a0", b"a1"]
        assert dict(rows[7]["headers"])["x-i"] == "7" and rows[7]["destination"] == q
        it, end = reader.read(end)  # acks the first 2500 (eager ack), takes the rest
        assert sum(b.num_rows for b in it) == 500 and end["seq"] == 3000
        assert (end["batch"]["acked"], end["batch"]["unacked"], end["batch"]["buffered"]) == (2500, 500, 0)
        wait_until(lambda: broker_thread.unacked(q) == 500, 10, "the first batch to be acked")
        t = time.monotonic()
        it, end2 = reader.read(end)  # nothing left: acks, waits pollTimeout, returns start
        assert list(it) == [] and end2 == end and time.monotonic() - t < 4
        wait_until(lambda: broker_thread.unacked(q) == 0, 10, "the second batch to be acked")
    finally:
        reader.stop()


def test_a_floor_holds_small_batches_back_until_the_trigger_delay(target: Any) -> None:
    """minMessagesPerBatch: fewer make no batch and stay un-acked; maxTriggerDelay lets them through."""
    from stompfast.errors import ConfigurationError
    from stompfast.spark._source import StompStreamReader

    q = target.queue()
    target.publish(q, [f"f{i}".encode() for i in range(50)])
    reader = StompStreamReader({"url": target.url, "destination": q, "pollTimeout": "1", "batchLinger": "0.3",
                                "minMessagesPerBatch": "100", "maxTriggerDelay": "6"})
    try:
        started = time.monotonic()
        it, end = reader.read(reader.initialOffset())
        assert list(it) == [] and end["seq"] == 0
        target.publish(q, [f"g{i}".encode() for i in range(60)])
        it, end = wait_for_batch(reader, end)
        assert end["seq"] == 110 and time.monotonic() - started < 6
        target.publish(q, [b"h0", b"h1"])
        it, end2 = reader.read(end)
        assert list(it) == [] and end2 == end
        # the delay counts from the last batch: then the two go on their own
        it, end2 = wait_for_batch(reader, end)
        assert [r["body"] for b in it for r in b.to_pylist()] == [b"h0", b"h1"] and end2["seq"] == 112
        reader.read(end2)
        assert target.wait_depth(q, 0) in (0, None)
    finally:
        reader.stop()
    assert target.drain(q) == []
    with pytest.raises(ConfigurationError, match="must not exceed"):
        StompStreamReader({"url": target.url, "destination": q, "minMessagesPerBatch": "500", "prefetch": "100"})


@pytest.mark.parametrize("target", ["inprocess", "rabbitmq"], indirect=True)
def test_a_hold_near_rabbitmqs_consumer_timeout_is_warned_about(
    target: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """RabbitMQ closes a consumer that holds a delivery past consumer_timeout: the reader warns at half of it."""
    from stompfast.spark import _source

    # 30 minutes scaled down: a batch held 1.5 s between two reads
    monkeypatch.setattr(_source, "RABBITMQ_HOLD_WARNING", 1.0)
    q = target.queue()
    target.publish(q, [b"x0", b"x1"])
    reader = _source.StompStreamReader({"url": target.url, "destination": q, "pollTimeout": "2", "batchLinger": "0.2"})
    try:
        it, end = reader.read(reader.initialOffset())
        assert sum(b.num_rows for b in it) == 2
        caplog.clear()
        time.sleep(1.5)
        with caplog.at_level("WARNING", logger="stompfast.spark"):
            reader.read(end)
        warned = [r.getMessage() for r in caplog.records if "consumer_timeout" in r.getMessage()]
        assert len(warned) == (1 if target.name == "rabbitmq" else 0), warned
    finally:
        reader.stop()
    target.drain(q)


def wait_for_batch(reader: Any, start: dict, timeout: float = 15.0) -> Any:
    """Read as Spark's triggers do until a read makes a batch; (its iterator, its end)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        it, end = reader.read(start)
        if end != start:
            return it, end
    raise AssertionError(f"no batch after {start} within {timeout} s")


def test_several_connections_read_one_queue_exactly(spark: Any, target: Any, spark_tmp: str) -> None:
    n = 3000
    q = target.queue()
    target.publish(q, [f"c{i}".encode() for i in range(n)])
    base = os.path.join(spark_tmp, uuid.uuid4().hex)
    out = os.path.join(base, "out")
    query = start_stream(spark, target.url, q, out, os.path.join(base, "ckpt"), connections="3",
                         maxMessagesPerBatch="1000", prefetch="200")
    try:
        wait_until(lambda: parquet_count(spark, out) >= n, 90, f"{n} rows in the sink")
        assert target.wait_depth(q, 0) in (0, None)
    finally:
        query.stop()
    bodies = sorted(bytes(r.body) for r in spark.read.parquet(out).select("body").collect())
    assert bodies == sorted(f"c{i}".encode() for i in range(n))
    subs = {r.subscription for r in spark.read.parquet(out).select("subscription").distinct().collect()}
    assert subs <= {"stompfast-0-0", "stompfast-1-0", "stompfast-2-0"} and len(subs) >= 2, subs
    assert target.drain(q) == []


def test_available_now_drains_stops_and_restarts_from_the_checkpoint(spark: Any, target: Any, spark_tmp: str) -> None:
    q = target.queue()
    base = os.path.join(spark_tmp, uuid.uuid4().hex)
    out, ckpt = os.path.join(base, "out"), os.path.join(base, "ckpt")

    def run_once() -> None:
        query = (spark.readStream.format("stomp").option("url", target.url).option("destination", q)
                 .option("pollTimeout", "1").option("maxMessagesPerBatch", "300").load()
                 .writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(90), "Trigger.AvailableNow did not stop"
        assert query.exception() is None

    target.publish(q, [f"v{i}".encode() for i in range(700)])
    run_once()  # 700 in batches of <= 300, then stops by itself, having acked its last batch
    assert parquet_count(spark, out) == 700
    assert target.wait_depth(q, 0) in (0, None)
    target.publish(q, [f"w{i}".encode() for i in range(250)])
    run_once()  # from the checkpoint: only the new ones
    bodies = sorted(bytes(r.body) for r in spark.read.parquet(out).select("body").collect())
    assert bodies == sorted([f"v{i}".encode() for i in range(700)] + [f"w{i}".encode() for i in range(250)])
    assert target.drain(q) == []


def test_a_backlog_comes_in_large_batches_on_each_real_broker(real_broker: Any, extra: Any = None) -> None:
    """The default ack mode per broker lets the prefetch window fill (ActiveMQ holds a cumulative-ack
    subscriber to about 200 unacked messages, hence client-individual there); the batch is acked after."""
    from stompfast.spark._source import StompStreamReader

    extra = extra or {}  # (a test of the test passes ack=client here: it must then fail)
    q = real_broker.queue()
    real_broker.publish(q, [f"b{i}".encode() for i in range(3000)])
    reader = StompStreamReader({"url": real_broker.url, "destination": q, "pollTimeout": "3", "batchLinger": "0.5",
                                **extra})
    try:
        got, reads, end = 0, 0, reader.initialOffset()
        while got < 3000 and reads < 10:  # as Spark reads: each read acks the batch before it
            it, end = reader.read(end)
            got += sum(b.num_rows for b in it)
            reads += 1
        # ActiveMQ sends its first page (200) alone; with ack=client every batch stays near 200
        assert got == 3000 and end["seq"] == 3000 and reads <= 3, (got, reads)
        assert reader._rt is not None
        assert reader._rt.ack == extra.get("ack", "client-individual" if real_broker.name == "activemq" else "client")
        it, end2 = reader.read(end)  # acks the batch; nothing more
        assert list(it) == [] and end2 == end
        assert real_broker.wait_depth(q, 0) == 0
    finally:
        reader.stop()
    assert real_broker.drain(q) == []
