"""A Spark job: the sink writes a DataFrame to a queue, the source reads it back, uppercased, exactly once.

    pip install "stompfast[spark]"      # and Java 17 for Spark
    python examples/spark_job.py 200

Batch write (``df.write.format("stomp")``, every row confirmed), then a streaming
read with ``Trigger.AvailableNow`` (read what is there, then stop) into Spark's
memory sink. The executors connect to the broker themselves, so with the
in-process broker (no $STOMPFAST_URL) Spark runs in local mode on this machine.
"""

from __future__ import annotations

import os
import sys
import tempfile

from _where import broker_url


def main(n: int) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession, functions as F

    from stompfast.spark import register

    spark = (SparkSession.builder.master("local[2]").appName("stompfast-example")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    try:
        with broker_url() as url, tempfile.TemporaryDirectory() as checkpoint:
            orders = spark.range(n).select(F.format_string("order %d", "id").alias("body"))
            (orders.write.format("stomp").option("url", url).option("destination", "/queue/spark-orders")
             .mode("append").save())
            query = (spark.readStream.format("stomp").option("url", url)
                     .option("destination", "/queue/spark-orders").load()
                     .select(F.upper(F.col("body").cast("string")).alias("body"))
                     .writeStream.format("memory").queryName("orders_upper")
                     .option("checkpointLocation", checkpoint)
                     .trigger(availableNow=True).start())
            query.awaitTermination(120)
            rows = sorted(r.body for r in spark.sql("SELECT body FROM orders_upper").collect())
            expected = sorted(f"ORDER {i}" for i in range(n))
            assert rows == expected, f"read {len(rows)} rows, {len(set(rows))} distinct"
            print(f"spark job: wrote {n} rows, read {len(rows)} back, each once")
    finally:
        spark.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
