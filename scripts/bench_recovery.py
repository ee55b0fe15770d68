"""`scripts/bench recovery`: time to recover a store of N MiB (default 2048) of 1 KiB
messages, after a clean exit and after a crash, as MB/s of CommitLog validated. Prints JSON."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import trio

from store import Message, StoreConfig
from store.message_store import MessageStore, open_store


async def fill(config: StoreConfig, total_bytes: int) -> int:
    body = os.urandom(1024)
    async with open_store(config) as store:
        n = 0
        while store.get_max_phy_offset() < total_bytes:
            batch = [Message("BenchRecovery", body, queue_id=(n // 32) % 8, keys=[f"k{n + i}"]) for i in range(32)]
            result = await store.put_messages(batch)
            assert result.ok, result.error
            n += 32
        return n


def timed_load(config: StoreConfig, crashed: bool) -> dict:
    if crashed:
        open(config.path("abort"), "wb").close()
        os.unlink(config.path("checkpoint"))  # nothing is known safe: validate everything
    store = MessageStore(config)
    t0 = time.perf_counter()
    store.load()
    seconds = time.perf_counter() - t0
    queue = store.commit_log.queue
    end = store.get_max_phy_offset()
    if crashed:
        validated = end - queue.files[0].file_from_offset
    else:
        validated = end - queue.files[max(0, len(queue.files) - 3)].file_from_offset
    store.commit_log.shutdown()
    store.consume_queues.shutdown()
    if store.index is not None:
        store.index.shutdown()
    store.checkpoint.shutdown()
    store.lock.release()
    return {
        "exit": "crash" if crashed else "clean",
        "validated_mb": round(validated / 2**20, 1),
        "load_seconds": round(seconds, 3),
        "validated_mb_per_s": round(validated / 2**20 / seconds, 1),
        "last_exit_ok": store.last_exit_ok,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench recovery", description=__doc__)
    parser.add_argument("--size-mb", type=int, default=2048)
    parser.add_argument("--dir", default=None, help="work directory (default: a temp dir, removed after)")
    args = parser.parse_args(argv)
    work = args.dir or tempfile.mkdtemp(prefix="tidemq-bench-recovery-")
    try:
        config = StoreConfig(store_path_root_dir=os.path.join(work, "store"))
        t0 = time.perf_counter()
        messages = trio.run(fill, config, args.size_mb * 2**20)
        fill_s = time.perf_counter() - t0
        results = [timed_load(config, crashed=False), timed_load(config, crashed=True)]
        print(json.dumps({
            "benchmark": "recovery",
            "store_mb": args.size_mb,
            "messages": messages,
            "message_body_bytes": 1024,
            "fill_seconds": round(fill_s, 1),
            "recoveries": results,
            "aim_mb_per_s": 200,
        }, indent=2))
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
