"""Offline store tools (store/tools.py) and the `tidemq store` CLI, over real segment files."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store import layout, tools
from store.message import Message, encode_msg_id
from store.record_codec import encode_blank, encode_record, masked_crc32, patch_record
from tests.examples import examples
from tidemq.cli import main

SEG = 4096
STORE_HOST = "10.0.0.1:10911"
MAX_MESSAGE_SIZE = 4 * 1024 * 1024
PROJECT_ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------
# building a store by hand, following the CommitLog append rule (FORMATS.md)


@attrs.frozen
class Written:
    offset: int
    size: int
    msg: Message
    queue_offset: int
    store_timestamp: int


@attrs.define
class Store:
    root: Path
    seg_size: int
    store_host: str
    records: list[Written]
    blanks: list[tuple[int, int]]  # (offset, size)
    end: int  # offset just past the last record

    def segment(self, offset: int) -> Path:
        start = offset - offset % self.seg_size
        return self.root / "commitlog" / f"{start:020d}"

    def write_at(self, offset: int, data: bytes) -> None:
        with open(self.segment(offset), "r+b") as f:
            f.seek(offset % self.seg_size)
            f.write(data)

    def read_at(self, offset: int, n: int) -> bytes:
        with open(self.segment(offset), "rb") as f:
            f.seek(offset % self.seg_size)
            return f.read(n)


def write_store(
    root: Path,
    msgs: list[Message],
    *,
    seg_size: int = SEG,
    first_offset: int = 0,
    store_host: str = STORE_HOST,
) -> Store:
    """Append `msgs` as a broker would: BLANK filler when record + 8 > space left."""
    segments: dict[int, bytearray] = {}
    records: list[Written] = []
    blanks: list[tuple[int, int]] = []
    counters: dict[tuple[str, int], int] = {}
    seg_start, pos, buf = first_offset, 0, bytearray(seg_size)
    for i, msg in enumerate(msgs):
        rec = encode_record(msg, store_host, MAX_MESSAGE_SIZE)
        if len(rec) + 8 > seg_size - pos:
            buf[pos : pos + 8] = encode_blank(seg_size - pos)
            blanks.append((seg_start + pos, seg_size - pos))
            segments[seg_start] = buf
            seg_start, pos, buf = seg_start + seg_size, 0, bytearray(seg_size)
        key = (msg.topic, msg.queue_id)
        queue_offset = counters.get(key, 0)
        counters[key] = queue_offset + 1
        store_ts = 1_700_000_000_000 + i
        patch_record(rec, queue_offset, seg_start + pos, store_ts)
        buf[pos : pos + len(rec)] = rec
        records.append(Written(seg_start + pos, len(rec), msg, queue_offset, store_ts))
        pos += len(rec)
    segments[seg_start] = buf
    cl = root / "commitlog"
    cl.mkdir(parents=True, exist_ok=True)
    for start, data in segments.items():
        (cl / f"{start:020d}").write_bytes(data)
    return Store(root, seg_size, store_host, records, blanks, seg_start + pos)


def sample_messages(n: int = 18) -> list[Message]:
    out = []
    for i in range(n):
        body = bytes((i * 7 + j) % 251 for j in range(120 + (i * 53) % 240))
        out.append(
            Message(
                topic="TopicTest" if i % 3 else "订单-topic",
                body=body,
                queue_id=i % 4,
                tags=f"Tag{i % 2}" if i % 5 else None,
                keys=[f"k{i}", "shared"] if i % 2 else [],
                properties={"UNIQ_KEY": f"U{i:04d}", "note": "héllo 中文"},
                flag=i,
                born_timestamp=1_600_000_000_000 + i,
                born_host="[::1]:50000" if i == 4 else f"192.168.0.{i}:{40000 + i}",
                reconsume_times=i % 3,
            )
        )
    return out


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = write_store(tmp_path / "store", sample_messages())
    # the shape the tests rely on: a full first segment and a partly written second one
    assert sorted(os.listdir(s.root / "commitlog")) == [f"{0:020d}", f"{SEG:020d}"]
    assert len(s.blanks) == 1 and s.blanks[0][0] < SEG
    in_second = [r for r in s.records if r.offset >= SEG]
    assert len(in_second) >= 3
    return s


def first_in_second_segment(s: Store) -> int:
    return next(i for i, r in enumerate(s.records) if r.offset >= s.seg_size)


# ---------------------------------------------------------------------------------------
# iter_segments


def test_iter_segments(store: Store):
    (store.root / "commitlog" / "README").write_text("not a segment")
    (store.root / "commitlog" / "123").write_bytes(bytes(SEG))
    assert layout.iter_segments(store.root) == [
        (0, str(store.root / "commitlog" / f"{0:020d}")),
        (SEG, str(store.root / "commitlog" / f"{SEG:020d}")),
    ]


def test_iter_segments_missing_dirs(tmp_path: Path):
    with pytest.raises(layout.StoreToolError, match="does not exist"):
        layout.iter_segments(tmp_path / "nope")
    with pytest.raises(layout.StoreToolError, match="no commitlog"):
        layout.iter_segments(tmp_path)
    (tmp_path / "commitlog").mkdir()
    assert layout.iter_segments(tmp_path) == []


# ---------------------------------------------------------------------------------------
# dump


def assert_record_dict(d: dict, w: Written, store_host: str = STORE_HOST) -> None:
    msg = w.msg
    assert d["offset"] == w.offset
    assert d["size"] == w.size
    assert d["magicVersion"] == 1
    assert d["topic"] == msg.topic
    assert d["queueId"] == msg.queue_id
    assert d["queueOffset"] == w.queue_offset
    assert d["flag"] == msg.flag
    assert d["sysFlag"] == (0x10 if msg.born_host.startswith("[") else 0) | (
        0x20 if store_host.startswith("[") else 0
    )
    assert d["bornTimestamp"] == msg.born_timestamp
    assert d["bornHost"] == msg.born_host
    assert d["storeTimestamp"] == w.store_timestamp
    assert d["storeHost"] == store_host
    assert d["reconsumeTimes"] == msg.reconsume_times
    assert d["preparedTransactionOffset"] == 0
    assert d["properties"] == msg.all_properties()
    assert d["keys"] == list(msg.keys)
    assert d["tags"] == msg.tags
    assert d["msgId"] == encode_msg_id(store_host, w.offset)
    assert d["bodyCrc"] == masked_crc32(msg.body)
    assert d["crcOk"] is True
    assert base64.b64decode(d["body"]) == msg.body


def expected_stream(s: Store) -> list[tuple[str, int]]:
    items = [("message", r.offset) for r in s.records] + [("blank", o) for o, _ in s.blanks]
    return sorted(items, key=lambda x: x[1])


def test_dump_lists_every_record_and_blank(store: Store):
    out = list(tools.dump(store.root))
    assert [("blank" if "blank" in d else "message", d["offset"]) for d in out] == expected_stream(store)
    by_offset = {d["offset"]: d for d in out}
    for w in store.records:
        assert_record_dict(by_offset[w.offset], w)
    blank_offset, blank_size = store.blanks[0]
    assert by_offset[blank_offset] == {"offset": blank_offset, "blank": blank_size}
    assert blank_offset + blank_size == SEG
    assert by_offset[store.records[4].offset]["bornHost"] == "[::1]:50000"
    json.dumps(out)  # JSON-ready


def test_dump_from_offset_and_limit(store: Store):
    recs = store.records
    out = list(tools.dump(store.root, from_offset=recs[3].offset))
    assert [d["offset"] for d in out] == [o for _, o in expected_stream(store) if o >= recs[3].offset]

    k = first_in_second_segment(store)
    out = list(tools.dump(store.root, from_offset=recs[k].offset, limit=2))
    assert [d["offset"] for d in out] == [recs[k].offset, recs[k + 1].offset]

    blank_offset = store.blanks[0][0]
    out = list(tools.dump(store.root, from_offset=blank_offset))
    assert out[0] == {"offset": blank_offset, "blank": SEG - blank_offset}
    assert out[1]["offset"] == SEG

    assert list(tools.dump(store.root, limit=0)) == []
    assert len(list(tools.dump(store.root, limit=5))) == 5


@pytest.mark.parametrize(
    "where",
    ["mid_record", "mid_blank", "end_of_data", "before_first", "past_last", "in_body"],
)
def test_dump_from_a_non_record_start(store: Store, where: str):
    r = store.records[2]
    offset = {
        "mid_record": r.offset + 1,
        "in_body": r.offset + 90,
        "mid_blank": store.blanks[0][0] + 16,
        "end_of_data": store.end,
        "before_first": -1,
        "past_last": 2 * SEG,
    }[where]
    out = list(tools.dump(store.root, from_offset=offset))
    assert len(out) == 1 and out[0]["offset"] == offset and out[0]["error"]


def test_dump_from_offset_in_a_store_whose_old_segments_are_gone(tmp_path: Path):
    s = write_store(tmp_path, sample_messages(), first_offset=10 * SEG)
    assert [d["offset"] for d in tools.dump(tmp_path)] == [o for _, o in expected_stream(s)]
    r = s.records[-2]
    assert [d["offset"] for d in tools.dump(tmp_path, from_offset=r.offset)] == [
        r.offset, s.records[-1].offset
    ]
    assert "error" in next(iter(tools.dump(tmp_path, from_offset=0)))
    assert tools.verify(tmp_path)["clean"]


def test_dump_keeps_going_after_a_crc_mismatch(store: Store):
    r = store.records[2]
    store.write_at(r.offset + 88, bytes([store.read_at(r.offset + 88, 1)[0] ^ 0x04]))
    out = [d for d in tools.dump(store.root) if "blank" not in d]
    assert len(out) == len(store.records)
    assert [d["crcOk"] for d in out].count(False) == 1
    assert out[2]["crcOk"] is False and out[2]["offset"] == r.offset


# ---------------------------------------------------------------------------------------
# verify


def test_verify_clean(store: Store):
    v = tools.verify(store.root)
    topics: dict[str, int] = {}
    for w in store.records:
        topics[w.msg.topic] = topics.get(w.msg.topic, 0) + 1
    assert v == {
        "segments": 2,
        "segmentSize": SEG,
        "messages": len(store.records),
        "blanks": 1,
        "bytes": store.end,
        "badCrcs": 0,
        "topics": topics,
        "endOffset": store.end,
        "firstInvalidOffset": None,
        "damage": [],
        "clean": True,
    }
    assert v["bytes"] == sum(r.size for r in store.records) + store.blanks[0][1]


def test_verify_any_segment_size_with_ipv6_store_host(tmp_path: Path):
    seg = 64 * 1024
    msgs = sample_messages(40) * 6
    s = write_store(tmp_path, msgs, seg_size=seg, store_host="[fe80::1]:10911")
    v = tools.verify(tmp_path)
    assert v["clean"] and v["segmentSize"] == seg and v["messages"] == len(msgs)
    assert v["segments"] == len(s.blanks) + 1 >= 2
    out = [d for d in tools.dump(tmp_path) if "blank" not in d]
    for d, w in zip(out, s.records, strict=True):
        assert_record_dict(d, w, store_host="[fe80::1]:10911")
    assert len(out[0]["msgId"]) == 56


def test_verify_empty_stores(tmp_path: Path):
    (tmp_path / "commitlog").mkdir()
    v = tools.verify(tmp_path)
    assert v["clean"] and v["segments"] == 0 and v["messages"] == 0 and v["endOffset"] is None
    (tmp_path / "commitlog" / f"{0:020d}").write_bytes(bytes(SEG))  # fresh, nothing written
    v = tools.verify(tmp_path)
    assert v["clean"] and v["segments"] == 1 and v["messages"] == 0 and v["bytes"] == 0
    assert list(tools.dump(tmp_path)) == []


def test_verify_preallocated_zero_segments_are_not_damage(store: Store):
    for n in (2, 3):
        (store.root / "commitlog" / f"{n * SEG:020d}").write_bytes(bytes(SEG))
    v = tools.verify(store.root)
    assert v["clean"] and v["segments"] == 4 and v["messages"] == len(store.records)
    assert len(list(tools.dump(store.root))) == len(store.records) + 1


def test_verify_store_ending_with_a_blank(tmp_path: Path):
    msgs = sample_messages()
    s = write_store(tmp_path, msgs)
    # drop the partly written second segment: the data now ends with the first BLANK
    os.remove(s.segment(SEG))
    v = tools.verify(tmp_path)
    assert v["clean"] and v["blanks"] == 1 and v["endOffset"] == SEG


# ---------------------------------------------------------------------------------------
# damage


def assert_damaged(v: dict, first_invalid: int | None, reason_start: str) -> None:
    assert v["clean"] is False
    assert v["firstInvalidOffset"] == first_invalid
    assert any(d["reason"].startswith(reason_start) for d in v["damage"]), v["damage"]
    assert v["damage"] == sorted(v["damage"], key=lambda d: d["offset"])


def test_torn_tail_truncated_file(store: Store):
    last = store.records[-1]
    cut = last.offset - SEG + 40
    os.truncate(store.segment(last.offset), cut)
    v = tools.verify(store.root)
    assert_damaged(
        v, last.offset, f"torn record: size {last.size} does not fit the 40 bytes left"
    )
    assert {"offset": SEG, "reason": f"segment {SEG:020d} is {cut} bytes; the first segment is {SEG} bytes"} in v["damage"]
    assert v["messages"] == len(store.records) - 1
    assert v["endOffset"] == last.offset
    out = list(tools.dump(store.root))
    assert out[-1]["offset"] == last.offset and out[-1]["error"].startswith("torn record")
    assert len(out) == len(store.records) + 1  # all but the torn one, the blank, the error


def test_torn_tail_zeroed_pages(store: Store):
    """A crash that kept the first part of the last record and lost the rest."""
    last = store.records[-1]
    store.write_at(last.offset + 100, bytes(SEG - (last.offset - SEG) - 100))
    v = tools.verify(store.root)
    assert_damaged(v, last.offset, "corrupt record")
    assert len(v["damage"]) == 1
    assert v["messages"] == len(store.records) - 1


@pytest.mark.parametrize("gap", [0, 100])
def test_garbage_after_valid_end(store: Store, gap: int):
    junk = random.Random(gap).randbytes(200)
    store.write_at(store.end + gap, b"\xee" + junk)
    v = tools.verify(store.root)
    assert_damaged(v, store.end, "garbage after valid end")
    if gap:
        assert f"non-zero data at offset {store.end + gap}" in v["damage"][0]["reason"]
    assert v["messages"] == len(store.records)
    assert v["endOffset"] == store.end
    out = list(tools.dump(store.root))
    assert out[-1] == {"offset": store.end, "error": v["damage"][0]["reason"]}


def test_zeroed_region_in_the_middle(store: Store):
    recs = store.records
    k = 3
    # from the middle of record k to the middle of record k + 1
    start, end = recs[k].offset + recs[k].size // 2, recs[k + 1].offset + 30
    store.write_at(start, bytes(end - start))
    v = tools.verify(store.root)
    assert_damaged(v, recs[k].offset, "corrupt record")
    # the first segment's walk stops there; the second segment is still walked
    assert v["messages"] == k + len(recs) - first_in_second_segment(store)
    out = list(tools.dump(store.root))
    assert out[-1]["offset"] == recs[k].offset and "error" in out[-1]
    assert len(out) == k + 1


def test_zeroed_whole_record_in_the_middle(store: Store):
    r = store.records[3]
    store.write_at(r.offset, bytes(r.size))
    v = tools.verify(store.root)
    assert_damaged(v, r.offset, "zeroed record header: non-zero data at offset")


def test_bit_flip_in_a_body(store: Store):
    r = store.records[5]
    body_pos = r.offset + 88 + 17
    store.write_at(body_pos, bytes([store.read_at(body_pos, 1)[0] ^ 0x10]))
    v = tools.verify(store.root)
    assert_damaged(v, r.offset, "body CRC mismatch")
    assert v["badCrcs"] == 1
    assert v["damage"] == [{"offset": r.offset, "reason": v["damage"][0]["reason"]}]
    assert v["messages"] == len(store.records)  # the walk went on
    assert v["endOffset"] == store.end


def test_second_bit_flip_counts_twice(store: Store):
    for r in (store.records[1], store.records[-1]):
        store.write_at(r.offset + 88, bytes([store.read_at(r.offset + 88, 1)[0] ^ 1]))
    v = tools.verify(store.root)
    assert v["badCrcs"] == 2 and v["firstInvalidOffset"] == store.records[1].offset


def test_physical_offset_field_mismatch(store: Store):
    r = store.records[2]
    store.write_at(r.offset + 28, (12345).to_bytes(8, "big"))
    v = tools.verify(store.root)
    assert_damaged(v, r.offset, "PHYSICALOFFSET field 12345")
    assert v["messages"] == len(store.records)


def test_non_last_segment_without_blank(store: Store):
    blank_offset = store.blanks[0][0]
    store.write_at(blank_offset, bytes(8))
    v = tools.verify(store.root)
    assert_damaged(v, blank_offset, "segment ends without a BLANK filler")
    assert v["messages"] == len(store.records) and v["blanks"] == 0


def test_blank_that_does_not_reach_the_segment_end(store: Store):
    blank_offset, size = store.blanks[0]
    store.write_at(blank_offset, encode_blank(size - 8))
    v = tools.verify(store.root)
    assert_damaged(v, blank_offset, "BLANK filler of size")


def test_segment_of_differing_size(store: Store):
    with open(store.segment(SEG), "ab") as f:
        f.write(bytes(100))
    v = tools.verify(store.root)
    assert v["clean"] is False and v["firstInvalidOffset"] is None
    assert v["damage"] == [
        {"offset": SEG, "reason": f"segment {SEG:020d} is {SEG + 100} bytes; the first segment is {SEG} bytes"}
    ]
    assert v["messages"] == len(store.records)


def test_missing_segment(tmp_path: Path):
    s = write_store(tmp_path, sample_messages(30))
    assert len(s.blanks) >= 2
    os.remove(s.segment(SEG))
    v = tools.verify(tmp_path)
    assert v["clean"] is False
    assert any("missing or misnamed" in d["reason"] for d in v["damage"])


def test_random_segment_never_raises(tmp_path: Path):
    rng = random.Random(7)
    cl = tmp_path / "commitlog"
    cl.mkdir()
    (cl / f"{0:020d}").write_bytes(rng.randbytes(SEG))
    (cl / f"{SEG:020d}").write_bytes(b"")
    v = tools.verify(tmp_path)
    assert v["clean"] is False and v["firstInvalidOffset"] == 0
    assert list(tools.dump(tmp_path))[-1]["offset"] == 0


@settings(max_examples=examples(60), deadline=None)
@given(
    edits=st.lists(
        st.tuples(st.integers(0, 2 * SEG - 1), st.binary(min_size=1, max_size=64)), max_size=6
    ),
    truncate=st.none() | st.integers(0, SEG),
)
def test_random_damage_never_raises(edits: list[tuple[int, bytes]], truncate: int | None):
    with tempfile.TemporaryDirectory() as d:
        s = write_store(Path(d), sample_messages())
        for offset, data in edits:
            s.write_at(offset, data[: SEG - offset % SEG])
        if truncate is not None:
            os.truncate(s.segment(SEG), truncate)
        v = tools.verify(d)
        json.dumps(v)
        assert v["clean"] == (not v["damage"])
        out = list(tools.dump(d))
        json.dumps(out)
        assert all("error" not in o for o in out[:-1])


# ---------------------------------------------------------------------------------------
# read-only, lock-free


@pytest.mark.slow
def test_tools_work_while_another_process_holds_the_store_lock(store: Store):
    lock = store.root / "lock"
    lock.write_text("lock")
    before = {p.name: p.read_bytes() for p in (store.root / "commitlog").iterdir()}
    holder = subprocess.Popen(
        [
            sys.executable, "-c",
            "import fcntl, sys\n"
            f"f = open({str(lock)!r}, 'r+')\n"
            "fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
            "print('locked', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with open(lock, "r+") as f, pytest.raises(OSError):
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # really held by the other process
        assert tools.verify(store.root)["clean"]
        assert len(list(tools.dump(store.root))) == len(store.records) + 1
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    after = {p.name: p.read_bytes() for p in (store.root / "commitlog").iterdir()}
    assert after == before


# ---------------------------------------------------------------------------------------
# CLI


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidemq", *args],
        capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=60,
    )


@pytest.mark.slow
def test_cli_verify_clean(store: Store):
    p = run_cli("store", "verify", str(store.root))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 1
    summary = json.loads(lines[0])
    assert summary == tools.verify(store.root)
    assert lines[0] == json.dumps(summary, separators=(",", ":"), ensure_ascii=False)  # one compact line


@pytest.mark.slow
def test_cli_verify_damaged(store: Store):
    store.write_at(store.end, b"garbage!")
    p = run_cli("store", "verify", str(store.root))
    assert p.returncode == 1, p.stderr
    summary = json.loads(p.stdout)
    assert summary["clean"] is False and summary["firstInvalidOffset"] == store.end


@pytest.mark.slow
def test_cli_dump(store: Store):
    p = run_cli("store", "dump", str(store.root))
    assert p.returncode == 0, p.stderr
    out = [json.loads(line) for line in p.stdout.splitlines()]
    assert out == list(tools.dump(store.root))
    assert [d["offset"] for d in out] == [o for _, o in expected_stream(store)]

    r = store.records[4]
    p = run_cli("store", "dump", str(store.root), "--from", str(r.offset), "--limit", "2")
    assert p.returncode == 0, p.stderr
    assert [json.loads(line)["offset"] for line in p.stdout.splitlines()] == [
        r.offset, store.records[5].offset
    ]


@pytest.mark.slow
def test_cli_dump_from_a_non_record_start(store: Store):
    p = run_cli("store", "dump", str(store.root), "--from", str(store.records[1].offset + 3))
    assert p.returncode == 1
    (line,) = p.stdout.splitlines()
    assert "error" in json.loads(line)


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        [],
        ["store"],
        ["store", "verify"],
        ["store", "frobnicate", "x"],
        ["store", "verify", "/nonexistent/tidemq-store"],
        ["store", "dump", "/nonexistent/tidemq-store"],
        ["store", "dump", ".", "--from", "abc"],
        ["store", "dump", ".", "--limit", "-1"],
    ],
)
def test_cli_usage_errors(args: list[str]):
    p = run_cli(*args)
    assert p.returncode == 2
    assert p.stdout == ""
    assert p.stderr.strip() and "Traceback" not in p.stderr


@pytest.mark.slow
def test_cli_not_a_store(tmp_path: Path):
    p = run_cli("store", "verify", str(tmp_path))
    assert p.returncode == 2
    assert "no commitlog" in p.stderr and "Traceback" not in p.stderr


def test_main_in_process(store: Store, capsys: pytest.CaptureFixture[str]):
    assert main(["store", "verify", str(store.root)]) == 0
    assert json.loads(capsys.readouterr().out)["clean"] is True
    assert main(["store", "dump", str(store.root), "--limit", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["offset"] == 0
    assert main(["store", "verify", str(store.root / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["--help"]) == 0
