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
