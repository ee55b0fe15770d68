"""Cold CommitLog pages leave the process (store/cold_pages.py): RSS falls back after a
release and stays bounded while writing goes on, and released pages read back intact.
Real files and maps; RSS read with psutil (the file-backed, shared part)."""

from __future__ import annotations

import psutil
import trio

from store import FlushDiskType, Message, PutMessageStatus, StoreConfig, open_store
from store.flush import flush_to_end
from tests.waiting import wait_until

MiB = 1024 * 1024
BODY = 3000  # under the pwrite threshold: appended through the map, so its pages are resident


def _shared_rss() -> int:
    return psutil.Process().memory_info().shared


def _body(i: int) -> bytes:
    return f"{i:08d}".encode().ljust(BODY, b"c")


async def _write(store, start: int, n: int) -> None:
    for i in range(start, start + n):
        r = await store.put_message(Message("Cold", _body(i), queue_id=0))
        assert r.status is PutMessageStatus.PUT_OK
    await trio.to_thread.run_sync(flush_to_end, store.commit_log.queue)
    await wait_until(lambda: store.reput.reput_from_offset == store.commit_log.max_offset(),
                     what="everything dispatched")


async def test_released_pages_leave_rss_and_read_back_intact(tmp_path) -> None:
    cfg = StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=8 * MiB,
                      flush_disk_type=FlushDiskType.ASYNC_FLUSH)
    async with open_store(cfg) as store:
        cold = store.cold_pages
        # only this test releases: the running service would otherwise drop the pages
        # (32 MiB became cold) before `written` is measured
        cold.interval_s, cold.step_bytes, cold.hot_bytes = 3600.0, 1 << 40, 0
        before = _shared_rss()
        await _write(store, 0, 12_000)  # ~36 MiB over five segments
        written = _shared_rss() - before
        assert written > 24 * MiB, written  # the map's pages are resident
        advised = await cold.release_once()
        assert advised >= 32 * MiB
        assert _shared_rss() - before < written / 4
        for i in (0, 2_731, 6_000, 11_999):  # faulted back from the page cache
            got = store.get_message("G", "Cold", 0, i, 1)
            assert got.messages and got.messages[0].body == _body(i)


async def test_rss_stays_bounded_while_writing_goes_on(tmp_path) -> None:
    cfg = StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=4 * MiB,
                      flush_disk_type=FlushDiskType.ASYNC_FLUSH)
    async with open_store(cfg) as store:
        store.cold_pages.hot_bytes = 2 * MiB
        cold = store.cold_pages  # only the test's rounds count (a loaded run let the service add one)
        cold.interval_s, cold.step_bytes = 3600.0, 1 << 40
        before = _shared_rss()
        peaks = []
        for round_ in range(6):  # ~8.6 MiB a round, 52 MiB in all
            await _write(store, round_ * 3_000, 3_000)
            await store.cold_pages.release_once()
            peaks.append(_shared_rss() - before)
        # what stays is the hot tail and the newest segment's unflushed part, not the history
        assert max(peaks) < 16 * MiB, peaks
        assert store.cold_pages.rounds == 6


async def test_the_service_releases_once_enough_became_cold(tmp_path) -> None:
    """The running service does not wait out its interval when `step_bytes` became cold."""
    cfg = StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=4 * MiB,
                      flush_disk_type=FlushDiskType.ASYNC_FLUSH)
    async with open_store(cfg) as store:
        cold = store.cold_pages
        cold.interval_s, cold.step_bytes, cold.hot_bytes = 3600.0, 1 * MiB, 0
        await _write(store, 0, 1_000)  # ~3 MiB
        await wait_until(lambda: cold.rounds >= 1, what="a release triggered by the cold bytes", timeout=10)
        assert cold.advised_bytes >= 2 * MiB


def _rss_under(folder: str) -> int:
    """Resident bytes of this process's maps of files under `folder`."""
    return sum(m.rss for m in psutil.Process().memory_maps(grouped=True) if folder in m.path)


async def test_full_consume_queue_files_and_old_index_entries_leave_rss_and_read_back(tmp_path) -> None:
    """A queue's files but its last, and the index's entries but the newest, are released:
    a soak's ConsumeQueues (a new 6 MB file every 300,000 messages a queue) and index
    (420 MB a file) would otherwise grow the RSS without end."""
    cfg = StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=64 * MiB,
                      mapped_file_size_consume_queue=2_000 * 20, max_hash_slot_num=1_000, max_index_num=40_000,
                      flush_disk_type=FlushDiskType.ASYNC_FLUSH)
    async with open_store(cfg) as store:
        cold = store.cold_pages
        cold.interval_s, cold.step_bytes, cold.hot_bytes = 3600.0, 1 << 40, 64 * 1024
        n = 12_000  # six ConsumeQueue files of 2,000 units; 12,000 index entries of 20 bytes
        for i in range(n):
            r = await store.put_message(Message("Cold", b"m%d" % i, queue_id=0, keys=(f"k{i}",)))
            assert r.status is PutMessageStatus.PUT_OK
        await wait_until(lambda: store.reput.reput_from_offset == store.commit_log.max_offset(),
                         what="everything dispatched")
        cq_before, index_before = _rss_under("/consumequeue/"), _rss_under("/index/")
        assert cq_before >= 5 * 2_000 * 20 - 4096 and index_before >= 200 * 1024, (cq_before, index_before)
        await cold.release_once()
        cq_after, index_after = _rss_under("/consumequeue/"), _rss_under("/index/")
        assert cq_after <= 2 * 2_000 * 20, (cq_before, cq_after)  # the last file (and a page around)
        assert index_after < index_before - 100 * 1024, (index_before, index_after)
        for i in (0, 2_001, 7_777, n - 1):  # both read back through the page cache
            got = store.get_message("G", "Cold", 0, i, 1)
            assert got.messages and got.messages[0].body == b"m%d" % i
            found = store.query_message("Cold", f"k{i}", 1, 0, 2**62)
            assert [m.body for m in found] == [b"m%d" % i]
