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
    """The interpreter Spark runs a Python data source with (its planner on the driver and
    its readers and writers on the executors): the SparkContext's `pythonExec`, which
    PySpark takes from PYSPARK_PYTHON when the context starts (default `python3`) and hands
    to `spark.dataSource.register`. The `spark.pyspark.python` setting does not reach it in
    a session built from plain Python (only spark-submit reads it)."""
    return spark.sparkContext.pythonExec


def worker_python_problem(python: str) -> str | None:
    """Why `python` cannot import tidemq's data source and pyarrow, or None when it can."""
    found = shutil.which(python) or python
    if os.path.abspath(found) == os.path.abspath(sys.executable):  # not realpath: a venv's python is a symlink
        return None
    try:
        probe = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=60)
    except OSError as e:
        return str(e)
    return probe.stderr.strip().splitlines()[-1] if probe.returncode else None


def check_worker_python(python: str) -> None:
    """Raise WorkerPythonError, naming the fix, when `python` cannot import tidemq's data
    source and pyarrow (a session whose workers run another Python than this one, the
    usual venv case, otherwise fails at the first read with `No module named ...` deep in
    a JVM traceback)."""
    problem = worker_python_problem(python)
    if problem:
        raise WorkerPythonError(
            f"Spark runs this session's Python data sources with {python!r}, which cannot load tidemq's "
            f"data source ({problem}); set PYSPARK_PYTHON={sys.executable} (an interpreter with tidemq[spark], "
            "on every worker) before the session starts, or install tidemq[spark] into that Python")


def register(spark: Any) -> None:
    """Register the `tidemq` format on `spark` (once per session).

    The data source runs with the interpreter `worker_python` names. When that one cannot
    load it and the session is local (its workers are processes on this machine), the
    data source is registered with this interpreter instead, which can: the session's own
    `pythonExec` (and so its UDFs) stays as it was. On a cluster, WorkerPythonError names
    the fix."""
    from pipeline.source import TidemqDataSource

    sc = spark.sparkContext
    python = worker_python(spark)
    if worker_python_problem(python) is None:
        spark.dataSource.register(TidemqDataSource)
        return
    if not str(sc.master).startswith("local"):
        check_worker_python(python)  # raises, naming the fix
    sc.pythonExec = sys.executable  # read once, by the registration below
    try:
        spark.dataSource.register(TidemqDataSource)
    finally:
        sc.pythonExec = python


def local_session(app: str = "tidemq", master: str = "local[2]", **conf: str) -> Any:
    """A local SparkSession on the loopback interface with the UI off and `tidemq`
    registered: what the jobs, tests and benchmark use. Its JVM maps Spark's classes from
    a class-data-sharing archive once one is built (pipeline.spark_cds)."""
    from pyspark.sql import SparkSession

    # PySpark hands PYSPARK_PYTHON to the data source's planner and workers (worker_python):
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
        # executors fork their Python workers with tidemq's data source already imported
        .config("spark.python.daemon.module", "pipeline.daemon")
    )
    from pipeline import spark_cds

    cds = spark_cds.java_options()  # the driver JVM's classes from an archive (spark_cds)
    if cds:
        conf = {**conf, "spark.driver.extraJavaOptions": f"{conf.get('spark.driver.extraJavaOptions', '')} {cds}".strip()}
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
