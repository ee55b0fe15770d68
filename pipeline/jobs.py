"""The `tidemq pipeline` jobs as functions over a SparkSession: export, stats, audit.

Each returns plain data (dicts and lists) that `pipeline.cli` prints; `Progress` shows a
running job's stages and tasks on a stream while it runs.
"""

from __future__ import annotations

import os
import re
import threading
import uuid
from collections.abc import Sequence
from typing import IO, Any

from pipeline.schema import CORRUPT_COLUMN

_HOST_PORT = re.compile(r"^[\w.-]+:\d+(;[\w.-]+:\d+)*$")


def is_namesrv(source: str) -> bool:
    """`host:port[;host:port]` that is not an existing path: a live cluster's name server."""
    return bool(_HOST_PORT.match(source)) and not os.path.exists(source)


def read_source(spark: Any, source: str, *, topic: str | None = None, options: dict[str, str] | None = None) -> Any:
    """A DataFrame of a store directory (path, glob, list) or of a live topic (name server)."""
    reader = spark.read.format("tidemq")
    for k, v in (options or {}).items():
        reader = reader.option(k, v)
    if is_namesrv(source):
        if not topic:
            raise ValueError("reading a live cluster needs --topic")
        return reader.option("namesrv", source).option("topic", topic).load()
    if topic:
        reader = reader.option("topics", topic)
    return reader.load(source)


class Progress:
    """Prints `[job] stage S: done/total tasks` lines while Spark jobs run (polls the status
    tracker from a thread; Spark's own console bar is off in the CLI's session), and at the
    end each stage's last count: the jobs run under a job group of their own, so a job
    quicker than one poll still shows what it did."""

    def __init__(self, spark: Any, label: str, out: IO[str], interval: float = 0.5) -> None:
        self.context = spark.sparkContext
        self.tracker = self.context.statusTracker()
        self.label = label
        self.out = out
        self.interval = interval
        self.group = f"tidemq-{label}-{uuid.uuid4().hex}"
        self._outer_group: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tidemq-progress")
        self._last: dict[int, tuple[int, int]] = {}

    def __enter__(self) -> Progress:
        self._outer_group = self.context.getLocalProperty("spark.jobGroup.id")
        self.context.setJobGroup(self.group, f"tidemq pipeline {self.label}")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        try:
            jobs = [self.tracker.getJobInfo(jid) for jid in self.tracker.getJobIdsForGroup(self.group)]
            self._report(sorted({sid for job in jobs if job is not None for sid in job.stageIds}), ran_only=True)
        except Exception:  # the session is stopping: nothing more to show
            pass
        self.context.setLocalProperty("spark.jobGroup.id", self._outer_group)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._report(self.tracker.getActiveStageIds())
            except Exception:  # the session is stopping: nothing more to show
                return

    def _report(self, stages: list[int], *, ran_only: bool = False) -> None:
        """A line for each stage whose count changed since its last line (`ran_only`: not
        for a stage that never ran a task, as one Spark skipped)."""
        for sid in stages:
            info = self.tracker.getStageInfo(sid)
            if info is None or (ran_only and info.numCompletedTasks == 0 and info.numActiveTasks == 0):
                continue
            state = (info.numCompletedTasks, info.numTasks)
            if self._last.get(sid) != state:
                self._last[sid] = state
                print(f"[{self.label}] stage {sid}: {state[0]}/{state[1]} tasks "
                      f"({info.numActiveTasks} running)", file=self.out, flush=True)


# ---------------------------------------------------------------------------------------
# export


def export(spark: Any, source: str, topic: str | None, to: str, *, fmt: str | None = None,
           options: dict[str, str] | None = None, overwrite: bool = False) -> dict[str, Any]:
    """Write the messages of `topic` (all topics when None) to `to` (parquet or json)."""
    fmt = fmt or ("json" if to.endswith((".json", ".jsonl")) else "parquet")
    if fmt not in ("parquet", "json"):
        raise ValueError(f"--format must be parquet or json, got {fmt!r}")
    df = read_source(spark, source, topic=topic, options=options)
    if fmt == "json":
        from pyspark.sql import functions as F

        df = df.withColumn("body", F.base64("body"))
    df.write.mode("overwrite" if overwrite else "errorifexists").format(fmt).save(to)
    written = spark.read.format(fmt).load(to)
    return {"source": source, "topic": topic, "to": to, "format": fmt, "rows": written.count()}


# ---------------------------------------------------------------------------------------
# stats


def stats(spark: Any, source: str, topic: str | None = None, *, bins: int = 24, top: int = 5,
          options: dict[str, str] | None = None) -> dict[str, Any]:
    """Per topic: messages, bytes, first/last store time, a store-time histogram of `bins`
    equal buckets over the whole time span, and the `top` most frequent keys."""
    from pyspark.sql import functions as F

    # bytes are CommitLog record bytes, which a store scan and a pull both carry, so the
    # body need not be read
    df = read_source(spark, source, topic=topic, options={**(options or {}), "includeBody": "false"})
    df = df.where(F.col("topic").isNotNull()).cache()
    try:
        per_topic = df.groupBy("topic").agg(
            F.count("*").alias("messages"), F.sum("size").alias("bytes"),
            F.min("store_timestamp").alias("first"), F.max("store_timestamp").alias("last"),
        ).collect()
        topics: dict[str, dict[str, Any]] = {
            r["topic"]: {"messages": r["messages"], "bytes": r["bytes"], "first_store_timestamp": r["first"],
                         "last_store_timestamp": r["last"], "histogram": [0] * bins, "top_keys": []}
            for r in per_topic
        }
        if not topics:
            return {"source": source, "topics": {}, "bins": []}
        lo = min(t["first_store_timestamp"] for t in topics.values())
        hi = max(t["last_store_timestamp"] for t in topics.values())
        width = max(1, -(-(hi - lo + 1) // bins))
        bucket = F.least(F.floor((F.col("store_timestamp") - F.lit(lo)) / F.lit(width)), F.lit(bins - 1))
        for r in df.groupBy("topic", bucket.alias("b")).count().collect():
            topics[r["topic"]]["histogram"][int(r["b"])] = r["count"]
        keyed = df.select("topic", F.explode("keys").alias("key")).groupBy("topic", "key").count()
        from pyspark.sql.window import Window

        ranked = keyed.withColumn(
            "rank", F.row_number().over(Window.partitionBy("topic").orderBy(F.desc("count"), "key")))
        for r in ranked.where(F.col("rank") <= top).orderBy("topic", "rank").collect():
            topics[r["topic"]]["top_keys"].append([r["key"], r["count"]])
    finally:
        df.unpersist()
    return {"source": source, "topics": topics, "bins": [lo + i * width for i in range(bins)],
            "bin_width_ms": width}


def stats_chart(result: dict[str, Any], path: str) -> None:
    """A PNG: messages per store-time bucket, one stacked bar series per topic."""
    import datetime as dt

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    starts = [dt.datetime.fromtimestamp(b / 1000, dt.UTC) for b in result["bins"]]
    width = dt.timedelta(milliseconds=result.get("bin_width_ms", 1)) * 0.9
    bottom = [0] * len(starts)
    for name, t in sorted(result["topics"].items()):
        # matplotlib's stubs type x and width as plain numbers; bar() converts datetime and
        # timedelta through its units registry (matplotlib.dates), as documented
        ax.bar(starts, t["histogram"], width=width, bottom=bottom,  # type: ignore[arg-type]
               label=f"{name} ({t['messages']})", align="edge")
        bottom = [a + b for a, b in zip(bottom, t["histogram"], strict=True)]
    ax.set_title(f"messages by store time: {result['source']}")
    ax.set_xlabel("store time (UTC)")
    ax.set_ylabel("messages")
    if result["topics"]:
        ax.legend(loc="upper left", fontsize="small")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


# ---------------------------------------------------------------------------------------
# audit


def audit(spark: Any, stores: Sequence[str], *, max_listed: int = 20) -> dict[str, Any]:
    """CRC and structure of every record of every store given (e.g. each node of a group),
    and, with several stores, where their CommitLogs diverge.

    Stores of one group hold the same bytes at the same offsets (replication copies them),
    so a record is compared by (offset, size, CRC, topic, queue, queue offset); a store
    that merely ends earlier is behind, not divergent."""
    from pyspark.sql import functions as F

    df = (spark.read.format("tidemq").option("mode", "PERMISSIVE").option("includeBody", "false")
          .load(",".join(stores))).cache()
    try:
        per = {r["source"]: r.asDict() for r in df.groupBy("source").agg(
            F.count(F.col("topic")).alias("records"),
            F.sum(F.when(F.col("crc_ok") == F.lit(False), 1).otherwise(0)).alias("bad_crc"),
            F.count(F.col(CORRUPT_COLUMN)).alias("problems"),
            F.max(F.when(F.col("topic").isNotNull(), F.col("commitlog_offset") + F.col("size"))).alias("end_offset"),
            F.min(F.when(F.col("topic").isNotNull(), F.col("commitlog_offset"))).alias("min_offset"),
        ).collect()}
        problems = [
            {"source": r["source"], "offset": r["commitlog_offset"], "problem": r[CORRUPT_COLUMN]}
            for r in df.where(F.col(CORRUPT_COLUMN).isNotNull()).orderBy("source", "commitlog_offset")
            .limit(max_listed).collect()
        ]
        divergence: dict[str, Any] = {"compared": len(per) > 1, "records": 0, "first_offset": None, "examples": []}
        if len(per) > 1:
            sig = F.concat_ws("/", "size", "body_crc", "topic", "queue_id", "queue_offset")
            common_lo = max(p["min_offset"] or 0 for p in per.values())
            common_hi = min(p["end_offset"] or 0 for p in per.values())
            rows = (df.where(F.col("topic").isNotNull())
                    .where((F.col("commitlog_offset") >= common_lo) & (F.col("commitlog_offset") < common_hi))
                    .groupBy("commitlog_offset")
                    .agg(F.collect_set(sig).alias("sigs"), F.collect_list("source").alias("sources"),
                         F.collect_list(sig).alias("by_source"))
                    .where((F.size("sigs") > 1) | (F.size("sources") < F.lit(len(per)))))
            divergence["records"] = rows.count()
            for r in rows.orderBy("commitlog_offset").limit(max_listed).collect():
                divergence["examples"].append({"offset": r["commitlog_offset"],
                                               "records": dict(zip(r["sources"], r["by_source"], strict=True))})
            if divergence["examples"]:
                divergence["first_offset"] = divergence["examples"][0]["offset"]
            divergence["common_range"] = [common_lo, common_hi]
    finally:
        df.unpersist()
    stores_out = {s: per.get(s, {"records": 0, "bad_crc": 0, "problems": 0, "end_offset": None})
                  for s in sorted(per)}
    clean = all(not p["bad_crc"] and not p["problems"] for p in stores_out.values()) and not divergence["records"]
    return {"stores": stores_out, "problems": problems, "divergence": divergence, "clean": clean}
