"""CommitLog put path through the MessageStore facade: segment rolls at exact boundaries,
BLANK fillers, batches, rejections (nothing written), queue offsets, msgIds, reopen.

Real files under tmp_path, real fsync; small segments so rolls happen after a few records.
"""

from __future__ import annotations

import os
import struct
import time

import pytest
import trio

from store import (
    BrokerRole,
    FlushDiskType,
    Message,
    PutMessageStatus,
    StoreConfig,
    open_store,
)
from store.message import decode_msg_id, encode_msg_id
from store.record_codec import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, RecordKind
from store.running_flags import RunningFlags
from store.status import AppendMessageStatus

SEG = 4096
FIXED = 91  # record overhead with IPv4 hosts: 91 + body + topic + properties
HOST = "10.0.0.1:10911"


def config(root, **kw) -> StoreConfig:
    opts = dict(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=SEG,
        store_host=HOST,
    )
    opts.update(kw)
    return StoreConfig(**opts)


def record_size(body_len: int, topic: str = "T", props: int = 0) -> int:
    return FIXED + body_len + len(topic.encode()) + props


def body_for_record(size: int, topic: str = "T") -> bytes:
    """A body whose record (no properties) is exactly `size` bytes."""
    n = size - record_size(0, topic)
    assert n >= 0
    return bytes((i * 7 + 3) % 256 for i in range(n))


def segment_path(root, start: int) -> str:
    return os.path.join(str(root), "commitlog", f"{start:020d}")


def segment_bytes(root, start: int) -> bytes:
    with open(segment_path(root, start), "rb") as f:
        return f.read()


def assert_blank(seg: bytes, pos: int) -> None:
    """A BLANK filler at `pos`: TOTALSIZE = bytes left, BLANK magic, rest of segment zero."""
    left = len(seg) - pos
    total, magic = struct.unpack_from(">iI", seg, pos)
    assert (total, magic) == (left, BLANK_MAGIC_CODE)
    assert seg[pos + 8 :] == bytes(left - 8)


# ---- segment rolls at exact boundaries ---------------------------------------------------


async def test_record_that_fits_exactly_leaving_eight_bytes(tmp_path):
    size = SEG - 8
    async with open_store(config(tmp_path)) as store:
        r = await store.put_message(Message("T", body_for_record(size)))
        assert r.status is PutMessageStatus.PUT_OK, r.error
        assert (r.commitlog_offset, r.append.wrote_bytes) == (0, size)
        assert store.get_max_phy_offset() == SEG - 8
        # the next record, however small, cannot leave 8 bytes: BLANK of exactly 8 bytes
        r2 = await store.put_message(Message("T", b""))
        assert r2.ok, r2.error
        assert r2.commitlog_offset == SEG
        assert store.get_max_phy_offset() == SEG + record_size(0)
        m = store.look_message_by_offset(0)
        assert m.size == size and m.body == body_for_record(size)
        assert store.look_message_by_offset(SEG).body == b""
    seg0 = segment_bytes(tmp_path, 0)
    assert struct.unpack_from(">iI", seg0, 0) == (size, MESSAGE_MAGIC_CODE)
    assert_blank(seg0, SEG - 8)
    assert struct.unpack_from(">iI", segment_bytes(tmp_path, SEG), 0) == (
        record_size(0),
        MESSAGE_MAGIC_CODE,
    )


@pytest.mark.parametrize("leftover", [0, 1, 7])
async def test_record_leaving_fewer_than_eight_bytes_rolls_behind_a_blank(tmp_path, leftover):
    first = 1000
    second = SEG - first - leftover  # would leave `leftover` (< 8) bytes in segment 0
    async with open_store(config(tmp_path)) as store:
        r1 = await store.put_message(Message("T", body_for_record(first)))
        assert r1.ok and r1.commitlog_offset == 0
        r2 = await store.put_message(Message("T", body_for_record(second), queue_id=0))
        assert r2.ok, r2.error
        assert r2.commitlog_offset == SEG  # at the next segment's start
        assert r2.queue_offset == 1  # the BLANK consumes no queue offset
        m = store.look_message_by_offset(SEG)
        assert m.commitlog_offset == SEG and m.body == body_for_record(second)
        assert store.look_message_by_offset(first) is None  # a BLANK is not a message
        assert store.get_max_phy_offset() == SEG + second
    seg0 = segment_bytes(tmp_path, 0)
    assert len(seg0) == SEG
    assert_blank(seg0, first)


async def test_reads_across_segments_and_iter_records(tmp_path):
    sizes = [300, 1500, 2000, 700, 3000, 120, 4000, 95, 2500, 2500, 1600]
    puts = []
    async with open_store(config(tmp_path)) as store:
        for i, size in enumerate(sizes):
            r = await store.put_message(Message("T", body_for_record(size), queue_id=0))
            assert r.ok, r.error
            assert r.queue_offset == i
            # a record never crosses a segment and always leaves >= 8 bytes
            start = r.commitlog_offset % SEG
            assert start + size + 8 <= SEG
            puts.append((r.commitlog_offset, size))
        assert len({off // SEG for off, _ in puts}) >= 5  # rolled several times
        for off, size in puts:
            m = store.look_message_by_offset(off)
            assert m is not None and m.size == size and m.commitlog_offset == off
            assert m.body == body_for_record(size)

        walked = list(store.commit_log.iter_records(0))
        msgs = [(off, d.size) for off, d in walked if d.kind is RecordKind.MESSAGE]
        blanks = [(off, d.size) for off, d in walked if d.kind is RecordKind.BLANK]
        assert msgs == puts
        assert all(d.kind is not RecordKind.INVALID for _, d in walked)
        # a BLANK ends every segment that was left behind, sized to the segment's end
        for off, size in blanks:
            assert off + size == (off // SEG + 1) * SEG
        assert len(blanks) == puts[-1][0] // SEG
        # iteration order is strictly by offset
        offsets = [off for off, _ in walked]
        assert offsets == sorted(offsets)
    for seg in range(puts[-1][0] // SEG):
        data = segment_bytes(tmp_path, seg * SEG)
        blank = [off for off, _ in blanks if off // SEG == seg][0]
        assert_blank(data, blank - seg * SEG)


async def test_record_bigger_than_a_segment_is_illegal_and_writes_nothing(tmp_path):
    async with open_store(config(tmp_path)) as store:
        r0 = await store.put_message(Message("T", b"x" * 100))
        assert r0.ok
        before = store.get_max_phy_offset()
        for size in (SEG - 7, SEG, SEG + 1, 3 * SEG):
            r = await store.put_message(Message("T", body_for_record(size)))
            assert r.status is PutMessageStatus.MESSAGE_ILLEGAL
            assert "segment" in r.error
            assert store.get_max_phy_offset() == before
        # no BLANK was written: the next small record follows the first one directly
        r1 = await store.put_message(Message("T", b"y"))
        assert r1.ok and r1.commitlog_offset == before and r1.queue_offset == 1
        # a batch bigger than a segment is refused too
        batch = [Message("T", body_for_record(1500)) for _ in range(3)]
        rb = await store.put_messages(batch)
        assert rb.status is PutMessageStatus.MESSAGE_ILLEGAL and rb.error
        assert store.get_max_phy_offset() == before + record_size(1)


# ---- batches -----------------------------------------------------------------------------


async def test_batch_is_contiguous_with_consecutive_queue_offsets(tmp_path):
    async with open_store(config(tmp_path, mapped_file_size_commit_log=64 * 1024)) as store:
        r0 = await store.put_message(Message("B", b"first", queue_id=2))
        assert r0.ok and r0.queue_offset == 0
        bodies = [f"batch-{i}".encode() * (i + 1) for i in range(10)]
        rb = await store.put_messages([Message("B", b, queue_id=2) for b in bodies])
        assert rb.ok, rb.error
        assert rb.msg_num == 10
        assert rb.queue_offset == 1
        ids = rb.msg_id.split(",")
        assert len(ids) == 10
        offset = rb.commitlog_offset
        assert offset == r0.commitlog_offset + r0.append.wrote_bytes
        for i, (msg_id, body) in enumerate(zip(ids, bodies, strict=True)):
            host, phys = decode_msg_id(msg_id)
            assert (host, phys) == (HOST, offset)
            m = store.look_message_by_offset(phys)
            assert m.body == body and m.queue_offset == 1 + i and m.queue_id == 2
            offset += m.size
        assert offset == rb.commitlog_offset + rb.append.wrote_bytes == store.get_max_phy_offset()
        r1 = await store.put_message(Message("B", b"after", queue_id=2))
        assert r1.queue_offset == 11


async def test_batch_never_spans_two_segments(tmp_path):
    async with open_store(config(tmp_path)) as store:
        r0 = await store.put_message(Message("T", body_for_record(2500)))
        assert r0.ok
        # 4 x 400 = 1600 bytes: would fit in 1596 left only without the 8-byte reserve;
        # here it does not fit at all, so all four go to segment 1 behind a BLANK
        batch = [Message("T", body_for_record(400)) for _ in range(4)]
        rb = await store.put_messages(batch)
        assert rb.ok, rb.error
        assert rb.commitlog_offset == SEG
        offs = [decode_msg_id(i)[1] for i in rb.msg_id.split(",")]
        assert offs == [SEG + 400 * i for i in range(4)]
        assert [store.look_message_by_offset(o).queue_offset for o in offs] == [1, 2, 3, 4]
        # a batch that leaves exactly 8 bytes fits where it is
        left = SEG - 1600
        rb2 = await store.put_messages(
            [Message("T", body_for_record(left - 8 - 1000)), Message("T", body_for_record(1000))]
        )
        assert rb2.ok and rb2.commitlog_offset == SEG + 1600
        assert store.get_max_phy_offset() == 2 * SEG - 8
    assert_blank(segment_bytes(tmp_path, 0), 2500)


async def test_a_group_append_rolls_segments_and_survives_a_refused_put(tmp_path):
    """append_group: puts land in order with consecutive queue offsets per queue, a put
    that does not fit rolls to the next segment behind a BLANK (the ones after it follow
    it there), and a put larger than a segment fails alone."""
    async with open_store(config(tmp_path)) as store:
        sizes = [1500, 1500, SEG + 100, 800, 1200]  # 1500 + 1500 + 800 = 3800 fit; 1200 rolls
        puts = [store.prepare_message(Message("T", body_for_record(n) if n < SEG else b"x" * n,
                                              queue_id=i % 2))
                for i, n in enumerate(sizes)]
        results = store.append_prepared(puts)
        assert [r.status for r in results] == [AppendMessageStatus.PUT_OK] * 2 + [
            AppendMessageStatus.MESSAGE_SIZE_EXCEEDED] + [AppendMessageStatus.PUT_OK] * 2
        ok = [results[i] for i in (0, 1, 3, 4)]
        assert [r.wrote_offset for r in ok] == [0, 1500, 3000, SEG]
        assert [(r.queue_offset, store.look_message_by_offset(r.wrote_offset).queue_id) for r in ok] == [
            (0, 0), (0, 1), (1, 1), (1, 0)]
        assert store.commit_log.topic_queue_table == {"T-0": 2, "T-1": 2}
    assert_blank(segment_bytes(tmp_path, 0), 3800)


# ---- rejections: status, a meaningful error, nothing written --------------------------------


async def _assert_nothing_written(store, before_max, topic="T", queue_id=0, next_queue_offset=1):
    assert store.get_max_phy_offset() == before_max
    r = await store.put_message(Message(topic, b"probe", queue_id=queue_id))
    assert r.ok, r.error
    assert r.commitlog_offset == before_max
    assert r.queue_offset == next_queue_offset  # no queue offset was consumed


def _long_props() -> dict[str, str]:
    return {"BIG": "v" * 32767}  # "BIG\x01" + 32767 > 32767 bytes


INVALID_SINGLE = [
    pytest.param(Message("T" * 128, b"x"), PutMessageStatus.MESSAGE_ILLEGAL, "127", id="topic-128"),
    pytest.param(Message("", b"x"), PutMessageStatus.MESSAGE_ILLEGAL, "empty", id="topic-empty"),
    pytest.param(Message("   ", b"x"), PutMessageStatus.MESSAGE_ILLEGAL, "empty", id="topic-blank"),
    pytest.param(Message("a b", b"x"), PutMessageStatus.MESSAGE_ILLEGAL, "character", id="topic-space"),
    pytest.param(Message("a/b", b"x"), PutMessageStatus.MESSAGE_ILLEGAL, "character", id="topic-slash"),
    pytest.param(Message("tópico", b"x"), PutMessageStatus.MESSAGE_ILLEGAL, "character", id="topic-utf8"),
    pytest.param(
        Message("T", b"x", properties=_long_props()),
        PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, "32767", id="properties-too-big",
    ),
    pytest.param(
        Message("T", b"x", keys=["k" * 20000, "j" * 20000]),
        PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, "32767", id="keys-too-big",
    ),
    pytest.param(Message("T", b"x" * 1025), PutMessageStatus.MESSAGE_ILLEGAL, "maxMessageSize", id="body-too-big"),
    pytest.param(Message("T", b"x", queue_id=-1), PutMessageStatus.MESSAGE_ILLEGAL, "queue", id="negative-queue"),
]


INVALID_FIELDS = [
    pytest.param(dict(born_host="nonsense"), "ip:port", id="born-host-garbage"),
    pytest.param(dict(queue_id=2**31), "2147483647", id="queue-id-over-int32"),
    pytest.param(dict(flag=2**40), "2147483647", id="flag-over-int32"),
    pytest.param(dict(reconsume_times=-(2**40)), "2147483647", id="reconsume-times"),
    pytest.param(dict(born_timestamp=2**64), "large", id="born-timestamp-over-int64"),
]


@pytest.mark.parametrize(("fields", "words"), INVALID_FIELDS)
async def test_field_that_cannot_be_encoded_is_illegal_not_an_exception(tmp_path, fields, words):
    async with open_store(config(tmp_path)) as store:
        assert (await store.put_message(Message("T", b"seed"))).ok
        before = store.get_max_phy_offset()
        r = await store.put_message(Message("T", b"x", **fields))
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL
        assert words in r.error, r.error
        qid = fields.get("queue_id", 0)
        rb = await store.put_messages([Message("T", b"ok", queue_id=qid), Message("T", b"x", **fields)])
        assert rb.status is PutMessageStatus.MESSAGE_ILLEGAL and words in rb.error
        await _assert_nothing_written(store, before)


@pytest.mark.parametrize(("msg", "status", "words"), INVALID_SINGLE)
async def test_invalid_message_is_rejected_and_nothing_written(tmp_path, msg, status, words):
    async with open_store(config(tmp_path, max_message_size=1024)) as store:
        assert (await store.put_message(Message("T", b"seed"))).ok
        before = store.get_max_phy_offset()
        r = await store.put_message(msg)
        assert r.status is status
        assert r.error and words in r.error, r.error
        assert not r.ok and r.append is None
        # as a one-message batch too
        rb = await store.put_messages([msg])
        assert rb.status is status and words in rb.error, rb.error
        await _assert_nothing_written(store, before)


async def test_topic_of_127_chars_and_body_at_the_limit_are_accepted(tmp_path):
    async with open_store(config(tmp_path, max_message_size=1024)) as store:
        r = await store.put_message(Message("%|_-aZ09" + "t" * 119, b"x" * 1024))
        assert r.ok, r.error
        m = store.look_message_by_offset(r.commitlog_offset)
        assert len(m.topic) == 127 and len(m.body) == 1024


async def test_empty_body_is_accepted(tmp_path):
    async with open_store(config(tmp_path)) as store:
        r = await store.put_message(Message("T", b""))
        assert r.ok, r.error
        m = store.look_message_by_offset(r.commitlog_offset)
        assert m.body == b"" and m.size == record_size(0)


INVALID_BATCH = [
    pytest.param(
        lambda: [Message("T", b"x" * 600), Message("T", b"y" * 600)],
        "maxMessageSize", id="bodies-together-too-big",
    ),
    pytest.param(lambda: [Message("T", b"x"), Message("U", b"y")], "one topic", id="mixed-topics"),
    pytest.param(
        lambda: [Message("T", b"x"), Message("T", b"y", queue_id=1)], "queue", id="mixed-queues"
    ),
    pytest.param(lambda: [], "empty", id="empty-batch"),
    pytest.param(
        lambda: [Message("T", b"x"), Message("T", b"y", properties={"DELAY": "3"})],
        "delay", id="delayed",
    ),
    pytest.param(
        lambda: [Message("T", b"x", sys_flag=0x4), Message("T", b"y")],
        "transaction", id="prepared",
    ),
    pytest.param(
        lambda: [Message("T", b"x"), Message("T" * 128, b"y")], "127", id="bad-topic-inside",
    ),
]


@pytest.mark.parametrize(("make", "words"), INVALID_BATCH)
async def test_invalid_batch_is_rejected_and_nothing_written(tmp_path, make, words):
    async with open_store(config(tmp_path, max_message_size=1024)) as store:
        assert (await store.put_message(Message("T", b"seed"))).ok
        before = store.get_max_phy_offset()
        r = await store.put_messages(make())
        assert r.status is PutMessageStatus.MESSAGE_ILLEGAL
        assert r.error and words in r.error, r.error
        await _assert_nothing_written(store, before)


async def test_put_after_shutdown_is_service_not_available(tmp_path):
    async with open_store(config(tmp_path)) as store:
        r = await store.put_message(Message("T", b"one"))
        assert r.ok
        end = store.get_max_phy_offset()
    r = await store.put_message(Message("T", b"late"))
    assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert "shut down" in r.error
    rb = await store.put_messages([Message("T", b"late")])
    assert rb.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "shut down" in rb.error
    async with open_store(config(tmp_path)) as store:
        assert store.get_max_phy_offset() == end
        assert store.look_message_by_offset(end) is None


async def test_slave_refuses_puts(tmp_path):
    async with open_store(config(tmp_path, broker_role=BrokerRole.SLAVE)) as store:
        r = await store.put_message(Message("T", b"x"))
        assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert "SLAVE" in r.error
        rb = await store.put_messages([Message("T", b"x")])
        assert rb.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "SLAVE" in rb.error
        assert store.get_max_phy_offset() == 0
        commitlog = os.path.join(str(tmp_path), "commitlog")
        assert not os.path.isdir(commitlog) or not os.listdir(commitlog)


@pytest.mark.parametrize(
    ("bit", "words"),
    [
        (RunningFlags.DISK_FULL, "disk"),
        (RunningFlags.NOT_WRITEABLE, "NOT_WRITEABLE"),
        (RunningFlags.WRITE_LOGICS_QUEUE_ERROR, "WRITE_LOGICS_QUEUE_ERROR"),
        (RunningFlags.WRITE_INDEX_FILE_ERROR, "WRITE_INDEX_FILE_ERROR"),
    ],
)
async def test_not_writeable_flags_refuse_puts(tmp_path, bit, words):
    async with open_store(config(tmp_path)) as store:
        assert (await store.put_message(Message("T", b"seed"))).ok
        before = store.get_max_phy_offset()
        store.flags.set(bit)
        r = await store.put_message(Message("T", b"x"))
        assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE
        assert words in r.error, r.error
        rb = await store.put_messages([Message("T", b"x"), Message("T", b"y")])
        assert rb.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and words in rb.error
        store.flags.clear(bit)
        await _assert_nothing_written(store, before)


async def test_puts_prepared_before_the_store_stopped_taking_writes_are_refused_at_append(tmp_path):
    """A node prepares a turn's puts before it appends them: if the store stopped taking
    writes in between (disk full, shut down), the append refuses them and writes nothing."""
    async with open_store(config(tmp_path)) as store:
        assert (await store.put_message(Message("T", b"seed"))).ok
        before = store.get_max_phy_offset()
        prepared = [store.prepare_message(Message("T", b"late")), store.prepare_batch([Message("T", b"b")])]
        store.flags.set(RunningFlags.DISK_FULL)
        results = store.append_prepared(prepared)
        assert [r.status for r in results] == [PutMessageStatus.SERVICE_NOT_AVAILABLE] * 2
        assert all("disk" in r.error for r in results)
        store.flags.clear(RunningFlags.DISK_FULL)
        await _assert_nothing_written(store, before)
        assert all(r.status is AppendMessageStatus.PUT_OK for r in store.append_prepared(prepared))


async def test_not_readable_flag_does_not_block_puts(tmp_path):
    async with open_store(config(tmp_path)) as store:
        store.flags.set(RunningFlags.NOT_READABLE)
        assert (await store.put_message(Message("T", b"x"))).ok


# ---- queue offsets, store timestamp, msgId ------------------------------------------------


async def test_queue_offsets_are_per_topic_queue(tmp_path):
    async with open_store(config(tmp_path, mapped_file_size_commit_log=64 * 1024)) as store:
        expected: dict[tuple[str, int], int] = {}
        plan = [("A", 0), ("A", 1), ("B", 0), ("A", 0), ("A", 0), ("B", 0), ("A", 1), ("B", 3)] * 5
        for i, (topic, qid) in enumerate(plan):
            r = await store.put_message(Message(topic, f"{i}".encode(), queue_id=qid))
            assert r.ok
            assert r.queue_offset == expected.get((topic, qid), 0)
            expected[(topic, qid)] = r.queue_offset + 1
            m = store.look_message_by_offset(r.commitlog_offset)
            assert (m.topic, m.queue_id, m.queue_offset) == (topic, qid, r.queue_offset)
        # a batch takes a run of offsets in its own queue only
        rb = await store.put_messages([Message("A", b"b", queue_id=1) for _ in range(3)])
        assert rb.queue_offset == expected[("A", 1)]
        r = await store.put_message(Message("A", b"z", queue_id=0))
        assert r.queue_offset == expected[("A", 0)]


async def test_prepared_and_rollback_take_no_queue_offset(tmp_path):
    async with open_store(config(tmp_path)) as store:
        assert (await store.put_message(Message("T", b"a"))).queue_offset == 0
        for flag in (0x4, 0xC):
            r = await store.put_message(Message("T", b"half", sys_flag=flag))
            assert r.ok and store.look_message_by_offset(r.commitlog_offset).queue_offset == 0
        r = await store.put_message(Message("T", b"commit", sys_flag=0x8))
        assert r.queue_offset == 1
        assert (await store.put_message(Message("T", b"b"))).queue_offset == 2


async def test_store_timestamp_is_within_the_put_call(tmp_path):
    async with open_store(config(tmp_path, flush_disk_type=FlushDiskType.SYNC_FLUSH)) as store:
        for i in range(20):
            t0 = int(time.time() * 1000)
            r = await store.put_message(Message("T", f"{i}".encode(), born_timestamp=12345))
            t1 = int(time.time() * 1000)
            assert r.ok
            m = store.look_message_by_offset(r.commitlog_offset)
            assert t0 <= m.store_timestamp <= t1
            assert r.append.store_timestamp == m.store_timestamp
            assert m.born_timestamp == 12345


@pytest.mark.parametrize(
    ("store_host", "born_host", "extra"),
    [("[::1]:10911", "[fe80::1]:5555", 24), ("[::1]:10911", "1.2.3.4:5", 12), ("10.0.0.1:10911", "[::2]:7", 12)],
)
async def test_ipv6_hosts_widen_the_record_and_the_msg_id(tmp_path, store_host, born_host, extra):
    async with open_store(config(tmp_path, store_host=store_host)) as store:
        rs = []
        for i in range(60):  # through a few rolls, so BLANK sizing sees the wider records
            t0 = int(time.time() * 1000)
            r = await store.put_message(Message("T", b"6" * (50 * i), born_host=born_host))
            assert r.ok, r.error
            rs.append((r, t0, int(time.time() * 1000)))
        for i, (r, t0, t1) in enumerate(rs):
            assert decode_msg_id(r.msg_id) == (store_host, r.commitlog_offset)
            m = store.look_message_by_offset(r.commitlog_offset)
            assert m.size == record_size(50 * i) + extra
            assert (m.store_host, m.born_host, m.body) == (store_host, born_host, b"6" * (50 * i))
            assert t0 <= m.store_timestamp <= t1  # patched at the right position
            assert m.commitlog_offset == r.commitlog_offset and m.queue_offset == i


async def test_msg_id_decodes_to_store_host_and_offset(tmp_path):
    async with open_store(config(tmp_path)) as store:
        for i in range(30):
            r = await store.put_message(Message("T", b"m" * (i * 50)))
            assert r.ok
            assert len(r.msg_id) == 32 and r.msg_id == r.msg_id.upper()
            assert decode_msg_id(r.msg_id) == (HOST, r.commitlog_offset)
            m = store.look_message_by_offset(decode_msg_id(r.msg_id)[1])
            assert m.msg_id == r.msg_id and m.store_host == HOST
    assert encode_msg_id("10.0.0.1:10911", 1073741824) == "0A00000100002A9F0000000040000000"


# ---- reopen ------------------------------------------------------------------------------


async def _fill(store, n, topic="T", queue_id=0):
    out = []
    for i in range(n):
        body = f"{topic}-{queue_id}-{i}-".encode() * (1 + i % 17)
        r = await store.put_message(Message(topic, body, queue_id=queue_id))
        assert r.ok, r.error
        out.append((r.commitlog_offset, body))
    return out


async def test_reopen_reads_everything_and_appends_at_the_end(tmp_path):
    async with open_store(config(tmp_path)) as store:
        written = await _fill(store, 120)
        end = store.get_max_phy_offset()
    assert not os.path.exists(os.path.join(str(tmp_path), "abort"))
    async with open_store(config(tmp_path)) as store:
        assert store.get_max_phy_offset() == end
        for off, body in written:
            assert store.look_message_by_offset(off).body == body
        more = await _fill(store, 60)
        assert more[0][0] in (end, (end // SEG + 1) * SEG)  # right after, or next segment
        written += more
        end2 = store.get_max_phy_offset()
    async with open_store(config(tmp_path)) as store:
        assert store.get_max_phy_offset() == end2
        offsets = [off for off, d in store.commit_log.iter_records(0) if d.kind is RecordKind.MESSAGE]
        assert offsets == [off for off, _ in written]
        for off, body in written:
            assert store.look_message_by_offset(off).body == body


async def test_reopen_after_a_roll_with_an_empty_new_segment(tmp_path):
    async with open_store(config(tmp_path)) as store:
        r = await store.put_message(Message("T", body_for_record(SEG - 8)))
        assert r.ok
    async with open_store(config(tmp_path)) as store:
        assert store.get_max_phy_offset() == SEG - 8
        r = await store.put_message(Message("T", b"next"))
        assert r.ok and r.commitlog_offset == SEG
    async with open_store(config(tmp_path)) as store:
        assert store.look_message_by_offset(SEG).body == b"next"
        assert store.look_message_by_offset(0).size == SEG - 8


async def test_reopen_continues_queue_offsets(tmp_path):
    async with open_store(config(tmp_path)) as store:
        await _fill(store, 5, "A", 0)
        await _fill(store, 3, "A", 1)
    async with open_store(config(tmp_path)) as store:
        r = await store.put_message(Message("A", b"x", queue_id=0))
        assert r.queue_offset == 5
        r = await store.put_message(Message("A", b"x", queue_id=1))
        assert r.queue_offset == 3


async def test_concurrent_puts_from_many_tasks_are_all_stored(tmp_path):
    results = []

    async def producer(p):
        for i in range(25):
            r = await store.put_message(Message("T", f"{p}:{i}".encode() * 9, queue_id=p % 4))
            assert r.ok
            results.append((r, f"{p}:{i}".encode() * 9))
            await trio.lowlevel.checkpoint()  # interleave the producers

    async with open_store(config(tmp_path)) as store:
        async with trio.open_nursery() as nursery:
            for p in range(8):
                nursery.start_soon(producer, p)
        offsets = sorted(r.commitlog_offset for r, _ in results)
        assert len(set(offsets)) == 200
        for r, body in results:
            assert store.look_message_by_offset(r.commitlog_offset).body == body
        for q in range(4):
            qos = sorted(r.queue_offset for r, _ in results if r.append and
                         store.look_message_by_offset(r.commitlog_offset).queue_id == q)
            assert qos == list(range(len(qos)))
