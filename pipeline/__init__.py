"""tidemq on PySpark: the `tidemq` data source (store directories, live queues, writes)
and the `tidemq pipeline` jobs. See docs/pipeline.md.

    from pipeline import register, local_session
    spark = local_session()          # or your own SparkSession
    register(spark)
    df = spark.read.format("tidemq").load("/data/store-a")

Importing this package does not import pyspark; `register` and `local_session` do.
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the `tidemq` format on `spark` (once per session)."""
    from pipeline.source import TidemqDataSource

    spark.dataSource.register(TidemqDataSource)


def local_session(app: str = "tidemq", master: str = "local[2]", **conf: str) -> Any:
    """A local SparkSession on the loopback interface with the UI off and `tidemq`
    registered: what the jobs, tests and benchmark use."""
    import os
    import sys

    from pyspark.sql import SparkSession

    # the JVM starts Python workers (and the data source planner) with PYSPARK_PYTHON:
    # make it this interpreter, which has pyarrow and tidemq
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master).appName(app)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        .config("spark.pyspark.python", sys.executable)
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
