"""A CommitLog flush that fails (fdatasync raises EIO): the puts waiting on it never get
PUT_OK, the store refuses later writes and says why, it never flushes the CommitLog again
(fsyncgate), and a restart brings it back: recovery writes back and syncs what the failed
flush covered (lost_writes.py). The failure is injected through the store's
`runtime.fdatasync` seam for one call; every other fdatasync is the real one, on real files."""

from __future__ import annotations

import errno
import os

import pytest
import trio

from store import FlushDiskType, Message, PutMessageStatus, StoreConfig, open_store, runtime
from store.layout import ABORT_FILE, COMMITLOG_DIR
from store.lost_writes import LostWrites
from store.running_flags import RunningFlags
from tests.waiting import wait_until

SEG = 64 * 1024


class FailingDisk:
    """Wraps runtime.fdatasync: the CommitLog fdatasync after `arm()` raises EIO once (and
    writes nothing); counts the CommitLog fdatasyncs tried after that failure."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.armed = False
        self.failed_at: int | None = None  # CommitLog syncs tried before the failure
        self.commitlog_syncs = 0
        real = runtime.fdatasync

        def fdatasync(fd: int, path: str) -> None:
            if os.path.basename(os.path.dirname(path)) == COMMITLOG_DIR:
                self.commitlog_syncs += 1
                if self.armed:
                    self.armed = False
                    self.failed_at = self.commitlog_syncs
                    raise OSError(errno.EIO, os.strerror(errno.EIO), path)
            real(fd, path)

        monkeypatch.setattr(runtime, "fdatasync", fdatasync)

    def arm(self) -> None:
        self.armed = True

    @property
    def retries(self) -> int:
        """CommitLog fdatasyncs tried after the failed one."""
        assert self.failed_at is not None, "no flush failed"
        return self.commitlog_syncs - self.failed_at


def config(root, flush: FlushDiskType, inline: bool = False) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=SEG, flush_disk_type=flush,
                       flush_interval_commit_log=10, flush_commit_log_least_pages=0, sync_flush_inline=inline)


def body(i: int) -> bytes:
    return f"m{i}-".encode().ljust(300, b".")


@pytest.mark.parametrize("inline", [False, True], ids=["thread", "inline"])
async def test_sync_flush_failure_fails_the_waiting_puts_and_stops_writes(tmp_path, monkeypatch, inline):
    disk = FailingDisk(monkeypatch)
    cfg = config(tmp_path, FlushDiskType.SYNC_FLUSH, inline)
    async with open_store(cfg) as store:
        for i in range(5):
            r = await store.put_message(Message("T", body(i)))
            assert r.status is PutMessageStatus.PUT_OK, r.error
        synced = store.commit_log.queue.flushed_where
        disk.arm()
        results = []

        async def put(i: int) -> None:
            results.append(await store.put_message(Message("T", body(i))))

        async with trio.open_nursery() as nursery:
            for i in range(5, 15):
                nursery.start_soon(put, i)
        assert len(results) == 10
        for r in results:  # appended, not durable: indeterminate, never PUT_OK or "stored"
            assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and r.indeterminate, r
            assert not r.status.stored and "flush failed" in r.error
            assert "Input/output error" in r.error and "not durable" in r.error
        assert store.flags.is_set(RunningFlags.FLUSH_DISK_ERROR)
        assert "FLUSH_DISK_ERROR" in store.flags.names() and not store.flags.is_writeable()
        assert store.commit_log.queue.flushed_where == synced  # nothing counted flushed past the sync
        end = store.get_max_phy_offset()
        refused = await store.put_message(Message("T", body(99)))
        assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and not refused.indeterminate
        assert refused.append is None and f"from offset {synced}" in refused.error
        assert store.get_max_phy_offset() == end  # the refused put wrote nothing
    assert disk.retries == 0  # never flushed again, not even by shutdown
    assert os.path.exists(os.path.join(tmp_path, ABORT_FILE))  # the restart recovers
    assert LostWrites(str(tmp_path)).offset() == synced  # noted durably for the restart
    async with open_store(cfg) as store:  # a restart brings the store back
        assert disk.retries == 1  # recovery wrote [synced, end) back and synced it
        assert LostWrites(str(tmp_path)).offset() is None
        assert store.get_max_phy_offset() == end  # the page cache had it all: nothing lost
        assert store.flags.is_writeable()
        r = await store.put_message(Message("T", body(100)))
        assert r.status is PutMessageStatus.PUT_OK, r.error
        assert store.commit_log.queue.flushed_where >= r.commitlog_offset + r.append.wrote_bytes


async def test_async_flush_failure_stops_writes_and_never_flushes_again(tmp_path, monkeypatch):
    disk = FailingDisk(monkeypatch)
    cfg = config(tmp_path, FlushDiskType.ASYNC_FLUSH)
    async with open_store(cfg) as store:
        r = await store.put_message(Message("T", body(0)))
        assert r.status is PutMessageStatus.PUT_OK, r.error
        await wait_until(lambda: store.commit_log.queue.flushed_where >= store.get_max_phy_offset(),
                         what="the first flush")
        synced = store.commit_log.queue.flushed_where
        timestamp = store.checkpoint.physic_msg_timestamp
        disk.arm()
        r = await store.put_message(Message("T", body(1)))
        assert r.status is PutMessageStatus.PUT_OK  # ASYNC_FLUSH: no PUT_OK waits on the flush
        await wait_until(lambda: store.flags.is_set(RunningFlags.FLUSH_DISK_ERROR), what="the failed flush")
        assert store.commit_log.queue.flushed_where == synced < store.get_max_phy_offset()
        assert store.checkpoint.physic_msg_timestamp == timestamp  # the checkpoint claims no more
        refused = await store.put_message(Message("T", body(2)))
        assert refused.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "flush failed" in refused.error
    assert disk.retries == 0
    assert os.path.exists(os.path.join(tmp_path, ABORT_FILE))
    async with open_store(cfg) as store:
        assert (await store.put_message(Message("T", body(3)))).status is PutMessageStatus.PUT_OK
