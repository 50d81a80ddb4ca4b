"""spark.readStream.format("stomp"): every message lands in the sink and is acked afterwards."""

from __future__ import annotations

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
