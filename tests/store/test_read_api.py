"""The store's read API: every GetMessageStatus, tag filtering, next offsets that never get a
consumer stuck, long polling, queue/index contents against the CommitLog, and random
puts/gets against an in-memory model."""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import threading
import time

import trio
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from store import GetMessageStatus, Message, StoreConfig, open_store
from store.index_file import index_key_hash, slot_of
from store.message import tags_code
from tests.examples import examples
from tests.waiting import wait_until

CL_SEGMENT = 4096
CQ_UNITS = 10


def make_config(root) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=CL_SEGMENT,
        mapped_file_size_consume_queue=CQ_UNITS * 20,
        max_hash_slot_num=53,
        max_index_num=40,
    )


async def put_all(store, msgs):
    results = []
    for m in msgs:
        r = await store.put_message(m)
        assert r.ok, r.error
        results.append(r)
    last = msgs[-1]
    assert await store.wait_for_message(last.topic, last.queue_id, results[-1].queue_offset, timeout=5)
    return results


async def test_found_paging_and_overflow_statuses(tmp_path):
    async with open_store(make_config(tmp_path)) as store:
        await put_all(store, [Message("T", f"m{i}".encode(), queue_id=1) for i in range(40)])
        res = store.get_message("g", "T", 1, 0, 16)
        assert res.status is GetMessageStatus.FOUND
        assert [m.body for m in res.messages][:3] == [b"m0", b"m1", b"m2"]
        assert (res.min_offset, res.max_offset) == (0, 40)
        # paging by next_begin_offset reads everything exactly once, across CQ segments
        seen, offset = [], 0
        while offset < 40:
            res = store.get_message("g", "T", 1, offset, 7)
            assert res.status is GetMessageStatus.FOUND
            seen += [m.body for m in res.messages]
            offset = res.next_begin_offset
        assert seen == [f"m{i}".encode() for i in range(40)]
        res = store.get_message("g", "T", 1, 40, 8)
        assert (res.status, res.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_ONE, 40)
        res = store.get_message("g", "T", 1, 99, 8)
        assert (res.status, res.next_begin_offset) == (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 40)
        res = store.get_message("g", "Unknown", 0, 0, 8)
        assert (res.status, res.next_begin_offset) == (GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0)
        store.consume_queues.find_or_create("Empty", 0)
        res = store.get_message("g", "Empty", 0, 5, 8)
        assert (res.status, res.next_begin_offset) == (GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0)


async def test_batch_limits_count_and_bytes(tmp_path):
    config = make_config(tmp_path)
    config.mapped_file_size_commit_log = 1 << 20
    config.max_transfer_count_on_message_in_memory = 5
    config.max_transfer_bytes_on_message_in_memory = 3000
    async with open_store(config) as store:
        await put_all(store, [Message("T", bytes(100)) for _ in range(20)])
        res = store.get_message("g", "T", 0, 0, 32)
        assert len(res.messages) == 5 and res.next_begin_offset == 5
        await put_all(store, [Message("T", bytes(1000)) for _ in range(10)])
        res = store.get_message("g", "T", 0, 20, 32)
        assert len(res.messages) == 2  # a third 1 KiB record would pass 3000 bytes
        assert res.next_begin_offset == 22


async def test_tag_filter_by_code_then_real_tag(tmp_path):
    async with open_store(make_config(tmp_path)) as store:
        # "Aa" and "BB" share a Java hash: the tagsCode matches, the real tag must not
        assert tags_code("Aa") == tags_code("BB")
        tags = ["Aa", "BB", "red", None, "Aa"]
        await put_all(store, [Message("T", f"{i}".encode(), tags=t) for i, t in enumerate(tags)])
        res = store.get_message("g", "T", 0, 0, 32, tag_filter="Aa")
        assert [m.body for m in res.messages] == [b"0", b"4"]
        res = store.get_message("g", "T", 0, 0, 32, tag_filter="red||BB")
        assert [m.body for m in res.messages] == [b"1", b"2"]
        res = store.get_message("g", "T", 0, 0, 32, tag_filter="*")
        assert len(res.messages) == 5
        res = store.get_message("g", "T", 0, 0, 32, tag_filter="blue")
        assert res.status is GetMessageStatus.NO_MATCHED_MESSAGE
        assert res.next_begin_offset == 5  # filtered units are skipped, never re-read


async def test_removed_commitlog_and_missing_cq_segments(tmp_path):
    async with open_store(make_config(tmp_path)) as store:
        results = await put_all(store, [Message("T", bytes(300), keys=[f"k{i}"]) for i in range(40)])
        cl = store.commit_log.queue
        assert len(cl.files) >= 3
        first_end = cl.first().file_from_offset + CL_SEGMENT
        in_first = sum(1 for r in results if r.commitlog_offset < first_end)
        # CommitLog segment deleted under a ConsumeQueue that still points at it (the async
        # flush may hold it a moment: a destroy is retried until its holder lets go, as the
        # cleanup service retries)
        first = cl.first()
        assert await wait_until(lambda: cl.delete_file(first, 0), what="the first segment deleted")
        assert in_first >= CQ_UNITS, "the first ConsumeQueue segment must point only into the removed one"
        res = store.get_message("g", "T", 0, 0, 32)
        assert res.status is GetMessageStatus.MESSAGE_WAS_REMOVING and res.messages == []
        assert res.next_begin_offset == CQ_UNITS, "the consumer moves past the removed range"
        res = store.get_message("g", "T", 0, in_first, 32)
        assert res.status is GetMessageStatus.FOUND and res.messages[0].queue_offset == in_first

        # a ConsumeQueue segment gone while its min offset still says it exists
        cq = store.consume_queues.find("T", 0)
        first_cq = cq.mapped_file_queue.first()
        assert await wait_until(lambda: cq.mapped_file_queue.delete_file(first_cq, 0),
                                what="the first ConsumeQueue segment deleted")
        res = store.get_message("g", "T", 0, 0, 32)
        assert res.status is GetMessageStatus.OFFSET_FOUND_NULL
        assert res.next_begin_offset == CQ_UNITS

        # once the min offset is corrected, an old offset is OFFSET_TOO_SMALL pointing at the min
        cq.correct_min_offset(store.get_min_phy_offset())
        res = store.get_message("g", "T", 0, 0, 32)
        assert res.status is GetMessageStatus.OFFSET_TOO_SMALL
        assert res.next_begin_offset == cq.min_offset_in_queue >= in_first
        res = store.get_message("g", "T", 0, res.next_begin_offset, 32)
        assert res.status is GetMessageStatus.FOUND


async def test_long_polling_wakes_on_arrival_and_times_out(tmp_path):
    async with open_store(make_config(tmp_path)) as store:
        await put_all(store, [Message("T", b"first")])
        t0 = time.monotonic()
        assert not await store.wait_for_message("T", 0, 1, timeout=0.2)
        assert time.monotonic() - t0 >= 0.19
        woke_after = None

        async def poll():
            nonlocal woke_after
            start = time.monotonic()
            assert await store.wait_for_message("T", 0, 1, timeout=10)
            woke_after = time.monotonic() - start

        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll)
            await trio.testing.wait_all_tasks_blocked()
            await store.put_message(Message("T", b"second"))
        assert woke_after is not None and woke_after < 1.0
        assert store.get_message("g", "T", 0, 1, 1).messages[0].body == b"second"


async def test_queue_and_index_files_match_the_commitlog_byte_by_byte(tmp_path):
    config = make_config(tmp_path)
    async with open_store(config) as store:
        msgs = [Message(f"Topic{i % 3}", bytes([i]) * (50 + i), queue_id=i % 2, tags=f"tag{i % 4}",
                        keys=[f"key{i}", f"alt{i}"]) for i in range(60)]
        results = await put_all(store, msgs)
        await trio.testing.wait_all_tasks_blocked()
        assert store.dispatch_behind_bytes() == 0
        assert len(store.commit_log.queue.files) >= 3 and len(store.index.files) >= 2
        for m, r in zip(msgs, results, strict=True):
            cq = store.consume_queues.find(m.topic, m.queue_id)
            name = r.queue_offset * 20 - (r.queue_offset * 20) % (CQ_UNITS * 20)
            path = os.path.join(config.store_path_root_dir, "consumequeue", m.topic, str(m.queue_id), f"{name:020d}")
            with open(path, "rb") as f:
                f.seek(r.queue_offset * 20 % (CQ_UNITS * 20))
                unit = f.read(20)
            size = store.look_message_by_offset(r.commitlog_offset).size
            assert unit == struct.pack(">qiq", r.commitlog_offset, size, tags_code(m.tags))
            assert cq is not None
        # the newest index file: a key's slot points at its newest entry, the entry holds the offset
        newest = store.index.files[-1]
        with open(newest.path, "rb") as f:
            data = f.read()
        count = struct.unpack_from(">i", data, 36)[0]
        entries = {}
        for n in range(1, count):
            key_hash, phy, _diff, _prev = struct.unpack_from(">iqii", data, 40 + 53 * 4 + n * 20)
            entries.setdefault(key_hash, []).append((n, phy))
        last = msgs[-1]
        key_hash = index_key_hash(f"{last.topic}#key59")
        slot_value = struct.unpack_from(">i", data, 40 + slot_of(key_hash, 53) * 4)[0]
        assert (slot_value, results[-1].commitlog_offset) in entries[key_hash]


class StorePortal:
    """A store open in its own trio thread, so a synchronous hypothesis state machine can
    drive it (`trio.from_thread`); closing it shuts the store down cleanly."""

    def __init__(self, config: StoreConfig) -> None:
        self._ready = threading.Event()
        self._closing: trio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(config,), daemon=True)
        self._thread.start()
        if not self._ready.wait(30) or self._error:
            raise RuntimeError(f"store did not open: {self._error!r}")

    def _run(self, config: StoreConfig) -> None:
        async def main() -> None:
            async with open_store(config) as store:
                self.store, self.token, self._closing = store, trio.lowlevel.current_trio_token(), trio.Event()
                self._ready.set()
                await self._closing.wait()

        try:
            trio.run(main)
        except BaseException as e:  # reported by __init__ or close
            self._error = e
            self._ready.set()

    def call(self, fn, *args):
        return trio.from_thread.run(fn, *args, trio_token=self.token)

    def call_sync(self, fn, *args):
        return trio.from_thread.run_sync(fn, *args, trio_token=self.token)

    def close(self) -> None:
        trio.from_thread.run_sync(self._closing.set, trio_token=self.token)
        self._thread.join(30)
        if self._error:
            raise self._error


TOPICS = st.sampled_from(["A", "B"])
QUEUES = st.integers(0, 2)
TAGS = st.sampled_from([None, "x", "y"])


class StoreModel(RuleBasedStateMachine):
    """Random puts, batches, gets with tag filters and reopens over several topics, checked
    against an in-memory model of every queue."""

    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="tidemq-model-")
        self.config = make_config(self.root)
        self.portal = StorePortal(self.config)
        self.model: dict[tuple[str, int], list[tuple[bytes, str | None]]] = {}

    def _visible(self, topic: str, qid: int, offset: int) -> None:
        assert self.portal.call(self.portal.store.wait_for_message, topic, qid, offset, 5)

    @rule(topic=TOPICS, qid=QUEUES, body=st.binary(max_size=300), tag=TAGS)
    def put(self, topic, qid, body, tag):
        r = self.portal.call(self.portal.store.put_message, Message(topic, body, queue_id=qid, tags=tag))
        assert r.ok, r.error
        queue = self.model.setdefault((topic, qid), [])
        assert r.queue_offset == len(queue)
        queue.append((body, tag))
        self._visible(topic, qid, r.queue_offset)

    @rule(topic=TOPICS, qid=QUEUES, bodies=st.lists(st.binary(max_size=200), min_size=1, max_size=5), tag=TAGS)
    def put_batch(self, topic, qid, bodies, tag):
        msgs = [Message(topic, b, queue_id=qid, tags=tag) for b in bodies]
        r = self.portal.call(self.portal.store.put_messages, msgs)
        queue = self.model.setdefault((topic, qid), [])
        assert r.ok and r.queue_offset == len(queue) and r.msg_num == len(bodies)
        queue.extend((b, tag) for b in bodies)
        self._visible(topic, qid, len(queue) - 1)

    @rule(topic=TOPICS, qid=QUEUES, offset=st.integers(0, 40), tag_filter=st.sampled_from([None, "x", "y||x"]))
    def get(self, topic, qid, offset, tag_filter):
        res = self.portal.call_sync(self.portal.store.get_message, "g", topic, qid, offset, 8, tag_filter)
        queue = self.model.get((topic, qid))
        if not queue:
            assert not res.messages
            return
        if offset >= len(queue):
            assert res.status in (GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.OFFSET_OVERFLOW_BADLY)
            assert res.next_begin_offset == len(queue)
            return
        wanted = None if tag_filter is None else set(tag_filter.split("||"))
        scanned = queue[offset:res.next_begin_offset]
        assert [m.body for m in res.messages] == [d for d, t in scanned if wanted is None or t in wanted]
        assert res.next_begin_offset > offset, "a consumer must always move on"

    @rule()
    def reopen(self):
        self.portal.close()
        self.portal = StorePortal(self.config)

    @invariant()
    def queue_lengths_match(self):
        for (topic, qid), queue in self.model.items():
            assert self.portal.call_sync(self.portal.store.get_max_offset_in_queue, topic, qid) == len(queue)

    def teardown(self):
        self.portal.close()
        shutil.rmtree(self.root, ignore_errors=True)


StoreModel.TestCase.settings = settings(
    max_examples=examples(20), stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_store_matches_the_model = StoreModel.TestCase
