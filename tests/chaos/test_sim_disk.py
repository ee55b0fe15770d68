"""The simulation's disk model (chaos/sim/disk.py) on real files: what the store's seams
(store/runtime.py) report as synced survives a power loss, what was only written may not,
page by page, the same way for the same seed; and the checkpoint's claim is judged against
the durable CommitLog (chaos/sim/power.py)."""

from __future__ import annotations

import errno
import os
import random
import struct

import pytest
import trio
import trio.testing

from chaos.sim.disk import PAGE, SECTOR, SimDisk
from chaos.sim.power import checkpoint_claims, logics_claims, records
from store import Message, StoreConfig, runtime
from store.durable import write_durably
from store.layout import StoreToolError
from store.mapped_file import MappedFile
from store.markers import AbortFile
from store.message_store import MessageStore, open_store
from store.queue_tools import dump_queue
from store.record_codec import encode_record, patch_record
from store.tools import verify


class Host:
    """A runtime.Gate with a disk model: what the store's seams report goes to it."""

    killed = False
    disk_delay = 0.0

    def __init__(self, disk: SimDisk) -> None:
        self.disk = disk

    async def wait_running(self) -> None:
        return None


def _write(path: str, data: bytes, at: int = 0) -> None:
    with open(path, "r+b" if os.path.exists(path) else "wb") as f:
        f.seek(at)
        f.write(data)


def test_the_store_s_syncs_reach_the_model_and_only_under_simulation(tmp_path):
    root = str(tmp_path)
    disk = SimDisk(root)
    mf = MappedFile(os.path.join(root, "00000000000000000000"), 4 * PAGE)
    try:
        mf.append(b"a" * 100)
        mf.flush(0)  # not simulated: nobody is told
        assert disk.images == {}
        with runtime.simulated(0.0):
            runtime.hosted(Host(disk))
            mf.append(b"b" * 100)
            mf.flush(0)
            write_durably(os.path.join(root, "topics.json"), b"{}", backup=True)
            AbortFile(os.path.join(root, "abort")).create()
        assert disk.images["00000000000000000000"][:200] == b"a" * 100 + b"b" * 100
        assert disk.images["topics.json"] == b"{}"
        assert disk.images["abort"] == b""  # created durably: a power loss cannot take it
    finally:
        mf.destroy(0)


def test_a_power_loss_keeps_what_was_synced_and_draws_each_unsynced_page(tmp_path):
    root = str(tmp_path)
    disk = SimDisk(root)
    path = os.path.join(root, "seg")
    _write(path, bytes(8 * PAGE))
    _write(path, b"D" * (2 * PAGE))
    disk.synced(path)  # pages 0-1 durable
    _write(path, b"N" * (5 * PAGE), at=2 * PAGE)  # pages 2-6 only in the page cache
    _write(os.path.join(root, "never"), b"x" * 10)
    losses = {loss.path: loss for loss in disk.power_loss(random.Random(7))}
    with open(path, "rb") as f:
        after = f.read()
    assert after[:2 * PAGE] == b"D" * (2 * PAGE) and len(after) == 8 * PAGE
    loss = losses["seg"]
    assert sorted(loss.kept + loss.dropped + ([loss.torn[0]] if loss.torn else [])) == [2, 3, 4, 5, 6]
    for page in loss.kept:
        assert after[page * PAGE:(page + 1) * PAGE] == b"N" * PAGE
    for page in loss.dropped:
        assert after[page * PAGE:(page + 1) * PAGE] == bytes(PAGE)
    if loss.torn is not None:
        page, sectors = loss.torn
        assert after[page * PAGE:(page + 1) * PAGE] == b"N" * (sectors * SECTOR) + bytes(PAGE - sectors * SECTOR)
    never = losses["never"]
    assert never.removed != os.path.exists(os.path.join(root, "never"))
    assert disk.durable("seg") == after  # after the loss, what is on disk is durable


def test_the_same_seed_loses_the_same_pages(tmp_path):
    outcomes = []
    for run in ("one", "two"):
        root = str(tmp_path / run)
        os.makedirs(root)
        disk = SimDisk(root)
        path = os.path.join(root, "seg")
        _write(path, bytes(16 * PAGE))
        disk.synced(path)
        _write(path, bytes(range(256)) * (12 * PAGE // 256), at=PAGE)
        described = [loss.describe() for loss in disk.power_loss(random.Random("seed 5"))]
        with open(path, "rb") as f:
            outcomes.append((described, f.read()))
    assert outcomes[0] == outcomes[1]
    assert "kept" in outcomes[0][0][0] and "dropped" in outcomes[0][0][0]


def _record_bytes(offset: int, timestamp: int) -> bytes:
    """One CommitLog record at `offset` stored at `timestamp`, encoded by the store itself."""
    raw = encode_record(Message(topic="T", body=b"body", queue_id=0), "127.0.0.1:10911", 4096)
    patch_record(raw, queue_offset=0, physical_offset=offset, store_timestamp=timestamp)
    return bytes(raw)


@pytest.mark.parametrize(("claimed_ms", "beyond"), [(1_000, 0), (2_500, 1)])
def test_the_checkpoint_may_claim_only_what_the_commitlog_made_durable(claimed_ms, beyond):
    first = _record_bytes(0, 1_000)
    second = _record_bytes(len(first), 2_000)
    segment = "00000000000000000000"
    durable = first + bytes(PAGE)
    written = first + second + bytes(PAGE)
    current = records({segment: written})
    assert sorted(current) == [0, len(first)]
    images = {f"commitlog/{segment}": durable, "checkpoint": struct.pack(">q", claimed_ms) + bytes(PAGE - 8)}
    assert len(checkpoint_claims(images, current)) == beyond


def _write_then_lose_power(root: str, flush: str, draw: int) -> list[int]:
    """A store written under simulation, abandoned (SIGKILL), its power lost with draw
    `draw`, then recovered; the CommitLog offsets of the puts that returned."""
    config = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=256 * 1024,
                         mapped_file_size_consume_queue=6000, flush_disk_type=flush,
                         max_hash_slot_num=500, max_index_num=2000)
    disk = SimDisk(root)
    rng = random.Random(draw)
    returned: list[int] = []

    async def write() -> None:
        with runtime.simulated(0.0):
            runtime.hosted(Host(disk))
            store = MessageStore(config)
            store.load()
            async with trio.open_nursery() as nursery:
                await store.start(nursery)
                for i in range(rng.randint(1, 200)):
                    r = await store.put_message(Message(topic="T", body=b"m%d" % i * 30, queue_id=i % 4,
                                                        keys=(f"k{i}",)))
                    returned.append(r.commitlog_offset)
                    if rng.random() < 0.05:
                        await trio.sleep(rng.uniform(0, 3))  # virtual: let periodic flushes run
                store.abandon()
                nursery.cancel_scope.cancel()

    async def recover() -> None:
        with runtime.simulated(0.0):
            async with open_store(config):
                await trio.sleep(5)  # virtual: dispatch catches up

    trio.run(write, clock=trio.testing.MockClock(autojump_threshold=0))
    disk.power_loss(random.Random(f"power {draw}"))
    trio.run(recover, clock=trio.testing.MockClock(autojump_threshold=0))
    return returned


@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_a_lone_store_recovers_consistent_from_any_page_draw(flush, tmp_path):
    """Write, abandon (SIGKILL), lose power with a different draw each time, recover: every
    record left passes CRC, every ConsumeQueue unit points at its record in order, and (with
    SYNC_FLUSH) every put that returned is still there."""
    for draw in range(6):
        root = str(tmp_path / f"{flush}-{draw}")
        returned = _write_then_lose_power(root, flush, draw)
        summary = verify(root)
        assert not summary["badCrcs"] and not summary["damage"], (draw, summary)
        kept = set()
        for queue in range(4):
            try:
                units = list(dump_queue(root, "T", queue))
            except StoreToolError:
                continue  # the queue's file never became durable: rebuilt empty
            offsets = [u["queueOffset"] for u in units]
            assert offsets == list(range(offsets[0], offsets[0] + len(offsets))) if offsets else True, (draw, queue)
            assert not [u for u in units if "error" in u], (draw, queue)
            kept.update(u["offset"] for u in units)
        if flush == "SYNC_FLUSH":
            assert set(returned) <= kept, (draw, sorted(set(returned) - kept)[:3])


@pytest.mark.parametrize(("logics_ms", "beyond"), [(1_500, 0), (2_500, 1)])
def test_the_checkpoint_may_claim_only_the_consumequeue_units_made_durable(logics_ms, beyond):
    first = _record_bytes(0, 1_000)
    second = _record_bytes(len(first), 2_000)
    current = records({"00000000000000000000": first + second + bytes(PAGE)}, dispatched=True)
    unit = struct.pack(">qiq", 0, len(first), 0)  # only the first record's unit is durable
    images = {"consumequeue/T/0/00000000000000000000": unit + bytes(20),
              "checkpoint": struct.pack(">qq", 0, logics_ms) + bytes(PAGE - 16)}
    assert len(logics_claims(images, current)) == beyond


async def test_a_failed_sync_raises_eio_and_loses_its_pages_for_good(tmp_path):
    """`fail_next_sync`: the store's next fdatasync of a file in the folder raises EIO, nothing
    of it becomes durable, and a later sync that succeeds still lacks the pages the failure
    lost (fsyncgate) unless they were written again; a power loss drops them."""
    root = str(tmp_path)
    os.mkdir(os.path.join(root, "commitlog"))
    disk = SimDisk(root)
    mf = MappedFile(os.path.join(root, "commitlog", "00000000000000000000"), 4 * PAGE)
    try:
        with runtime.simulated(0.0):
            runtime.hosted(Host(disk))
            mf.append(b"a" * PAGE)
            mf.flush(0)
            mf.append(b"b" * PAGE)  # page 1
            disk.fail_next_sync("commitlog")
            with pytest.raises(OSError) as failed:
                mf.flush(0)
            assert failed.value.errno == errno.EIO and mf.flushed_position == PAGE
            rel = os.path.join("commitlog", "00000000000000000000")
            assert [(f, size) for f, _at, size in disk.failed] == [(rel, PAGE)] and disk.failing is None
            mf.append(b"c" * PAGE)  # page 2: the next sync succeeds and writes it, not page 1
            mf.flush(0)
            assert disk.durable(rel)[:3 * PAGE] == b"a" * PAGE + b"\0" * PAGE + b"c" * PAGE
    finally:
        mf.close()
    losses = disk.power_loss(random.Random(1))
    assert [loss.dropped for loss in losses] == [[1]]
    with open(os.path.join(root, rel), "rb") as f:
        assert f.read(3 * PAGE) == b"a" * PAGE + b"\0" * PAGE + b"c" * PAGE


async def test_a_cut_and_a_deleted_segment_stay_gone_after_a_power_loss(tmp_path):
    """Seed 38 with `--storage`: a slave's cut came back at its next power loss (the zeroed
    tail was never synced), and a ConsumeQueue segment deleted by the cut and created again
    under the same name came back with the deleted file's content."""
    root = str(tmp_path)
    disk = SimDisk(root)
    path = os.path.join(root, "00000000000000000000")
    with runtime.simulated(0.0):
        runtime.hosted(Host(disk))
        mf = MappedFile(path, 2 * PAGE)
        mf.append(b"a" * 3000)
        mf.flush(0)
        mf.zero_tail(1000)  # a rejoining node's cut (recovery.truncate(sync=True)): synced
        mf.sync()
        assert disk.durable("00000000000000000000").rstrip(b"\0") == b"a" * 1000
        mf.destroy(0)
        again = MappedFile(path, 2 * PAGE)  # the same name, new content, never synced
        again.append(b"b" * 100)
        again.shutdown(0)
        again.destroy(0)
        assert disk.durable("00000000000000000000") is None


def test_recovery_after_a_crash_makes_what_it_trusts_durable(tmp_path):
    """A SIGKILLed store's ConsumeQueues hold what it wrote, maybe only in the page cache;
    recovery trusts them, so it syncs them before the checkpoint can claim them (seeds 45, 103, 127 with
    `--storage`: ConsumeQueue units a later power loss took although the checkpoint claimed them)."""
    root = str(tmp_path)
    config = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=256 * 1024,
                         mapped_file_size_consume_queue=6000, flush_disk_type="ASYNC_FLUSH")
    disk = SimDisk(root)

    async def crash_then_load() -> None:
        store = MessageStore(config)  # not simulated: no disk model sees these writes
        store.load()
        async with trio.open_nursery() as nursery:
            await store.start(nursery)
            for i in range(20):
                assert (await store.put_message(Message(topic="T", body=b"x" * 40, queue_id=i % 2))).ok
            await trio.sleep(1)  # virtual: dispatch catches up
            store.abandon()
            nursery.cancel_scope.cancel()
        with runtime.simulated(0.0):
            runtime.hosted(Host(disk))
            again = MessageStore(config)
            again.load()  # the abort file is there: a crash
            again.close()

    trio.run(crash_then_load, clock=trio.testing.MockClock(autojump_threshold=0))
    queues = [rel for rel in disk.images if rel.startswith("consumequeue/T/")]
    assert len(queues) == 2 and all(disk.images[rel].rstrip(b"\0") for rel in queues)
