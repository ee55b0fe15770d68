"""store/allocate.py: the next CommitLog segment is pre-created in the background, handed
out by the next allocate, and an unused pre-created one is deleted at shutdown."""

from __future__ import annotations

import os

import trio

from store.allocate import AllocateMappedFileService
from store.layout import segment_name
from tests.waiting import wait_until

SIZE = 64 * 1024


def seg(tmp_path, offset: int) -> str:
    return str(tmp_path / segment_name(offset))


async def wait_for_file(path: str) -> None:
    await wait_until(lambda: os.path.exists(path), what=f"{path} to be pre-created")


async def test_next_segment_is_precreated_and_handed_out(tmp_path):
    service = AllocateMappedFileService()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(service.run)
        first = service.allocate(seg(tmp_path, 0), SIZE)  # nothing ready: created inline
        assert service.preallocated_hits == 0 and os.path.getsize(first.path) == SIZE
        await wait_for_file(seg(tmp_path, SIZE))  # the background task made the next one
        second = service.allocate(seg(tmp_path, SIZE), SIZE)
        assert service.preallocated_hits == 1
        assert second.file_from_offset == SIZE and second.wrote_position == 0
        await wait_for_file(seg(tmp_path, 2 * SIZE))
        nursery.cancel_scope.cancel()
    service.shutdown()  # the unused third segment goes away; the handed-out ones stay
    assert not os.path.exists(seg(tmp_path, 2 * SIZE))
    assert os.path.exists(first.path) and os.path.exists(second.path)
    for mf in (first, second):
        mf.destroy(0)


async def test_a_segment_that_exists_is_not_created_twice(tmp_path):
    service = AllocateMappedFileService()
    mf = service.allocate(seg(tmp_path, 0), SIZE)
    service._preallocate(seg(tmp_path, 0), SIZE)  # already on disk (in use): left alone
    assert service._ready == {}
    mf.destroy(0)


async def test_a_failed_precreation_is_logged_and_allocate_still_works(tmp_path, caplog):
    service = AllocateMappedFileService()
    gone, moved = tmp_path / "gone", tmp_path / "moved"
    gone.mkdir()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(service.run)
        first = service.allocate(str(gone / segment_name(0)), SIZE)
        gone.rename(moved)  # before the background task runs: its pre-creation fails
        await wait_until(lambda: "could not pre-create" in caplog.text, what="the failed pre-creation logged")
        second = service.allocate(str(moved / segment_name(SIZE)), SIZE)  # made inline
        assert service.preallocated_hits == 0 and second.file_from_offset == SIZE
        nursery.cancel_scope.cancel()
    service.shutdown()
    for mf in (first, second):
        mf.destroy(0)
