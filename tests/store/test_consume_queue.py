import array
import logging
import os
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.config import StoreConfig
from store.consume_queue import (
    INT_MAX,
    ConsumeQueue,
    ConsumeQueueTable,
    iter_units,
    unit_columns,
    written_units,
)
from store.mapped_file import SegmentSizeError
from tests.examples import examples

UNIT = 20
FILE = 5 * UNIT  # 5 units per segment


def unit(offset, size, tags):
    return struct.pack(">qiq", offset, size, tags)


def make_cq(root, topic="TopicTest", qid=0, file_size=FILE):
    cq = ConsumeQueue(topic, qid, str(root), file_size)
    cq.load()
    cq.recover()
    return cq


def seg_path(root, name, topic="TopicTest", qid=0):
    return os.path.join(str(root), topic, str(qid), f"{name:020d}")


def fill(cq, n, start=0, step=100, size=100):
    """Units i in [start, start+n): CommitLog offset i*step, size `size`, tagsCode i."""
    for i in range(start, start + n):
        assert cq.put_message_position_info(i * step, size, i, i)


def test_units_are_20_bytes_big_endian(tmp_path):
    cq = make_cq(tmp_path, file_size=StoreConfig(mapped_file_size_consume_queue=1000).cq_file_size)
    try:
        assert cq.put_message_position_info(0, 191, 2598919, 0)
        assert cq.put_message_position_info(191, 250, -646394, 1)
        assert cq.put_message_position_info(2**40, 7, -(2**63), 2)
        cq.flush(0)
        data = Path(seg_path(tmp_path, 0)).read_bytes()
        assert len(data) == 1000
        assert data[0:20] == unit(0, 191, 2598919)
        assert data[20:40] == unit(191, 250, -646394)
        assert data[40:60] == unit(2**40, 7, -(2**63))
        assert data[60:] == bytes(940)
        assert cq.max_offset_in_queue == 3
        assert cq.min_offset_in_queue == 0
        assert cq.max_physic_offset == 2**40 + 7
        assert cq.get_unit(1) == (191, 250, -646394)
        assert cq.get_unit(3) is None
        assert cq.last_unit_store_info == (2**40, 7, -(2**63))
    finally:
        cq.shutdown()


def test_cq_file_size_rounding_and_bad_size(tmp_path):
    assert StoreConfig(mapped_file_size_consume_queue=101).cq_file_size == 120
    with pytest.raises(ValueError):
        ConsumeQueue("T", 0, str(tmp_path), 101)


def test_segment_roll_and_index_buffer(tmp_path):
    cq = make_cq(tmp_path)
    try:
        fill(cq, 12)
        names = sorted(os.listdir(os.path.join(tmp_path, "TopicTest", "0")))
        assert names == [f"{0:020d}", f"{100:020d}", f"{200:020d}"]
        assert cq.max_offset_in_queue == 12
        assert cq.get_unit(7) == (700, 100, 7)

        res = cq.get_index_buffer(7)
        assert res is not None
        with res:
            assert res.start_offset == 140
            assert res.size == 3 * UNIT  # to the end of segment 100
            assert list(iter_units(res.view)) == [(700, 100, 7), (800, 100, 8), (900, 100, 9)]
        last = cq.get_index_buffer(10)
        with last:
            assert last.size == 2 * UNIT  # only what is written
        assert cq.get_index_buffer(12) is None  # nothing written there yet
        assert cq.get_index_buffer(99) is None
        assert cq.roll_next_file(7) == 10
        assert cq.roll_next_file(10) == 15
    finally:
        cq.shutdown()


def test_pre_blank_fill_when_queue_starts_mid_way(tmp_path):
    cq = make_cq(tmp_path)
    try:
        assert cq.put_message_position_info(5000, 120, 33, 7)  # expect = 140 in segment 100
        path = seg_path(tmp_path, 100)
        assert os.listdir(os.path.dirname(path)) == [os.path.basename(path)]
        assert cq.min_logic_offset == 140
        assert cq.min_offset_in_queue == 7
        assert cq.max_offset_in_queue == 8
        cq.flush(0)
        data = Path(path).read_bytes()
        assert data[0:20] == unit(0, INT_MAX, 0)
        assert data[20:40] == unit(0, INT_MAX, 0)
        assert data[40:60] == unit(5000, 120, 33)
        assert cq.get_unit(6) is None  # below the minimum
        assert cq.get_unit(7) == (5000, 120, 33)
        assert cq.get_index_buffer(5) is None
        assert cq.max_physic_offset == 5120
        assert cq.put_message_position_info(5120, 80, 0, 8)
        assert cq.max_offset_in_queue == 9
    finally:
        cq.shutdown()

    # after a restart the blank units are valid for recovery but not messages
    cq = make_cq(tmp_path)
    try:
        assert cq.max_offset_in_queue == 9
        assert cq.max_physic_offset == 5200
        cq.correct_min_offset(0)  # blanks (offset 0) never become the minimum
        assert cq.min_offset_in_queue == 7
    finally:
        cq.shutdown()


def test_pre_blank_on_segment_boundary_writes_no_blanks(tmp_path):
    cq = make_cq(tmp_path)
    try:
        assert cq.put_message_position_info(100, 10, 0, 10)  # expect = 200, segment start
        assert os.listdir(os.path.join(tmp_path, "TopicTest", "0")) == [f"{200:020d}"]
        assert cq.min_offset_in_queue == 10
        assert cq.max_offset_in_queue == 11
        assert cq.get_unit(10) == (100, 10, 0)
    finally:
        cq.shutdown()


def test_skip_duplicate_and_gap(tmp_path, caplog):
    cq = make_cq(tmp_path)
    try:
        assert cq.put_message_position_info(100, 50, 1, 0)
        assert cq.max_physic_offset == 150
        # already built: offset + size <= max_physic_offset
        assert cq.put_message_position_info(120, 30, 9, 1)
        assert cq.max_offset_in_queue == 1
        assert cq.put_message_position_info(150, 50, 2, 1)
        # duplicate logical offset with a newer CommitLog offset: accepted, nothing written
        assert cq.put_message_position_info(400, 50, 3, 1)
        assert cq.max_offset_in_queue == 2
        assert cq.max_physic_offset == 200
        assert cq.get_unit(1) == (150, 50, 2)
        # duplicate at cqOffset 0 is also refused
        assert cq.put_message_position_info(500, 50, 3, 0)
        assert cq.max_offset_in_queue == 2
        # gap: logged as a bug, but appended at the write position
        with caplog.at_level(logging.WARNING, logger="tidemq.store"):
            assert cq.put_message_position_info(600, 50, 4, 5)
        assert any("[BUG]" in r.getMessage() for r in caplog.records)
        assert cq.max_offset_in_queue == 3
        assert cq.get_unit(2) == (600, 50, 4)
        assert cq.max_physic_offset == 650
    finally:
        cq.shutdown()


def test_correct_min_offset(tmp_path):
    cq = make_cq(tmp_path)
    try:
        fill(cq, 8)
        cq.correct_min_offset(250)
        assert cq.min_offset_in_queue == 3
        assert cq.get_unit(2) is None
        assert cq.get_unit(3) == (300, 100, 3)
        # only the first segment is scanned; nothing qualifies there: unchanged
        cq.correct_min_offset(10_000)
        assert cq.min_offset_in_queue == 3
    finally:
        cq.shutdown()


def test_truncate_dirty_logic_files(tmp_path):
    cq = make_cq(tmp_path)
    try:
        fill(cq, 13)  # segments 0, 100, 200 (units 10..12)
        cq.truncate_dirty_logic_files(700)
        assert cq.max_offset_in_queue == 7
        assert cq.max_physic_offset == 700  # unit 6: 600 + 100
        assert not os.path.exists(seg_path(tmp_path, 200))
        assert os.path.exists(seg_path(tmp_path, 100))
        assert cq.get_unit(7) is None
        # the queue goes on from there
        assert cq.put_message_position_info(700, 100, 77, 7)
        assert cq.get_unit(7) == (700, 100, 77)
    finally:
        cq.shutdown()


def test_truncate_mid_record_and_whole_files(tmp_path):
    cq = make_cq(tmp_path)
    try:
        fill(cq, 13)
        cq.truncate_dirty_logic_files(450)  # inside record 4: units with offset < 450 stay
        assert cq.max_offset_in_queue == 5
        assert cq.max_physic_offset == 500
        assert sorted(os.listdir(os.path.join(tmp_path, "TopicTest", "0"))) == [f"{0:020d}"]
        cq.truncate_dirty_logic_files(0)
        assert cq.max_offset_in_queue == 0
        assert cq.mapped_file_queue.files == []
        assert cq.max_physic_offset == -1  # no unit left: as a new queue (not the cut point: see the method)
    finally:
        cq.shutdown()


def test_recover_after_reopen(tmp_path):
    cq = make_cq(tmp_path)
    fill(cq, 17)  # 4 segments: recovery starts at the 3rd-last
    cq.flush(0)
    cq.shutdown()

    cq = make_cq(tmp_path)
    try:
        assert cq.max_offset_in_queue == 17
        assert cq.max_physic_offset == 1700
        assert [cq.get_unit(i) for i in range(17)] == [(i * 100, 100, i) for i in range(17)]
        assert cq.mapped_file_queue.flushed_where == 17 * UNIT
        assert cq.put_message_position_info(1700, 100, 17, 17)
        assert cq.get_unit(17) == (1700, 100, 17)
    finally:
        cq.shutdown()


def test_recover_cuts_torn_tail_and_empty_segments(tmp_path):
    cq = make_cq(tmp_path)
    fill(cq, 8)
    cq.shutdown()
    # unit 6 torn (size 0), unit 7 left behind; an empty segment after it
    with open(seg_path(tmp_path, 100), "r+b") as f:
        f.seek(20)
        f.write(unit(600, 0, 0))
    with open(seg_path(tmp_path, 200), "wb") as f:
        f.truncate(FILE)

    cq = make_cq(tmp_path)
    try:
        assert cq.max_offset_in_queue == 6
        assert cq.max_physic_offset == 600
        assert not os.path.exists(seg_path(tmp_path, 200))
        assert cq.get_unit(6) is None
    finally:
        cq.shutdown()


def test_wrong_segment_size_fails_load(tmp_path):
    d = os.path.join(tmp_path, "T", "0")
    os.makedirs(d)
    with open(os.path.join(d, f"{0:020d}"), "wb") as f:
        f.truncate(60)
    with pytest.raises(SegmentSizeError):
        ConsumeQueue("T", 0, str(tmp_path), FILE).load()


def _times(n, base=1000, step=10):
    return {i * 100: base + i * step for i in range(n)}


def test_offset_in_queue_by_time_exact_and_nearest(tmp_path):
    cq = make_cq(tmp_path, file_size=10 * UNIT)
    try:
        times = _times(7)  # unit i stored at 1000 + 10*i
        fill(cq, 7)

        def at(phy, size):
            return times.get(phy)

        by_time = cq.get_offset_in_queue_by_time
        for i in range(7):
            assert by_time(1000 + 10 * i, at, 0) == i  # exact
        assert by_time(1024, at, 0) == 2  # nearer to 1020
        assert by_time(1026, at, 0) == 3  # nearer to 1030
        assert by_time(1025, at, 0) == 2  # tie: the left one
        assert by_time(10, at, 0) == 0  # before everything
        assert by_time(1059, at, 0) == 6  # only a left neighbour...
        assert by_time(5000, at, 0) == 6  # ...after everything (file mtime < ts: last file)
        # units below the CommitLog minimum count as too early
        assert by_time(1000, at, 250) == 3
        assert by_time(1045, at, 250) == 4
        # every unit too early: the end of them
        assert by_time(1000, at, 10_000) == 7
        # a record that cannot be read
        assert by_time(1020, lambda phy, size: None, 0) == 0
    finally:
        cq.shutdown()


def test_offset_in_queue_by_time_picks_file_by_mtime(tmp_path):
    cq = make_cq(tmp_path)
    try:
        fill(cq, 10)  # segments 0 (units 0..4) and 100 (units 5..9)
        times = _times(10)
        files = cq.mapped_file_queue.files
        os.utime(files[0].path, (1.040, 1.040))  # mtime 1040 ms
        os.utime(files[1].path, (1.090, 1.090))
        at = lambda phy, size: times[phy]  # noqa: E731
        assert cq.get_offset_in_queue_by_time(1020, at, 0) == 2  # first file (mtime >= ts)
        assert cq.get_offset_in_queue_by_time(1060, at, 0) == 6  # second file
        assert cq.get_offset_in_queue_by_time(1045, at, 0) == 5  # nearest within file 2 only
        assert cq.get_offset_in_queue_by_time(2000, at, 0) == 9  # none new enough: last file
        # respects min_logic_offset as the low bound
        cq.correct_min_offset(300)
        assert cq.get_offset_in_queue_by_time(1000, at, 0) == 3
    finally:
        cq.shutdown()


def test_offset_in_queue_by_time_without_files(tmp_path):
    cq = make_cq(tmp_path)
    assert cq.get_offset_in_queue_by_time(1, lambda p, s: 1, 0) == 0


def test_delete_expired_file(tmp_path):
    cq = make_cq(tmp_path)
    try:
        fill(cq, 13)  # segments 0, 100, 200
        assert cq.delete_expired_file(400) == 0  # last unit of segment 0 is at 400: kept
        assert cq.delete_expired_file(600) == 1
        assert not os.path.exists(seg_path(tmp_path, 0))
        assert cq.min_offset_in_queue == 6
        assert cq.get_unit(5) is None
        assert cq.get_unit(6) == (600, 100, 6)
        # never the newest segment
        assert cq.delete_expired_file(100_000) == 1
        assert [mf.file_from_offset for mf in cq.mapped_file_queue.files] == [200]
        assert cq.max_offset_in_queue == 13
    finally:
        cq.shutdown()


def test_delete_stops_at_segment_held_by_reader(tmp_path):
    cq = make_cq(tmp_path)
    try:
        fill(cq, 13)
        held = cq.get_index_buffer(0)
        assert cq.delete_expired_file(100_000) == 0  # held: not deleted yet
        held.release()
        assert cq.delete_expired_file(100_000) == 2  # the hanged one goes on the next pass
    finally:
        cq.shutdown()


def test_destroy(tmp_path):
    cq = make_cq(tmp_path)
    fill(cq, 6)
    cq.destroy()
    assert cq.max_physic_offset == -1
    assert cq.max_offset_in_queue == 0
    assert os.listdir(os.path.join(tmp_path, "TopicTest", "0")) == []


def test_table_load_and_max_physic_offset(tmp_path):
    table = ConsumeQueueTable(str(tmp_path), FILE)
    fill(table.find_or_create("A", 0), 3)
    fill(table.find_or_create("A", 1), 6)
    fill(table.find_or_create("B", 3), 2, step=1000)
    assert table.find_or_create("A", 1) is table.find("A", 1)
    assert table.find("C", 0) is None
    table.flush(0)
    table.shutdown()
    os.makedirs(os.path.join(tmp_path, "A", "notanint"))
    os.makedirs(os.path.join(tmp_path, "A", "007"))
    open(os.path.join(tmp_path, "stray-file"), "w").close()

    table = ConsumeQueueTable(str(tmp_path), FILE)
    table.load()
    try:
        assert table.topics() == {"A": [0, 1], "B": [3]}
        assert len(table) == 3
        assert table.recover() == 1100  # B-3: 1000 + 100
        assert table.max_physic_offset_of_all() == 1100
        assert table.find("A", 1).max_offset_in_queue == 6
        table.truncate_dirty_logic_files(250)
        assert table.find("A", 1).max_offset_in_queue == 3
        assert table.find("B", 3).max_offset_in_queue == 1
        table.correct_min_offset(100)
        assert table.find("A", 0).min_offset_in_queue == 1
    finally:
        table.shutdown()
    assert ConsumeQueueTable(str(tmp_path / "none"), FILE).max_physic_offset_of_all() == -1


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    first=st.integers(0, 30),
    sizes=st.lists(st.integers(1, 5000), min_size=1, max_size=40),
    units_per_file=st.integers(1, 7),
)
def test_recover_matches_what_was_written(tmp_path_factory, first, sizes, units_per_file):
    root = tmp_path_factory.mktemp("cq")
    cq = make_cq(root, file_size=units_per_file * UNIT)
    expected = {}
    phy = 10_000
    for i, size in enumerate(sizes):
        assert cq.put_message_position_info(phy, size, i - 3, first + i)
        expected[first + i] = (phy, size, i - 3)
        phy += size
    cq.shutdown()

    cq = make_cq(root, file_size=units_per_file * UNIT)
    try:
        assert cq.max_offset_in_queue == first + len(sizes)
        assert cq.max_physic_offset == phy
        cq.correct_min_offset(0)
        assert cq.min_offset_in_queue == first
        assert {i: cq.get_unit(i) for i in expected} == expected
    finally:
        cq.shutdown()


# ---------------------------------------------------------------------------------------
# the offline bulk reader (the pipeline's topic pruning)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**31), 2**31 - 1),
                          st.integers(-(2**63), 2**63 - 1)), max_size=23),
       st.binary(max_size=19))
def test_unit_columns_equal_unpacking_unit_by_unit(units, tail):
    offsets, sizes = unit_columns(b"".join(unit(*u) for u in units) + tail)
    assert list(offsets) == [u[0] for u in units]
    assert list(sizes) == [u[1] for u in units]


def test_written_units_span_segments_and_drop_blank_and_unwritten_units(tmp_path):
    cq = ConsumeQueue("T", 0, str(tmp_path), FILE)
    cq.load()
    try:
        assert cq.put_message_position_info(500, 40, 0, 2)  # queue offset 2: two pre-blank units first
        assert cq.put_message_position_info(540, 50, 7, 3)
        assert cq.put_message_position_info(590, 60, 0, 4)  # tagsCode 0: a unit ending in zero bytes
        assert cq.put_message_position_info(650, 70, 0, 5)  # the second segment
        cq.flush(0)
    finally:
        cq.shutdown()
    assert sorted(os.listdir(tmp_path / "T" / "0")) == [f"{0:020d}", f"{FILE:020d}"]
    offsets, sizes = written_units(str(tmp_path / "T" / "0"))
    assert list(offsets) == [500, 540, 590, 650]
    assert list(sizes) == [40, 50, 60, 70]


def test_written_units_of_an_empty_queue_dir(tmp_path):
    assert written_units(str(tmp_path)) == (array.array("q"), array.array("i"))


def test_first_offset_at_or_after_a_commitlog_offset(tmp_path):
    """KIP-320's move back (node op offset_for_epoch): the first unit whose record starts at
    or past a CommitLog offset, across segments, from the queue's minimum; its end past all."""
    cq = make_cq(tmp_path)
    try:
        assert cq.first_offset_at_or_after(0) == 0  # an empty queue: its end
        fill(cq, 12, start=3)  # units 3..14 at CommitLog 300..1400 (the queue starts mid-way)
        found = [cq.first_offset_at_or_after(o) for o in (0, 300, 301, 400, 999, 1000, 1400, 1401, 10**9)]
        assert found == [3, 3, 4, 4, 10, 10, 14, 15, 15]
        cq.correct_min_offset(350)  # unit 3 is gone: never answered
        assert (cq.first_offset_at_or_after(0), cq.first_offset_at_or_after(999)) == (4, 10)
    finally:
        cq.shutdown()
