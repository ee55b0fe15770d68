"""Flush and commit: group commit (SYNC_FLUSH), async flush, WAIT=false, shutdown flushing,
the transient store pool. Real files, real fdatasync; polling only with a deadline."""

from __future__ import annotations

import logging
import os

import pytest
import trio

from store import BrokerRole, FlushDiskType, Message, PutMessageStatus, StoreConfig, open_store
from store.record_codec import RecordKind
from tests.waiting import wait_until

SEG = 4096


def config(root, **kw) -> StoreConfig:
    opts = dict(store_path_root_dir=str(root), mapped_file_size_commit_log=SEG)
    opts.update(kw)
    return StoreConfig(**opts)


def body(i: int, n: int = 200) -> bytes:
    seed = f"m{i}-".encode()
    return (seed * (n // len(seed) + 1))[:n]


def flushed_where(store) -> int:
    return store.commit_log.queue.flushed_where


# ---- SYNC_FLUSH: group commit ------------------------------------------------------------


@pytest.mark.parametrize("inline", [False, True], ids=["thread", "inline"])
async def test_sync_flush_put_returns_only_once_durable(tmp_path, inline):
    async with open_store(config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH,
                                 sync_flush_inline=inline)) as store:
        for i in range(40):
            r = await store.put_message(Message("T", body(i, 300)))
            assert r.status is PutMessageStatus.PUT_OK, r.error
            assert flushed_where(store) >= r.commitlog_offset + r.append.wrote_bytes
        assert store.group_commit.flush_count >= 1


@pytest.mark.parametrize("inline", [False, True], ids=["thread", "inline"])
async def test_group_commit_groups_concurrent_puts(tmp_path, inline):
    results = []
    cfg = config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH,
                 mapped_file_size_commit_log=1024 * 1024, sync_flush_inline=inline)
    async with open_store(cfg) as store:
        before = store.group_commit.flush_count

        async def producer(i):
            r = await store.put_message(Message("T", body(i, 512), queue_id=i % 4))
            results.append((i, r))

        async with trio.open_nursery() as nursery:
            for i in range(64):
                nursery.start_soon(producer, i)
        assert len(results) == 64
        assert all(r.status is PutMessageStatus.PUT_OK for _, r in results), [
            (r.status, r.error) for _, r in results if not r.ok
        ]
        rounds = store.group_commit.flush_count - before
        assert 1 <= rounds < 32, rounds
        end = max(r.commitlog_offset + r.append.wrote_bytes for _, r in results)
        assert flushed_where(store) >= end
        for i, r in results:
            assert store.look_message_by_offset(r.commitlog_offset).body == body(i, 512)


async def test_group_commit_across_segment_rolls(tmp_path):
    """Concurrent puts rolling through several small segments all end up durable."""
    results = []
    async with open_store(config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH)) as store:

        async def producer(p):
            for i in range(10):
                r = await store.put_message(Message("T", body(p * 100 + i, 700)))
                results.append((p * 100 + i, r))

        async with trio.open_nursery() as nursery:
            for p in range(16):
                nursery.start_soon(producer, p)
        assert all(r.status is PutMessageStatus.PUT_OK for _, r in results)
        assert len({r.commitlog_offset // SEG for _, r in results}) > 20
        assert flushed_where(store) >= max(r.commitlog_offset + r.append.wrote_bytes for _, r in results)
        for i, r in results:
            assert store.look_message_by_offset(r.commitlog_offset).body == body(i, 700)


async def test_flush_disk_timeout_still_stores_the_message(tmp_path):
    """With a 1 ms syncFlushTimeout some large puts may time out on a real disk; whatever
    the disk does, each status is PUT_OK or FLUSH_DISK_TIMEOUT and every message is stored."""
    cfg = config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout=1,
                 mapped_file_size_commit_log=4 * 1024 * 1024, max_message_size=1024 * 1024)
    results = []
    async with open_store(cfg) as store:

        async def producer(p):
            for i in range(4):
                n = p * 10 + i
                r = await store.put_message(Message("T", body(n, 256 * 1024)))
                results.append((n, r))

        async with trio.open_nursery() as nursery:
            for p in range(8):
                nursery.start_soon(producer, p)
        statuses = {r.status for _, r in results}
        assert statuses <= {PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT}
        for n, r in results:
            assert r.append is not None and r.commitlog_offset >= 0
            if r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT:
                assert "syncFlushTimeout" in r.error and r.status.stored
            assert store.look_message_by_offset(r.commitlog_offset).body == body(n, 256 * 1024)
        # a timed-out message still becomes durable
        end = max(r.commitlog_offset + r.append.wrote_bytes for _, r in results)
        await wait_until(lambda: flushed_where(store) >= end, what="flush after timeouts")
    async with open_store(cfg) as store:
        for n, r in results:
            assert store.look_message_by_offset(r.commitlog_offset).body == body(n, 256 * 1024)


async def test_wait_false_under_sync_flush_returns_at_once_and_flushes_later(tmp_path):
    async with open_store(config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH)) as store:
        r = await store.put_message(Message("T", body(1), properties={"WAIT": "false"}))
        assert r.status is PutMessageStatus.PUT_OK and r.error == ""
        end = r.commitlog_offset + r.append.wrote_bytes
        # the put did not wait: nothing had a chance to flush yet
        assert flushed_where(store) < end
        m = store.look_message_by_offset(r.commitlog_offset)
        assert m.body == body(1) and "WAIT" not in m.properties
        await wait_until(lambda: flushed_where(store) >= end, what="WAIT=false flush")


async def test_sync_flush_shutdown_flushes_a_wait_false_backlog(tmp_path):
    """WAIT=false puts across many segments, then a clean exit: all of it is flushed."""
    written = []
    async with open_store(config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH)) as store:
        for i in range(300):
            r = await store.put_message(Message("T", body(i, 400), properties={"WAIT": "false"}))
            assert r.ok
            written.append((r.commitlog_offset, i))
        end = store.get_max_phy_offset()
        assert end // SEG >= 25
    assert store.commit_log.queue.flushed_where == end
    async with open_store(config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH)) as store:
        assert store.get_max_phy_offset() == end
        for off, i in written:
            assert store.look_message_by_offset(off).body == body(i, 400)


# ---- ASYNC_FLUSH -------------------------------------------------------------------------


async def test_async_flush_eventually_reaches_the_max_offset(tmp_path):
    cfg = config(tmp_path, flush_interval_commit_log=20, flush_commit_log_thorough_interval=100)
    async with open_store(cfg) as store:
        for i in range(100):
            r = await store.put_message(Message("T", body(i, 300)))
            assert r.status is PutMessageStatus.PUT_OK
        end = store.get_max_phy_offset()
        assert flushed_where(store) < end  # async puts never wait for the disk
        await wait_until(lambda: flushed_where(store) >= end, what="async flush")
        assert flushed_where(store) == end
        assert store.checkpoint.physic_msg_timestamp > 0


@pytest.mark.parametrize("timed", [False, True])
async def test_async_flush_least_pages_then_thorough(tmp_path, timed):
    """Fewer dirty pages than flushCommitLogLeastPages wait for the thorough flush."""
    cfg = config(tmp_path, mapped_file_size_commit_log=1024 * 1024, flush_interval_commit_log=10,
                 flush_commit_log_least_pages=4, flush_commit_log_thorough_interval=300,
                 flush_commit_log_timed=timed)
    async with open_store(cfg) as store:
        r = await store.put_message(Message("T", body(0, 100)))
        end = r.commitlog_offset + r.append.wrote_bytes
        await wait_until(lambda: flushed_where(store) >= end, what="thorough flush")
        # 5 pages of data: flushed by the least-pages rule
        for i in range(5 * 4096 // 1100 + 1):
            assert (await store.put_message(Message("T", body(i, 1000)))).ok
        end = store.get_max_phy_offset()
        await wait_until(lambda: flushed_where(store) >= end - end % 4096, what="least-pages flush")


async def test_async_flush_shutdown_flushes_everything(tmp_path):
    written = []
    cfg = config(tmp_path, flush_interval_commit_log=60_000, flush_commit_log_thorough_interval=60_000)
    async with open_store(cfg) as store:
        for i in range(400):
            r = await store.put_message(Message("T", body(i, 350)))
            assert r.ok
            written.append((r.commitlog_offset, i))
        end = store.get_max_phy_offset()
        assert end // SEG >= 30
    assert store.commit_log.queue.flushed_where == end
    assert not os.path.exists(os.path.join(str(tmp_path), "abort"))
    async with open_store(cfg) as store:
        assert store.get_max_phy_offset() == end
        for off, i in written:
            assert store.look_message_by_offset(off).body == body(i, 350)


async def test_async_flush_loop_is_woken_by_dirty_pages_and_stops_with_the_store(tmp_path):
    """The flushing loop runs in its own thread: with an interval of a minute, appends of
    at least `least_pages` pages still get flushed soon (the append wakes it), and closing
    the store stops the loop before the last flush."""
    cfg = config(tmp_path, mapped_file_size_commit_log=1024 * 1024, flush_interval_commit_log=60_000,
                 flush_commit_log_least_pages=2, flush_commit_log_thorough_interval=60_000)
    async with open_store(cfg) as store:
        service = store.flush_service
        for i in range(40):  # 40 x 350 bytes: more than 2 pages
            assert (await store.put_message(Message("T", body(i, 350)))).ok
        # flushed until fewer than 2 pages are dirty: at least into the page before the last
        mark = (store.get_max_phy_offset() // 4096 - 1) * 4096
        assert mark > 0
        await wait_until(lambda: flushed_where(store) >= mark, what="the dirty pages flushed")
        assert not service._stopped.is_set()  # the loop runs
    assert service._stopped.is_set()
    assert flushed_where(store) == store.get_max_phy_offset()


async def test_async_master_puts_do_not_wait(tmp_path):
    """ASYNC_FLUSH with WAIT=true: PUT_OK at once, no group commit service at all."""
    async with open_store(config(tmp_path)) as store:
        assert store.group_commit is None and store.flush_service is not None
        r = await store.put_message(Message("T", b"x"))
        assert r.ok and r.error == ""


# ---- transient store pool ------------------------------------------------------------------


def pool_config(root, **kw) -> StoreConfig:
    opts = dict(
        transient_store_pool_enable=True,
        transient_store_pool_size=2,
        flush_disk_type=FlushDiskType.ASYNC_FLUSH,
        broker_role=BrokerRole.ASYNC_MASTER,
        commit_interval_commit_log=20,
        flush_interval_commit_log=20,
        flush_commit_log_thorough_interval=50,
    )
    opts.update(kw)
    return config(root, **opts)


async def test_transient_pool_data_is_readable_only_after_commit(tmp_path):
    async with open_store(pool_config(tmp_path)) as store:
        assert store.pool is not None and store.commit_service is not None
        r = await store.put_message(Message("T", body(7, 500)))
        assert r.ok
        mf = store.commit_log.queue.last()
        assert mf.write_buffer is not None
        # appended to the write buffer only: invisible until the commit service copies it
        assert mf.wrote_position == r.append.wrote_bytes
        assert mf.get_read_position() == 0
        assert store.look_message_by_offset(r.commitlog_offset) is None
        assert store.get_max_phy_offset() == 0
        await wait_until(lambda: mf.get_read_position() == mf.wrote_position, what="commit")
        assert store.get_max_phy_offset() == r.append.wrote_bytes
        assert store.look_message_by_offset(r.commitlog_offset).body == body(7, 500)
        end = r.append.wrote_bytes
        await wait_until(lambda: flushed_where(store) >= end, what="flush after commit")


async def test_transient_pool_everything_is_there_after_reopen(tmp_path):
    written = []
    async with open_store(pool_config(tmp_path)) as store:
        for i in range(600):
            r = await store.put_message(Message("T", body(i, 300), queue_id=i % 3))
            assert r.ok, r.error
            written.append((r.commitlog_offset, i))
            if i % 7 == 0:
                await trio.lowlevel.checkpoint()  # interleave with the commit service
        end_wrote = store.commit_log.queue.max_wrote_offset()
        assert end_wrote // SEG >= 40
        # readers eventually see all of it
        await wait_until(lambda: store.get_max_phy_offset() == end_wrote, what="commit of all")
        for off, i in written:
            assert store.look_message_by_offset(off).body == body(i, 300)
        assert store.pool.available <= 2
    async with open_store(config(tmp_path)) as store:
        assert store.get_max_phy_offset() == end_wrote
        for off, i in written:
            assert store.look_message_by_offset(off).body == body(i, 300)


@pytest.mark.parametrize("commit_interval", [20, 60_000])
async def test_transient_pool_shutdown_commits_a_backlog(tmp_path, commit_interval):
    """Clean exit right after a burst of puts: the uncommitted write buffers reach the files
    (with a running commit service, buffers get reused by segments far past committedWhere)."""
    written = []
    cfg = pool_config(tmp_path, transient_store_pool_size=4, commit_interval_commit_log=commit_interval,
                      commit_commit_log_thorough_interval=commit_interval)
    async with open_store(cfg) as store:
        for i in range(800):
            r = await store.put_message(Message("T", body(i, 300)))
            assert r.ok
            written.append((r.commitlog_offset, i))
            await trio.lowlevel.checkpoint()  # interleave: the allocator pre-creates segments (each takes a buffer)
        end = store.commit_log.queue.max_wrote_offset()
        assert end // SEG >= 50
    assert store.commit_log.queue.committed_where == end
    assert store.commit_log.queue.flushed_where == end
    async with open_store(config(tmp_path)) as store:
        assert store.get_max_phy_offset() == end
        records = [off for off, d in store.commit_log.iter_records(0) if d.kind is RecordKind.MESSAGE]
        assert records == [off for off, _ in written]
        for off, i in written:
            assert store.look_message_by_offset(off).body == body(i, 300)


async def test_transient_pool_is_ignored_with_sync_flush(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="tidemq.store")
    cfg = config(tmp_path, transient_store_pool_enable=True, transient_store_pool_size=2,
                 flush_disk_type=FlushDiskType.SYNC_FLUSH)
    async with open_store(cfg) as store:
        assert store.pool is None and store.commit_service is None
        assert any("transientStorePoolEnable is ignored" in rec.getMessage() and "SYNC_FLUSH" in rec.getMessage()
                   for rec in caplog.records)
        r = await store.put_message(Message("T", b"direct"))
        assert r.ok
        assert store.commit_log.queue.last().write_buffer is None
        assert store.look_message_by_offset(r.commitlog_offset).body == b"direct"


async def test_transient_pool_is_ignored_on_a_slave(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="tidemq.store")
    cfg = config(tmp_path, transient_store_pool_enable=True, broker_role=BrokerRole.SLAVE)
    async with open_store(cfg) as store:
        assert store.pool is None
        assert any("SLAVE" in rec.getMessage() for rec in caplog.records)
