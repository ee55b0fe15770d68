"""Store crash matrix: a child process writes, is SIGKILLed at a random point, and the
recovered store is checked against what the child was told.

`python -m chaos.store_crash child ROOT MODE SEED` is the writer; `run_iteration()` is one
kill-and-check round, used by tests/store/test_crash_matrix.py (a few dozen seeds) and by
scripts/crash-soak (hundreds).

What is promised: under SYNC_FLUSH every PUT_OK message survives. A SIGKILL loses no page
cache, so ASYNC_FLUSH keeps them too; with the transient pool, bytes still in the write
buffer die with the process, so only a prefix of the acknowledged messages is promised.
In every mode the recovered queues must be contiguous, agree with the CommitLog record by
record, and the index must find every surviving key.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading

import attrs
import trio

from store import GetMessageStatus, Message, StoreConfig, open_store
from store.record_codec import RecordKind
from store.tools import verify

MODES = ("sync", "async", "async-pool")
TOPICS = ("CrashA", "CrashB")
QUEUES = 3


def config_for(root: str, mode: str) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=root,
        flush_disk_type="SYNC_FLUSH" if mode == "sync" else "ASYNC_FLUSH",
        transient_store_pool_enable=mode == "async-pool",
        transient_store_pool_size=3,
        mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * 200,
        max_hash_slot_num=211,
        max_index_num=2000,
        flush_interval_commit_log=20,
        commit_interval_commit_log=20,
    )


def body_of(seed: int, seq: int) -> bytes:
    return random.Random(seed * 1_000_003 + seq).randbytes(40 + (seq * 37) % 700)


def message_of(seed: int, seq: int) -> Message:
    rnd = random.Random(seed * 7 + seq)
    return Message(TOPICS[seq % 2], body_of(seed, seq), queue_id=rnd.randrange(QUEUES),
                   tags=f"t{seq % 3}", keys=[f"k-{seed}-{seq}"])


async def _child(root: str, mode: str, seed: int) -> None:
    rnd = random.Random(seed)
    seq = 0
    async with open_store(config_for(root, mode)) as store:
        out = sys.stdout
        while True:
            if rnd.random() < 0.15:  # a batch of one topic-queue
                first = message_of(seed, seq)
                batch = [first]
                for k in range(1, 4):
                    m = message_of(seed, seq + k)
                    batch.append(Message(first.topic, m.body, queue_id=first.queue_id, tags=m.tags, keys=m.keys))
                result = await store.put_messages(batch)
                seqs = list(range(seq, seq + len(batch)))
                queue = (first.topic, first.queue_id)
            else:
                msg = message_of(seed, seq)
                result = await store.put_message(msg)
                seqs = [seq]
                queue = (msg.topic, msg.queue_id)
            if result.status.value == "PUT_OK":
                ids = result.msg_id.split(",")
                for i, s in enumerate(seqs):
                    out.write(f"ACK {s} {queue[0]} {queue[1]} {result.queue_offset + i} {ids[i]}\n")
                out.flush()
            seq += len(seqs)


@attrs.define
class Ack:
    seq: int
    topic: str
    queue_id: int
    queue_offset: int
    msg_id: str


@attrs.define
class IterationReport:
    seed: int
    mode: str
    acked: int
    recovered_messages: int
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def _spawn_and_kill(root: str, mode: str, seed: int, kill_after: int, timeout: float = 60) -> list[Ack]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "chaos.store_crash", "child", root, mode, str(seed)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    assert proc.stdout is not None  # stdout=PIPE
    acks: list[Ack] = []
    # a child that stops printing would block the read below for ever: the watchdog kills
    # it at the deadline, which ends the read
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    try:
        for line in proc.stdout:
            parts = line.split()
            if parts and parts[0] == "ACK":
                acks.append(Ack(int(parts[1]), parts[2], int(parts[3]), int(parts[4]), parts[5]))
            if len(acks) >= kill_after:
                break
    finally:
        watchdog.cancel()
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    # killed by the watchdog is a crash point like any other; exiting on its own is not
    if len(acks) < kill_after and proc.returncode != -signal.SIGKILL:
        raise RuntimeError(f"crash child (seed {seed}, {mode}) exited early with {proc.returncode}")
    return acks


async def _check(root: str, mode: str, seed: int, acks: list[Ack]) -> IterationReport:
    problems: list[str] = []
    by_seq = {a.seq: a for a in acks}
    recovered = 0
    async with open_store(config_for(root, mode)) as store:
        # every record in the CommitLog agrees with its ConsumeQueue unit and the index
        seen_keys = set()
        offset = max(store.get_min_phy_offset(), 0)
        for rec_offset, decoded in store.commit_log.iter_records(offset, check_crc=True):
            if decoded.kind is RecordKind.INVALID:
                problems.append(f"invalid record at {rec_offset} after recovery: {decoded.error}")
                break
            if decoded.kind is RecordKind.BLANK:
                continue
            m = decoded.message
            assert m is not None  # a MESSAGE record decodes to its message
            recovered += 1
            cq = store.consume_queues.find(m.topic, m.queue_id)
            unit = cq.get_unit(m.queue_offset) if cq else None
            if unit is None or unit[0] != rec_offset or unit[1] != m.size:
                problems.append(f"ConsumeQueue {m.topic}-{m.queue_id}@{m.queue_offset} is {unit}, record at {rec_offset}")
            key = m.keys[0]
            if not any(q.commitlog_offset == rec_offset for q in store.query_message(m.topic, key, 4)):
                problems.append(f"index does not find key {key} at {rec_offset}")
            seen_keys.add(key)
        # queues are contiguous from their min offset
        for cq in store.consume_queues:
            for qo in range(cq.min_offset_in_queue, cq.max_offset_in_queue):
                res = store.get_message("check", cq.topic, cq.queue_id, qo, 1)
                if res.status is not GetMessageStatus.FOUND or res.messages[0].queue_offset != qo:
                    problems.append(f"queue {cq.topic}-{cq.queue_id} has a hole at {qo}: {res.status.value}")
                    break
        # what the child was told
        promised = sorted(by_seq)
        if mode == "async-pool":
            # bytes still in the write buffer died with the process: a prefix survives
            survived = [f"k-{seed}-{s}" in seen_keys for s in promised]
            if False in survived and any(survived[survived.index(False):]):
                problems.append(f"acknowledged messages lost out of order: first lost {promised[survived.index(False)]}")
            promised = [s for s, ok in zip(promised, survived, strict=True) if ok]
        for s in promised:
            a = by_seq[s]
            expected = body_of(seed, s)
            res = store.get_message("check", a.topic, a.queue_id, a.queue_offset, 1)
            if res.status is not GetMessageStatus.FOUND or res.messages[0].body != expected:
                problems.append(f"acked seq {s} not readable by queue {a.topic}-{a.queue_id}@{a.queue_offset}")
                continue
            by_id = store.look_message_by_msg_id(a.msg_id)
            if by_id is None or by_id.body != expected:
                problems.append(f"acked seq {s} not readable by msgId {a.msg_id}")
            if not any(m.body == expected for m in store.query_message(a.topic, f"k-{seed}-{s}", 4)):
                problems.append(f"acked seq {s} not found by key")
    summary = verify(root)
    if not summary["clean"]:
        problems.append(f"verify after recovery: {summary['damage'][:3]}")
    return IterationReport(seed, mode, len(acks), recovered, problems)


def run_iteration(root: str, seed: int, mode: str | None = None) -> IterationReport:
    """One round: write until a seeded random number of acks, SIGKILL, recover, check."""
    rnd = random.Random(seed)
    mode = mode or MODES[seed % len(MODES)]
    rounds = 1 + rnd.randrange(2)  # sometimes crash a store that already crashed once
    acks: list[Ack] = []
    for r in range(rounds):
        acks += _spawn_and_kill(root, mode, seed * 10 + r, rnd.randrange(20, 400))
        if r < rounds - 1:
            # the next writer continues after recovery: reseeded bodies, so keep only the last round's promise
            acks = []
    return trio.run(_check, root, mode, seed * 10 + rounds - 1, acks)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "child":
        os.makedirs(sys.argv[2], exist_ok=True)
        trio.run(_child, sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        sys.exit("usage: python -m chaos.store_crash child ROOT MODE SEED")
