"""Builds the class-data-sharing archive pipeline.spark_cds names: `python -m
pipeline.spark_cds_build PATH`, started in the background by the first local session
(`--detach PATH`), or `--ensure`: the archive for this Java and PySpark, now, unless it is
there (scripts/test, before the suite)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pipeline import local_session
from pipeline.spark_cds import QUIET


def build(path: Path) -> bool:
    """Build the archive at `path` (in this process's JVM's exit); True when it is there."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    work = Path(tempfile.mkdtemp(prefix="tidemq-cds-"))
    try:
        spark = local_session("tidemq-cds", **{
            "spark.driver.extraJavaOptions": f"-XX:ArchiveClassesAtExit={tmp} {QUIET}",
            "spark.ui.showConsoleProgress": "false"})
        _exercise(spark, work)
        gateway = spark.sparkContext._gateway
        spark.stop()
        gateway.shutdown()
        proc = gateway.proc
        proc.stdin.close()  # the JVM exits when its stdin closes, writing the archive
        code = proc.wait(timeout=300)
        if code == 0 and tmp.is_file() and tmp.stat().st_size > 0:
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
        shutil.rmtree(work, ignore_errors=True)
    return path.is_file()


def _exercise(spark: object, work: Path) -> None:
    """Read a small store, aggregate, write Parquet: the classes tidemq's jobs load."""
    from pyspark.sql import functions as F

    from store.layout import commitlog_dir, segment_name
    from store.message import Message
    from store.record_codec import encode_record, patch_record

    seg = bytearray()
    for i in range(20):
        rec = encode_record(Message(f"T{i % 2}", b"x" * 64, tags="t", keys=[f"k{i}"]), "127.0.0.1:1", 1 << 20)
        patch_record(rec, i, len(seg), 1_700_000_000_000 + i)
        seg += rec
    segments = Path(commitlog_dir(work / "store"))
    segments.mkdir(parents=True)
    (segments / segment_name(0)).write_bytes(bytes(seg) + bytes(4096))
    df = spark.read.format("tidemq").load(str(work / "store"))  # type: ignore[attr-defined]
    df.groupBy("topic").agg(F.count("*"), F.sum("size"), F.min("store_time")).collect()
    df.select("topic", F.explode("keys")).groupBy("topic").count().orderBy("topic").collect()
    df.write.mode("overwrite").parquet(str(work / "out.parquet"))
    df.withColumn("body", F.base64("body")).write.mode("overwrite").json(str(work / "out.json"))


def detach(path: Path) -> None:
    """Start the build in its own session and return: the builder is re-parented to init,
    and its pid goes into the lock file."""
    with open(os.devnull, "wb") as null:
        proc = subprocess.Popen([sys.executable, "-m", "pipeline.spark_cds_build", str(path)],
                                stdin=subprocess.DEVNULL, stdout=null, stderr=null, start_new_session=True)
    path.with_suffix(".building").write_text(str(proc.pid))


KEEP = 4
"""Archives kept in the cache directory (one per Java and PySpark installation); building
another removes the oldest beyond these (~180 MB each)."""


def remove_old(path: Path, keep: int = KEEP) -> None:
    """All but the `keep` newest archives next to `path` (other installations' ones)."""
    archives = sorted(path.parent.glob("spark-*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in archives[keep:]:
        with contextlib.suppress(OSError):
            old.unlink()


def remove_stale(path: Path) -> None:
    """Temporary archives of builders that are gone (killed mid-dump)."""
    import psutil

    for tmp in path.parent.glob(f"{path.name}.*.tmp"):
        pid = tmp.name[len(path.name) + 1:-len(".tmp")]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            with contextlib.suppress(OSError):
                tmp.unlink()


if __name__ == "__main__":
    if sys.argv[1] == "--detach":
        detach(Path(sys.argv[2]))
        sys.exit(0)
    if sys.argv[1] == "--ensure":  # scripts/test: build it now, in the foreground, if missing
        from pipeline.spark_cds import archive_path, enabled

        target = archive_path()
        if not enabled() or target.is_file():
            sys.exit(0)
        target.parent.mkdir(parents=True, exist_ok=True)
    else:
        target = Path(sys.argv[1])
    try:
        remove_stale(target)
        ok = build(target)
        if ok:
            remove_old(target)
    finally:
        with contextlib.suppress(OSError):
            target.with_suffix(".building").unlink()
    sys.exit(0 if ok else 1)
