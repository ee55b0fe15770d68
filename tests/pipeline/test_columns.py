"""The compiled column scan (store._accel.scan_columns + pipeline.columns) against the row
path (store.record_rows.py_scan_rows + BatchBuilder, pure Python): the same Arrow batches
for any segment hypothesis finds, and the same partition reads end to end. No Spark."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline import store_scan
from pipeline.columns import batch_from_columns
from pipeline.schema import BatchBuilder
from store import record_codec, record_rows, segment_walker
from store.message import Message
from store.record_codec import encode_blank, encode_record, patch_record
from tests.store.test_accel import SETTINGS, int64, segments
from tests.store.test_message import MAX_MESSAGE_SIZE

COMPILED = record_codec.COMPILED
pytestmark = pytest.mark.skipif(COMPILED is None, reason="store._accel not loaded")


def both(buf: bytes, begin: int, start: int, max_rows: int, **opts):
    """(columnar stop, its batch or None, row-path stop, its batch or None)."""
    pos_c, n, cols = COMPILED.scan_columns(buf, begin, len(buf), start, max_rows, **opts)
    b = BatchBuilder(batch_rows=max_rows)
    pos_r = record_rows.py_scan_rows(buf, begin, len(buf), start, b.rows, max_rows,
                                     extra=("src", None), **opts)
    columns = batch_from_columns(b.schema, n, cols, "src", verify_crc=opts["verify_crc"]) if n else None
    return pos_c, columns, pos_r, b.flush()


def check(buf: bytes, begin: int, start: int, max_rows: int, **opts) -> None:
    pos_c, columns, pos_r, rows = both(buf, begin, start, max_rows, **opts)
    if columns is None:
        assert pos_c == pos_r or rows is not None
        return
    columns.validate(full=True)
    assert columns.schema == rows.schema
    assert columns.equals(rows.slice(0, columns.num_rows)), (columns.to_pylist(), rows.to_pylist())
    # it stops where the row path does, or earlier at a record the row path then reads
    assert pos_c == pos_r or columns.num_rows < rows.num_rows


@SETTINGS
@given(seg=segments(), verify_crc=st.booleans(), include_body=st.booleans(),
       max_rows=st.integers(1, 6), begin=st.sampled_from([0, 0, 5]),
       topics=st.none() | st.frozensets(st.sampled_from(["", "a", "T"]), max_size=2),
       t0=st.none() | int64, t1=st.none() | int64)
def test_columns_equal_the_row_path(seg, verify_crc, include_body, max_rows, begin, topics, t0, t1):
    buf, start = seg
    check(buf, begin, start, max_rows, verify_crc=verify_crc, include_body=include_body,
          topics=topics, start_time=t0, end_time=t1)


def with_properties(raw: bytes, phys: int = 0) -> bytes:
    """A record whose PROPERTIES are `raw` as they are (duplicates, stray separators...)."""
    buf = encode_record(Message("T", b"body"), "127.0.0.1:1", MAX_MESSAGE_SIZE)
    patch_record(buf, 0, phys, 0)
    rec = bytes(buf)[:-2] + struct.pack(">h", len(raw)) + raw
    return struct.pack(">i", len(rec)) + rec[4:]


ODD_PROPERTIES = [
    b"", b"TAGS\x01t", b"KEYS\x01a  b c ", b"KEYS\x01 ", b"a\x01b\x01c", b"a\x01b\x02",
    b"\x02a\x01b", b"a\x01b\x02a\x01c", b"a\x01", b"\x01b", b"a", b"a\x01b\x02\x02c\x01d",
    "t\x01\u00e9\u4e2d\U0001f600".encode(), b"a\x01\xff", b"TAGS\x01x\x02TAGS\x01y",
    # a byte >= 0x80 inside a whole 8-byte word, and in the tail after the last whole word
    "abcdefgh\x01ijklmnop\u00e9q".encode(), b"abcdefghij\x01klmnopqrstu\xff", b"abcdefghijklmnop\x01q\x80",
]


@pytest.mark.parametrize("raw", ODD_PROPERTIES)
@pytest.mark.parametrize("verify_crc", [True, False])
def test_odd_properties(raw, verify_crc):
    """Properties the reference reads its own way: the columns agree or leave the record to
    the row path."""
    rec = with_properties(raw)
    buf = rec + with_properties(b"k\x01v", len(rec)) + encode_blank(8)
    check(buf, 0, 0, 10, verify_crc=verify_crc, include_body=True, topics=None,
          start_time=None, end_time=None)


def test_a_partition_reads_the_same_with_and_without_columns(tmp_path, monkeypatch):
    """read_partition over a segment with clean records, a record with duplicate
    properties, a CRC-bad one (permissive) and a torn tail: the same batches' rows."""
    seg = b""
    for i in range(40):
        if i == 7:
            seg += with_properties(b"a\x01b\x02a\x01c", len(seg))
            continue
        buf = encode_record(Message(f"T{i % 3}", bytes([i]) * 100, tags=f"t{i}", keys=[f"k{i}"]),
                            "127.0.0.1:1", MAX_MESSAGE_SIZE)
        patch_record(buf, i, len(seg), 1000 + i)
        if i == 20:
            buf[-20] ^= 0x01  # a property byte: still valid UTF-8, CRC unaffected
            buf[100] ^= 0xFF  # a body byte: CRC mismatch
        seg += bytes(buf)
    seg += seg[:50]  # torn tail
    path = tmp_path / "00000000000000000000"
    path.write_bytes(seg)
    part = store_scan.StorePartition(str(tmp_path), str(path), 0, 0, len(seg), True)
    opts = store_scan.ScanOptions(permissive=True, batch_rows=16)

    def rows() -> list[dict]:
        return [r for b in store_scan.read_partition(part, opts) for r in b.to_pylist()]

    fast = rows()
    monkeypatch.setattr(store_scan, "COMPILED", None)
    monkeypatch.setattr(store_scan, "scan_rows", record_rows.py_scan_rows)
    monkeypatch.setattr(segment_walker, "decode_record", record_codec.py_decode_record)
    assert fast == rows()
    assert len(fast) == 41 and [r["_corrupt"] is not None for r in fast].count(True) == 2
    assert pa.types.is_map(store_scan.BatchBuilder(permissive=True).schema.field("properties").type)


@pytest.mark.parametrize("first_null", [0, 3, 8, 11, 16])
def test_validity_bits_start_at_the_first_null(first_null):
    """A text column carries no validity bits until a null comes; then every row before it
    counts as valid and later rows get their own bit (tags: null where a record has none)."""
    seg = b""
    for i in range(30):
        tags = None if i == first_null or i % 7 == 6 and i > first_null else f"t{i}"
        buf = encode_record(Message("T", bytes([i]) * 20, tags=tags), "127.0.0.1:1", MAX_MESSAGE_SIZE)
        patch_record(buf, i, len(seg), 1000 + i)
        seg += bytes(buf)
    pos, n, cols = COMPILED.scan_columns(seg, 0, len(seg), 0, 100, verify_crc=True, include_body=True,
                                         topics=None, start_time=None, end_time=None)
    assert n == 30 and cols["topic"][0] is None, "no nulls: no validity buffer"
    check(seg, 0, 0, 100, verify_crc=True, include_body=True, topics=None, start_time=None, end_time=None)
    batch = batch_from_columns(BatchBuilder().schema, n, cols, "src", verify_crc=True)
    tags = batch.column("tags").to_pylist()
    assert [i for i, t in enumerate(tags) if t is None] == [
        i for i in range(30) if i == first_null or i % 7 == 6 and i > first_null]


def test_large_buffers_reused_across_scans_hold_each_batch_intact():
    """Body buffers of a megabyte or more are kept when their batch is dropped and handed to
    the next scan: a batch still alive keeps its own bytes while later scans run."""
    seg = b""
    for i in range(6):
        buf = encode_record(Message("T", bytes([65 + i]) * 400_000), "127.0.0.1:1", MAX_MESSAGE_SIZE)
        patch_record(buf, i, len(seg), 1000 + i)
        seg += bytes(buf)
    schema = BatchBuilder().schema

    def scan() -> pa.RecordBatch:
        _, n, cols = COMPILED.scan_columns(seg, 0, len(seg), 0, 100, verify_crc=True, include_body=True,
                                           topics=None, start_time=None, end_time=None)
        return batch_from_columns(schema, n, cols, "src", verify_crc=True)

    kept = [scan() for _ in range(3)]
    for _ in range(10):
        scan()  # dropped at once: its buffer goes back for the next scan
        kept.append(scan())
    want = [bytes([65 + i]) * 400_000 for i in range(6)]
    for batch in kept:
        assert batch.column("body").to_pylist() == want
