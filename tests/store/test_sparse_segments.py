"""Segments cost what their data costs (issue 40 item 5).

A fresh segment is sparse: only a reserve step ahead of the writer has blocks, in every
flush mode (the transient pool too), and no write through a map lands on a hole (the
SIGBUS a full disk would give). Recovery and `store verify` stop at the end of the data:
they read at most LOOK_AHEAD bytes past it, never a segment's untouched tail (checked with
the page cache: after dropping a file's pages, what a read touched comes back resident).
Abnormal recovery still cuts a torn tail and finds every record of a multi-segment log.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os
from pathlib import Path

import pytest

from store import Message, StoreConfig, mapped_file, open_store, segment_walker, tools
from store.layout import segment_name
from store.mapped_file import MappedFile, reserve_step
from store.recovery import scan_valid_end
from store.status import GetMessageStatus
from tests.store.test_cleanup import read_queue, settle
from tests.waiting import wait_until

KiB = 1024
MiB = 1024 * KiB
PAGE = mmap.PAGESIZE


def allocated(path: str | Path) -> int:
    return os.stat(path).st_blocks * 512


def no_hole_below(path: str | Path, position: int) -> bool:
    """Whether every byte below `position` has blocks (no hole a map write could hit)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.lseek(fd, 0, os.SEEK_HOLE) >= position
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------
# a fresh segment is sparse


@pytest.mark.parametrize("mode", ["ASYNC_FLUSH", "SYNC_FLUSH", "ASYNC_FLUSH+pool"])
async def test_a_fresh_segment_is_sparse_in_every_flush_mode(tmp_path, mode):
    seg = 64 * MiB
    flush, _, pool = mode.partition("+")
    config = StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=seg,
                         flush_disk_type=flush, transient_store_pool_enable=bool(pool),
                         transient_store_pool_size=2)
    step = reserve_step(seg)
    assert step == MiB
    async with open_store(config) as store:
        if pool:
            assert store.pool is not None and store.commit_log.queue.last() is None
        for i in range(3):
            assert (await store.put_message(Message("Sparse", b"x" * 900, keys=[f"k{i}"]))).ok
        first = store.commit_log.queue.files[0]
        if pool:
            assert first.write_buffer is not None  # the pool's path: written by the commit
            store.commit_log.queue.commit(0)
        settle(store)
        next_path = tmp_path / "commitlog" / segment_name(seg)
        await wait_until(next_path.exists, what="the next segment pre-created")
        for path in (first.path, next_path):
            assert os.path.getsize(path) == seg
            assert allocated(path) <= step + PAGE, (path, allocated(path))
        assert no_hole_below(first.path, first.wrote_position)
        cq_files = list((tmp_path / "consumequeue").rglob("0000*"))
        assert cq_files
        for path in cq_files:  # 6,000,000-byte ConsumeQueue files: one step of ~92 KiB
            assert allocated(path) <= reserve_step(6_000_000) + PAGE < os.path.getsize(path) // 32
        index = list((tmp_path / "index").iterdir())
        assert index and all(allocated(p) < MiB for p in index)  # 420 MB, sparse


async def test_the_pre_created_segment_is_sparse(tmp_path):
    from store.allocate import AllocateMappedFileService

    service = AllocateMappedFileService()
    path = str(tmp_path / segment_name(0))
    service._preallocate(path, 1 << 30)  # RocketMQ's 1 GiB default
    assert os.path.getsize(path) == 1 << 30
    assert 0 < allocated(path) <= reserve_step(1 << 30) + PAGE  # 1 MiB of 1 GiB
    service.shutdown()
    assert not os.path.exists(path)


def test_appends_reserve_blocks_a_step_ahead_and_never_write_into_a_hole(tmp_path):
    size = 16 * MiB
    mf = MappedFile(str(tmp_path / segment_name(0)), size, preallocate=True)
    try:
        step = mf.reserve_step
        assert step == 256 * KiB and mf.reserved == step
        assert allocated(mf.path) <= step + PAGE
        record = os.urandom(1000)
        while mf.wrote_position < 3 * step + 10_000:
            assert mf.append(record)  # through the map
            assert mf.reserved >= mf.wrote_position
            assert no_hole_below(mf.path, mf.wrote_position)
        assert mf.append(os.urandom(mapped_file.PWRITE_MIN_BYTES * 2))  # through pwrite
        assert no_hole_below(mf.path, mf.wrote_position)
        assert mf.reserved <= mf.wrote_position + step
        assert allocated(mf.path) <= mf.reserved + PAGE
    finally:
        mf.destroy(0)


def test_an_existing_segment_reserves_from_its_write_position(tmp_path):
    size = 16 * MiB
    path = str(tmp_path / segment_name(0))
    MappedFile(path, size, preallocate=True).close()
    mf = MappedFile(path, size, expect_existing=True)
    try:
        assert mf.reserved == 0  # not known for a file it did not create
        mf.set_positions(5 * MiB)  # recovery found the data ending here
        assert mf.append(b"y" * 100)
        assert mf.reserved == 5 * MiB + mf.reserve_step
        assert allocated(path) <= 2 * mf.reserve_step + 2 * PAGE  # not the 5 MiB below
    finally:
        mf.close()


def test_a_full_disk_refuses_the_append_and_loses_nothing(tmp_path, monkeypatch):
    mf = MappedFile(str(tmp_path / segment_name(0)), 16 * MiB, preallocate=True)
    try:
        step = mf.reserve_step
        assert mf.append(b"a" * (step - 10))
        calls = []

        def full(fd, offset, length):
            calls.append((offset, length))
            return errno.ENOSPC

        monkeypatch.setattr(mapped_file, "reserve_blocks", full)
        assert not mf.append(b"b" * 100)  # crosses the reserved end: no room
        assert mf.wrote_position == step - 10 and mf.reserved == step
        assert "No space left on device" in mf.write_error and mf.path in mf.write_error
        # a step was asked for, then only what the append needed
        assert calls == [(step, step), (step, 90)]
        assert mf.append(b"c" * 10)  # what fits the reserved blocks still goes in
        monkeypatch.undo()
        assert mf.append(b"b" * 100)
        assert mf.read(step - 10, 110) == b"c" * 10 + b"b" * 100
        assert no_hole_below(mf.path, mf.wrote_position)
    finally:
        mf.destroy(0)


def test_cutting_the_tail_frees_its_blocks_and_the_next_append_reserves_again(tmp_path):
    size = 16 * MiB
    mf = MappedFile(str(tmp_path / segment_name(0)), size, preallocate=True)
    try:
        while mf.wrote_position < 2 * MiB:
            assert mf.append(os.urandom(4000))
        mf.flush(0)
        before = allocated(mf.path)
        assert before >= 2 * MiB
        mf.zero_tail(100 * KiB)
        mf.set_positions(100 * KiB)
        assert allocated(mf.path) <= 100 * KiB + PAGE < before
        assert mf.mm[100 * KiB : 2 * MiB] == bytes(2 * MiB - 100 * KiB)
        assert mf.append(b"z" * 5000)
        assert no_hole_below(mf.path, mf.wrote_position)
    finally:
        mf.destroy(0)


# ---------------------------------------------------------------------------------------
# recovery and verify read the data, not the segment's tail

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def resident_pages(path: str | Path, start: int, end: int) -> int:
    """Pages of [start, end) of the file in the page cache (mincore on a fresh map)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as mm:
        n = (end - start) // PAGE
        vec = (ctypes.c_ubyte * n)()
        addr = ctypes.addressof(ctypes.c_char.from_buffer(mm)) + start
        try:
            if _libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(n * PAGE), vec) != 0:
                pytest.skip(f"mincore failed: {os.strerror(ctypes.get_errno())}")
            return sum(v & 1 for v in vec)
        finally:
            del vec


def drop_pages(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


SEG = 64 * MiB


@pytest.fixture
def big_mostly_empty(tmp_path):
    """A store of 64 MiB segments holding 3 messages; the rest of segment 0 is written
    zeros (real blocks, as an older tidemq's preallocated segment), and segment 1, the
    pre-created next one, has its blocks allocated. Both are dropped from the page cache."""
    root = tmp_path / "store"
    config = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=SEG)

    async def fill():
        async with open_store(config) as store:
            for i in range(3):
                assert (await store.put_message(Message("Big", b"m" * 1000, keys=[f"k{i}"]))).ok
            return store.get_max_phy_offset()

    import trio

    end = trio.run(fill)
    seg0 = root / "commitlog" / segment_name(0)
    seg1 = root / "commitlog" / segment_name(SEG)
    zeros = bytes(MiB)
    with open(seg0, "r+b") as f:
        pos = -(-end // PAGE) * PAGE
        while pos < SEG:
            pos += os.pwrite(f.fileno(), zeros[: min(MiB, SEG - pos)], pos)
    with open(seg1, "wb") as f:
        os.posix_fallocate(f.fileno(), 0, SEG)
        os.ftruncate(f.fileno(), SEG)
    for path in (seg0, seg1):
        drop_pages(path)
        if resident_pages(path, 0, SEG) > 16:
            pytest.skip("this file system keeps the pages in memory (tmpfs?): nothing to observe")
    return config, end, seg0, seg1


FAR = segment_walker.LOOK_AHEAD + 8 * MiB  # past the look-ahead and any readahead around it


def assert_tail_untouched(seg0: Path, seg1: Path) -> None:
    assert resident_pages(seg0, FAR, SEG) == 0, "segment 0's tail was read"
    assert resident_pages(seg1, FAR, SEG) == 0, "the empty segment 1 was read past its start"


def test_verify_reads_only_the_data_part(big_mostly_empty):
    config, end, seg0, seg1 = big_mostly_empty
    v = tools.verify(config.store_path_root_dir)
    assert v["clean"] and v["messages"] == 3 and v["endOffset"] == end
    assert_tail_untouched(seg0, seg1)
    out = list(tools.dump(config.store_path_root_dir))
    assert len(out) == 3
    assert_tail_untouched(seg0, seg1)


def test_recovery_reads_only_the_data_part(big_mostly_empty):
    config, end, seg0, seg1 = big_mostly_empty
    files = [MappedFile(str(p), SEG, expect_existing=True) for p in (seg0, seg1)]
    try:
        assert scan_valid_end(files, SEG, 0, check_crc=True) == end
        assert_tail_untouched(seg0, seg1)
    finally:
        for mf in files:
            mf.close()


async def test_abnormal_recovery_of_a_big_mostly_empty_segment_keeps_everything(big_mostly_empty):
    config, end, seg0, seg1 = big_mostly_empty
    open(os.path.join(config.store_path_root_dir, "abort"), "wb").close()
    async with open_store(config) as store:
        assert not store.last_exit_ok
        assert store.get_max_phy_offset() == end
        settle(store)
        got = store.get_message("G", "Big", 0, 0, 10)
        assert got.status is GetMessageStatus.FOUND and len(got.messages) == 3
    assert not seg1.exists()  # the empty pre-created segment went with the cut
    assert allocated(seg0) <= 2 * MiB  # the cut freed the written zeros past the data


# ---------------------------------------------------------------------------------------
# where the data ends: the first blank after the last record


def _messages(n: int, size: int = 1000) -> list[Message]:
    return [Message("Multi", f"{i:06d}".encode() + os.urandom(size), queue_id=i % 2, keys=[f"k{i}"])
            for i in range(n)]


async def _write(config: StoreConfig, msgs: list[Message]) -> list[tuple[int, int]]:
    """Put `msgs`, close cleanly; (offset, size) of each record."""
    out = []
    async with open_store(config) as store:
        for m in msgs:
            r = await store.put_message(m)
            assert r.ok, r.error
            out.append((r.commitlog_offset, r.append.wrote_bytes))
    return out


def _crash(root: str) -> None:
    """As after a kill with nothing known safe: the abort file, no checkpoint."""
    open(os.path.join(root, "abort"), "wb").close()
    os.unlink(os.path.join(root, "checkpoint"))


def _all_bodies(store, queues: int = 2) -> list[bytes]:
    return sorted(m.body for q in range(queues) for m in read_queue(store, "Multi", q))


@pytest.mark.parametrize("torn", [False, True])
async def test_abnormal_recovery_finds_every_record_of_a_multi_segment_log(tmp_path, monkeypatch, torn):
    """1 MiB segments and a 64 KiB look-ahead (so segments are bigger than it): three
    segments of records; garbage far past the end of the data (beyond the look-ahead) is
    not judged, and is cut with the tail; a torn last record is detected and cut."""
    monkeypatch.setattr(segment_walker, "LOOK_AHEAD", 64 * KiB)
    seg = MiB
    root = str(tmp_path / "store")
    config = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=seg)
    msgs = _messages(2600)
    placed = await _write(config, msgs)
    end = placed[-1][0] + placed[-1][1]
    assert end // seg == 2  # three segments
    seg2 = Path(root) / "commitlog" / segment_name(2 * seg)
    with open(seg2, "r+b") as f:
        os.pwrite(f.fileno(), b"\xee" * 64, seg - 64)  # garbage at the segment's very end
    expect_end, kept = end, msgs
    if torn:
        last_offset, last_size = placed[-1]
        with open(seg2, "r+b") as f:  # the crash kept the first 100 bytes of the last record
            os.pwrite(f.fileno(), bytes(last_size - 100), last_offset - 2 * seg + 100)
        expect_end, kept = last_offset, msgs[:-1]
        assert "corrupt record" in tools.verify(root)["damage"][0]["reason"]
    else:
        assert tools.verify(root)["clean"]  # the garbage lies past the look-ahead: not read
    _crash(root)
    async with open_store(config) as store:
        assert not store.last_exit_ok
        assert store.get_max_phy_offset() == expect_end
        settle(store)
        assert _all_bodies(store) == sorted(m.body for m in kept)
    v = tools.verify(root)
    assert v["clean"] and v["endOffset"] == expect_end and v["messages"] == len(kept)
    with open(seg2, "rb") as f:  # the cut zeroed everything after the end, garbage included
        f.seek(expect_end - 2 * seg)
        assert f.read() == bytes(seg - (expect_end - 2 * seg))


async def test_a_zero_totalsize_ends_the_data_and_the_blank_filler_still_rolls(tmp_path, monkeypatch):
    """A record whose TOTALSIZE is 0 ends the data there (RocketMQ's recovery stops too);
    the records after it are cut (named as damage, as they lie within the look-ahead);
    BLANK fillers before it still hand over to the next segment."""
    monkeypatch.setattr(segment_walker, "LOOK_AHEAD", 64 * KiB)
    seg = MiB
    root = str(tmp_path / "store")
    config = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=seg)
    msgs = _messages(1500)
    placed = await _write(config, msgs)
    k = next(i for i, (offset, _) in enumerate(placed) if offset > seg + 1000)  # in segment 1
    offset, _ = placed[k]
    assert tools.verify(root)["blanks"] == 1  # segment 0 ends with a BLANK filler
    with open(Path(root) / "commitlog" / segment_name(seg), "r+b") as f:
        os.pwrite(f.fileno(), bytes(4), offset - seg)  # TOTALSIZE := 0
    v = tools.verify(root)
    assert v["firstInvalidOffset"] == offset
    _crash(root)
    async with open_store(config) as store:
        assert store.get_max_phy_offset() == offset
        settle(store)
        assert _all_bodies(store) == sorted(m.body for m in msgs[:k])
