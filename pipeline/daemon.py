"""The daemon Spark's executors fork their Python workers from (`spark.python.daemon.module`,
set by `local_session`): PySpark's own daemon, with tidemq's data source, pyarrow and
PySpark's worker imported once before it forks, so a new worker starts with them loaded
instead of importing them again (each import is ~0.5 s of a short job's first task). The
imported objects are then frozen (gc.freeze, as the gc docs advise before forking
workers): a worker's garbage collections no longer walk them, and their pages stay shared.

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` (and py4j's zip) first on its workers'
PYTHONPATH. With pip's pyspark that zip holds the same sources as the installed package, but
an import from a zip compiles every module again (no bytecode cache: ~1.2 s of CPU for
PySpark's worker), and each new worker re-reads the zip's directory of ~1,500 entries when
it adds Spark's files directory to its path (importlib.invalidate_caches). So when the
installed package is importable, the daemon drops those zips from its path before it imports
anything from them, and its workers inherit that path. A worker with PySpark only in the zip
(a cluster node without pip's pyspark) keeps it."""

import importlib.machinery
import sys


def _drop_shadowing_zips() -> None:
    """Remove each `<package>...zip` entry of sys.path whose package (pyspark, py4j) is
    importable from a directory entry of sys.path as well."""
    dirs = [p for p in sys.path if not p.endswith(".zip")]
    for package in ("pyspark", "py4j"):
        zips = [p for p in sys.path if p.endswith(".zip") and p.rsplit("/", 1)[-1].startswith(package)]
        if zips and importlib.machinery.PathFinder.find_spec(package, dirs) is not None:
            for p in zips:
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
