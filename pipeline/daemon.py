"""The daemon Spark's executors fork their Python workers from (`spark.python.daemon.module`,
set by `local_session`): PySpark's own daemon, with tidemq's data source, pyarrow and
PySpark's worker imported once before it forks, so a new worker starts with them loaded
instead of importing them again (each import is ~0.5 s of a short job's first task). The
imported objects are then frozen (gc.freeze, as the gc docs advise before forking
workers): a worker's garbage collections no longer walk them, and their pages stay shared.

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` (and py4j's zip) first on its workers'
PYTHONPATH. With pip's pyspark, SPARK_HOME is the installed package and the zip holds that
package's own sources, but an import from a zip compiles every module again (no bytecode
cache: ~1.2 s of CPU for PySpark's worker), and each new worker re-reads the zip's directory
of ~1,500 entries when it adds Spark's files directory to its path
(importlib.invalidate_caches). So the daemon drops the zips that lie inside the installed
pyspark package (py4j's only when py4j is installed too: pyspark pins its version) before it
imports anything from them, and its workers inherit that path. A zip from another Spark
distribution, or PySpark only in the zip (a node without pip's pyspark), stays."""

import importlib.machinery
import os
import sys


def _drop_shadowing_zips() -> None:
    """Remove from sys.path the zips inside the installed pyspark package (see above)."""
    dirs = [p for p in sys.path if not p.endswith(".zip")]
    installed = importlib.machinery.PathFinder.find_spec("pyspark", dirs)
    if installed is None or not installed.origin:
        return
    package = os.path.dirname(os.path.realpath(installed.origin)) + os.sep
    for p in [p for p in sys.path if p.endswith(".zip") and os.path.realpath(p).startswith(package)]:
        name = os.path.basename(p)
        if name.startswith("pyspark") or (
                name.startswith("py4j") and importlib.machinery.PathFinder.find_spec("py4j", dirs) is not None):
            sys.path.remove(p)
            sys.path_importer_cache.pop(p, None)


_drop_shadowing_zips()

import gc  # noqa: E402  (after the path is settled: every import below comes from it)

import pyspark.worker  # noqa: E402, F401  (what every forked worker runs)
from pyspark.daemon import manager  # noqa: E402

import pipeline.source  # noqa: E402, F401  (loaded before the fork; every worker inherits it)

if __name__ == "__main__":
    gc.freeze()
    manager()
