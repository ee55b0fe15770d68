"""What the pull path's body CRC check costs per message (issue 45, `corrupt`): a store of
messages of one body size, pulled 32 at a time from its start, with the store's reads as they
were (`_trusting`, the read the simulation's `skip-crc` mutation puts back), as they are by
default (checkCrcOnRead=sealed: records in the active segment are trusted) and with
checkCrcOnRead=all (every body's CRC checked). Interleaved rounds, the best of each kept.

    PYTHONPATH=$PWD .venv/bin/python -m bench.read_crc [--body 200] [--messages 20000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import trio

from store import Message, StoreConfig, open_store
from store.message import StoredMessage
from store.message_store import MessageStore
from store.reads import MessageReads
from store.record_codec import RecordKind

TOPIC = "CrcBench"


def _trusting(self: MessageReads, commitlog_offset: int, size: int | None = None) -> StoredMessage | None:
    decoded = self.commit_log.read_record(commitlog_offset)
    if decoded is None or decoded.kind is not RecordKind.MESSAGE or (size is not None and decoded.size != size):
        return None
    return decoded.message


def pull_all(store: MessageStore, count: int) -> float:
    """Seconds to pull every message of queue 0, 32 a pull."""
    began = time.perf_counter()
    offset = got = 0
    while got < count:
        res = store.get_message("g", TOPIC, 0, offset, 32)
        got += len(res.messages)
        offset = res.next_begin_offset
    return time.perf_counter() - began


async def measure(body: int, count: int, rounds: int) -> dict[str, float]:
    """Seconds per message pulled: `trusting` (the reads before issue 45's corrupt), `sealed`
    (the default: these records lie in the active segment, so only the damage lookup runs)
    and `all` (checkCrcOnRead=all: every body's CRC). Rounds interleave the three, each
    variant's best kept."""
    with tempfile.TemporaryDirectory() as root:
        config = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=64 * 1024 * 1024)
        async with open_store(config) as store:
            payload = bytes(range(256)) * (body // 256 + 1)
            for _ in range(count):
                r = await store.put_message(Message(TOPIC, payload[:body]))
                assert r.ok, r.error
            while store.get_max_offset_in_queue(TOPIC, 0) < count:
                await trio.sleep(0.01)
            best: dict[str, float] = {}
            original = MessageReads.look_message_by_offset
            for i in range(rounds):
                variants = ["trusting", "sealed", "all"]
                for name in variants[i % 3:] + variants[:i % 3]:  # each goes first in turn
                    store.reads._check_all = name == "all"
                    if name == "trusting":
                        MessageReads.look_message_by_offset = _trusting  # type: ignore[method-assign]
                    try:
                        took = pull_all(store, count) / count
                    finally:
                        MessageReads.look_message_by_offset = original  # type: ignore[method-assign]
                    best[name] = min(best.get(name, took), took)
            store.reads._check_all = False
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--body", type=int, nargs="+", default=[200, 1024, 4096])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    for body in args.body:
        best = trio.run(measure, body, args.messages, args.rounds)
        base = best["trusting"]
        print(f"body {body:5d} B: trusting {base * 1e6:.2f} us/message; "
              + "; ".join(f"{name} {best[name] * 1e6:.2f} (+{(best[name] - base) * 1e6:.3f} us, "
                          f"{(best[name] / base - 1) * 100:+.1f} %)" for name in ("sealed", "all")))

if __name__ == "__main__":
    main()
