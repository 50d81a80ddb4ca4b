"""STOMP for Apache Spark: a streaming source, a batch/streaming sink and distributed load generation.

::

    from stompfast.spark import register
    register(spark)     # spark.dataSource.register(...) for "stomp" and "stomp-loadgen"

    df = (spark.readStream.format("stomp")
          .option("url", "stomp://guest:guest@127.0.0.1:61613/")
          .option("destination", "/queue/in").load())
    (df.selectExpr("body", "'/queue/out' AS destination")
       .writeStream.format("stomp").option("url", ...)
       .option("checkpointLocation", "/tmp/ckpt").start())

Built on PySpark 4's Python Data Source API (``pyspark.sql.datasource``); needs the
``spark`` extra (``pip install 'stompfast[spark]'``: pyspark>=4.2,<5 and pyarrow) on the
driver *and* on every executor. The core SDK never imports this package; importing it
without pyspark raises ImportError with that install hint. docs/spark.md documents
the options and the delivery semantics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

SPARK_HINT = "stompfast.spark needs PySpark 4: pip install 'stompfast[spark]' (pyspark>=4.2,<5 and pyarrow)"

# Rule 12: optional part, guarded with an install hint
try:
    import pyspark.sql.datasource  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(SPARK_HINT) from exc

__all__ = [
    "ClusterLoadResult",
    "StompDataSource",
    "StompLoadgenDataSource",
    "register",
    "run_cluster_load",
]

if TYPE_CHECKING:
    from ._loadgen import ClusterLoadResult, StompLoadgenDataSource, run_cluster_load
    from ._source import StompDataSource


def register(spark: Any) -> None:
    """Register the ``stomp`` and ``stomp-loadgen`` formats with ``spark`` (a SparkSession)."""
    from ._loadgen import StompLoadgenDataSource
    from ._source import StompDataSource

    spark.dataSource.register(StompDataSource)
    spark.dataSource.register(StompLoadgenDataSource)


def __getattr__(name: str) -> Any:
    if name == "StompDataSource":
        from ._source import StompDataSource

        return StompDataSource
    if name in ("ClusterLoadResult", "StompLoadgenDataSource", "run_cluster_load"):
        from . import _loadgen

        return getattr(_loadgen, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
