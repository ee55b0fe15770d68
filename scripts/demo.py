"""Embedded-store demo for `scripts/run`: write messages under ./data/demo, read them back
through the ConsumeQueue and by key, and print the store's stats as JSON."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import trio

from store import GetMessageStatus, Message, StoreConfig, open_store


async def demo(root: str, count: int) -> dict:
    config = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=16 * 1024 * 1024,
                         mapped_file_size_consume_queue=30_000 * 20)
    async with open_store(config) as store:
        start_max = store.get_max_offset_in_queue("DemoTopic", 0)
        t0 = time.perf_counter()
        last = None
        for i in range(count):
            last = await store.put_message(
                Message("DemoTopic", f"hello tidemq #{i}".encode(), queue_id=0, tags="demo", keys=[f"demo-{i}"])
            )
            if not last.ok:
                raise SystemExit(f"put failed: {last.status.value}: {last.error}")
        put_s = time.perf_counter() - t0
        await store.wait_for_message("DemoTopic", 0, start_max + count - 1, timeout=5)
        got = store.get_message("demo", "DemoTopic", 0, start_max, 32)
        assert got.status is GetMessageStatus.FOUND, got.status
        by_key = store.query_message("DemoTopic", f"demo-{count - 1}", 1)
        return {
            "store": os.path.abspath(root),
            "sent": count,
            "puts_per_s": round(count / put_s),
            "last_msg_id": last.msg_id,
            "read_back": [m.body.decode() for m in got.messages[:3]],
            "read_status": got.status.value,
            "by_key": [m.body.decode() for m in by_key],
            "queue": {"min": got.min_offset, "max": got.max_offset},
            "commitlog": {"min": store.get_min_phy_offset(), "max": store.get_max_phy_offset()},
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/run", description=__doc__)
    parser.add_argument("--dir", default="data/demo", help="store root (default ./data/demo)")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--stop", action="store_true", help="stop what scripts/run started")
    args = parser.parse_args(argv)
    if args.stop:
        print("the embedded demo runs in the foreground; nothing is left running")
        return 0
    print(json.dumps(trio.run(demo, args.dir, args.count), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
