"""Batch reads of store directories: schema and values against the store's own decoder
(store.tools.dump), a RocketMQ-layout segment built byte by byte, record-aligned partitions
inside large segments, filters and their pruning, and bad files (failfast and permissive)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from pipeline import store_scan
from pipeline.schema import rows_to_dicts
from pipeline.store_scan import ScanOptions, StoreReadError
from store import layout, tools
from store.message import Message
from store.record_codec import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    masked_crc32,
)
from tests.store.test_tools import SEG, sample_messages, write_store


def scan_rows(root: Path, **opts) -> list[dict]:
    rows = []
    for batch in store_scan.scan([str(root)], ScanOptions(**opts)):
        rows.extend(rows_to_dicts(batch))
    return rows


def as_decoder_view(row: dict) -> dict:
    """A row in store.tools.message_to_dict's terms."""
    return {
        "offset": row["commitlog_offset"], "size": row["size"], "topic": row["topic"],
        "queueId": row["queue_id"], "queueOffset": row["queue_offset"], "flag": row["flag"],
        "sysFlag": row["sysflag"], "bornTimestamp": row["born_timestamp"], "bornHost": row["born_host"],
        "storeTimestamp": row["store_timestamp"], "storeHost": row["store_host"],
        "reconsumeTimes": row["reconsume_times"], "properties": row["properties"],
        "keys": row["keys"], "tags": row["tags"], "msgId": row["msg_id"], "bodyCrc": row["body_crc"],
        "crcOk": row["crc_ok"], "body": row["body"],
    }


def decoder_view(d: dict) -> dict:
    import base64

    out = {k: v for k, v in d.items() if k not in ("magicVersion", "preparedTransactionOffset")}
    out["body"] = base64.b64decode(d["body"])
    return out


@pytest.fixture
def store(tmp_path):
    return write_store(tmp_path / "store", sample_messages(40))


def test_spark_rows_equal_the_store_decoder(spark, store):
    df = spark.read.format("tidemq").load(str(store.root))
    assert [f.name for f in df.schema.fields][:4] == ["topic", "queue_id", "queue_offset", "commitlog_offset"]
    assert df.schema["keys"].dataType.simpleString() == "array<string>"
    assert df.schema["properties"].dataType.simpleString() == "map<string,string>"
    assert df.schema["store_time"].dataType.simpleString() == "timestamp"
    rows = [r.asDict(recursive=True) for r in df.orderBy("commitlog_offset").collect()]
    expected = [decoder_view(d) for d in tools.dump(store.root) if "blank" not in d]
    assert len(rows) == len(expected) == 40
    assert [as_decoder_view(r) for r in rows] == expected
    assert {r["source"] for r in rows} == {str(store.root)}
    first = rows[0]
    assert first["store_time"].timestamp() * 1000 == pytest.approx(first["store_timestamp"])
    assert first["born_time"].timestamp() * 1000 == pytest.approx(first["born_timestamp"])


def test_two_stores_by_glob_and_by_list(spark, tmp_path):
    a = write_store(tmp_path / "node-a", sample_messages(5), store_host="10.0.0.1:10911")
    b = write_store(tmp_path / "node-b", sample_messages(7), store_host="10.0.0.2:10911")
    by_glob = spark.read.format("tidemq").load(str(tmp_path / "node-*"))
    counts = {r["source"]: r["count"] for r in by_glob.groupBy("source").count().collect()}
    assert counts == {str(a.root): 5, str(b.root): 7}
    assert store_scan.expand_paths(f"{a.root}, {b.root}") == [str(a.root), str(b.root)]
    by_list = spark.read.format("tidemq").load(f"{a.root},{b.root}")
    assert by_list.count() == 12
    with pytest.raises(layout.StoreToolError, match="no store directory matches"):
        store_scan.expand_paths(str(tmp_path / "nothing-*"))


def build_rocketmq_segment(start: int, size: int) -> tuple[bytes, list[int]]:
    """A segment laid out as a RocketMQ 4.x broker writes it (FORMATS.md), field by field:
    a v1 record, a v2 record (RocketMQ 5) with a trailing property separator, a BLANK."""
    def record(magic: int, phys: int, queue_offset: int, topic: bytes, body: bytes, props: bytes) -> bytes:
        topic_len = struct.pack(">b", len(topic)) if magic == MESSAGE_MAGIC_CODE else struct.pack(">h", len(topic))
        rest = b"".join([
            struct.pack(">I", magic), struct.pack(">i", masked_crc32(body)), struct.pack(">i", 3),
            struct.pack(">i", 77), struct.pack(">q", queue_offset), struct.pack(">q", phys),
            struct.pack(">i", 0), struct.pack(">q", 1_700_000_000_000),
            bytes([192, 168, 1, 2]) + struct.pack(">i", 50123), struct.pack(">q", 1_700_000_000_123),
            bytes([10, 0, 0, 1]) + struct.pack(">i", 10911), struct.pack(">i", 2), struct.pack(">q", 0),
            struct.pack(">i", len(body)), body, topic_len, topic, struct.pack(">h", len(props)), props,
        ])
        return struct.pack(">i", 4 + len(rest)) + rest

    buf = bytearray(size)
    r1 = record(MESSAGE_MAGIC_CODE, start, 42, b"TopicTest", b"Hello RocketMQ",
                b"TAGS\x01TagA\x02KEYS\x01KEY1 KEY2\x02UNIQ_KEY\x01ABC")
    r2 = record(MESSAGE_MAGIC_CODE_V2, start + len(r1), 43, b"TopicTest", b"v2 body", b"TAGS\x01TagB\x02")
    buf[: len(r1)] = r1
    buf[len(r1) : len(r1) + len(r2)] = r2
    pos = len(r1) + len(r2)
    buf[pos : pos + 8] = struct.pack(">iI", size - pos, BLANK_MAGIC_CODE)
    return bytes(buf), [start, start + len(r1)]


def test_a_rocketmq_layout_segment_not_starting_at_zero(spark, tmp_path):
    start, size = 1 << 30, 4096
    data, offsets = build_rocketmq_segment(start, size)
    (tmp_path / "rmq" / "commitlog").mkdir(parents=True)
    (tmp_path / "rmq" / "commitlog" / f"{start:020d}").write_bytes(data)
    rows = [r.asDict(recursive=True) for r in
            spark.read.format("tidemq").load(str(tmp_path / "rmq")).orderBy("commitlog_offset").collect()]
    assert [r["commitlog_offset"] for r in rows] == offsets
    one, two = rows
    assert one["msg_id"] == "0A00000100002A9F0000000040000000"  # ROCKETMQ-FACTS vector
    assert (one["topic"], one["queue_id"], one["queue_offset"], one["flag"]) == ("TopicTest", 3, 42, 77)
    assert one["tags"] == "TagA" and one["keys"] == ["KEY1", "KEY2"]
    assert one["properties"]["UNIQ_KEY"] == "ABC" and one["crc_ok"] is True
    assert (one["born_host"], one["store_host"]) == ("192.168.1.2:50123", "10.0.0.1:10911")
    assert (one["born_timestamp"], one["store_timestamp"], one["reconsume_times"]) == (
        1_700_000_000_000, 1_700_000_000_123, 2)
    assert two["body"] == b"v2 body" and two["tags"] == "TagB" and two["queue_offset"] == 43


def test_partitions_inside_large_segments_cut_at_record_starts(spark, tmp_path):
    msgs = [Message(f"T{i % 3}", bytes([i % 256]) * (50 + i % 200), queue_id=i % 2) for i in range(400)]
    store = write_store(tmp_path / "big", msgs, seg_size=64 * 1024)
    starts = {r.offset for r in store.records}
    opts = ScanOptions(max_partition_bytes=5000)
    parts = store_scan.plan([str(store.root)], opts)
    segments = {p.path for p in parts}
    assert len(parts) > 2 * len(segments), "large segments are split"
    for p in parts:
        assert p.segment_start + p.begin in starts
        assert p.end - p.begin < 5000 + max(r.size for r in store.records) or p.end == os.path.getsize(p.path)
    seen = []
    for p in parts:
        for batch in store_scan.read_partition(p, opts):
            seen.extend(batch.column("commitlog_offset").to_pylist())
    assert sorted(seen) == sorted(starts), "every record exactly once"
    df = spark.read.format("tidemq").option("maxPartitionBytes", "20000").load(str(store.root))
    assert df.rdd.getNumPartitions() == len(store_scan.plan([str(store.root)], ScanOptions(max_partition_bytes=20000)))
    assert df.count() == 400


def test_filters_and_pruning(spark, tmp_path):
    msgs = [Message("Hot" if i % 10 else "Rare", b"x" * 100, queue_id=0) for i in range(300)]
    store = write_store(tmp_path / "f", msgs, seg_size=8192)  # store times 1_700_000_000_000 + i
    everything = store_scan.plan([str(store.root)], ScanOptions())
    # time: only the segments that can hold [t0+100, t0+120] are planned
    t0 = 1_700_000_000_000
    window = ScanOptions(start_time=t0 + 100, end_time=t0 + 120)
    assert len(store_scan.plan([str(store.root)], window)) < len(everything) // 2
    rows = scan_rows(store.root, start_time=t0 + 100, end_time=t0 + 120)
    assert [r["store_timestamp"] for r in rows] == list(range(t0 + 100, t0 + 121))
    # topics: filtered exactly; body and CRC optional
    rows = scan_rows(store.root, topics=frozenset({"Rare"}), include_body=False, verify_crc=False)
    assert len(rows) == 30 and {r["topic"] for r in rows} == {"Rare"}
    assert all(r["body"] is None and r["crc_ok"] is None for r in rows)
    df = (spark.read.format("tidemq").option("topics", "Rare").option("includeBody", "false")
          .option("startTime", "2023-11-14T22:13:20.100+00:00").load(str(store.root)))
    got = df.select("store_timestamp", "body").collect()
    assert [r[0] for r in got] == [t0 + i for i in range(100, 300, 10)] and all(r[1] is None for r in got)


def test_topic_pruning_through_the_consume_queue(tmp_path):
    """A real store (ConsumeQueues written by the store's dispatch): a rare topic's
    partitions are found through its units, the rest are not read."""
    import trio

    from store import StoreConfig, open_store

    root = tmp_path / "real"

    async def fill():
        cfg = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=16 * 1024,
                          mapped_file_size_consume_queue=2000, max_hash_slot_num=53, max_index_num=40)
        async with open_store(cfg) as s:
            for i in range(400):
                r = await s.put_message(Message("Rare" if i in (5, 390) else "Hot", b"y" * 120))
                assert r.ok
            assert await s.wait_for_message("Hot", 0, 397, timeout=5)

    trio.run(fill)
    everything = store_scan.plan([str(root)], ScanOptions())
    rare = store_scan.plan([str(root)], ScanOptions(topics=frozenset({"Rare"})))
    assert len(rare) == 2 < len(everything)
    rows = scan_rows(root, topics=frozenset({"Rare"}))
    assert [r["queue_offset"] for r in rows] == [0, 1]
    assert len(store_scan.plan([str(root)], ScanOptions(topics=frozenset({"Nobody"})))) == 0


def _real_store(root: Path, count: int = 600) -> None:
    """A store written by the store itself: CommitLog, ConsumeQueues from its dispatch."""
    import trio

    from store import StoreConfig, open_store

    async def fill():
        cfg = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=64 * 1024,
                          mapped_file_size_consume_queue=20 * 400, max_hash_slot_num=53, max_index_num=40)
        async with open_store(cfg) as s:
            for i in range(count):
                r = await s.put_message(Message(f"T{i % 3}", bytes([i % 256]) * (40 + i % 300), queue_id=i % 4))
                assert r.ok
            last = count - 1  # dispatched: the last message's unit is in its queue
            same_queue = sum(1 for i in range(last) if i % 3 == last % 3 and i % 4 == last % 4)
            assert await s.wait_for_message(f"T{last % 3}", last % 4, same_queue, timeout=5)

    trio.run(fill)


def _record_starts(root: Path) -> set[int]:
    return {r["offset"] for r in tools.dump(str(root)) if "topic" in r}


def _read_once(root: Path, parts: list, opts: ScanOptions) -> list[int]:
    seen = []
    for p in parts:
        for batch in store_scan.read_partition(p, opts):
            seen.extend(batch.column("commitlog_offset").to_pylist())
    return seen


def test_cuts_come_from_the_consume_queues_and_match_hopping(tmp_path):
    """Partition cuts inside a segment are found through the ConsumeQueue units (no walk of
    the CommitLog); without ConsumeQueues the planner hops record by record and cuts at the
    same places. Either way every record is read exactly once."""
    import shutil

    root = tmp_path / "real"
    _real_store(root)
    starts = _record_starts(root)
    opts = ScanOptions(max_partition_bytes=6000)
    from_queues = store_scan.plan([str(root)], opts)
    assert len(from_queues) > 3 * len({p.path for p in from_queues})
    assert all(p.segment_start + p.begin in starts for p in from_queues)
    assert sorted(_read_once(root, from_queues, opts)) == sorted(starts)
    shutil.rmtree(root / "consumequeue")
    assert store_scan.plan([str(root)], opts) == from_queues


def test_a_consume_queue_unit_that_is_no_record_start_is_not_trusted(tmp_path):
    """A unit pointing into the middle of a record (a stale or damaged ConsumeQueue) is
    checked against the CommitLog and not used as a cut: the planner hops there instead."""
    root = tmp_path / "real"
    _real_store(root)
    starts = _record_starts(root)
    opts = ScanOptions(max_partition_bytes=6000)
    good = store_scan.plan([str(root)], opts)
    for qdir in (root / "consumequeue").glob("*/*"):  # every unit of every queue 3 bytes on
        for f in qdir.iterdir():
            data = bytearray(f.read_bytes())
            for at in range(0, len(data) - 19, 20):
                phy = int.from_bytes(data[at:at + 8], "big", signed=True)
                if phy > 0:
                    data[at:at + 8] = (phy + 3).to_bytes(8, "big", signed=True)
            f.write_bytes(bytes(data))
    parts = store_scan.plan([str(root)], opts)
    assert parts == good
    assert sorted(_read_once(root, parts, opts)) == sorted(starts)


# ---------------------------------------------------------------------------------------
# bad files: a clear error naming file and offset, or a _corrupt row; never a silent skip


def test_torn_tail_fails_naming_the_file_and_offset(spark, store):
    last = store.records[-1]
    store.write_at(last.offset + last.size, struct.pack(">iI", 500, MESSAGE_MAGIC_CODE) + b"\x01" * 30)
    seg = store.segment(last.offset)
    with pytest.raises(StoreReadError) as e:
        scan_rows(store.root)
    assert str(seg) in str(e.value) and f"offset {last.offset + last.size}" in str(e.value)
    assert "torn record" in str(e.value)
    with pytest.raises(Exception) as e:
        spark.read.format("tidemq").load(str(store.root)).count()
    # after Spark's own first line, tidemq's message, not a traceback
    assert str(e.value).splitlines()[1].startswith(
        f"pipeline.store_scan.StoreReadError: {seg}: at CommitLog offset {last.offset + last.size}"), str(e.value)
    assert "Traceback" not in str(e.value)


def test_permissive_reports_the_bad_range_and_keeps_the_rest(spark, store):
    victim = store.records[3]
    store.write_at(victim.offset + victim.size - 5, b"\xff")  # last property byte: CRC still fine
    body_rec = next(r for r in store.records if r.offset >= SEG)
    store.write_at(body_rec.offset + 100, b"\x00\x01")  # inside the body: CRC mismatch
    df = spark.read.format("tidemq").option("mode", "PERMISSIVE").load(str(store.root))
    rows = [r.asDict(recursive=True) for r in df.orderBy("commitlog_offset").collect()]
    bad = [r for r in rows if r["_corrupt"]]
    assert any(r["commitlog_offset"] == body_rec.offset and r["crc_ok"] is False
               and "body CRC mismatch" in r["_corrupt"] for r in bad)
    structural = [r for r in bad if r["topic"] is None]
    assert [r["commitlog_offset"] for r in structural] == [victim.offset]
    assert str(store.segment(victim.offset)) in structural[0]["_corrupt"]
    # the walk of that segment stops at the damage; the next segment is read in full
    good = [r["commitlog_offset"] for r in rows if not r["_corrupt"]]
    assert good[:3] == [r.offset for r in store.records[:3]]
    assert all(r.offset in good for r in store.records if r.offset > body_rec.offset)
    with pytest.raises(StoreReadError, match="body CRC mismatch|corrupt record|malformed"):
        scan_rows(store.root)


def test_not_a_commitlog_and_not_a_store(spark, tmp_path):
    (tmp_path / "junk" / "commitlog").mkdir(parents=True)
    junk = tmp_path / "junk" / "commitlog" / f"{0:020d}"
    junk.write_bytes(b"PK\x03\x04 this is a zip file" + b"\x00" * 100)
    with pytest.raises(StoreReadError, match=rf"{junk}.*offset 0 .*not a CommitLog segment"):
        scan_rows(tmp_path / "junk")
    rows = scan_rows(tmp_path / "junk", permissive=True)
    assert len(rows) == 1 and "not a CommitLog segment" in rows[0]["_corrupt"]
    with pytest.raises(layout.StoreToolError, match="no commitlog"):
        store_scan.plan([str(tmp_path)], ScanOptions())
    with pytest.raises(Exception, match="does not exist"):
        spark.read.format("tidemq").load(str(tmp_path / "missing")).count()


def test_a_segment_that_vanished_after_planning_is_an_error(tmp_path):
    store = write_store(tmp_path / "s", sample_messages(5))
    [part] = store_scan.plan([str(store.root)], ScanOptions())
    os.unlink(part.path)  # e.g. removed by the node's cleanup between planning and reading
    with pytest.raises(StoreReadError, match=rf"{part.path}: at CommitLog offset 0 .*cannot open"):
        list(store_scan.read_partition(part, ScanOptions()))
    [row] = [r for b in store_scan.read_partition(part, ScanOptions(permissive=True)) for r in b.to_pylist()]
    assert "cannot open" in row["_corrupt"] and row["commitlog_offset"] == 0


def test_a_bad_option_fails_planning_with_its_message_first(spark, store):
    with pytest.raises(Exception) as e:
        spark.read.format("tidemq").option("mode", "DROPMALFORMED").load(str(store.root)).count()
    assert "reader: ValueError: mode must be FAILFAST or PERMISSIVE, got 'DROPMALFORMED'" in str(e.value)
    assert "Traceback" not in str(e.value)


def test_bad_options_are_clear_errors():
    with pytest.raises(ValueError, match="verifyCrc"):
        ScanOptions.from_options({"verifyCrc": "maybe"})
    with pytest.raises(ValueError, match="startTime"):
        ScanOptions.from_options({"startTime": "yesterday"})
    with pytest.raises(ValueError, match="maxPartitionBytes"):
        ScanOptions.from_options({"maxPartitionBytes": "0"})
    with pytest.raises(ValueError, match="mode"):
        ScanOptions.from_options({"mode": "DROPMALFORMED"})
    o = ScanOptions.from_options({"TOPICS": "a, b", "StartTime": "1000", "mode": "permissive"})
    assert o.topics == {"a", "b"} and o.start_time == 1000 and o.permissive


async def test_a_transactional_workload_reads_only_committed_messages_on_the_real_topic(tmp_path):
    """Issue 43: the store read of the real topic shows the committed message only; the
    prepared (still open) and rolled-back ones are records of the half topic, where they
    carry their real topic as a property and never its name."""
    from store.transaction import HALF_TOPIC, OP_HALF_TOPIC
    from tests.node.test_ops import serving_ops
    from tests.node.test_transactions import TOPIC, conf_of, create_topic, end, prepare

    async with serving_ops(conf_of(tmp_path)) as (services, conn):
        await create_topic(conn)
        committed, rolled_back, _open = (await prepare(conn, b"c"), await prepare(conn, b"r"),
                                         await prepare(conn, b"u"))
        await end(conn, committed, "COMMIT")
        await end(conn, rolled_back, "ROLLBACK")
        root = Path(services.store.config.store_path_root_dir)
    real = scan_rows(root, topics=frozenset({TOPIC}))
    assert [r["body"] for r in real] == [b"c"]
    half = scan_rows(root, topics=frozenset({HALF_TOPIC}))
    assert sorted(r["body"] for r in half) == [b"c", b"r", b"u"]
    assert all(r["topic"] == HALF_TOPIC and r["properties"]["REAL_TOPIC"] == TOPIC for r in half)
    assert len(scan_rows(root, topics=frozenset({OP_HALF_TOPIC}))) == 2
