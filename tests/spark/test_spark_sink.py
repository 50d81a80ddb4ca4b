"""df.write / writeStream.format("stomp"), and a STOMP -> Spark -> STOMP pipeline."""

from __future__ import annotations

import os
import uuid
from typing import Any, Dict, Tuple

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


def refusal(target: Any) -> Tuple[str, Dict[str, str]]:
    """A destination and headers the broker refuses: ActiveMQ takes any other name, Artemis any name
    at all (it creates the address), but not a routing type it does not know."""
    if target.name == "artemis":
        return target.queue(), {"destination-type": "BOGUS"}
    return ("/queue/" if target.name == "activemq" else "/bogus/nowhere"), {}


def test_write_failure_is_a_task_failure_with_the_brokers_message(spark: Any, target: Any) -> None:
    bad, headers = refusal(target)
    df = spark.createDataFrame([("x", headers)], "body string, headers map<string,string>")
    with pytest.raises(Exception) as info:
        df.write.format("stomp").option("url", target.url).option("destination", bad).mode("append").save()
    text = str(info.value)
    assert "ServerError" in text or "closed the connection" in text, text[-2000:]


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


@pytest.mark.parametrize("case", ["null body", "null destination", "int body", "int header values", "no body"])
def test_bad_rows_fail_naming_the_column_and_send_nothing_unconfirmed(spark: Any, broker_thread: Any,
                                                                       case: str) -> None:
    q = f"/queue/bad-{uuid.uuid4().hex[:8]}"
    frames = {
        "null body": (("SELECT IF(id = 5, NULL, CAST(CAST(id AS STRING) AS BINARY)) AS body, '%s' AS destination"
                       " FROM range(10)"), "column 'body' is null in row 5"),
        "null destination": (("SELECT CAST(id AS STRING) AS body, IF(id = 3, NULL, '%s') AS destination"
                              " FROM range(10)"), "column 'destination' is null in row 3"),
        "int body": ("SELECT id AS body, '%s' AS destination FROM range(3)",
                     "column 'body' must be binary or string, not bigint"),
        "int header values": ("SELECT 'x' AS body, '%s' AS destination, map('x-n', id) AS headers FROM range(3)",
                              "column 'headers' must be map<string,string>"),
        "no body": ("SELECT 'x' AS payload, '%s' AS destination FROM range(3)", "needs a 'body' column"),
    }
    sql, expected = frames[case]
    df = spark.sql(sql % q).coalesce(1)
    with pytest.raises(Exception) as info:
        df.write.format("stomp").option("url", broker_thread.url).mode("append").save()
    assert expected in str(info.value), str(info.value)[-3000:]
    # The rows before the bad one were sent and confirmed; the task failed, so Spark may retry it
    # (at-least-once): never more than the good rows, never a row after the bad one.
    got = []
    from stompfast import Client, ReceiveTimeout

    with Client(broker_thread.url) as client, client.subscribe(q, ack="auto") as sub:
        try:
            while True:
                got += [m.body for m in sub.receive_batch(100, timeout=0.5)]
        except ReceiveTimeout:
            pass
    bad_row = {"null body": 5, "null destination": 3}.get(case, 0)
    assert set(got) <= {str(i).encode() for i in range(bad_row)}, got


@pytest.mark.parametrize("what", ["refused SEND", "rejected destination"])
def test_broker_refusals_fail_the_task_with_the_brokers_reply(spark: Any, real_broker: Any, what: str) -> None:
    df = spark.createDataFrame([("x",), ("y",)], "body string").coalesce(1)
    w = df.write.format("stomp").option("url", real_broker.url).mode("append")
    if what == "refused SEND":  # a header value the broker will not parse
        header = "expiration" if real_broker.name == "rabbitmq" else "expires"
        w = w.option("destination", real_broker.queue()).option(f"header.{header}", "soon")
    else:
        w = w.option("destination", "/bogus/nowhere" if real_broker.name == "rabbitmq" else "/queue/")
    with pytest.raises(Exception) as info:
        w.save()
    text = str(info.value)
    if real_broker.name == "rabbitmq":  # the ERROR frame's message
        assert ("invalid expiration 'soon'" if what == "refused SEND" else "Unknown destination") in text, text[-3000:]
    else:  # ActiveMQ answers these by closing the connection (its ERROR frame is not reliably sent)
        assert "ServerError" in text or "closed the connection" in text, text[-3000:]


def test_confirmation_modes_per_broker(spark: Any, target: Any) -> None:
    """confirm=every/transaction where a receipt confirms what came before; refused on RabbitMQ."""
    from pyspark.sql import functions as F

    n = 1200
    df = spark.range(n, numPartitions=2).select(F.col("id").cast("string").alias("body"))
    for mode in ("every", "transaction", "auto"):
        q = target.queue()
        w = (df.write.format("stomp").option("url", target.url).option("destination", q)
             .option("confirm", mode).option("receiptEvery", "250").mode("append"))
        if target.name == "rabbitmq" and mode != "auto":
            with pytest.raises(Exception, match="not safe on RabbitMQ"):
                w.save()
            continue
        w.save()
        assert sorted(int(b) for b in target.drain(q)) == list(range(n)), mode


def test_a_failing_sink_acks_nothing_it_did_not_deliver(spark: Any, target: Any, spark_tmp: str) -> None:
    """STOMP -> Spark -> a destination the broker refuses: the query fails and every input message stays."""
    n = 300
    src = target.queue()
    target.publish(src, [f"k{i}".encode() for i in range(n)])
    from pyspark.sql import functions as F

    bad, headers = refusal(target)
    header_map = F.create_map(*[F.lit(x) for kv in headers.items() for x in kv]).cast("map<string,string>")
    query = (spark.readStream.format("stomp").option("url", target.url).option("destination", src)
             .option("pollTimeout", "0.5").load().select("body", header_map.alias("headers"))
             .writeStream.format("stomp").option("url", target.url).option("destination", bad)
             .option("checkpointLocation", os.path.join(spark_tmp, uuid.uuid4().hex))
             .trigger(processingTime="0.5 seconds").start())
    with pytest.raises(Exception, match="ServerError|closed the connection"):  # the broker's refusal
        query.awaitTermination(60)
    left = target.drain(src, expect=n)
    missing = sorted({f"k{i}".encode() for i in range(n)} - set(left))
    if missing:
        # Say where they went: the refused destination (Artemis: a queue of that name), or a batch Spark committed
        elsewhere = target.drain(bad) if target.name == "artemis" else []
        batches = [(p.get("batchId"), p.get("numInputRows")) for p in query.recentProgress]
        pytest.fail(f"{len(missing)} of {n} input messages gone: {missing[:5]}; in {bad}: {len(elsewhere)};"
                    f" the query's batches (id, rows): {batches}")
    assert sorted(left) == sorted(f"k{i}".encode() for i in range(n))


def test_trace_option_one_span_per_task_its_traceparent_on_every_send(spark: Any) -> None:
    # option trace=true: one PRODUCER span per task (partition), its context on each of the task's SENDs;
    # the executors' spans stay in their processes, so what arrives at the broker is checked
    pytest.importorskip("opentelemetry.sdk.trace", reason="opentelemetry-sdk is not installed:"
                        " pip install 'stompfast[otel]' opentelemetry-sdk")
    from pyspark.sql import functions as F

    from stompfast.testing import Broker

    with Broker.in_thread(port=0, record=True, record_limit=10_000) as broker:
        q = f"/queue/traced-{uuid.uuid4().hex[:8]}"
        rows = (spark.range(30, numPartitions=3)
                .select(F.col("id").cast("string").alias("body"),
                        F.create_map(F.lit("traceparent"), F.lit("00-" + "1" * 32 + "-" + "2" * 16 + "-01"),
                                     F.lit("x-row"), F.col("id").cast("string")).alias("headers")))
        rows.write.format("stomp").option("url", broker.url).option("destination", q) \
            .option("trace", "true").mode("append").save()
        plain = f"/queue/untraced-{uuid.uuid4().hex[:8]}"
        spark.createDataFrame([("a",), ("b",)], "body string").write.format("stomp") \
            .option("url", broker.url).option("destination", plain).mode("append").save()
        frames = [f for f in broker.received if f.command == "SEND"]
    traced = [f for f in frames if f.headers["destination"] == q]
    assert len(traced) == 30 and all("x-row" in f.headers for f in traced)
    parents = {f.headers.get("traceparent") for f in traced}
    assert None not in parents and len(parents) == 3, parents  # one span per partition, not per row
    assert "00-" + "1" * 32 + "-" + "2" * 16 + "-01" not in parents  # the task's context replaced the row's
    assert all("traceparent" not in f.headers for f in frames if f.headers["destination"] == plain)
