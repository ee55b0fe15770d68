import os
import struct

from store.checkpoint import CHECKPOINT_FILE_SIZE, StoreCheckpoint


def test_new_checkpoint_is_4k_of_zeros(tmp_path):
    path = tmp_path / "sub" / "checkpoint"
    cp = StoreCheckpoint(str(path))
    try:
        assert os.path.getsize(path) == CHECKPOINT_FILE_SIZE == 4096
        assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp) == (0, 0, 0)
        assert cp.min_timestamp == 0
        assert cp.min_timestamp_index == 0
    finally:
        cp.shutdown()


def test_round_trip_bytes_and_reopen(tmp_path):
    path = tmp_path / "checkpoint"
    cp = StoreCheckpoint(str(path))
    cp.physic_msg_timestamp = 1_700_000_000_123
    cp.logics_msg_timestamp = 1_700_000_000_456
    cp.index_msg_timestamp = -5
    # not written into the file before flush()
    assert path.read_bytes()[:24] == bytes(24)
    cp.flush()
    assert path.read_bytes()[:24] == struct.pack(">qqq", 1_700_000_000_123, 1_700_000_000_456, -5)
    cp.shutdown()
    cp.flush()  # after shutdown: a no-op, not a crash

    cp2 = StoreCheckpoint(str(path))
    try:
        assert cp2.physic_msg_timestamp == 1_700_000_000_123
        assert cp2.logics_msg_timestamp == 1_700_000_000_456
        assert cp2.index_msg_timestamp == -5
    finally:
        cp2.shutdown()


def test_shutdown_flushes(tmp_path):
    path = tmp_path / "checkpoint"
    cp = StoreCheckpoint(str(path))
    cp.logics_msg_timestamp = 42
    cp.shutdown()
    assert struct.unpack_from(">q", path.read_bytes(), 8)[0] == 42


def test_preserves_trailing_bytes_and_extends_short_file(tmp_path):
    path = tmp_path / "checkpoint"
    # a short file (e.g. written by a tool) with RocketMQ 5's extra fields at 24 and 32
    path.write_bytes(struct.pack(">qqqqq", 1, 2, 3, 4, 5))
    cp = StoreCheckpoint(str(path))
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp) == (1, 2, 3)
    cp.physic_msg_timestamp = 10
    cp.shutdown()
    data = path.read_bytes()
    assert len(data) == 4096
    assert struct.unpack_from(">qqqqq", data, 0) == (10, 2, 3, 4, 5)


def test_min_timestamp_formulas(tmp_path):
    cp = StoreCheckpoint(str(tmp_path / "checkpoint"))
    try:
        cp.physic_msg_timestamp = 10_000
        cp.logics_msg_timestamp = 8_000
        cp.index_msg_timestamp = 4_000
        assert cp.min_timestamp == 5_000  # min(10000, 8000) - 3000
        assert cp.min_timestamp_index == 4_000  # no 3 s margin on the index value
        cp.index_msg_timestamp = 9_000
        assert cp.min_timestamp_index == 5_000
        cp.physic_msg_timestamp = 2_999
        assert cp.min_timestamp == 0  # floored at 0
        cp.physic_msg_timestamp = 3_001
        assert cp.min_timestamp == 1
        assert cp.min_timestamp_index == 1
    finally:
        cp.shutdown()


def test_confirm_offset_at_32_goes_into_the_file_at_once(tmp_path):
    """RocketMQ 5's confirmPhyOffset: read at load (0 in a 4.x file: none known), written
    into the map as soon as it is noted (a killed process leaves it), 24 left alone."""
    path = tmp_path / "checkpoint"
    path.write_bytes(struct.pack(">qqqqq", 1, 2, 3, 4, 5))
    cp = StoreCheckpoint(str(path))
    assert cp.confirm_phy_offset == 5
    cp.note_confirm(1234)
    assert struct.unpack_from(">qq", path.read_bytes(), 24) == (4, 1234)  # before any flush
    cp.close()  # what a kill leaves
    cp2 = StoreCheckpoint(str(path))
    try:
        assert cp2.confirm_phy_offset == 1234
        cp2.note_confirm(None)
    finally:
        cp2.shutdown()
    cp3 = StoreCheckpoint(str(path))
    try:
        assert cp3.confirm_phy_offset is None
    finally:
        cp3.shutdown()
    fresh = StoreCheckpoint(str(tmp_path / "new"))
    try:
        assert fresh.confirm_phy_offset is None
    finally:
        fresh.shutdown()


def test_caught_up_time_at_40_goes_into_the_file_at_once(tmp_path):
    """tidemq's caughtUpTimestamp (a slave's promotion check after a restart): 0 is never,
    written into the map as soon as noted, the confirm offset at 32 left alone."""
    path = tmp_path / "checkpoint"
    path.write_bytes(struct.pack(">qqqqq", 1, 2, 3, 4, 5))
    cp = StoreCheckpoint(str(path))
    assert cp.caught_up_ms is None
    cp.note_caught_up(1_790_000_000_123)
    assert struct.unpack_from(">qq", path.read_bytes(), 32) == (5, 1_790_000_000_123)  # before any flush
    cp.close()  # what a kill leaves
    again = StoreCheckpoint(str(path))
    try:
        assert again.caught_up_ms == 1_790_000_000_123 and again.confirm_phy_offset == 5
    finally:
        again.shutdown()
