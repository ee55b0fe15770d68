"""Store put-path benchmark for `scripts/bench store`: prints ONE JSON object.

Figures (per body size, 128 B and 1 KiB):
- ASYNC_FLUSH, single puts and batches of 32: puts/s and MB/s of record bytes, against the
  ceiling of a bare Python loop copying the same record bytes into an mmap
  (`mm[pos:pos+n] = data`), and of the least a Python put could do (CRC, pack, join,
  copy: `floor_python_put`); each put yields to trio once, so ConsumeQueue dispatch runs
  inside the timed loop;
- SYNC_FLUSH with 1, 16 and 64 concurrent producers (trio tasks): against the ceiling of
  `os.write` + `os.fdatasync` per record on a plain file (what one producer could get with
  no group commit). A ratio above 1 means group commit beat one fsync per record.

Every store lives in a fresh temp dir under --dir (default: the system temp dir) that is
removed afterwards. Counts and durations are modest: the whole run takes well under 2 min.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import mmap
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import trio  # noqa: E402

from store import FlushDiskType, Message, StoreConfig, accel, open_store  # noqa: E402
from store.record_codec import encode_record, masked_crc32, prepare_record, record_parts

MiB = 1024 * 1024
SIZES = {"128B": 128, "1KiB": 1024}
SEGMENT = 128 * MiB
STORE_HOST = "127.0.0.1:10911"


def _body(n: int) -> bytes:
    return bytes((i * 31 + 7) % 251 for i in range(n))


def _record_len(body: bytes) -> int:
    return len(encode_record(Message("BenchTopic", body), STORE_HOST, 4 * MiB))


def _figure(count: int, seconds: float, record_len: int, body_len: int) -> dict:
    """mb_s counts whole records (what reaches the log); body_mb_s only the bodies."""
    puts_s = count / seconds if seconds > 0 else 0.0
    return {
        "puts": count,
        "seconds": round(seconds, 3),
        "puts_s": round(puts_s, 1),
        "mb_s": round(puts_s * record_len / MiB, 2),
        "body_mb_s": round(puts_s * body_len / MiB, 2),
    }


def _config(root: str, flush: FlushDiskType) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=root,
        store_host=STORE_HOST,
        mapped_file_size_commit_log=SEGMENT,
        flush_disk_type=flush,
        message_index_enable=False,
    )


# ---- ceilings ------------------------------------------------------------------------------


@contextlib.contextmanager
def _scratch_map(workdir: str, name: str, size: int) -> Iterator[mmap.mmap]:
    """A fresh file of `size` bytes mapped shared, removed afterwards."""
    path = os.path.join(workdir, name)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, size)
        with mmap.mmap(fd, size) as mm:
            yield mm
    finally:
        os.close(fd)
        os.unlink(path)


def ceiling_mmap(workdir: str, record: bytes, body_len: int, count: int) -> dict:
    n = len(record)
    with _scratch_map(workdir, "ceiling.mmap", count * n) as mm:
        pos = 0
        t0 = time.perf_counter()
        for _ in range(count):
            mm[pos : pos + n] = record
            pos += n
        elapsed = time.perf_counter() - t0
    return _figure(count, elapsed, n, body_len)


def floor_python_put(workdir: str, body: bytes, count: int) -> dict:
    """The least any pure-Python put does per message, with nothing else: CRC the body,
    pack the fixed fields with the record's offsets, join the record and copy it into an
    mmap. No validation, no queue offset table, no trio, no dispatch. Its ratio to the
    bare copy loop bounds what a Python put path can reach."""
    rec = prepare_record(Message("BenchTopic", body), STORE_HOST, 4 * MiB)
    n = rec.total
    with _scratch_map(workdir, "floor.mmap", count * n) as mm:
        pos = 0
        t0 = time.perf_counter()
        for i in range(count):
            masked_crc32(body)
            mm[pos : pos + n] = b"".join(record_parts(rec, i, pos, 0))
            pos += n
        elapsed = time.perf_counter() - t0
    return _figure(count, elapsed, n, len(body))


def ceiling_fdatasync(workdir: str, record: bytes, body_len: int, seconds: float) -> dict:
    path = os.path.join(workdir, "ceiling.sync")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    count = 0
    try:
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while True:
            os.write(fd, record)
            os.fdatasync(fd)
            count += 1
            if time.perf_counter() >= deadline:
                break
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    return _figure(count, elapsed, len(record), body_len)


# ---- store figures ---------------------------------------------------------------------------


async def bench_async(workdir: str, body: bytes, count: int, batch: int) -> dict:
    root = tempfile.mkdtemp(prefix="async-", dir=workdir)
    try:
        async with open_store(_config(root, FlushDiskType.ASYNC_FLUSH)) as store:
            msgs = [Message("BenchTopic", body, queue_id=0) for _ in range(batch)]
            rounds = count // batch
            t0 = time.perf_counter()
            if batch == 1:
                msg = msgs[0]
                for _ in range(rounds):
                    r = await store.put_message(msg)
                    if not r.ok:
                        raise SystemExit(f"put failed: {r.status.value}: {r.error}")
            else:
                for _ in range(rounds):
                    r = await store.put_messages(msgs)
                    if not r.ok:
                        raise SystemExit(f"batch put failed: {r.status.value}: {r.error}")
            elapsed = time.perf_counter() - t0
        return _figure(rounds * batch, elapsed, _record_len(body), len(body))
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def bench_sync(workdir: str, body: bytes, producers: int, seconds: float) -> dict:
    root = tempfile.mkdtemp(prefix="sync-", dir=workdir)
    try:
        async with open_store(_config(root, FlushDiskType.SYNC_FLUSH)) as store:
            count = 0
            before = store.group_commit.flush_count
            msg = Message("BenchTopic", body, queue_id=0)
            t0 = time.perf_counter()
            deadline = t0 + seconds

            async def producer() -> None:
                nonlocal count
                while time.perf_counter() < deadline:
                    r = await store.put_message(msg)
                    if not r.ok:
                        raise SystemExit(f"put failed: {r.status.value}: {r.error}")
                    count += 1

            async with trio.open_nursery() as nursery:
                for _ in range(producers):
                    nursery.start_soon(producer)
            elapsed = time.perf_counter() - t0
            flushes = store.group_commit.flush_count - before
        figure = _figure(count, elapsed, _record_len(body), len(body))
        figure["fdatasyncs"] = flushes
        figure["puts_per_fdatasync"] = round(count / flushes, 1) if flushes else None
        return figure
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def bench_reads(workdir: str, count: int, index_keys: int, producers: int) -> dict:
    """Read side (1 KiB bodies): get_message msgs/s at 32 per call against puts/s into the
    same store; key queries/s on an index holding `index_keys` keys; dispatch lag (put
    return → visible in its queue) p50/p99 with `producers` concurrent producers."""
    root = tempfile.mkdtemp(prefix="reads-", dir=workdir)
    body = _body(1024)
    try:
        config = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=SEGMENT)
        async with open_store(config) as store:
            t0 = time.perf_counter()
            for i in range(count):
                r = await store.put_message(Message("ReadTopic", body, queue_id=i % 4))
                assert r.ok
            put_s = count / (time.perf_counter() - t0)
            with trio.fail_after(60):
                while store.dispatch_behind_bytes():
                    await trio.sleep(0.01)  # poll: let dispatch finish before timing reads
            t0 = time.perf_counter()
            read = 0
            for q in range(4):
                offset = 0
                while True:
                    res = store.get_message("bench", "ReadTopic", q, offset, 32)
                    if not res.messages:
                        break
                    read += len(res.messages)
                    offset = res.next_begin_offset
            read_s = read / (time.perf_counter() - t0)

            # dispatch lag under concurrent producers
            lags: list[float] = []

            async def producer(k: int) -> None:
                for _ in range(count // (producers * 4)):
                    r = await store.put_message(Message("LagTopic", body, queue_id=k))
                    returned = time.perf_counter()
                    await store.wait_for_message("LagTopic", k, r.queue_offset, timeout=5)
                    lags.append(time.perf_counter() - returned)

            async with trio.open_nursery() as nursery:
                for k in range(producers):
                    nursery.start_soon(producer, k)
            lags.sort()

        config = StoreConfig(store_path_root_dir=os.path.join(root, "idx"), mapped_file_size_commit_log=SEGMENT)
        async with open_store(config) as store:
            for i in range(0, index_keys, 32):
                r = await store.put_messages([Message("KeyTopic", b"k", keys=[f"key-{j}"]) for j in range(i, i + 32)])
                assert r.ok
            with trio.fail_after(120):
                while store.dispatch_behind_bytes():
                    await trio.sleep(0.01)  # poll: the index must hold every key first
            probes = [f"key-{(i * 7919) % index_keys}" for i in range(5000)]
            t0 = time.perf_counter()
            hits = sum(len(store.query_message("KeyTopic", k, 1)) for k in probes)
            query_s = len(probes) / (time.perf_counter() - t0)
        return {
            "messages": count,
            "puts_s": round(put_s, 1),
            "get_message_msgs_s": round(read_s, 1),
            "reads_vs_puts": round(read_s / put_s, 2),
            "index_keys": index_keys,
            "key_queries_s": round(query_s, 1),
            "key_query_hits": hits,
            "dispatch_lag_producers": producers,
            "dispatch_lag_ms": {"p50": round(lags[len(lags) // 2] * 1000, 3),
                                "p99": round(lags[int(len(lags) * 0.99)] * 1000, 3)},
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _ratio(figure: dict, ceiling: dict) -> float | None:
    return round(figure["puts_s"] / ceiling["puts_s"], 3) if ceiling["puts_s"] else None


async def run(args: argparse.Namespace) -> dict:
    os.makedirs(args.dir, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="tidemq-bench-", dir=args.dir)
    out: dict = {
        "benchmark": "store",
        "codec": accel.implementation(),  # compiled (store._accel) or pure (TIDEMQ_PURE=1)
        "python": platform.python_version(),
        "platform": platform.platform(),
        "dir": args.dir,
        "segment_bytes": SEGMENT,
        "async_puts": args.async_puts,
        "sync_seconds": args.sync_seconds,
        "sizes": {},
    }
    t_start = time.perf_counter()
    try:
        for name, n in SIZES.items():
            body = _body(n)
            record = bytes(encode_record(Message("BenchTopic", body), STORE_HOST, 4 * MiB))
            mm_ceiling = ceiling_mmap(workdir, record, n, args.async_puts)
            sync_ceiling = ceiling_fdatasync(workdir, record, n, args.sync_seconds)
            res: dict = {"body_bytes": n, "record_bytes": len(record)}
            res["ceiling_mmap_copy"] = mm_ceiling
            floor = floor_python_put(workdir, body, args.async_puts)
            floor["ratio_to_ceiling"] = _ratio(floor, mm_ceiling)
            res["floor_python_put"] = floor
            res["ceiling_write_fdatasync"] = sync_ceiling
            for label, batch in (("async_single", 1), ("async_batch32", 32)):
                fig = await bench_async(workdir, body, args.async_puts, batch)
                fig["ratio_to_ceiling"] = _ratio(fig, mm_ceiling)
                res[label] = fig
            for producers in (1, 16, 64):
                fig = await bench_sync(workdir, body, producers, args.sync_seconds)
                fig["ratio_to_ceiling"] = _ratio(fig, sync_ceiling)
                res[f"sync_{producers}_producers"] = fig
            out["sizes"][name] = res
        out["reads"] = await bench_reads(workdir, args.async_puts, args.index_keys, 16)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    out["total_seconds"] = round(time.perf_counter() - t_start, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench store", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=tempfile.gettempdir(),
                        help="where the temporary stores go (default: %(default)s)")
    parser.add_argument("--async-puts", type=int, default=50_000,
                        help="messages per ASYNC_FLUSH figure (default: %(default)s)")
    parser.add_argument("--sync-seconds", type=float, default=3.0,
                        help="duration of each SYNC_FLUSH figure and of the fsync ceiling "
                        "(default: %(default)s)")
    parser.add_argument("--index-keys", type=int, default=1_000_000,
                        help="keys in the index for the key-query figure (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.async_puts < 32 or args.sync_seconds <= 0:
        parser.error("--async-puts must be >= 32 and --sync-seconds > 0")
    result = trio.run(run, args)
    json.dump(result, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
