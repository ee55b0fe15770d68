"""tidemq on PySpark: the `tidemq` data source (store directories, live queues, writes)
and the `tidemq pipeline` jobs. See docs/pipeline.md.

    from pipeline import register, local_session
    spark = local_session()          # or your own SparkSession
    register(spark)
    df = spark.read.format("tidemq").load("/data/store-a")

Importing this package does not import pyspark; `register` and `local_session` do.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Any

_PROBE = "import pyarrow, pipeline.source"


class WorkerPythonError(RuntimeError):
    """Spark's Python workers run an interpreter that cannot import the data source."""


def worker_python(spark: Any) -> str:
    """The interpreter Spark starts its Python workers (and the data source's planner)
    with: `spark.pyspark.python`, else PYSPARK_PYTHON, else the context's default."""
    conf = spark.sparkContext.getConf()
    return conf.get("spark.pyspark.python", None) or os.environ.get("PYSPARK_PYTHON") or spark.sparkContext.pythonExec


def check_worker_python(python: str) -> None:
    """Raise WorkerPythonError, naming the fix, when `python` cannot import tidemq's data
    source and pyarrow (a session whose workers run another Python than this one, the
    usual venv case, otherwise fails at the first read with `No module named ...` deep in
    a JVM traceback)."""
    found = shutil.which(python) or python
    if os.path.abspath(found) == os.path.abspath(sys.executable):  # not realpath: a venv's python is a symlink
        return
    try:
        probe = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=60)
        problem = probe.stderr.strip().splitlines()[-1] if probe.returncode else None
    except OSError as e:
        problem = str(e)
    if problem:
        raise WorkerPythonError(
            f"Spark starts its Python workers with {python!r}, which cannot load tidemq's data source "
            f"({problem}); create the session with .config('spark.pyspark.python', {sys.executable!r}) "
            f"(or PYSPARK_PYTHON={sys.executable} before it starts), or install tidemq[spark] into that Python")


def register(spark: Any) -> None:
    """Register the `tidemq` format on `spark` (once per session), after checking that its
    Python workers can load it (WorkerPythonError names the fix when they cannot)."""
    from pipeline.source import TidemqDataSource

    check_worker_python(worker_python(spark))
    spark.dataSource.register(TidemqDataSource)


def local_session(app: str = "tidemq", master: str = "local[2]", **conf: str) -> Any:
    """A local SparkSession on the loopback interface with the UI off and `tidemq`
    registered: what the jobs, tests and benchmark use."""
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
