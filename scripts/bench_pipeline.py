"""`scripts/bench pipeline`: batch-scan rows/s of a >= 2 GiB store on Spark local[2], beside
the project's single-process decoder in the same run, and streaming end-to-end lag.

Scan: a store of 1 KiB messages (4 topics, keys, tags) is written segment by segment with
the store's encoder (`store.message.prepare_record` / `record_parts`, BLANK fillers as a
broker writes them, 1 GiB segments). Then, on the same files:
- `decoder_1proc`: `store.message.decode_record` (with the CRC check) over every record in
  this process: the project's own single-process decoder;
- `scan_1proc`: `pipeline.store_scan.scan` in this process (the same decoder plus Arrow
  batches: what one Spark task does);
- `spark`: `spark.read.format("tidemq")` on local[2], every column produced (a Python data
  source cannot prune columns), aggregated so that every row is read; one cold and one
  warm run.
Lag: the 1m-1s-dev layout as real processes; a producer sends at a steady rate while a
streaming query (default trigger) reads the topic; per row, lag = time its micro-batch
reached the driver's sink - born timestamp. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import trio

from pipeline import local_session, store_scan
from store import accel, tools
from store.message import (
    Message,
    RecordKind,
    decode_record,
    encode_blank,
    prepare_record,
    record_parts,
)

REPO = Path(__file__).resolve().parents[1]
GiB = 1 << 30
BODY = 1024
SEGMENT = GiB
STORE_HOST = "127.0.0.1:10911"
AIM_ROWS_PER_S = 1_000_000
AIM_PER_CORE_RATIO = 1.5


def write_store(root: Path, total_bytes: int) -> dict:
    """CommitLog segments holding at least `total_bytes` of 1 KiB-body records."""
    cl = root / "commitlog"
    cl.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    queue_offsets: dict[tuple[str, int], int] = {}
    seg_start, pos, written, n = 0, 0, 0, 0
    f = open(cl / f"{seg_start:020d}", "wb")  # noqa: SIM115 (rolled below)
    chunk: list[bytes] = []
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
            f = open(cl / f"{seg_start:020d}", "wb")  # noqa: SIM115
        q = queue_offsets.get((topic, qid), 0)
        queue_offsets[(topic, qid)] = q + 1
        chunk.extend(record_parts(rec, q, seg_start + pos, base_ts + n // 100))
        pos += rec.total
        written += rec.total
        n += 1
        if len(chunk) > 3000:
            f.write(b"".join(chunk))
            chunk = []
    f.write(b"".join(chunk))
    f.truncate(SEGMENT)
    f.close()
    return {"records": n, "bytes": written, "segments": seg_start // SEGMENT + 1,
            "write_seconds": round(time.perf_counter() - t0, 1)}


def bench_decoder(root: Path) -> dict:
    """`store.message.decode_record` (CRC checked) over every record, segment by segment,
    in this process: the project's own decoder with nothing around it."""
    rows = 0
    t0 = time.perf_counter()
    for _, path in tools.iter_segments(root):
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            pos = 0
            while True:
                d = decode_record(buf, pos, check_crc=True)
                if d.kind is not RecordKind.MESSAGE:
                    break
                rows += 1
                pos += d.size
    elapsed = time.perf_counter() - t0
    return {"rows": rows, "seconds": round(elapsed, 2), "rows_per_s": round(rows / elapsed)}


def bench_scan_1proc(root: Path) -> dict:
    t0 = time.perf_counter()
    rows = sum(b.num_rows for b in store_scan.scan([str(root)], store_scan.ScanOptions()))
    elapsed = time.perf_counter() - t0
    return {"rows": rows, "seconds": round(elapsed, 2), "rows_per_s": round(rows / elapsed)}


def bench_spark(spark, root: Path) -> dict:
    from pyspark.sql import functions as F

    df = spark.read.format("tidemq").load(str(root))
    runs = []
    for _ in range(2):
        t0 = time.perf_counter()
        row = df.agg(F.count("*").alias("rows"), F.sum("size").alias("bytes"),
                     F.sum(F.length("body")).alias("body_bytes")).collect()[0]
        elapsed = time.perf_counter() - t0
        runs.append({"rows": row["rows"], "seconds": round(elapsed, 2), "rows_per_s": round(row["rows"] / elapsed)})
    return {"partitions": df.rdd.getNumPartitions(), "cold": runs[0], "warm": runs[1]}


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
            born = [r[0] for r in df.select("born_timestamp").collect()]
            now = time.time() * 1000
            lags.extend(now - b for b in born)
            batches.append(len(born))

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench pipeline", description=__doc__)
    parser.add_argument("--gib", type=float, default=2.0, help="store size in GiB (default 2)")
    parser.add_argument("--dir", help="work directory; a store already there is reused (default: temp, removed)")
    parser.add_argument("--rate", type=int, default=200, help="producer rate for the lag run (msgs/s)")
    parser.add_argument("--lag-seconds", type=float, default=10.0, help="duration of the lag run (0: skip)")
    args = parser.parse_args(argv)
    work = Path(args.dir or tempfile.mkdtemp(prefix="tidemq-bench-pipeline-"))
    root = work / "store"
    t0 = time.perf_counter()
    try:
        marker = root / "bench.json"
        if marker.exists():
            store = json.loads(marker.read_text())
        else:
            shutil.rmtree(root, ignore_errors=True)
            store = write_store(root, int(args.gib * GiB))
            marker.write_text(json.dumps(store))
        decoder = bench_decoder(root)
        one = bench_scan_1proc(root)
        spark = local_session("tidemq-bench", **{"spark.ui.showConsoleProgress": "false"})
        try:
            sp = bench_spark(spark, root)
            lag = bench_lag(spark, work, args.rate, args.lag_seconds) if args.lag_seconds > 0 else None
        finally:
            spark.stop()
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    warm = sp["warm"]["rows_per_s"]
    per_core = warm / 2
    print(json.dumps({
        "benchmark": "pipeline", "codec": accel.implementation(), "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
        "message_body_bytes": BODY, "store": store, "decoder_1proc": decoder, "scan_1proc": one, "spark_local2": sp,
        "aim": {
            "rows_per_s": AIM_ROWS_PER_S, "measured_rows_per_s": warm, "met_rows_per_s": warm >= AIM_ROWS_PER_S,
            "spark_per_core_vs_decoder": round(decoder["rows_per_s"] / per_core, 2),
            "met_within_1_5x_per_core": decoder["rows_per_s"] / per_core <= AIM_PER_CORE_RATIO,
        },
        "streaming_lag": lag, "total_seconds": round(time.perf_counter() - t0, 1),
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
