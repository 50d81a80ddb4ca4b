"""Spark throughput of the stomp source and sink: rows/s read and written.

    python bench/spark_throughput.py [--url stomp://guest:guest@127.0.0.1:61613/] [-n 20000]

Without --url the in-process broker runs in a thread on a loopback port. Write: a
batch ``df.write.format("stomp")`` of N rows (every message confirmed by a receipt).
Read: a streaming query ``readStream.format("stomp")`` into a noop sink, timed from
start until N rows were processed (and acked). local[2] unless --master.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import uuid


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url")
    ap.add_argument("-n", type=int, default=20000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--max-per-batch", type=int, default=5000)
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from stompfast.spark import register

    with contextlib.ExitStack() as stack:
        url = args.url
        if url is None:
            from stompfast.testing import Broker

            url = stack.enter_context(Broker.in_thread(record=False)).url
        spark = (SparkSession.builder.master(args.master).appName("stompfast-bench")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        stack.callback(spark.stop)
        register(spark)
        q = f"/queue/stompfast-spark-bench-{uuid.uuid4().hex[:8]}"
        n = args.n
        payload = "x" * args.size
        df = spark.range(n, numPartitions=args.partitions).select(
            F.concat(F.lit(payload), F.col("id").cast("string")).cast("binary").alias("body"))
        df.write.format("noop").mode("overwrite").save()  # warm the Python workers
        t = time.perf_counter()
        df.write.format("stomp").option("url", url).option("destination", q).mode("append").save()
        write_s = time.perf_counter() - t
        print(f"write: {n} rows in {write_s:.2f} s = {n / write_s:,.0f} rows/s "
              f"({args.partitions} partitions, receipts on every message)")

        seen = {"rows": 0}

        def count(batch: object, batch_id: int) -> None:
            seen["rows"] += batch.count()  # type: ignore[attr-defined]

        t = time.perf_counter()
        query = (spark.readStream.format("stomp").option("url", url).option("destination", q)
                 .option("maxMessagesPerBatch", str(args.max_per_batch)).option("prefetch", str(args.max_per_batch))
                 .option("pollTimeout", "0.2").load()
                 .writeStream.foreachBatch(count).trigger(processingTime="0 seconds").start())
        try:
            deadline = time.monotonic() + 300
            while seen["rows"] < n and time.monotonic() < deadline:
                time.sleep(0.05)
            read_s = time.perf_counter() - t
        finally:
            query.stop()
        print(f"read:  {seen['rows']} rows in {read_s:.2f} s = {seen['rows'] / read_s:,.0f} rows/s "
              f"(streaming, maxMessagesPerBatch={args.max_per_batch}, includes query start-up)")


if __name__ == "__main__":
    main()
