import os
import struct

import pytest

from store.checkpoint import StoreCheckpoint
from store.index_file import (
    IndexFile,
    IndexService,
    index_file_name,
    index_file_size,
    index_key_hash,
    slot_of,
)
from store.mapped_file import SegmentSizeError

HEADER = struct.Struct(">qqqqii")
ENTRY = struct.Struct(">iqii")
T0 = 1_700_000_000_000


def entry_pos(slots, n):
    return 40 + slots * 4 + n * 20


def read_at(path, pos, size):
    with open(path, "rb") as f:
        f.seek(pos)
        return f.read(size)


def test_key_hash_vectors():
    assert index_key_hash("TopicTest#KEY1") == 1656969516
    assert slot_of(1656969516, 5_000_000) == 1969516
    assert index_key_hash("polygenelubricants") == 0  # Integer.MIN_VALUE
    assert index_key_hash("Aa") == index_key_hash("BB") == 2112
    assert index_file_size(5_000_000, 20_000_000) == 420_000_040


def test_real_file_slot_bytes_with_5m_slots(tmp_path):
    path = str(tmp_path / "20240101000000000")
    f = IndexFile(path, 5_000_000, 4)
    try:
        assert os.path.getsize(path) == 40 + 5_000_000 * 4 + 4 * 20  # sparse
        assert f.put_key("TopicTest#KEY1", 1234, T0)
        f.flush()
        assert read_at(path, 40 + 1969516 * 4, 4) == struct.pack(">i", 1)
        assert read_at(path, entry_pos(5_000_000, 1), 20) == ENTRY.pack(1656969516, 1234, 0, 0)
        assert f.hash_slot_count == 1
    finally:
        f.close()


def test_header_and_entries_byte_level(tmp_path):
    path = str(tmp_path / "20240101000000000")
    slots = 7
    f = IndexFile(path, slots, 10)
    try:
        assert read_at(path, 0, 40) == HEADER.pack(0, 0, 0, 0, 0, 1)
        assert f.put_key("T#a", 100, T0)
        assert f.put_key("T#b", 200, T0 + 5_999)  # 5.999 s → timeDiff 5
        assert f.put_key("T#a", 300, T0 + 61_000)
        # header written into the map as it changes, before any flush
        hash_a, hash_b = index_key_hash("T#a"), index_key_hash("T#b")
        same_slot = slot_of(hash_a, slots) == slot_of(hash_b, slots)
        slot_count = 1 if same_slot else 2
        assert read_at(path, 0, 40) == HEADER.pack(T0, T0 + 61_000, 100, 300, slot_count, 4)
        assert read_at(path, entry_pos(slots, 1), 20) == ENTRY.pack(hash_a, 100, 0, 0)
        prev_b = 1 if same_slot else 0
        assert read_at(path, entry_pos(slots, 2), 20) == ENTRY.pack(hash_b, 200, 5, prev_b)
        prev_a = 2 if same_slot else 1
        assert read_at(path, entry_pos(slots, 3), 20) == ENTRY.pack(hash_a, 300, 61, prev_a)
        assert read_at(path, 40 + slot_of(hash_a, slots) * 4, 4) == struct.pack(">i", 3)
        # entry number 0 is never used
        assert read_at(path, entry_pos(slots, 0), 20) == bytes(20)
    finally:
        f.close()


def test_time_diff_clamps(tmp_path):
    f = IndexFile(str(tmp_path / "20240101000000000"), 3, 10)
    try:
        assert f.put_key("k", 1, T0)
        assert f.put_key("k", 2, T0 - 10_000)  # earlier than begin: 0
        assert f.put_key("k", 3, T0 + (2**31) * 1000 + 5)  # overflow: Integer.MAX_VALUE
        base = 40 + 3 * 4
        diffs = [ENTRY.unpack_from(f._mm, base + n * 20)[2] for n in (1, 2, 3)]
        assert diffs == [0, 0, 2**31 - 1]
    finally:
        f.close()


def test_collisions_are_candidates_newest_first(tmp_path):
    f = IndexFile(str(tmp_path / "20240101000000000"), 100, 10)
    try:
        f.put_key("Aa", 10, T0)
        f.put_key("xyz", 15, T0)
        f.put_key("BB", 20, T0 + 1000)
        f.put_key("Aa", 30, T0 + 2000)
        # "Aa" and "BB" have equal Java hashes: both come back; the caller filters on the key
        assert f.query("Aa", 10, 0, 2**62) == [30, 20, 10]
        assert f.query("BB", 10, 0, 2**62) == [30, 20, 10]
        assert f.query("xyz", 10, 0, 2**62) == [15]
        assert f.query("nope", 10, 0, 2**62) == []
        assert f.query("Aa", 2, 0, 2**62) == [30, 20]  # max_num
    finally:
        f.close()


def test_one_slot_chain_filters_by_hash(tmp_path):
    f = IndexFile(str(tmp_path / "20240101000000000"), 1, 10)
    try:
        for i, key in enumerate(["a", "b", "a", "c", "a"]):
            f.put_key(key, i, T0 + i * 1000)
        assert f.query("a", 10, 0, 2**62) == [4, 2, 0]
        assert f.query("c", 10, 0, 2**62) == [3]
        assert f.hash_slot_count == 1
    finally:
        f.close()


def test_time_range_filter_and_stop(tmp_path):
    f = IndexFile(str(tmp_path / "20240101000000000"), 10, 10)
    try:
        for i in range(5):
            f.put_key("T#k", 100 + i, T0 + i * 10_000)  # every 10 s
        assert f.query("T#k", 10, T0 + 5_000, T0 + 25_000) == [102, 101]
        assert f.query("T#k", 10, T0 + 10_000, T0 + 10_000) == [101]
        assert f.query("T#k", 10, T0 + 41_000, T0 + 99_000) == []
        assert f.is_time_matched(T0 - 1, T0 + 50_000)  # covers the file
        assert f.is_time_matched(T0 + 1, T0 + 99_000)  # begin inside
        assert f.is_time_matched(T0 - 99, T0 + 1)  # end inside
        assert not f.is_time_matched(T0 + 40_001, T0 + 99_000)
        assert not f.is_time_matched(0, T0 - 1)
    finally:
        f.close()


def test_full_file_and_reload(tmp_path):
    path = str(tmp_path / "20240101000000000")
    f = IndexFile(path, 10, 4)
    assert [f.put_key(f"k{i}", i, T0 + i) for i in range(4)] == [True, True, True, False]
    assert f.is_write_full()
    f.shutdown()
    f = IndexFile(path, 10, 4)  # an existing file loads its header
    try:
        assert (f.index_count, f.begin_phy_offset, f.end_phy_offset) == (4, 0, 2)
        assert (f.begin_timestamp, f.end_timestamp) == (T0, T0 + 2)
        assert f.query("k1", 10, 0, 2**62) == [1]
        assert f.is_write_full()
    finally:
        f.close()
    with pytest.raises(SegmentSizeError):
        IndexFile(path, 11, 4)


class Clock:
    def __init__(self, ms):
        self.ms = ms

    def __call__(self):
        return self.ms


def make_service(tmp_path, index_num=4, slots=16, clock=None, checkpoint=None):
    cp = checkpoint or StoreCheckpoint(str(tmp_path / "checkpoint"))
    svc = IndexService(str(tmp_path / "index"), slots, index_num, cp, clock=clock or Clock(T0))
    return svc, cp


def test_service_rolls_full_file(tmp_path):
    svc, cp = make_service(tmp_path)
    try:
        for i in range(3):
            assert svc.build_index("T", 1000 + i * 100, 10_000 + i * 1000, [f"k{i}"], None, 0)
        assert len(svc.files) == 1
        assert svc.build_index("T", 1300, 20_000, ["k3"], None, 0)  # 4th key: the file is full
        first, second = svc.files
        assert first.is_write_full()
        assert first.file_name == index_file_name(T0)
        # same clock: the name exists, so one millisecond later
        assert second.file_name == index_file_name(T0 + 1)
        assert cp.index_msg_timestamp == 12_000
        with open(tmp_path / "checkpoint", "rb") as fh:  # the checkpoint was flushed
            assert struct.unpack_from(">q", fh.read(24), 16)[0] == 12_000
        # quirk: the new file began with the previous end values; timeDiff counted from them
        assert (second.begin_timestamp, second.begin_phy_offset) == (20_000, 1300)
        base = 40 + 16 * 4 + 20
        assert ENTRY.unpack_from(second._mm, base)[1:3] == (1300, 8)  # (20000 - 12000) / 1000
        assert svc.query_offsets("T", "k3", 10, 0, 2**62) == [1300]
        assert svc.query_offsets("T", "k0", 10, 0, 2**62) == [1000]
        res = svc.query_offset("T", "k0", 10, 0, 2**62)
        assert (res.index_last_update_timestamp, res.index_last_update_phyoffset) == (20_000, 1300)
    finally:
        svc.shutdown()
        cp.shutdown()


def test_service_keys_uniq_key_rollback_and_redispatch(tmp_path):
    svc, cp = make_service(tmp_path, index_num=100)
    try:
        assert svc.build_index("T", 500, T0, "a  b", "UNIQ1", 0)  # empty pieces skipped
        assert svc.files[0].index_count == 4
        assert svc.query_offsets("T", "UNIQ1", 10, 0, 2**62) == [500]
        assert svc.query_offsets("T", "b", 10, 0, 2**62) == [500]
        assert svc.query_offsets("U", "b", 10, 0, 2**62) == []  # other topic
        assert svc.build_index("T", 600, T0, ["c"], None, 0xC)  # ROLLBACK: skipped
        assert svc.build_index("T", 400, T0, ["d"], None, 0)  # below endPhyOffset: skipped
        assert svc.build_index("T", 700, T0, ["e"], None, 0x8)  # COMMIT: indexed
        assert svc.build_index("T", 800, T0, ["f"], None, 0x4)  # PREPARED: indexed
        assert svc.query_offsets("T", "c", 10, 0, 2**62) == []
        assert svc.query_offsets("T", "d", 10, 0, 2**62) == []
        assert svc.query_offsets("T", "e", 10, 0, 2**62) == [700]
        assert svc.query_offsets("T", "f", 10, 0, 2**62) == [800]
        assert svc.build_index("T", 900, T0, None, None, 0)  # nothing to index
        assert svc.files[0].index_count == 6
    finally:
        svc.shutdown()
        cp.shutdown()


def test_service_query_newest_first_across_files_and_limits(tmp_path):
    clock = Clock(T0)
    svc, cp = make_service(tmp_path, index_num=3, clock=clock)  # 2 entries per file
    try:
        for i in range(6):
            clock.ms += 1000
            assert svc.build_index("T", i * 100, 10_000 + i * 10_000, ["dup"], None, 0)
        assert len(svc.files) == 3
        names = [f.file_name for f in svc.files]
        assert names == sorted(names)
        assert svc.query_offsets("T", "dup", 100, 0, 2**62) == [500, 400, 300, 200, 100, 0]
        assert svc.query_offsets("T", "dup", 3, 0, 2**62) == [500, 400, 300]
        # max_num capped by max_msgs_num_batch
        svc.max_msgs_num_batch = 2
        assert svc.query_offsets("T", "dup", 100, 0, 2**62) == [500, 400]
        svc.max_msgs_num_batch = 64
        # time range: the walk stops after the file whose begin is before `begin`
        assert svc.query_offsets("T", "dup", 100, 30_000, 40_000) == [300, 200]
        assert svc.query_offsets("T", "dup", 100, 61_000, 2**62) == []
        # RocketMQ quirk: the first entry of a rolled file (400, stored at 50 s) got its
        # timeDiff (10 s) from the previous file's end (40 s), but it is read back against
        # the new begin (50 s): it looks stored at 60 s.
        assert svc.query_offsets("T", "dup", 100, 55_000, 2**62) == [500, 400]
        assert svc.query_offsets("T", "dup", 100, 50_000, 55_000) == []
    finally:
        svc.shutdown()
        cp.shutdown()


def test_name_order_kept_when_clock_goes_back(tmp_path):
    clock = Clock(T0)
    svc, cp = make_service(tmp_path, index_num=2, clock=clock)  # 1 entry per file
    try:
        svc.build_index("T", 0, 1, ["a"], None, 0)
        clock.ms = T0 - 3_600_000
        svc.build_index("T", 10, 2, ["b"], None, 0)
        assert [f.file_name for f in svc.files] == [index_file_name(T0), index_file_name(T0 + 1)]
    finally:
        svc.shutdown()
        cp.shutdown()


def test_load_after_crash_destroys_files_newer_than_checkpoint(tmp_path):
    clock = Clock(T0)
    svc, cp = make_service(tmp_path, index_num=3, clock=clock)
    for i in range(3):
        clock.ms += 1
        svc.build_index("T", i * 100, 10_000 + i * 1000, [f"k{i}"], None, 0)
    assert len(svc.files) == 2
    assert cp.index_msg_timestamp == 11_000  # end of the full first file
    names = [f.file_name for f in svc.files]
    svc.shutdown()

    svc2, _ = make_service(tmp_path, index_num=3, checkpoint=cp)
    svc2.load(last_exit_ok=True)
    assert [f.file_name for f in svc2.files] == names
    svc2.shutdown()

    os.makedirs(tmp_path / "index" / "junk")
    svc3, _ = make_service(tmp_path, index_num=3, checkpoint=cp)
    svc3.load(last_exit_ok=False)
    try:
        assert [f.file_name for f in svc3.files] == names[:1]
        assert not os.path.exists(tmp_path / "index" / names[1])
        assert svc3.query_offsets("T", "k1", 10, 0, 2**62) == [100]
        assert svc3.query_offsets("T", "k2", 10, 0, 2**62) == []
        # the first file is full: the next key starts a new file
        assert svc3.build_index("T", 200, 12_000, ["k2"], None, 0)
        assert len(svc3.files) == 2
    finally:
        svc3.shutdown()
        cp.shutdown()


def test_delete_expired_and_destroy(tmp_path):
    clock = Clock(T0)
    svc, cp = make_service(tmp_path, index_num=2, clock=clock)  # 1 entry per file
    try:
        for i in range(4):
            clock.ms += 1
            svc.build_index("T", i * 100, 10_000 + i, ["k"], None, 0)
        assert len(svc.files) == 4
        assert svc.delete_expired_file(0) == 0
        assert svc.delete_expired_file(150) == 2  # ends 0 and 100 are below 150
        assert [f.end_phy_offset for f in svc.files] == [200, 300]
        assert svc.delete_expired_file(10**9) == 1  # never the newest
        assert len(svc.files) == 1
        assert len(os.listdir(tmp_path / "index")) == 1
        svc.flush()
        svc.destroy()
        assert svc.files == []
        assert os.listdir(tmp_path / "index") == []
    finally:
        svc.shutdown()
        cp.shutdown()
