"""Child process for test_crash.py: writes to a SYNC_FLUSH store until it is killed.

    python -m tests.store.crash_writer DIR SEED [PRODUCERS]

After each PUT_OK it prints "offset size seq" (size = record bytes) and flushes stdout, so
every line the parent reads is a message the store acknowledged as durable. Bodies are a
function of (SEED, seq): see `body_for`.
"""

from __future__ import annotations

import random
import sys

import trio

from store import FlushDiskType, Message, PutMessageStatus, StoreConfig, open_store

SEGMENT = 64 * 1024
TOPICS = ("CrashA", "CrashB")


def store_config(root: str) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=SEGMENT,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        mapped_file_size_consume_queue=1000 * 20,
    )


def body_for(seed: int, seq: int) -> bytes:
    rnd = random.Random(seed * 1_000_003 + seq)
    return rnd.randbytes(rnd.randint(0, 6000))


def message_for(seed: int, seq: int) -> Message:
    return Message(TOPICS[seq % 2], body_for(seed, seq), queue_id=seq % 3, keys=[f"k{seq}"])


async def main(root: str, seed: int, producers: int) -> None:
    counter = iter(range(1 << 62))
    out = sys.stdout

    async def producer() -> None:
        while True:
            seq = next(counter)
            r = await store.put_message(message_for(seed, seq))
            if r.status is not PutMessageStatus.PUT_OK:
                print(f"put {seq} failed: {r.status.value}: {r.error}", file=sys.stderr, flush=True)
                continue
            out.write(f"{r.commitlog_offset} {r.append.wrote_bytes} {seq}\n")
            out.flush()

    async with open_store(store_config(root)) as store, trio.open_nursery() as nursery:
        for _ in range(producers):
            nursery.start_soon(producer)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 4)
