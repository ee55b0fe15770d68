"""`scripts/bench pipeline`: the `tidemq` data source against the floor of PySpark's Python
Data Source API, in one Spark session, on a generated store of >= 1 GiB; planning; the jobs'
start; streaming lag. Prints one JSON object with the figures, the ratios and the goals.

- store: 1 KiB messages (4 topics, 8 queues each, keys, tags) written segment by segment
  with the store's encoder, BLANK fillers as a broker writes them, 1 GiB segments, and the
  ConsumeQueues a broker's dispatch would write;
- `arrow_1proc`: `pipeline.store_scan` turning the whole store into Arrow batches in this
  process (what one Spark task does), full schema and `includeBody=false`; an untimed pass,
  then `--runs` passes, the best counting;
- `planning`: `store_scan.plan` (what the driver's planner runs) on the store and on one
  `--plan-gib` times as large;
- `spark`: local[2], `noop` writes of `format("tidemq")` and of `format("tidemq_floor")`
  (bench/spark_floor.py: the same batches, prebuilt before timing and held in the Python
  workers' memory), full schema and without bodies; one untimed run each, then `--runs`
  rounds of the four interleaved, the best counts; rows/s and MB/s of store bytes;
- `jobs`: `tidemq pipeline stats | audit | export` on a 200-message store, wall clock as a
  user runs them, beside a process that only starts Spark and runs one trivial query;
- `streaming_lag`: the 1m-1s-dev layout as real processes; a producer sends at a steady
  rate while a streaming query reads the topic; lag = the micro-batch done at the driver's
  sink - the message's store time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import trio

from bench import spark_floor
from pipeline import local_session, store_scan
from store import accel
from store.consume_queue import UNIT
from store.layout import commitlog_dir, consumequeue_dir, queue_dir, segment_name
from store.message import Message, tags_code
from store.record_codec import encode_blank, prepare_record, record_parts

REPO = Path(__file__).resolve().parents[1]
GiB = 1 << 30
BODY = 1024
SEGMENT = GiB
STORE_HOST = "127.0.0.1:10911"
GOAL_SPARK_RATIO = 0.85
GOAL_ARROW_ROWS_PER_S = 1_000_000
GOAL_PLAN_SECONDS = {1: 0.1, 10: 0.5}
GOAL_JOB_SECONDS = 15.0


def write_store(root: Path, total_bytes: int) -> dict:
    """CommitLog segments holding at least `total_bytes` of 1 KiB-body records."""
    cl = Path(commitlog_dir(root))
    cl.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    queue_offsets: dict[tuple[str, int], int] = {}
    seg_start, pos, written, n = 0, 0, 0, 0
    f = open(cl / segment_name(seg_start), "wb")  # noqa: SIM115 (rolled below)
    chunk: list[bytes] = []
    units: dict[tuple[str, int], list[bytes]] = {}
    base_ts = int(time.time() * 1000) - 3_600_000
    body = bytearray(os.urandom(BODY))
    while written < total_bytes:
        topic, qid = f"Bench{n % 4}", n % 8
        body[:8] = n.to_bytes(8, "big")
        rec = prepare_record(Message(topic, bytes(body), queue_id=qid, tags=f"t{n % 3}", keys=[f"key-{n % 1000}"]),
                             STORE_HOST, 4 * 1024 * 1024)
        if rec.total + 8 > SEGMENT - pos:
            chunk.append(encode_blank(SEGMENT - pos))
            f.write(b"".join(chunk))
            chunk = []
            f.truncate(SEGMENT)
            f.close()
            seg_start, pos = seg_start + SEGMENT, 0
            f = open(cl / segment_name(seg_start), "wb")  # noqa: SIM115
        q = queue_offsets.get((topic, qid), 0)
        queue_offsets[(topic, qid)] = q + 1
        chunk.extend(record_parts(rec, q, seg_start + pos, base_ts + n // 100))
        units.setdefault((topic, qid), []).append(UNIT.pack(seg_start + pos, rec.total, tags_code(f"t{n % 3}")))
        pos += rec.total
        written += rec.total
        n += 1
        if len(chunk) > 3000:
            f.write(b"".join(chunk))
            chunk = []
    f.write(b"".join(chunk))
    f.truncate(SEGMENT)
    f.close()
    for (topic, qid), queue in units.items():  # one file holds 300,000 units
        qdir = Path(queue_dir(consumequeue_dir(root), topic, qid))
        qdir.mkdir(parents=True, exist_ok=True)
        for k in range(0, len(queue), 300_000):
            (qdir / segment_name(k * UNIT.size)).write_bytes(b"".join(queue[k:k + 300_000]))
    return {"records": n, "bytes": written, "segments": seg_start // SEGMENT + 1,
            "write_seconds": round(time.perf_counter() - t0, 1)}


def bench_arrow_1proc(root: Path, include_body: bool, runs: int) -> dict:
    """The whole store as Arrow batches, in this process: one untimed pass (as the Spark
    cases have: imports, the buffer pool), then `runs` passes, the best counting."""
    opts = store_scan.ScanOptions(include_body=include_body)
    times = []
    for i in range(runs + 1):
        t0 = time.perf_counter()
        rows = sum(b.num_rows for b in store_scan.scan([str(root)], opts))
        if i:
            times.append(time.perf_counter() - t0)
    elapsed = min(times)
    return {"rows": rows, "seconds": round(elapsed, 2), "runs_seconds": [round(t, 2) for t in times],
            "rows_per_s": round(rows / elapsed), "us_per_row": round(elapsed / rows * 1e6, 3)}


def bench_plan(root: Path, store: dict, runs: int = 3) -> dict:
    """`store_scan.plan` as the driver's planner runs it (best of `runs`, page cache warm)."""
    best, parts = float("inf"), 0
    for _ in range(runs):
        t0 = time.perf_counter()
        parts = len(store_scan.plan([str(root)], store_scan.ScanOptions()))
        best = min(best, time.perf_counter() - t0)
    return {"store_bytes": store["bytes"], "partitions": parts, "seconds": round(best, 4)}


def bench_spark(spark, root: Path, store: dict, floor_dir: Path, runs: int) -> dict:
    """noop writes of the tidemq source and the floor, full schema and without bodies."""
    cases = {
        "floor": spark.read.format("tidemq_floor").load(str(floor_dir)),
        "tidemq": spark.read.format("tidemq").load(str(root)),
        "floor_null_body": spark.read.format("tidemq_floor").option("nullBody", "true").load(str(floor_dir)),
        "tidemq_no_body": spark.read.format("tidemq").option("includeBody", "false").load(str(root)),
    }
    rows, size = store["records"], store["bytes"]
    for df in cases.values():  # untimed: the JIT, the floor's worker memory
        df.write.format("noop").mode("overwrite").save()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):  # interleaved, so that a noisy moment does not fall on one case
        for name, df in cases.items():
            t0 = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            times[name].append(time.perf_counter() - t0)
    out = {}
    for name, df in cases.items():
        best = min(times[name])
        out[name] = {"partitions": df.rdd.getNumPartitions(), "seconds": round(best, 2),
                     "runs_seconds": [round(t, 2) for t in times[name]], "rows_per_s": round(rows / best),
                     "store_mb_per_s": round(size / best / 1e6)}
    out["ratio_full"] = round(out["tidemq"]["rows_per_s"] / out["floor"]["rows_per_s"], 3)
    out["ratio_no_body"] = round(out["tidemq_no_body"]["rows_per_s"] / out["floor_null_body"]["rows_per_s"], 3)
    return out


def bench_jobs(work: Path) -> dict:
    """Wall clock of the three jobs on a 200-message store, as a user runs them, and of a
    process that only starts a local session and runs one trivial query (Spark's start)."""
    small = work / "small"
    if not (small / "bench.json").exists():
        shutil.rmtree(small, ignore_errors=True)
        (small / "bench.json").parent.mkdir(parents=True)
        info = write_store(small, 200 * 1100)
        (small / "bench.json").write_text(json.dumps(info))
    tidemq = [sys.executable, "-m", "tidemq"]
    commands = {
        "spark_start": [sys.executable, "-c", "from pipeline import local_session\n"
                        "local_session('start').range(1).count()"],
        "stats": [*tidemq, "pipeline", "stats", str(small)],
        "audit": [*tidemq, "pipeline", "audit", str(small), str(small)],
        "export": [*tidemq, "pipeline", "export", str(small), "--to", str(work / "small-export.parquet")],
    }
    out = {}
    for name, cmd in commands.items():
        shutil.rmtree(work / "small-export.parquet", ignore_errors=True)
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        out[name] = {"seconds": round(time.perf_counter() - t0, 1), "exit": done.returncode}
        if done.returncode:
            out[name]["stderr_tail"] = done.stderr.strip().splitlines()[-3:]
    return out


# ---------------------------------------------------------------------------------------
# streaming lag


def bench_lag(spark, work: Path, rate: int, seconds: float) -> dict:
    from cluster.client import Admin, Producer
    from cluster.launch import launcher

    conf, base = work / "lag" / "conf", work / "lag" / "data"
    launcher.copy_layout(REPO / "conf" / "1m-1s-dev", conf, overrides={"broker-a": {"brokerRole": "ASYNC_MASTER"}})
    results = launcher.up(conf, base)
    try:
        namesrv = next(r.record.address for r in results if r.record.stage is launcher.Stage.NAMESRV)

        async def create() -> None:
            async with Admin(namesrv=namesrv) as admin:
                await admin.create_topic("BenchLag", read_queue_nums=4, write_queue_nums=4)
                with trio.fail_after(20):
                    while True:
                        try:
                            await admin.route("BenchLag", refresh=True)
                            return
                        except Exception:
                            await trio.sleep(0.1)  # poll

        trio.run(create)
        lags: list[float] = []
        batches: list[int] = []
        sent = [0]

        def on_batch(df, batch_id: int) -> None:
            stored = [r[0] for r in df.select("store_timestamp").collect()]
            now = time.time() * 1000  # the micro-batch is at the driver's sink: committed next
            lags.extend(now - t for t in stored)
            batches.append(len(stored))

        query = (spark.readStream.format("tidemq").option("namesrv", namesrv).option("topic", "BenchLag")
                 .option("startingOffsets", "latest").load().writeStream.foreachBatch(on_batch).start())
        while not query.recentProgress:  # the first (empty) batch fixed the start offsets
            query.awaitTermination(0.2)

        async def produce() -> None:
            async with Producer(namesrv=namesrv) as producer:
                t0 = trio.current_time()
                for i in range(int(rate * seconds)):
                    await trio.sleep_until(t0 + i / rate)
                    await producer.send("BenchLag", os.urandom(BODY))
                    sent[0] += 1

        producer = threading.Thread(target=trio.run, args=(produce,))
        producer.start()
        producer.join()
        deadline = time.monotonic() + 120
        while len(lags) < sent[0] and time.monotonic() < deadline:
            query.awaitTermination(0.2)
        query.stop()
    finally:
        launcher.down(base)
    lags.sort()

    def pct(q: float) -> float:
        return round(lags[min(len(lags) - 1, int(q * len(lags)))] / 1000, 3) if lags else -1.0

    return {"rate_msgs_per_s": rate, "seconds": seconds, "sent": sent[0], "received": len(lags),
            "micro_batches": len(batches), "lag_p50_s": pct(0.5), "lag_p99_s": pct(0.99), "lag_max_s": pct(1.0)}


def ensure_store(root: Path, gib: float) -> dict:
    marker = root / "bench.json"
    if marker.exists() and json.loads(marker.read_text()).get("gib") == gib:
        return json.loads(marker.read_text())
    shutil.rmtree(root, ignore_errors=True)
    store = {**write_store(root, int(gib * GiB)), "gib": gib}
    marker.write_text(json.dumps(store))
    return store


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench pipeline", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=1.0, help="store size in GiB (default 1; at least 1 for the goals)")
    parser.add_argument("--plan-gib", type=float, default=10.0,
                        help="a second store, planned only (default 10; 0: skip)")
    parser.add_argument("--dir", help="work directory; stores already there are reused (default: temp, removed)")
    parser.add_argument("--runs", type=int, default=3, help="Spark runs per case, the best counts (default 3)")
    parser.add_argument("--rate", type=int, default=200, help="producer rate for the lag run (msgs/s)")
    parser.add_argument("--lag-seconds", type=float, default=10.0, help="duration of the lag run (0: skip)")
    parser.add_argument("--skip-jobs", action="store_true", help="do not time the three jobs")
    args = parser.parse_args(argv)
    work = Path(args.dir or tempfile.mkdtemp(prefix="tidemq-bench-pipeline-"))
    root = work / "store"
    t0 = time.perf_counter()
    try:
        store = ensure_store(root, args.gib)
        planning = {"store": bench_plan(root, store)}
        if args.plan_gib > 0:
            large = ensure_store(work / "store-plan", args.plan_gib)
            planning["large_store"] = bench_plan(work / "store-plan", large)
        arrow = {"full": bench_arrow_1proc(root, True, args.runs), "no_body": bench_arrow_1proc(root, False, args.runs)}
        floor_dir = work / "floor"
        if not floor_dir.exists():
            spark_floor.prebuild([str(root)], str(floor_dir), store_scan.ScanOptions())
        spark = local_session("tidemq-bench", **{"spark.ui.showConsoleProgress": "false"})
        try:
            spark_floor.register(spark)
            sp = bench_spark(spark, root, store, floor_dir, args.runs)
            lag = bench_lag(spark, work, args.rate, args.lag_seconds) if args.lag_seconds > 0 else None
        finally:
            spark.stop()
        jobs = None if args.skip_jobs else bench_jobs(work)
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    goals = {
        "spark_full_vs_floor": _goal(sp["ratio_full"], ">=", GOAL_SPARK_RATIO),
        "spark_no_body_vs_floor_null_body": _goal(sp["ratio_no_body"], ">=", GOAL_SPARK_RATIO),
        "arrow_1proc_rows_per_s": _goal(arrow["full"]["rows_per_s"], ">=", GOAL_ARROW_ROWS_PER_S),
    }
    for result in planning.values():
        gib = round(result["store_bytes"] / GiB)
        if gib in GOAL_PLAN_SECONDS:
            goals[f"plan_{gib}_gib_seconds"] = _goal(result["seconds"], "<=", GOAL_PLAN_SECONDS[gib])
    for name in ("stats", "audit", "export"):
        if jobs:
            goals[f"job_{name}_seconds"] = _goal(jobs[name]["seconds"], "<=", GOAL_JOB_SECONDS)
    print(json.dumps({
        "benchmark": "pipeline", "codec": accel.implementation(), "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2), "message_body_bytes": BODY, "store": store,
        "planning": planning, "arrow_1proc": arrow, "spark_local2": sp, "jobs": jobs,
        "streaming_lag": lag, "goals": goals, "total_seconds": round(time.perf_counter() - t0, 1),
    }, indent=2))
    return 0


def _goal(value: float, op: str, aim: float) -> dict:
    return {"value": value, "goal": f"{op} {aim}", "met": value >= aim if op == ">=" else value <= aim}


if __name__ == "__main__":
    sys.exit(main())
