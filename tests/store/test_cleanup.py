"""Expired-file cleanup (store/cleanup.py): CommitLog deletion by age in the deleteWhen hour,
by disk usage at each threshold, manually; reader-held segments; ConsumeQueue and index
cleanup after the CommitLog minimum moved; DISK_FULL; the put path on a really full disk.

Real stores on real files. The designed seams are injected: the clock (wall time: hour of
day and mtime comparisons) and the disk-usage probe. Passes are run with run_once(), never
by waiting for the loop; delete_commit_log_files_interval is 0.
"""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys

import psutil
import pytest
import trio

from store import (
    FlushDiskType,
    GetMessageStatus,
    Message,
    MessageStore,
    PutMessageStatus,
    StoreConfig,
    open_store,
)
from store.cleanup import (
    MAX_MANUAL_DELETE_FILE_TIMES,
    CleanCommitLogService,
    CleanConsumeQueueService,
    disk_partition_used_ratio,
    is_hour_in,
    used_ratio,
)
from store.running_flags import RunningFlags

SEG = 4096
CQ_UNITS = 10
BODY = 1000  # ~1100-byte records: 3 per CommitLog segment
RESERVED_H = 72
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def config(root, **kw) -> StoreConfig:
    opts = dict(
        store_path_root_dir=str(root),
        # a put returns once flushed: cleanup only deletes flushed and dispatched segments
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        mapped_file_size_commit_log=SEG,
        mapped_file_size_consume_queue=CQ_UNITS * 20,
        max_hash_slot_num=8,
        max_index_num=10,  # 9 keys per index file
        file_reserved_time=RESERVED_H,
        delete_when="04",
        delete_commit_log_files_interval=0,
        delete_consume_queue_files_interval=0,
    )
    opts.update(kw)
    return StoreConfig(**opts)


def local_ts(hour: int, minute: int = 30, second: int = 0) -> float:
    """Tomorrow at hour:minute local time: real mtimes (now) are then < 72 h old."""
    day = datetime.date.today() + datetime.timedelta(days=1)
    return datetime.datetime(day.year, day.month, day.day, hour, minute, second).timestamp()


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Disk:
    """The injected probe: returns `ratio` for every path and records what was asked."""

    def __init__(self, ratio: float = 0.5) -> None:
        self.ratio = ratio
        self.paths: set[str] = set()

    def __call__(self, path: str) -> float:
        self.paths.add(path)
        return self.ratio


def body(i: int) -> bytes:
    return f"{i:05d}".encode() + bytes((i + j) % 251 for j in range(BODY - 5))


async def fill(store, segments: int, start: int = 0) -> list:
    """Put messages (key k<i>) until the CommitLog has `segments` segments; returns the results."""
    results = []
    i = start
    while len(store.commit_log.queue.files) < segments:
        r = await store.put_message(Message("T", body(i), keys=(f"k{i}",)))
        assert r.ok, r.error
        results.append(r)
        i += 1
    settle(store)
    return results


def settle(store) -> None:
    """Dispatch everything written so far to the queues and the index (deterministic: the
    dispatcher runs on this thread; no waiting)."""
    store.reput.do_reput()


def names(store) -> list[str]:
    return [mf.file_name for mf in store.commit_log.queue.files]


def seg_name(n: int) -> str:
    return f"{n * SEG:020d}"


def seg_path(root, n: int) -> str:
    return os.path.join(str(root), "commitlog", seg_name(n))


def age(root, segments, clock: Clock, hours: float) -> None:
    """Set the mtime of CommitLog segments to `hours` before the injected now."""
    t = clock.now - hours * 3600
    for n in segments:
        os.utime(seg_path(root, n), (t, t))


def read_queue(store, topic="T", queue_id=0, offset=None) -> list:
    """Pull everything from `offset` (default: the queue's min) to the end."""
    offset = store.get_min_offset_in_queue(topic, queue_id) if offset is None else offset
    out = []
    while True:
        res = store.get_message("g", topic, queue_id, offset, 32)
        if res.status is GetMessageStatus.OFFSET_OVERFLOW_ONE:
            return out
        assert res.status is GetMessageStatus.FOUND, res.status
        out += res.messages
        offset = res.next_begin_offset


# ---- helpers ----------------------------------------------------------------------------


def test_used_ratio_rounds_up_to_a_percent():
    assert used_ratio(0, 100) == 0.0
    assert used_ratio(1, 99) == 0.01
    assert used_ratio(101, 9899) == 0.02  # 1.01 % -> 2 %
    assert used_ratio(75, 25) == 0.75
    assert used_ratio(100, 0) == 1.0
    assert used_ratio(0, 0) == -1.0


def test_default_probe_reads_the_partition(tmp_path):
    path = tmp_path / "store" / "commitlog"
    ratio = disk_partition_used_ratio(str(path))
    assert path.is_dir()  # created first, as RocketMQ does
    u = psutil.disk_usage(str(path))
    assert ratio == pytest.approx(used_ratio(u.used, u.free), abs=0.011)
    assert 0 < ratio <= 1 and round(ratio, 2) == ratio
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"x")
    assert disk_partition_used_ratio(str(blocker / "sub")) == -1.0


def test_delete_when_hours():
    assert is_hour_in("04", 4) and not is_hour_in("04", 5)
    assert is_hour_in("04;05", 5) and is_hour_in("4;23", 23) and not is_hour_in("04;05", 3)


# ---- by age, in the deleteWhen hour ----------------------------------------------------


async def test_expired_segments_deleted_only_in_the_delete_when_hour(tmp_path):
    clock = Clock(local_ts(10))
    async with open_store(config(tmp_path), clock=clock, disk_usage=Disk(0.5)) as store:
        await fill(store, 6)
        age(tmp_path, range(3), clock, RESERVED_H + 7)  # still expired at 04:30, 6 h earlier
        before = names(store)
        assert await store.clean_commit_log.run_once() == 0  # 10:30: not the hour
        assert names(store) == before
        clock.now = local_ts(4)
        assert await store.clean_commit_log.run_once() == 3
        assert names(store) == before[3:]  # the three oldest, and only those
        for n in range(6):
            assert os.path.exists(seg_path(tmp_path, n)) == (n >= 3)
        assert store.get_min_phy_offset() == 3 * SEG
        assert await store.clean_commit_log.run_once() == 0  # the rest are young


async def test_reserved_time_boundary(tmp_path):
    clock = Clock(local_ts(4))
    async with open_store(config(tmp_path), clock=clock, disk_usage=Disk(0.5)) as store:
        await fill(store, 3)
        age(tmp_path, [0], clock, RESERVED_H - 0.01)
        assert await store.clean_commit_log.run_once() == 0
        age(tmp_path, [0], clock, RESERVED_H)  # now >= mtime + reserved: expired
        assert await store.clean_commit_log.run_once() == 1


async def test_stops_at_the_first_kept_and_never_deletes_the_newest(tmp_path):
    clock = Clock(local_ts(4))
    async with open_store(config(tmp_path), clock=clock, disk_usage=Disk(0.5)) as store:
        await fill(store, 5)
        age(tmp_path, [0, 1, 3, 4], clock, 100)  # 2 is young, 4 (newest) is old
        assert await store.clean_commit_log.run_once() == 2
        assert names(store) == [seg_name(n) for n in (2, 3, 4)]  # no hole at 2
        age(tmp_path, [2], clock, 100)
        assert await store.clean_commit_log.run_once() == 2
        assert names(store) == [seg_name(4)]  # the newest stays, however old
        assert await store.clean_commit_log.run_once() == 0
        assert os.path.exists(seg_path(tmp_path, 4))


async def test_at_most_ten_segments_a_pass(tmp_path):
    clock = Clock(local_ts(4))
    async with open_store(config(tmp_path), clock=clock, disk_usage=Disk(0.5)) as store:
        await fill(store, 15)
        age(tmp_path, range(15), clock, 100)
        assert await store.clean_commit_log.run_once() == 10
        assert names(store)[0] == seg_name(10)
        assert await store.clean_commit_log.run_once() == 4
        assert names(store) == [seg_name(14)]
        assert store.clean_commit_log.deleted_total == 14


# ---- by disk usage ---------------------------------------------------------------------


async def test_below_the_max_ratio_nothing_happens_outside_the_hour(tmp_path):
    clock, disk = Clock(local_ts(10)), Disk(0.5)
    async with open_store(config(tmp_path), clock=clock, disk_usage=disk) as store:
        await fill(store, 4)
        age(tmp_path, range(4), clock, 100)
        assert await store.clean_commit_log.run_once() == 0
        assert not store.flags.is_set(RunningFlags.DISK_FULL)
        # both partitions are probed: the CommitLog's and the ConsumeQueues'
        assert disk.paths == {str(tmp_path / "commitlog"), str(tmp_path / "consumequeue")}


async def test_over_the_max_ratio_deletes_expired_segments_at_any_hour(tmp_path):
    clock = Clock(local_ts(10))
    async with open_store(config(tmp_path), clock=clock, disk_usage=Disk(0.80)) as store:
        await fill(store, 5)
        age(tmp_path, [0, 1], clock, 100)
        assert await store.clean_commit_log.run_once() == 2
        assert names(store)[0] == seg_name(2)  # young segments are kept
        assert not store.clean_commit_log.clean_immediately
        assert not store.flags.is_set(RunningFlags.DISK_FULL)


async def test_over_the_forcibly_ratio_deletes_from_the_oldest_whatever_the_age(tmp_path):
    clock = Clock(local_ts(10))
    async with open_store(config(tmp_path), clock=clock, disk_usage=Disk(0.87)) as store:
        await fill(store, 5)
        assert await store.clean_commit_log.run_once() == 4  # none is expired
        assert names(store) == [seg_name(4)]
        assert store.clean_commit_log.clean_immediately
        assert not store.flags.is_set(RunningFlags.DISK_FULL)  # 0.87 < 0.90: puts go on
        assert (await store.put_message(Message("T", b"after"))).ok


async def test_forcible_cleaning_needs_clean_file_forcibly_enable(tmp_path):
    clock = Clock(local_ts(10))
    cfg = config(tmp_path, clean_file_forcibly_enable=False)
    async with open_store(cfg, clock=clock, disk_usage=Disk(0.87)) as store:
        await fill(store, 5)
        age(tmp_path, [0], clock, 100)
        assert await store.clean_commit_log.run_once() == 1  # expired ones only
        assert names(store)[0] == seg_name(1)


async def test_over_the_warning_ratio_disk_full_refuses_puts_until_space_is_back(tmp_path):
    clock, disk = Clock(local_ts(10)), Disk(0.95)
    async with open_store(config(tmp_path), clock=clock, disk_usage=disk) as store:
        await fill(store, 4)
        assert await store.clean_commit_log.run_once() == 3  # clean immediately
        assert store.flags.is_set(RunningFlags.DISK_FULL)
        r = await store.put_message(Message("T", b"refused"))
        assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert "disk" in r.error, r.error
        rb = await store.put_messages([Message("T", b"a"), Message("T", b"b")])
        assert rb.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "disk" in rb.error
        # reads go on while the disk is full
        assert store.get_message("g", "T", 0, store.get_min_offset_in_queue("T", 0), 32).messages
        await store.clean_commit_log.run_once()  # still full: the flag stays
        assert store.flags.is_set(RunningFlags.DISK_FULL)
        disk.ratio = 0.5
        await store.clean_commit_log.run_once()
        assert not store.flags.is_set(RunningFlags.DISK_FULL)
        assert (await store.put_message(Message("T", b"accepted"))).ok


async def test_between_forcibly_and_warning_clears_disk_full(tmp_path):
    clock, disk = Clock(local_ts(10)), Disk(0.91)
    async with open_store(config(tmp_path), clock=clock, disk_usage=disk) as store:
        await fill(store, 2)
        await store.clean_commit_log.run_once()
        assert store.flags.is_set(RunningFlags.DISK_FULL)
        disk.ratio = 0.90  # "over" means strictly over
        await store.clean_commit_log.run_once()
        assert not store.flags.is_set(RunningFlags.DISK_FULL)
        assert store.clean_commit_log.clean_immediately  # 0.90 > 0.85


async def test_unreadable_usage_cleans_expired_and_leaves_disk_full_alone(tmp_path):
    clock, disk = Clock(local_ts(10)), Disk(0.95)
    async with open_store(config(tmp_path), clock=clock, disk_usage=disk) as store:
        await fill(store, 4)
        age(tmp_path, [0], clock, 100)
        disk.ratio = 0.5
        await store.clean_commit_log.run_once()  # nothing to do at 10:30 and 0.5
        assert names(store)[0] == seg_name(0)
        disk.ratio = -1.0  # unreadable: counts as over the max ratio, not as full
        assert await store.clean_commit_log.run_once() == 1
        assert names(store)[0] == seg_name(1)
        assert not store.flags.is_set(RunningFlags.DISK_FULL)
        disk.ratio = 0.95
        await store.clean_commit_log.run_once()
        assert store.flags.is_set(RunningFlags.DISK_FULL)
        disk.ratio = -1.0
        await store.clean_commit_log.run_once()
        assert store.flags.is_set(RunningFlags.DISK_FULL)  # unknown: unchanged


# ---- manual ----------------------------------------------------------------------------


async def test_manual_delete_works_outside_the_hour_for_twenty_passes(tmp_path):
    clock = Clock(local_ts(10))
    async with open_store(config(tmp_path), clock=clock, disk_usage=Disk(0.5)) as store:
        await fill(store, 6)
        age(tmp_path, [0, 1], clock, 100)
        clean = store.clean_commit_log
        assert await clean.run_once() == 0
        # the admin op: 20 passes, the first one now; expired files only
        assert await store.delete_expired_files_manually() == 2
        assert MAX_MANUAL_DELETE_FILE_TIMES == 20
        assert clean.manual_delete_remaining == 19
        assert names(store)[0] == seg_name(2)
        assert store.get_min_offset_in_queue("T", 0) > 0  # the queues followed at once
        for _ in range(18):  # passes 2..19
            assert await clean.run_once() == 0
        age(tmp_path, [2], clock, 100)
        assert clean.manual_delete_remaining == 1
        assert await clean.run_once() == 1  # the 20th pass
        assert clean.manual_delete_remaining == 0
        age(tmp_path, [3], clock, 100)
        assert await clean.run_once() == 0  # the 21st: over
        assert names(store)[0] == seg_name(3)
        clean.execute_delete_files_manually()  # the service-level trigger alone: counter only
        assert names(store)[0] == seg_name(3)
        assert await clean.run_once() == 1


async def test_manual_delete_needs_a_started_store(tmp_path):
    store = MessageStore(config(tmp_path))
    with pytest.raises(RuntimeError, match="not started"):
        await store.delete_expired_files_manually()


# ---- reader-held segments --------------------------------------------------------------


async def test_a_held_segment_is_deferred_until_the_reader_releases_it(tmp_path):
    clock = Clock(local_ts(4))
    async with open_store(config(tmp_path), clock=clock, disk_usage=Disk(0.5)) as store:
        await fill(store, 4)
        age(tmp_path, range(4), clock, 100)
        held = store.commit_log.get_data(0)  # a reader's zero-copy slice of segment 0
        assert held is not None
        first = store.commit_log.queue.first()
        assert await store.clean_commit_log.run_once() == 0
        assert os.path.exists(seg_path(tmp_path, 0)) and names(store)[0] == seg_name(0)
        assert not first.available  # shut down: no new reader gets it
        assert store.get_min_phy_offset() == SEG  # the minimum already moved past it
        assert store.commit_log.get_data(0) is None
        assert bytes(held.view[4:8]) == b"\xda\xa3\x20\xa7"  # the reader still reads
        assert await store.clean_commit_log.run_once() == 0  # 120 s not passed: still deferred
        assert os.path.exists(seg_path(tmp_path, 0))
        held.release()
        assert await store.clean_commit_log.run_once() == 3
        assert not os.path.exists(seg_path(tmp_path, 0))
        assert names(store) == [seg_name(3)]


async def test_a_held_segment_is_forced_once_the_interval_has_passed(tmp_path):
    clock = Clock(local_ts(4))
    cfg = config(tmp_path, destroy_mapped_file_interval_forcibly=0)
    async with open_store(cfg, clock=clock, disk_usage=Disk(0.5)) as store:
        await fill(store, 3)
        age(tmp_path, range(3), clock, 100)
        held = store.commit_log.get_data(0)
        assert await store.clean_commit_log.run_once() == 0  # the first attempt only marks it
        assert os.path.exists(seg_path(tmp_path, 0))
        assert await store.clean_commit_log.run_once() == 2  # forced, then the next one
        assert not os.path.exists(seg_path(tmp_path, 0))
        assert names(store) == [seg_name(2)]
        assert bytes(held.view[4:8]) == b"\xda\xa3\x20\xa7"  # the map outlives the file
        held.release()


async def test_a_hanged_first_segment_is_retried_outside_the_hour(tmp_path):
    clock = Clock(local_ts(4, 59, 30))
    cfg = config(tmp_path, destroy_mapped_file_interval_forcibly=0, redelete_hanged_file_interval=120_000)
    async with open_store(cfg, clock=clock, disk_usage=Disk(0.5)) as store:
        await fill(store, 3)
        age(tmp_path, [0], clock, 100)
        held = store.commit_log.get_data(0)
        assert await store.clean_commit_log.run_once() == 0
        clock.now += 60  # 05:00:30: no trigger, and the retry interval has not passed
        assert await store.clean_commit_log.run_once() == 0
        assert names(store)[0] == seg_name(0)
        clock.now += 121
        assert await store.clean_commit_log.run_once() == 1  # the hanged file, forced
        assert names(store) == [seg_name(1), seg_name(2)]
        assert not os.path.exists(seg_path(tmp_path, 0))
        held.release()


# ---- ConsumeQueue and index after the CommitLog moved ------------------------------------


async def test_consume_queue_and_index_follow_the_commit_log(tmp_path):
    clock = Clock(local_ts(4))
    async with open_store(config(tmp_path), clock=clock, disk_usage=Disk(0.5)) as store:
        results = await fill(store, 8)  # 22 messages, 3 per segment
        n = len(results)
        cq = store.consume_queues.find("T", 0)
        cq_before = [mf.file_name for mf in cq.mapped_file_queue.files]
        assert len(cq_before) == 3
        index_before = list(store.index.files)
        assert len(index_before) >= 3
        assert store.query_message("T", "k3")
        age(tmp_path, range(5), clock, 100)
        assert await store.clean_commit_log.run_once() == 5
        min_phy = store.get_min_phy_offset()
        assert min_phy == 5 * SEG
        first_kept = next(i for i, r in enumerate(results) if r.commitlog_offset >= min_phy)

        res = await store.clean_consume_queue.run_once()
        assert res is not None and res.min_phy_offset == min_phy
        # CQ segment 0 (units 0-9) points below the minimum; segment 1 still reaches it
        assert res.cq_files == 1
        assert [mf.file_name for mf in cq.mapped_file_queue.files] == cq_before[1:]
        assert not os.path.exists(os.path.join(str(tmp_path), "consumequeue", "T", "0", cq_before[0]))
        assert store.get_min_offset_in_queue("T", 0) == first_kept
        assert store.get_max_offset_in_queue("T", 0) == n
        # index files wholly below the minimum are gone, oldest first, never the newest
        expected_gone = []
        for f in index_before[:-1]:
            if f.end_phy_offset >= min_phy:
                break
            expected_gone.append(f)
        assert res.index_files == len(expected_gone) >= 1
        assert store.index.files == index_before[len(expected_gone):]
        for f in expected_gone:
            assert not os.path.exists(f.path)
        assert store.index.files[0].end_phy_offset >= min_phy
        assert store.query_message("T", "k3") == []
        assert [m.body for m in store.query_message("T", f"k{n - 1}")] == [body(n - 1)]

        # a consumer at an old offset is told where to go on, and goes on
        old = store.get_message("g", "T", 0, 0, 32)
        assert old.status is GetMessageStatus.OFFSET_TOO_SMALL
        assert old.next_begin_offset == first_kept == old.min_offset
        got = read_queue(store, offset=old.next_begin_offset)
        assert [m.body for m in got] == [body(i) for i in range(first_kept, n)]
        assert got[0].commitlog_offset == min_phy

        # nothing more until the CommitLog minimum moves again
        assert await store.clean_consume_queue.run_once() is None


async def test_consume_queue_cleanup_waits_for_the_commit_log_minimum(tmp_path):
    clock = Clock(local_ts(10))
    async with open_store(config(tmp_path), clock=clock, disk_usage=Disk(0.5)) as store:
        await fill(store, 8)
        cq = store.consume_queues.find("T", 0)
        assert await store.clean_consume_queue.run_once() is None  # min is 0
        assert len(cq.mapped_file_queue.files) == 3
        assert store.get_min_offset_in_queue("T", 0) == 0


async def test_each_queue_keeps_its_newest_segment(tmp_path):
    clock = Clock(local_ts(4))
    async with open_store(config(tmp_path), clock=clock, disk_usage=Disk(0.5)) as store:
        for i in range(CQ_UNITS):  # queue 1: exactly one full CQ segment, all in old segments
            assert (await store.put_message(Message("T", body(i), queue_id=1))).ok
        await fill(store, 8, start=100)
        age(tmp_path, range(7), clock, 100)
        await store.clean_commit_log.run_once()
        res = await store.clean_consume_queue.run_once()
        assert res is not None
        q1 = store.consume_queues.find("T", 1)
        assert len(q1.mapped_file_queue.files) == 1  # points below the minimum, yet kept
        assert res.cq_files >= 1  # queue 0 lost its old segment
        assert len(store.consume_queues.find("T", 0).mapped_file_queue.files) >= 1
        # reading queue 1 does not get stuck: its units point into deleted segments
        res1 = store.get_message("g", "T", 1, 0, 32)
        assert res1.status is GetMessageStatus.MESSAGE_WAS_REMOVING and not res1.messages
        assert res1.next_begin_offset == CQ_UNITS
        end = store.get_message("g", "T", 1, res1.next_begin_offset, 32)
        assert end.status is GetMessageStatus.OFFSET_OVERFLOW_ONE


# ---- wiring ----------------------------------------------------------------------------


async def test_the_store_starts_and_stops_both_services(tmp_path):
    async with open_store(config(tmp_path)) as store:
        assert isinstance(store.clean_commit_log, CleanCommitLogService)
        assert isinstance(store.clean_consume_queue, CleanConsumeQueueService)
        assert store.clean_commit_log.initial_delay_ms == store.config.clean_resource_interval
        assert store.clean_commit_log.clock is store.clock
        await fill(store, 2)
    assert store.clean_commit_log._stopped and store.clean_consume_queue._stopped
    assert await store.clean_commit_log.run_once() == 0  # after shutdown: no pass


# ---- a segment that cannot be created ----------------------------------------------------


async def test_a_segment_that_cannot_be_created_fails_the_put_cleanly(tmp_path):
    async with open_store(config(tmp_path), disk_usage=Disk(0.5)) as store:
        os.makedirs(seg_path(tmp_path, 1))  # a directory where segment 1 must go
        acked = []
        for i in range(10):
            r = await store.put_message(Message("T", body(i)))
            if not r.ok:
                break
            acked.append(i)
        assert r.status is PutMessageStatus.CREATE_MAPEDFILE_FAILED
        assert seg_path(tmp_path, 1) in r.error and "Is a directory" in r.error, r.error
        assert acked == [0, 1, 2]
        r2 = await store.put_message(Message("T", body(99)))  # the store is still up
        assert r2.status is PutMessageStatus.CREATE_MAPEDFILE_FAILED
        settle(store)
        assert [m.body for m in read_queue(store)] == [body(i) for i in acked]
        os.rmdir(seg_path(tmp_path, 1))
        r3 = await store.put_message(Message("T", body(3)))
        assert r3.ok and r3.commitlog_offset == SEG
        settle(store)
        assert [m.body for m in read_queue(store)] == [body(i) for i in range(4)]


async def test_a_creation_cut_short_by_a_crash_leaves_nothing_behind(tmp_path):
    async with open_store(config(tmp_path), disk_usage=Disk(0.5)) as store:
        await fill(store, 2)
    # a crash between creating and sizing a segment leaves only the temporary name
    stale = seg_path(tmp_path, 2) + ".creating"
    with open(stale, "wb"):
        pass
    async with open_store(config(tmp_path), disk_usage=Disk(0.5)) as store:
        assert not os.path.exists(stale)
        assert names(store) == [seg_name(0), seg_name(1)]
        await fill(store, 3, start=10)
        assert os.path.getsize(seg_path(tmp_path, 2)) == SEG


# ---- a real full disk --------------------------------------------------------------------

FULL_SEG = 256 * 1024
FULL_BODY = 4000


async def full_disk_scenario(mount: str) -> None:
    """Runs in a child process (a SIGBUS must fail the test, not kill the test run).

    Segments are sparse and reserve their blocks a step ahead of the writer, so the
    tmpfs, filled up to half a segment of room, runs out either while the segment in use
    reserves its next blocks or when the next segment is created. Puts go on until one
    fails, which must be a clean CREATE_MAPEDFILE_FAILED naming the segment and ENOSPC (no
    SIGBUS, no short segment file); every acknowledged message must read back; once space
    is freed, puts work again, also after a reopen.
    """
    cfg = StoreConfig(
        store_path_root_dir=os.path.join(mount, "store"),
        mapped_file_size_commit_log=FULL_SEG,
        mapped_file_size_consume_queue=200 * 20,  # one page: no new CQ segment in this test
        max_hash_slot_num=16, max_index_num=100,  # one-page index file, no keys indexed
        clean_resource_interval=3_600_000,  # the real cleanup loop stays out of the way
    )
    acked: list[bytes] = []
    filler = os.path.join(mount, "filler")

    def msg(i: int) -> Message:
        return Message("T", f"{i:06d}".encode() + bytes([i % 256]) * (FULL_BODY - 6))

    async with open_store(cfg) as store:
        assert (await store.put_message(msg(0))).ok
        acked.append(msg(0).body)
        settle(store)
        # Pages written lazily through maps that are not part of the put path (checkpoint,
        # index file): written now, while there is space.
        store.checkpoint.flush()
        # The allocator pre-creates segment 1 in the background; make that happen now.
        seg1 = os.path.join(mount, "store", "commitlog", f"{FULL_SEG:020d}")
        await trio.to_thread.run_sync(store.allocator._preallocate, seg1, FULL_SEG)
        st = os.statvfs(mount)
        left = st.f_bavail * st.f_frsize - FULL_SEG // 2  # room for half a segment
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            chunk = b"\xff" * 65536
            while left > 0:
                left -= os.write(fd, chunk[: min(len(chunk), left)])
        finally:
            os.close(fd)

        i = 1
        while True:
            r = await store.put_message(msg(i))
            if not r.ok:
                break
            acked.append(msg(i).body)
            i += 1
            assert i < 1000, "the disk never filled up"
        segs = [os.path.join(mount, "store", "commitlog", f"{k * FULL_SEG:020d}") for k in range(4)]
        assert r.status is PutMessageStatus.CREATE_MAPEDFILE_FAILED, (r.status, r.error)
        assert any(seg in r.error for seg in segs) and "No space left on device" in r.error, r.error
        for seg in segs:  # no short file left under a segment's name
            assert not os.path.exists(seg) or os.path.getsize(seg) == FULL_SEG, seg
        assert len(acked) > 1  # the room that was left was used
        again = await store.put_message(msg(i))
        assert again.status is PutMessageStatus.CREATE_MAPEDFILE_FAILED, again.status

        # the real probe sees the full disk; DISK_FULL refuses puts with a clear message
        assert store.clean_commit_log.check_disk_space()
        assert store.flags.is_set(RunningFlags.DISK_FULL), store.clean_commit_log.last_ratio
        refused = await store.put_message(msg(i))
        assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "disk" in refused.error

        settle(store)
        got = [m.body for m in read_queue(store)]
        assert got == acked, (len(got), len(acked))

        os.unlink(filler)  # space comes back
        store.clean_commit_log.check_disk_space()
        assert not store.flags.is_set(RunningFlags.DISK_FULL), store.clean_commit_log.last_ratio
        assert 0 <= store.clean_commit_log.last_ratio < 0.75
        r = await store.put_message(msg(i))
        assert r.ok, (r.status, r.error)
        acked.append(msg(i).body)
        settle(store)
        assert [m.body for m in read_queue(store)] == acked

    async with open_store(cfg) as store:
        assert [m.body for m in read_queue(store)] == acked
        assert (await store.put_message(msg(i + 1))).ok
    print(f"full disk scenario OK: {len(acked)} messages")


_CHILD = (
    "import sys, trio, logging; logging.basicConfig(level=logging.WARNING); "
    "from tests.store.test_cleanup import full_disk_scenario; trio.run(full_disk_scenario, sys.argv[1])"
)


@pytest.mark.slow
def test_a_really_full_disk_fails_puts_cleanly_and_recovers(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip() or mounted.returncode}")
    try:
        proc = subprocess.run([sys.executable, "-c", _CHILD, str(mnt)], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True, check=False)
    out = proc.stdout + proc.stderr
    if proc.returncode == -signal.SIGBUS:
        pytest.fail("the store process was killed by SIGBUS: a write through a map touched an "
                    "unallocated page of a sparse file on the full disk\n" + out)
    assert proc.returncode == 0, out
    assert "full disk scenario OK" in proc.stdout
