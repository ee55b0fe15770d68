"""The daemon Spark's executors fork their Python workers from (`spark.python.daemon.module`,
set by `local_session`): PySpark's own daemon, with tidemq's data source and pyarrow
imported once before it forks, so a new worker starts with them loaded instead of
importing them again (each import is ~0.5 s of a short job's first task). The imported
objects are then frozen (gc.freeze, as the gc docs advise before forking workers): a
worker's garbage collections no longer walk them, and their pages stay shared."""

import gc

from pyspark.daemon import manager

import pipeline.source  # noqa: F401  (loaded before the fork; every worker inherits it)

if __name__ == "__main__":
    gc.freeze()
    manager()
