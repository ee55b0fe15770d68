"""A failed flush of a ConsumeQueue, an index file or the checkpoint (fdatasync raises EIO):
the store refuses writes and says which file failed, it never flushes that file again
(fsyncgate), the checkpoint on disk claims nothing past the last good flush, and the abort
file stays, so the restart's recovery dispatches again from there and every message is read
back. The failure is injected through the store's `runtime.fdatasync` seam for one call;
every other fdatasync is the real one, on real files."""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Callable

import pytest

from store import FlushDiskType, Message, PutMessageStatus, StoreConfig, open_store, runtime
from store.layout import ABORT_FILE, CHECKPOINT_FILE, CONSUMEQUEUE_DIR, INDEX_DIR
from store.running_flags import RunningFlags
from tests.waiting import wait_until


class FailingFiles:
    """Wraps runtime.fdatasync: after `arm()`, the next fdatasync of a path `matches` picks
    raises EIO (and writes nothing); counts the matching fdatasyncs tried after it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, matches: Callable[[str], bool]) -> None:
        self.armed = False
        self.failed = False
        self.after = 0
        real = runtime.fdatasync

        def fdatasync(fd: int, path: str) -> None:
            if matches(path):
                if self.failed:
                    self.after += 1
                if self.armed:
                    self.armed, self.failed = False, True
                    raise OSError(errno.EIO, os.strerror(errno.EIO), path)
            real(fd, path)

        monkeypatch.setattr(runtime, "fdatasync", fdatasync)

    def arm(self) -> None:
        self.armed = True


def _under(folder: str) -> Callable[[str], bool]:
    return lambda path: f"{os.sep}{folder}{os.sep}" in path


def _checkpoint_file(path: str) -> bool:
    return os.path.basename(path) == CHECKPOINT_FILE


CASES = {
    # what fails, which flag says so, what picks its fdatasyncs, which checkpoint field stays
    "consumequeue": ("ConsumeQueue", RunningFlags.WRITE_LOGICS_QUEUE_ERROR, _under(CONSUMEQUEUE_DIR), 8),
    "index": ("index file", RunningFlags.WRITE_INDEX_FILE_ERROR, _under(INDEX_DIR), 16),
    "checkpoint": ("checkpoint", RunningFlags.CHECKPOINT_FLUSH_ERROR, _checkpoint_file, None),
}


def config(root) -> StoreConfig:
    # a thorough ConsumeQueue flush (and its checkpoint flush) every 20 ms; index files of
    # 8 entries, so one fills (and is flushed) every few messages
    return StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=64 * 1024,
                       flush_disk_type=FlushDiskType.SYNC_FLUSH, flush_interval_consume_queue=10,
                       flush_consume_queue_thorough_interval=20, max_hash_slot_num=16, max_index_num=8)


def on_disk(root, at: int) -> int:
    with open(os.path.join(root, CHECKPOINT_FILE), "rb") as f:
        return struct.unpack_from(">q", f.read(64), at)[0]


async def put(store, i: int) -> None:
    r = await store.put_message(Message("T", f"m{i}".encode(), keys=[f"k{i}"]))
    assert r.status is PutMessageStatus.PUT_OK, r.error


@pytest.mark.parametrize("case", CASES)
async def test_a_failed_flush_of_a_queue_index_or_checkpoint_stops_writes_and_recovery_rebuilds(
        tmp_path, monkeypatch, case):
    what, bit, matches, field = CASES[case]
    disk = FailingFiles(monkeypatch, matches)
    cfg = config(tmp_path)
    async with open_store(cfg) as store:
        for i in range(10):
            await put(store, i)
        await wait_until(lambda: on_disk(tmp_path, 8) > 0, what="a thorough flush with its checkpoint")
        disk.arm()
        n = 10
        while store.flags.is_writeable():  # each put dispatches more; the flushes come
            await put(store, n)
            n += 1
            assert n < 500, "no flush of the armed kind ran"
        assert store.flags.is_set(bit) and disk.failed
        frozen = on_disk(tmp_path, field) if field else None
        refused = await store.put_message(Message("T", b"late"))
        assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE, refused
        assert f"a {what} flush failed" in refused.error and "Input/output error" in refused.error
    assert disk.after == 0  # never flushed again, not even by shutdown
    assert os.path.exists(os.path.join(tmp_path, ABORT_FILE))  # the restart recovers
    if field is not None:  # the checkpoint claims nothing past the last good flush
        assert on_disk(tmp_path, field) == frozen
    async with open_store(cfg) as store:
        assert store.flags.is_writeable()
        bodies: list[bytes] = []
        while got := store.get_message("g", "T", 0, len(bodies), 32).messages:
            bodies += [m.body for m in got]
        assert bodies == [f"m{i}".encode() for i in range(n)]
        assert len(store.query_message("T", f"k{n - 1}")) == 1
        await put(store, n)
