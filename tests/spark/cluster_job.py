"""Run by test_spark_cluster.py in a process of its own (one SparkContext per process):
a ``local-cluster[2,1,1024]`` application whose executors are separate JVMs with their
own Python workers. They write N rows with the stomp sink and run the distributed load
generator; the driver prints one JSON line with what it saw.

    python tests/spark/cluster_job.py URL QUEUE N LOADGEN_PREFIX LOADGEN_COUNT
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    url, queue, n, prefix, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import stompfast

    root = os.path.dirname(os.path.dirname(os.path.abspath(stompfast.__file__)))
    from pyspark.sql import SparkSession, functions as F

    spark = (SparkSession.builder.master("local-cluster[2,1,1024]").appName("stompfast-cluster-test")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.executorEnv.PYTHONPATH", root)  # this checkout's stompfast on the executors
             .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        from stompfast.loadgen import LoadConfig
        from stompfast.spark import register, run_cluster_load

        register(spark)
        # Where the tasks ran: separate executor processes, not the driver.
        where = (spark.sparkContext.parallelize(range(8), 4)
                 .map(lambda _: (__import__("os").getppid(), __import__("socket").gethostname())).distinct().collect())
        df = spark.range(n, numPartitions=4).select(F.col("id").cast("string").alias("body"))
        df.write.format("stomp").option("url", url).option("destination", queue).mode("append").save()
        result = run_cluster_load(spark, LoadConfig(url=url, count=count, receipts=True, drain_timeout=10.0,
                                                    destinations=(prefix,)), workers=2)
        executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # minus the driver
        print(json.dumps({
            "executors": executors,
            "executor_jvms": sorted({ppid for ppid, _ in where}),
            "driver_pid": os.getpid(),
            "ok": result.ok, "problems": result.problems, "counts": result.counts,
            "workers": sorted(r["worker"] for r in result.rows),
        }))
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
