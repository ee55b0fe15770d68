"""MessageStore.truncate_to / truncate_store: after a cut at x every query answers as if only
the records before x were ever written, the report names what was dropped, a restart
recovers to the same state, and bad offsets change nothing."""

from __future__ import annotations

import os
import tempfile

import attrs
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store import GetMessageStatus, Message, MessageStore, StoreConfig, open_store, truncate_store
from tests.examples import examples

SEGMENT = 4096
TOPICS = ("TA", "TB")


def make_config(root) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=SEGMENT,
        mapped_file_size_consume_queue=20 * 16,
        max_hash_slot_num=101,
        max_index_num=400,
    )


def make_message(i: int, topic: str, qid: int, size: int) -> Message:
    return Message(topic, bytes([i % 251]) * size, queue_id=qid, keys=[f"k{i}"], tags=f"t{i % 3}")


async def write(config: StoreConfig, specs) -> list[tuple[Message, int, str]]:
    """Put each (topic, qid, size); (message, commitlog offset, msgId) each."""
    placed = []
    async with open_store(config) as store:
        for i, (topic, qid, size) in enumerate(specs):
            msg = make_message(i, topic, qid, size)
            r = await store.put_message(msg)
            assert r.ok, r.error
            placed.append((msg, r.commitlog_offset, r.msg_id))
    return placed


def assert_holds_exactly(store: MessageStore, kept, dropped, end: int) -> None:
    """The model: the store answers as if only `kept` had ever been written."""
    assert store.get_max_phy_offset() == end
    for topic in TOPICS:
        for qid in (0, 1):
            expected = [m for m, _o, _id in kept if m.topic == topic and m.queue_id == qid]
            assert store.get_max_offset_in_queue(topic, qid) == len(expected)
            got, offset = [], 0
            while offset < len(expected):
                res = store.get_message("g", topic, qid, offset, 32)
                assert res.status is GetMessageStatus.FOUND, res.status
                got += res.messages
                offset = res.next_begin_offset
            assert [m.body for m in got] == [m.body for m in expected]
            assert [m.queue_offset for m in got] == list(range(len(expected)))
            res = store.get_message("g", topic, qid, len(expected), 32)
            if expected:
                assert res.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
            else:  # a queue whose every unit was cut may stay behind, empty
                assert res.status in (GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.NO_MATCHED_LOGIC_QUEUE)
            assert res.messages == []
    for msg, _offset, msg_id in kept:
        assert store.look_message_by_msg_id(msg_id).body == msg.body
        assert [m.body for m in store.query_message(msg.topic, msg.keys[0])] == [msg.body]
    for msg, _offset, msg_id in dropped:
        assert store.look_message_by_msg_id(msg_id) is None
        assert store.query_message(msg.topic, msg.keys[0]) == []


specs_strategy = st.lists(
    st.tuples(st.sampled_from(TOPICS), st.integers(0, 1), st.integers(1, 700)), min_size=1, max_size=30
)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=specs_strategy, data=st.data())
async def test_truncate_matches_a_model_and_survives_restart(specs, data):
    with tempfile.TemporaryDirectory() as root:
        config = make_config(root)
        placed = await write(config, specs)
        cut = data.draw(st.integers(0, len(placed)), label="cut")
        x = placed[cut][1] if cut < len(placed) else None
        store = MessageStore(config)
        store.load()
        try:
            max_before = store.get_max_phy_offset()
            assert max_before > placed[-1][1]
            x = max_before if x is None else x
            report = store.truncate_to(x)
        finally:
            store.close()
        kept, dropped = placed[:cut], placed[cut:]
        assert (report.from_offset, report.to_offset) == (x, max_before)
        assert report.message_count == len(dropped)
        assert report.msg_ids == tuple(msg_id for _m, _o, msg_id in dropped)
        for _ in range(2):  # the restart after the cut, and one more clean restart
            async with open_store(config) as store:
                assert_holds_exactly(store, kept, dropped, x)
        async with open_store(config) as store:  # the cut store takes new writes where it was cut
            r = await store.put_message(make_message(999, "TA", 0, 10))
            assert r.ok and r.commitlog_offset >= x


async def test_truncate_after_a_crash_and_segment_deletion(tmp_path):
    """A cut at a segment boundary deletes the later segments and zeroes the one at the cut;
    after an unclean exit the cut store is also what abnormal recovery comes back to."""
    config = make_config(tmp_path)
    placed = await write(config, [("TA", i % 2, 500) for i in range(30)])
    open(os.path.join(config.store_path_root_dir, "abort"), "wb").close()  # as if it had crashed
    boundary = next(i for i, (_m, off, _id) in enumerate(placed) if off >= 2 * SEGMENT)
    x = placed[boundary][1]
    report = await trio.to_thread.run_sync(truncate_store, config, x)
    assert report.message_count == len(placed) - boundary
    assert report.deleted_segments  # 30 x 600 bytes spans more than three 4 KiB segments
    for name in report.deleted_segments:
        assert not os.path.exists(os.path.join(config.store_path_root_dir, "commitlog", name))
    async with open_store(config) as store:
        assert not store.last_exit_ok
        assert_holds_exactly(store, placed[:boundary], placed[boundary:], x)


async def test_bad_offsets_are_refused_and_change_nothing(tmp_path):
    config = make_config(tmp_path)
    placed = await write(config, [("TA", 0, 100) for _ in range(5)])
    store = MessageStore(config)
    store.load()
    try:
        end = store.get_max_phy_offset()
        for bad, why in ((placed[1][1] + 3, "no record starts there"), (end + 1, "holds"), (-1, "holds")):
            with pytest.raises(ValueError, match=why):
                store.truncate_to(bad)
        assert store.get_max_phy_offset() == end
        noop = store.truncate_to(end)
        assert (noop.message_count, noop.dropped_bytes) == (0, 0)
    finally:
        store.close()
    async with open_store(config) as store:
        assert_holds_exactly(store, placed, [], end)
        with pytest.raises(RuntimeError, match="not running"):
            store.truncate_to(placed[0][1])


async def test_recovery_progress_reports_validated_bytes(tmp_path):
    config = make_config(tmp_path)
    await write(config, [("TA", 0, 500) for _ in range(20)])
    calls: list[tuple[int, int]] = []
    async with open_store(config, recovery_progress=lambda done, total: calls.append((done, total))) as store:
        segments = len(store.commit_log.queue.files)
    total = min(segments, 3) * SEGMENT  # a clean exit validates the last three segments
    assert calls[-1] == (total, total)
    assert all(t == total for _d, t in calls)
    done = [d for d, _t in calls]
    assert done == sorted(done) and len(calls) >= 2


async def test_a_clamped_cut_inside_a_record_cuts_from_that_record_s_start(tmp_path):
    """A rejoining node asked to cut inside one of its records (issue 45, seed 4: logs that
    diverged inside one epoch) cuts from the start of the record that holds the point and
    keeps running; without `clamp` the point is refused as before."""
    config = make_config(tmp_path)
    placed = await write(config, [("TA", 0, 100) for _ in range(5)])
    inside = placed[2][1] + 3
    report = await trio.to_thread.run_sync(lambda: truncate_store(config, inside, clamp=True))
    assert report.from_offset == placed[2][1] and report.message_count == 3
    async with open_store(config) as store:
        assert_holds_exactly(store, placed[:2], placed[2:], placed[2][1])


async def test_a_cut_resets_the_checkpoint_s_timestamps(tmp_path):
    """Records a new master sends after the cut may be stored earlier than those cut: the
    checkpoint must not claim their ConsumeQueue units durable (seed 38 with `--storage`)."""
    config = make_config(tmp_path)
    placed = await write(config, [("TA", 0, 100) for _ in range(5)])
    await trio.to_thread.run_sync(truncate_store, config, placed[0][1])  # nothing kept
    store = MessageStore(config)
    store.load()
    try:
        cp = store.checkpoint
        assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp) == (0, 0, 0)
    finally:
        store.close()


async def test_a_cut_names_what_the_load_s_recovery_cut_at_a_damaged_record(tmp_path):
    """A slave's recovery cuts at a record whose body fails its CRC; a rejoin's cut to an
    earlier point then reports the records past the damage too, the damaged one included
    (storage seed 352: the report stopped at the damage, hiding what the rejoin dropped)."""
    config = make_config(tmp_path)
    placed = await write(config, [("TA", 0, 100) for _ in range(6)])
    damaged = placed[3][1]
    path = os.path.join(config.store_path_root_dir, "commitlog", f"{damaged - damaged % SEGMENT:020d}")
    with open(path, "r+b") as f:  # a flipped bit in the body (IPv4 hosts: the body starts at 88)
        f.seek(damaged % SEGMENT + 90)
        byte = f.read(1)[0]
        f.seek(damaged % SEGMENT + 90)
        f.write(bytes([byte ^ 0x04]))
    slave = attrs.evolve(config, broker_role="SLAVE")
    report = await trio.to_thread.run_sync(truncate_store, slave, placed[1][1])
    assert report.from_offset == placed[1][1]
    assert report.msg_ids == tuple(msg_id for _m, _o, msg_id in placed[1:])
    assert report.message_count == 5
    async with open_store(slave) as store:
        assert_holds_exactly(store, placed[:1], placed[1:], placed[1][1])


async def test_queue_ends_held_name_where_undispatched_records_end_each_queue(tmp_path):
    """A restarted master holds dispatch at its confirm offset: its ConsumeQueues end short of
    its log, and a committed offset between the two is not past what it holds (storage seed
    6961: a new epoch's clamp lowered a SYNC_MASTER's commit answered OK)."""
    config = make_config(tmp_path)
    placed = await write(config, [("TA", i % 2, 100) for i in range(7)] + [("TB", 0, 100)])
    store = MessageStore(config)
    store.load()
    try:
        store.reput.reput_from_offset = store.get_max_phy_offset()
        assert store.queue_ends_held() == {}  # all dispatched
        store.reput.reput_from_offset = placed[3][1]  # as if held after the third record
        assert store.queue_ends_held() == {("TA", 1): 3, ("TA", 0): 4, ("TB", 0): 1}
    finally:
        store.close()
