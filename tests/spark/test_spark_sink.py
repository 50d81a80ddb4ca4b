"""df.write / writeStream.format("stomp"), and a STOMP -> Spark -> STOMP pipeline."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest

from .test_spark_source import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(120)]


def test_batch_write_puts_exactly_n_messages(spark: Any, target: Any) -> None:
    from pyspark.sql import functions as F

    n = 1000
    q = target.queue()
    df = (spark.range(n, numPartitions=3)
          .select(F.col("id").cast("string").cast("binary").alias("body"),
                  F.lit(q).alias("destination"),
                  F.create_map(F.lit("x-row"), F.col("id").cast("string")).alias("headers")))
    df.write.format("stomp").option("url", target.url).option("dedupeHeader", "sf-dedupe") \
        .option("dedupeId", "job1").mode("append").save()
    got = target.drain(q)
    assert sorted(int(b) for b in got) == list(range(n))


def test_batch_write_string_body_and_destination_option(spark: Any, broker_thread: Any) -> None:
    q = f"/queue/str-{uuid.uuid4().hex[:8]}"
    df = spark.createDataFrame([("a",), ("b",), ("c",)], "body string")
    df.write.format("stomp").option("url", broker_thread.url).option("destination", q) \
        .option("dedupeHeader", "sf-dedupe").option("dedupeId", "q1").option("header.x-app", "t").mode("append").save()
    from stompfast import Client

    with Client(broker_thread.url) as client, client.subscribe(q, ack="client-individual") as sub:
        messages = sub.receive_many(10, timeout=5)
        while len(messages) < 3:
            messages += sub.receive_many(10, timeout=5)
        for m in messages:
            m.ack()
    assert sorted(m.body for m in messages) == [b"a", b"b", b"c"]
    dedupe = sorted(m.headers["sf-dedupe"] for m in messages)
    assert all(d.startswith("q1/0/") for d in dedupe) and len(set(dedupe)) == 3
    assert all(m.headers["x-app"] == "t" for m in messages)


def test_write_failure_is_a_task_failure_with_the_brokers_message(spark: Any, target: Any) -> None:
    df = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(Exception) as info:
        df.write.format("stomp").option("url", target.url).option("destination", "/bogus/nowhere").mode("append").save()
    text = str(info.value)
    assert "ServerError" in text or "ERROR" in text, text[-2000:]


def test_stomp_to_spark_to_stomp_pipeline(spark: Any, target: Any, spark_tmp: str) -> None:
    from pyspark.sql import functions as F

    n = 600
    src, dst = target.queue(), target.queue()
    target.publish(src, [f"p{i}".encode() for i in range(n)])
    ckpt = os.path.join(spark_tmp, uuid.uuid4().hex)
    query = (spark.readStream.format("stomp").option("url", target.url).option("destination", src)
             .option("pollTimeout", "0.2").load()
             .select(F.upper(F.col("body").cast("string")).alias("body"),
                     F.map_concat(F.col("headers"), F.create_map(F.lit("x-via"), F.lit("spark"))).alias("headers"))
             .writeStream.format("stomp").option("url", target.url).option("destination", dst)
             .option("checkpointLocation", ckpt).trigger(processingTime="0.5 seconds").start())
    got: list = []
    try:
        def enough() -> bool:
            got.extend(target.drain(dst, timeout=0.5))
            return len(set(got)) >= n

        wait_until(enough, 60, f"{n} messages on the output queue")
        assert target.wait_depth(src, 0) in (0, None)
    finally:
        query.stop()
    assert set(got) == {f"P{i}".encode() for i in range(n)}
    assert target.drain(src) == []
