"""store/mapped_file_queue.py: segments named by start offset; lookup by offset (also after
the oldest were deleted), roll to a new segment, truncation of a dirty tail, deletion that
never takes the newest, and loading what is on disk."""

from __future__ import annotations

import os

import pytest

from store.layout import segment_name
from store.mapped_file import CREATING_SUFFIX, SegmentSizeError
from store.mapped_file_queue import MappedFileQueue

SIZE = 4096


def fill(queue: MappedFileQueue, segments: int) -> None:
    """Write `segments` full segments of a recognisable byte each."""
    for i in range(segments):
        mf = queue.get_last_mapped_file(0)
        assert mf is not None and mf.file_from_offset == i * SIZE
        assert mf.append(bytes([i + 1]) * SIZE)


@pytest.fixture
def queue(tmp_path):
    q = MappedFileQueue(str(tmp_path / "cl"), SIZE)
    yield q
    q.shutdown()


def test_roll_and_find_by_offset(queue):
    assert queue.get_last_mapped_file(0, need_create=False) is None
    fill(queue, 3)
    assert [mf.file_name for mf in queue.files] == [segment_name(i * SIZE) for i in range(3)]
    assert queue.max_offset() == queue.max_wrote_offset() == 3 * SIZE
    for offset, index in ((0, 0), (SIZE - 1, 0), (SIZE, 1), (3 * SIZE - 1, 2)):
        assert queue.find_by_offset(offset) is queue.files[index]
    assert queue.find_by_offset(3 * SIZE) is None
    assert queue.find_by_offset(3 * SIZE, return_first_on_not_found=True) is queue.files[0]
    assert queue.delete_file(queue.files[0])  # the oldest goes: lookups stay right
    assert queue.min_offset() == SIZE
    assert queue.find_by_offset(0) is None and queue.find_by_offset(SIZE + 5) is queue.files[0]


def test_flush_moves_flushed_where_a_segment_at_a_time(queue):
    fill(queue, 2)
    assert queue.remain_how_many_data_to_flush() == 2 * SIZE
    queue.flush(0)
    assert queue.flushed_where == SIZE
    assert not queue.flush(0)  # the second segment: something new was flushed
    assert queue.flushed_where == 2 * SIZE
    assert queue.flush(0)  # nothing left
    queue.commit(0)  # no pool: committing only moves the mark, a segment per call
    queue.commit(0)
    assert queue.committed_where == 2 * SIZE and queue.remain_how_many_data_to_commit() == 0


def test_truncate_dirty_files_cuts_the_tail(queue):
    fill(queue, 3)
    cut = SIZE + 100
    doomed = queue.files[2].path
    queue.truncate_dirty_files(cut)
    assert len(queue.files) == 2 and not os.path.exists(doomed)
    assert queue.max_offset() == cut
    assert queue.files[1].wrote_position == 100
    mf = queue.get_last_mapped_file(0)  # the cut segment is not full: appends continue in it
    assert mf is queue.files[1]


def test_delete_expired_never_takes_the_newest_and_stops_at_the_first_kept(queue):
    fill(queue, 4)
    now = 10_000_000.0
    os.utime(queue.files[0].path, (now - 100, now - 100))
    os.utime(queue.files[1].path, (now, now))  # young: it and everything after stay
    os.utime(queue.files[2].path, (now - 100, now - 100))
    deleted = queue.delete_expired_by_time(50_000, 0, False, now_ms=lambda: now * 1000)
    assert deleted == 1 and queue.min_offset() == SIZE
    deleted = queue.delete_expired_by_time(0, 0, True, now_ms=lambda: now * 1000)  # immediately
    assert deleted == 2 and len(queue.files) == 1  # the newest stays
    assert queue.files[0].file_from_offset == 3 * SIZE


def test_load_maps_segments_and_drops_unfinished_ones(tmp_path):
    path = tmp_path / "cl"
    q = MappedFileQueue(str(path), SIZE)
    fill(q, 2)
    q.shutdown()
    (path / (segment_name(2 * SIZE) + CREATING_SUFFIX)).write_bytes(b"half")
    (path / "README").write_text("not a segment")
    loaded = MappedFileQueue(str(path), SIZE)
    loaded.load()
    try:
        assert [mf.file_from_offset for mf in loaded.files] == [0, SIZE]
        assert not (path / (segment_name(2 * SIZE) + CREATING_SUFFIX)).exists()
        assert loaded.files[1].read(0, 4) == bytes([2]) * 4
    finally:
        loaded.shutdown()
    (path / segment_name(2 * SIZE)).write_bytes(b"short")
    wrong = MappedFileQueue(str(path), SIZE)
    with pytest.raises(SegmentSizeError, match="configured size"):
        wrong.load()
    wrong.shutdown()


def test_a_segment_that_cannot_be_created_says_why(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the directory should be")
    q = MappedFileQueue(str(blocker / "cl"), SIZE)
    assert q.get_last_mapped_file(0) is None
    assert "cannot create segment" in q.create_error
    assert q.files == []
