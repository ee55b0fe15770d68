"""store/reput.py: ReputMessageService follows the CommitLog and dispatches each complete
record to its ConsumeQueue and the index; an incomplete replicated record waits for its
rest, a record that cannot be decoded stops dispatch with a running flag."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from store import BrokerRole, Message, MessageStore, StoreConfig
from store.record_codec import encode_record, patch_record, prepare_record
from store.running_flags import RunningFlags
from store.sysflag import SysFlag

pytestmark = pytest.mark.usefixtures("both_codecs")  # compiled and pure (conftest.py)

SEG = 64 * 1024
HOST = "127.0.0.1:10911"


def loaded_store(root, **kw) -> MessageStore:
    """A loaded, not started store: reput is built but nothing dispatches on its own."""
    store = MessageStore(StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=SEG,
                                     max_hash_slot_num=101, max_index_num=400, **kw))
    store.load()
    return store


def append(store: MessageStore, msg: Message) -> int:
    rec = prepare_record(msg, store.config.store_host, store.config.max_message_size)
    result = store.commit_log.append_messages([rec], msg.topic, msg.queue_id)
    return result.wrote_offset


def test_dispatch_fills_queues_index_and_checkpoint(tmp_path):
    store = loaded_store(tmp_path)
    try:
        reput = store.reput
        offsets = [append(store, Message("T", b"x" * 50, queue_id=i % 2, keys=[f"k{i}"])) for i in range(6)]
        assert reput.dispatch_behind_bytes() == store.commit_log.max_offset()
        assert reput.do_reput() == 6
        assert reput.dispatch_behind_bytes() == 0 and reput.reput_from_offset == store.commit_log.max_offset()
        for qid in (0, 1):
            cq = store.consume_queues.find("T", qid)
            assert cq.max_offset_in_queue == 3
            assert [cq.get_unit(i)[0] for i in range(3)] == offsets[qid::2]
        assert list(store.index.query_offsets("T", "k4", 10, 0, 2**62)) == [offsets[4]]
        assert store.checkpoint.logics_msg_timestamp > 0
        assert reput.do_reput() == 0  # nothing new
    finally:
        store.close()


def test_max_bytes_bounds_a_round(tmp_path):
    store = loaded_store(tmp_path)
    try:
        for _ in range(10):
            append(store, Message("T", b"y" * 200))
        size = store.commit_log.max_offset() // 10
        assert store.reput.do_reput(max_bytes=3 * size) == 3  # a round stops at the bound
        assert store.reput.do_reput() == 7
    finally:
        store.close()


def test_prepared_transactions_are_indexed_but_take_no_queue_unit(tmp_path):
    store = loaded_store(tmp_path)
    try:
        append(store, Message("T", b"p", keys=["prep"], sys_flag=int(SysFlag.TRANSACTION_PREPARED)))
        append(store, Message("T", b"n"))
        assert store.reput.do_reput() == 2
        assert store.consume_queues.find("T", 0).max_offset_in_queue == 1
        assert list(store.index.query_offsets("T", "prep", 10, 0, 2**62)) == [0]
    finally:
        store.close()


def test_an_incomplete_replicated_record_waits_for_the_rest(tmp_path):
    store = loaded_store(tmp_path, broker_role=BrokerRole.SLAVE)
    try:
        buf = encode_record(Message("T", b"z" * 300), HOST, 4 * 1024 * 1024)
        patch_record(buf, 0, 0, 1_700_000_000_000)  # as the master stored it
        record = bytes(buf)
        assert store.commit_log.append_data(0, record[:100])
        assert store.reput.do_reput() == 0 and store.reput.stopped_at_error is None
        assert store.reput.reput_from_offset == 0
        assert store.commit_log.append_data(100, record[100:])
        assert store.reput.do_reput() == 1
        assert store.consume_queues.find("T", 0).max_offset_in_queue == 1
        assert store.checkpoint.physic_msg_timestamp == 1_700_000_000_000  # a slave's comes from dispatch
    finally:
        store.close()


def test_an_undecodable_record_stops_dispatch_with_a_flag(tmp_path, caplog):
    store = loaded_store(tmp_path, broker_role=BrokerRole.SLAVE)
    try:
        good = bytes(encode_record(Message("T", b"ok"), HOST, 4 * 1024 * 1024))
        assert store.commit_log.append_data(0, good)
        garbage = (64).to_bytes(4, "big") + b"\x12\x34\x56\x78" + bytes(56)  # unknown magic
        assert store.commit_log.append_data(len(good), garbage)
        assert store.reput.do_reput() == 1  # the good record, then it stops
        assert f"offset {len(good)}" in store.reput.stopped_at_error
        assert store.flags.is_set(RunningFlags.WRITE_LOGICS_QUEUE_ERROR)
        assert not store.flags.is_writeable()
        assert "dispatch stopped" in caplog.text
        assert store.reput.do_reput() == 0  # stays stopped
    finally:
        store.close()


async def test_run_dispatches_on_wakeup_and_wakes_long_polls(tmp_path):
    store = loaded_store(tmp_path)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.reput.run)
            store.add_append_listener(store.reput.wakeup)
            with trio.fail_after(10):
                async with trio.open_nursery() as waiters:
                    waiters.start_soon(store.reput.wait_dispatched)
                    await trio.testing.wait_all_tasks_blocked()
                    append(store, Message("T", b"w"))  # the listener wakes the service
            assert store.consume_queues.find("T", 0).max_offset_in_queue == 1
            nursery.cancel_scope.cancel()
    finally:
        store.close()


async def test_a_long_poll_by_queue_wakes_only_when_its_queue_grows(tmp_path):
    """wait_dispatched(topic, queue_id): a dispatch round into other queues leaves the
    waiter waiting (no wake-up of every long poll per round); one into its queue ends it."""
    store = loaded_store(tmp_path)
    woken: list[str] = []

    async def poll(topic: str, queue_id: int) -> None:
        await store.reput.wait_dispatched(topic, queue_id)
        woken.append(f"{topic}-{queue_id}")

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.reput.run)
            store.add_append_listener(store.reput.wakeup)
            with trio.fail_after(10):
                async with trio.open_nursery() as waiters:
                    waiters.start_soon(poll, "A", 1)
                    waiters.start_soon(poll, "B", 0)
                    await trio.testing.wait_all_tasks_blocked()
                    append(store, Message("A", b"other queue", queue_id=0))
                    append(store, Message("C", b"other topic", queue_id=1))
                    await trio.testing.wait_all_tasks_blocked()
                    assert store.consume_queues.find("C", 1).max_offset_in_queue == 1  # dispatched
                    assert woken == []
                    append(store, Message("A", b"its queue", queue_id=1))
                    await trio.testing.wait_all_tasks_blocked()
                    assert woken == ["A-1"]
                    append(store, Message("B", b"the other one"))
            assert woken == ["A-1", "B-0"]
            nursery.cancel_scope.cancel()
    finally:
        store.close()


async def test_dispatch_held_at_the_visible_end_is_woken_only_once_the_end_covers_the_record(tmp_path):
    """wake_if_visible (the append and visibility hook): dispatch held at the visible end is
    not woken by bytes appended past the held record, nor by an end that moved short of it
    (rounds that would dispatch nothing); an append is enough once the end, read again,
    covers it (the end may move with the log). A round that dispatched up to the end stops
    there rather than looking again."""
    store = loaded_store(tmp_path)
    limit: list[int | None] = [0]
    rounds: list[int] = []
    do_reput = store.reput.do_reput

    def counted(*args, **kwargs):
        rounds.append(n := do_reput(*args, **kwargs))
        return n

    store.reput.do_reput = counted
    store.replica_log.limit_visibility(lambda: limit[0])
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.reput.run)
            store.add_append_listener(store.reput.wake_if_visible)
            with trio.fail_after(10):
                append(store, Message("T", b"first"))
                first_end = store.commit_log.max_offset()
                await trio.testing.wait_all_tasks_blocked()
                assert rounds == []  # not woken: the end does not reach past dispatch
                store.reput.wakeup()  # (woken all the same: the round holds the record)
                await trio.testing.wait_all_tasks_blocked()
                assert rounds == [0] and store.reput.held_back
                append(store, Message("T", b"second"))
                await trio.testing.wait_all_tasks_blocked()
                assert rounds == [0]  # not woken: the end still stops at the first record
                limit[0] = first_end
                append(store, Message("T", b"third"))
                await trio.testing.wait_all_tasks_blocked()
                assert rounds == [0, 1] and store.consume_queues.find("T", 0).max_offset_in_queue == 1
                limit[0] = first_end + 1  # moved, but short of the second record's end
                store.replica_log.visibility_moved()
                await trio.testing.wait_all_tasks_blocked()
                assert rounds == [0, 1]
                limit[0] = None
                store.replica_log.visibility_moved()
                await trio.testing.wait_all_tasks_blocked()
                assert rounds == [0, 1, 2] and store.consume_queues.find("T", 0).max_offset_in_queue == 3
            nursery.cancel_scope.cancel()
    finally:
        store.close()


def test_a_rolled_segments_uncommitted_tail_waits_for_its_commit(tmp_path):
    """With a transient store pool, readers see committed bytes only: once the writer has
    rolled to the next segment, the last one's tail (its last records and BLANK filler)
    may still sit in the write buffer. Dispatch waits for it, rather than taking the
    committed end for a segment without its filler and stopping (a live store that stopped
    dispatching: found by the crash matrix's async-pool seeds)."""
    store = loaded_store(tmp_path, transient_store_pool_enable=True, flush_disk_type="ASYNC_FLUSH")
    try:
        assert store.config.transient_pool_active
        queue = store.commit_log.queue
        n = 0
        for _ in range(50):  # most of the first segment, committed
            append(store, Message("T", b"x" * 900, queue_id=0))
            n += 1
        queue.files[0].commit(0)
        while len(queue.files) < 2:  # its tail and the roll, not committed
            append(store, Message("T", b"x" * 900, queue_id=0))
            n += 1
        first = queue.files[0]
        queue.files[-1].commit(0)  # the new segment's bytes are readable before the old tail's
        assert first.get_read_position() < first.wrote_position
        store.reput.do_reput()
        assert store.reput.stopped_at_error is None
        first.commit(0)  # the commit service's next step: the tail reaches its file
        store.reput.do_reput()
        assert store.reput.stopped_at_error is None
        assert store.consume_queues.find("T", 0).max_offset_in_queue == n
    finally:
        store.close()
