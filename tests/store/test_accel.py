"""The compiled accelerator (store/_accel.pyx) against the pure-Python reference: identical
parses of valid, v2, blank, torn, zeroed, CRC-bad and garbage records, identical dispatch
requests and identical scan rows, for any input hypothesis finds; and its C CRC32 (zlib-ng's
or libz's, bound at import) against zlib's."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store import accel, message, record_codec, record_rows, segment_walker, sysflag
from store.properties import encode_properties
from store.record_codec import (
    MESSAGE_MAGIC_CODE_V2,
    Decoded,
    encode_blank,
    encode_record,
    patch_record,
)
from tests.examples import examples
from tests.store.test_message import MAX_MESSAGE_SIZE, hosts, int64, messages, topics

COMPILED = record_codec.COMPILED
needs_compiled = pytest.mark.skipif(
    COMPILED is None, reason="store._accel not loaded (TIDEMQ_PURE=1 or not built)"
)
SETTINGS = settings(max_examples=examples(300), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def test_the_accelerator_is_built():
    """`pip install` builds store._accel on a machine with a C compiler (this one): a build
    that silently fell back to pure Python would lose the speed without a failing test."""
    assert accel.load_compiled() is not None, "store._accel was not built: see setup.py's warnings"
    if not accel.forced_pure():
        assert accel.implementation() == "compiled"
        assert record_codec.decode_record is COMPILED.decode_record
        assert record_rows.scan_rows is COMPILED.scan_rows
        assert segment_walker.skip_clean is COMPILED.skip_clean


@pytest.mark.slow
@needs_compiled
@SETTINGS
@given(body=st.binary(max_size=5000))
def test_the_c_crc_answers_as_zlib(body):
    """The accelerator calls a C CRC32 found at import (zlib-ng's, else libz's) or, unbound,
    zlib.crc32 through Python: each gives the store's CRC (zlib's, masked to 31 bits)."""
    import zlib

    assert accel.crc32_address() is not None, "zlib-ng (a dependency) or libz should be found"
    want = zlib.crc32(body) & 0x7FFFFFFF
    msg = message.Message("T", body)
    assert COMPILED.prepare_record(msg, "127.0.0.1:1", MAX_MESSAGE_SIZE).body_crc == want
    COMPILED.bind_crc32(0)
    try:
        assert COMPILED.prepare_record(msg, "127.0.0.1:1", MAX_MESSAGE_SIZE).body_crc == want
    finally:
        COMPILED.bind_crc32(accel.crc32_address())


def test_tidemq_pure_forces_the_pure_codec():
    env = dict(os.environ, TIDEMQ_PURE="1")
    code = ("from store import accel, record_codec, record_rows, segment_walker; "
            "assert record_codec.decode_record is record_codec.py_decode_record; "
            "assert record_rows.scan_rows is record_rows.py_scan_rows; "
            "assert segment_walker.skip_clean is segment_walker.py_skip_clean; "
            "print(accel.implementation())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "pure"


# ---------------------------------------------------------------------------------------
# inputs: valid records, then damaged ones


def to_v2(rec: bytes) -> bytes:
    """The same record in format v2: MAGIC 0xDAA320AB and a 2-byte TOPICLENGTH."""
    total = struct.unpack_from(">i", rec)[0]
    sys_flag = struct.unpack_from(">i", rec, 36)[0]
    p = 48 + (20 if sys_flag & 0x10 else 8) + 8 + (20 if sys_flag & 0x20 else 8) + 12
    body_len = struct.unpack_from(">i", rec, p)[0]
    t = p + 4 + body_len
    topic_len = rec[t]
    return b"".join((struct.pack(">iI", total + 1, MESSAGE_MAGIC_CODE_V2), rec[8:t],
                     struct.pack(">h", topic_len), rec[t + 1:]))


@st.composite
def records(draw: st.DrawFn, phys: int | None = None) -> bytes:
    msg = draw(messages())
    buf = encode_record(msg, draw(hosts), MAX_MESSAGE_SIZE)
    patch_record(buf, draw(int64), draw(int64) if phys is None else phys, draw(int64))
    rec = bytes(buf)
    return to_v2(rec) if draw(st.booleans()) and len(rec) < 60000 else rec


@st.composite
def damaged(draw: st.DrawFn, rec: bytes) -> bytes:
    """rec as it is, or torn, zeroed at the tail, with bytes changed, or a field set to an
    edge value (sizes, lengths, magic, CRC)."""
    how = draw(st.sampled_from(["none", "torn", "zero_tail", "flip", "field", "crc"]))
    n = len(rec)
    if how == "torn":
        return rec[: draw(st.integers(0, n - 1))]
    if how == "zero_tail":
        k = draw(st.integers(0, n - 1))
        return rec[:k] + bytes(n - k)
    if how == "flip":
        b = bytearray(rec)
        for _ in range(draw(st.integers(1, 3))):
            b[draw(st.integers(0, n - 1))] = draw(st.integers(0, 255))
        return bytes(b)
    if how == "field":
        at = draw(st.integers(0, n - 4))
        value = draw(st.sampled_from([0, -1, 1, 7, 8, 47, 48, 80, 0x7F, 0x80, 0x7FFF, 0x8000,
                                      n, n + 1, 2**31 - 1, -(2**31)]))
        return rec[:at] + struct.pack(">i", value) + rec[at + 4:]
    if how == "crc":
        return rec[:8] + struct.pack(">i", (struct.unpack_from(">i", rec, 8)[0] + 1) & 0x7FFFFFFF) + rec[12:]
    return rec


@st.composite
def buffers(draw: st.DrawFn) -> tuple[bytes, int]:
    """(buffer, position of the record to read): garbage or another record before it, then
    the (maybe damaged) record, then zeros, a BLANK filler or garbage."""
    before = draw(st.sampled_from([b"", b"\0" * 8, b"junk"]))
    rec = draw(damaged(draw(records())))
    after = draw(st.sampled_from([b"", bytes(16), encode_blank(8), b"\xff" * 5]))
    return before + rec + after, len(before)


def same_decoded(a: Decoded, b: Decoded) -> None:
    assert a == b
    assert type(a) is type(b) and type(a.message) is type(b.message)
    if a.message is not None:
        assert list(a.message.properties.items()) == list(b.message.properties.items())
        assert type(a.message.body) is type(b.message.body) is bytes


# ---------------------------------------------------------------------------------------
# decode_record, decode_dispatch


@needs_compiled
@SETTINGS
@given(data=buffers(), check_crc=st.booleans(), read_body=st.booleans(), cut=st.integers(0, 40))
def test_decode_record_identical(data, check_crc, read_body, cut):
    buf, pos = data
    for view in (buf, bytearray(buf), memoryview(buf)):
        for limit in (None, max(pos, len(buf) - cut)):
            same_decoded(
                record_codec.py_decode_record(view, pos, check_crc=check_crc, read_body=read_body, limit=limit),
                COMPILED.decode_record(view, pos, check_crc=check_crc, read_body=read_body, limit=limit),
            )


@needs_compiled
@SETTINGS
@given(data=buffers(), cut=st.integers(0, 40))
def test_decode_dispatch_identical(data, cut):
    buf, pos = data
    for limit in (len(buf), max(pos, len(buf) - cut)):
        assert record_codec.py_decode_dispatch(buf, pos, limit) == COMPILED.decode_dispatch(buf, pos, limit)


@needs_compiled
@pytest.mark.parametrize("buf", [b"", b"\0" * 7, b"\0" * 64, encode_blank(8), encode_blank(7) + b"\0" * 4,
                                 encode_blank(100), b"\xda\xa3\x20\xa7" * 30])
@pytest.mark.parametrize("pos", [0, 1, 4, 200])
def test_short_blank_and_garbage_identical(buf, pos):
    """Edge positions and sizes, including reads that start past the buffer's end."""
    same_decoded(record_codec.py_decode_record(buf, pos), COMPILED.decode_record(buf, pos))
    assert record_codec.py_decode_dispatch(buf, pos, len(buf)) == COMPILED.decode_dispatch(buf, pos, len(buf))


@needs_compiled
def test_a_buffer_without_direct_access_goes_to_the_reference():
    """A non-contiguous view cannot be read directly: the reference gets it, and both
    refuse it the same way."""
    rec = encode_record(message.Message("T", b"body"), "127.0.0.1:1", MAX_MESSAGE_SIZE)
    strided = memoryview(bytes(rec) * 2)[::2]
    for decode in (record_codec.py_decode_record, COMPILED.decode_record):
        with pytest.raises(BufferError):
            decode(strided, 0)


# ---------------------------------------------------------------------------------------
# scan_rows


@st.composite
def segments(draw: st.DrawFn) -> tuple[bytes, int]:
    """(segment bytes, segment start): records at their PHYSICALOFFSET, one maybe damaged,
    then a BLANK filler, zeros or nothing."""
    start = draw(st.sampled_from([0, 1 << 30]))
    out = b""
    n = draw(st.integers(1, 5))
    bad = draw(st.integers(0, n))  # n: none damaged
    for i in range(n):
        phys = start + len(out) + draw(st.sampled_from([0, 0, 0, 0, 1]))
        rec = draw(records(phys=phys))
        out += draw(damaged(rec)) if i == bad else rec
    out += draw(st.sampled_from([b"", bytes(32), encode_blank(8)]))
    return out, start


@needs_compiled
@SETTINGS
@given(seg=segments(), verify_crc=st.booleans(), include_body=st.booleans(),
       max_rows=st.integers(1, 6), begin=st.sampled_from([0, 0, 5]),
       topics=st.none() | st.frozensets(st.sampled_from(["", "a", "T"]), max_size=2),
       t0=st.none() | int64, t1=st.none() | int64)
def test_scan_rows_identical(seg, verify_crc, include_body, max_rows, begin, topics, t0, t1):
    buf, start = seg
    results = []
    for scan in (record_rows.py_scan_rows, COMPILED.scan_rows):
        rows: list = [("earlier",)]
        pos = scan(buf, begin, len(buf), start, rows, max_rows, verify_crc=verify_crc,
                   include_body=include_body, topics=topics, start_time=t0, end_time=t1,
                   extra=("src", None))
        results.append((pos, rows))
    (pos_a, rows_a), (pos_b, rows_b) = results
    assert pos_a == pos_b
    assert rows_a == rows_b
    for a, b in zip(rows_a[1:], rows_b[1:], strict=True):
        assert len(a) == len(record_rows.ROW_FIELDS) + 2
        assert [type(x) for x in a] == [type(x) for x in b]
        assert list(a[17].items()) == list(b[17].items())


@needs_compiled
@SETTINGS
@given(seg=segments(), check_crc=st.booleans(), begin=st.sampled_from([0, 0, 5]),
       stop=st.none() | st.integers(0, 600))
def test_skip_clean_identical(seg, check_crc, begin, stop):
    """The segment walker's bulk path stops where the reference does: the same position for
    any segment, stop and buffer type."""
    buf, start = seg
    stop = len(buf) if stop is None else stop
    for view in (buf, bytearray(buf), memoryview(buf)):
        assert (segment_walker.py_skip_clean(view, begin, stop, start, check_crc)
                == COMPILED.skip_clean(view, begin, stop, start, check_crc))


def test_row_fields_are_the_pipeline_row_layout():
    """The pipeline's BatchBuilder takes scan rows as they are: same columns, same order."""
    schema = pytest.importorskip("pipeline.schema")
    assert (*record_rows.ROW_FIELDS, "source", schema.CORRUPT_COLUMN) == schema._ROW


# ---------------------------------------------------------------------------------------
# encoding: prepare_record, record_parts


def outcome(fn, *args):
    """What a call gives: its value, or its exception's type, text and status."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 (compared, not handled)
        return type(e), str(e), getattr(e, "status", None)


@needs_compiled
@SETTINGS
@given(msg=messages(), store_host=hosts, max_size=st.sampled_from([0, 100, MAX_MESSAGE_SIZE]),
       offsets=st.tuples(int64, int64, int64))
def test_encoding_identical(msg, store_host, max_size, offsets):
    pure = outcome(record_codec.py_prepare_record, msg, store_host, max_size)
    assert pure == outcome(COMPILED.prepare_record, msg, store_host, max_size)
    if isinstance(pure, record_codec.PreparedRecord):
        assert b"".join(record_codec.py_record_parts(pure, *offsets)) == b"".join(COMPILED.record_parts(pure, *offsets))


@needs_compiled
@SETTINGS
@given(topic=st.one_of(topics, st.sampled_from(["T\x00", "T" * 128, "é" * 70])),
       body=st.one_of(st.binary(max_size=300), st.just(b"x" * 200)),
       queue_id=st.one_of(st.integers(0, 2**31 - 1), st.sampled_from([-1, 2**31, True])),
       tags=st.one_of(st.none(), st.text(max_size=12), st.sampled_from(["", "a\x01b", "c\x02", "\x00", "\ud800"])),
       flag=st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([2**31, -(2**31) - 1])),
       born_timestamp=st.one_of(st.just(1), st.integers(0, 2**63 - 1), st.sampled_from([-1, 2**63])),
       born_host=st.one_of(st.none(), hosts, st.just("nowhere")),
       store_host=st.one_of(hosts, st.just("bad")), max_size=st.sampled_from([0, 100, MAX_MESSAGE_SIZE]))
def test_a_plain_send_encodes_as_its_message_does(topic, body, queue_id, tags, flag, born_timestamp, born_host,
                                                  store_host, max_size):
    """prepare_plain, the compiled send path's record builder, against the reference (the
    Message encoder): the same record, or the same refusal."""
    args = (topic, body, queue_id, tags, flag, born_timestamp, born_host, store_host, max_size)
    pure = outcome(record_codec.py_prepare_plain, *args)
    assert pure == outcome(COMPILED.prepare_plain, *args)
    assert record_codec.prepare_plain is COMPILED.prepare_plain or accel.forced_pure()


_PROP_TEXT = st.one_of(st.text(max_size=10), st.sampled_from(["UNIQ_KEY", "WAIT", "TAGS", "KEYS", "a\x00", "\ud800",
                                                               "C0A8000100002A9F0000000000000001"]))


@needs_compiled
@SETTINGS
@given(topic=st.one_of(topics, st.sampled_from(["T\x00", "T" * 128])),
       body=st.one_of(st.binary(max_size=300), st.just(b"x" * 200)),
       queue_id=st.integers(0, 2**31 - 1),
       tags=st.one_of(st.none(), st.text(max_size=12), st.sampled_from(["", "\x00", "\ud800"])),
       properties=st.one_of(st.none(), st.dictionaries(_PROP_TEXT, _PROP_TEXT, max_size=4),
                            st.just({"a": "x" * 40000}), st.just({"a": None}), st.just({"a": 1})),
       keys=st.one_of(st.lists(st.text(max_size=8), max_size=3), st.lists(st.text(max_size=8), max_size=2).map(tuple),
                      st.just([1])),
       flag=st.integers(-(2**31), 2**31 - 1), born_timestamp=st.integers(0, 2**63 - 1),
       born_host=st.one_of(st.none(), hosts), store_host=hosts, max_size=st.sampled_from([0, 100, MAX_MESSAGE_SIZE]))
def test_a_plain_send_with_properties_encodes_as_its_message_does(topic, body, queue_id, tags, properties, keys, flag,
                                                                  born_timestamp, born_host, store_host, max_size):
    """prepare_plain with a remoting send's keys and other properties, compiled against the
    reference (the Message encoder): the same record, or the same refusal."""
    args = (topic, body, queue_id, tags, flag, born_timestamp, born_host, store_host, max_size, properties, keys)
    pure = outcome(record_codec.py_prepare_plain, *args)
    assert pure == outcome(COMPILED.prepare_plain, *args)
    if properties and type(properties) is dict and all(type(v) is str for v in properties.values()) and not tags \
            and not keys and "WAIT" not in properties and isinstance(pure, record_codec.PreparedRecord):
        assert pure.tail.endswith(encode_properties(properties).encode())  # its own, in their order


@needs_compiled
@SETTINGS
@given(msgs=st.lists(messages(), min_size=1, max_size=4), tx=st.lists(st.sampled_from([0, 0x4, 0x8, 0xC]), min_size=4,
                                                                       max_size=4),
       queue_offset=st.one_of(st.integers(0, 2**40), st.just(2**63 - 1)), phys=st.one_of(st.integers(0, 2**40),
                                                                                         st.just(-1)),
       now=int64, prefix=st.sampled_from(["7F00000100002A9F", "", "é"]))
def test_placing_a_puts_records_is_identical(msgs, tx, queue_offset, phys, now, prefix):
    """place_records (a put's records placed in the CommitLog: their bytes and msgIds, the
    next queue offset) against the reference, transaction records taking no queue offset."""
    records = []
    for msg, t in zip(msgs, tx, strict=False):
        msg.sys_flag = t
        rec = outcome(record_codec.py_prepare_record, msg, "127.0.0.1:10911", MAX_MESSAGE_SIZE)
        if isinstance(rec, record_codec.PreparedRecord):
            records.append(rec)
    pure_parts: list[bytes] = []
    compiled_parts: list[bytes] = []
    pure = outcome(record_codec.py_place_records, records, pure_parts, queue_offset, phys, now, prefix)
    assert pure == outcome(COMPILED.place_records, records, compiled_parts, queue_offset, phys, now, prefix)
    assert pure_parts == compiled_parts


ODD_MESSAGES = [
    dict(topic="T", body=b"x", properties={"WAIT": "false", "a": "b"}),
    dict(topic="T", body=b"x", tags="t", properties={"TAGS": "old", "x": "y"}),
    dict(topic="T", body=b"x", keys=["a", "b"], properties={"KEYS": "old"}),
    dict(topic="T", body=b"x", properties={"a": None, "b": "c"}),
    dict(topic="T", body=b"x", properties={"a": 1}),
    dict(topic="T", body=b"x", properties={"a": "b\x00"}),
    dict(topic="T", body=b"x", properties={"a": "x" * 40000}),
    dict(topic="T", body=b"x", properties={"a": "\ud800"}),
    dict(topic="T\x00", body=b"x"),
    dict(topic="T" * 128, body=b"x"),
    dict(topic=5, body=b"x"),
    dict(topic="T", body=bytearray(b"xy")),
    dict(topic="T", body=b"x" * 200),
    dict(topic="T", body=b"x", born_host="nowhere"),
    dict(topic="T", body=b"x", born_host="[::1]:5"),
    dict(topic="T", body=b"x", sys_flag=sysflag.SysFlag.MULTI_TAGS | sysflag.SysFlag.BORNHOST_V6),
    dict(topic="T", body=b"x", sys_flag=2**31),
    dict(topic="T", body=b"x", sys_flag=0x7F),
    dict(topic="T", body=b"x", queue_id=True),
    dict(topic="T", body=b"x", queue_id=2**31),
    dict(topic="T", body=b"x", flag=-(2**31) - 1),
    dict(topic="T", body=b"x", reconsume_times=1.5),
    dict(topic="T", body=b"x", prepared_transaction_offset=2**63),
    dict(topic="T", body=b"x", born_timestamp=-(2**63) - 1),
]


@needs_compiled
@pytest.mark.parametrize("fields", ODD_MESSAGES)
@pytest.mark.parametrize("store_host", ["127.0.0.1:10911", "[2001:db8::1]:10911", "bad"])
def test_odd_messages_encode_identically(fields, store_host):
    msg = message.Message(born_timestamp=fields.pop("born_timestamp", 1), **fields)
    pure = outcome(record_codec.py_prepare_record, msg, store_host, 100)
    assert pure == outcome(COMPILED.prepare_record, msg, store_host, 100)
    if isinstance(pure, record_codec.PreparedRecord):
        for offsets in ((0, 0, 0), (2**63 - 1, -(2**63), 1), (2**63, 0, 0), (0, 0, "x")):
            assert outcome(record_codec.py_record_parts, pure, *offsets) == outcome(COMPILED.record_parts, pure, *offsets)


@needs_compiled
def test_odd_prepared_records_pack_identically():
    rec = record_codec.py_prepare_record(message.Message("T", b"x", born_timestamp=1), "127.0.0.1:1", 100)
    for odd in (rec._replace(total=2**31), rec._replace(born_host=b"\1" * 9),
                rec._replace(born_timestamp=2**63), rec._replace(queue_id=None), rec._replace(body=b"")):
        assert outcome(record_codec.py_record_parts, odd, 1, 2, 3) == outcome(COMPILED.record_parts, odd, 1, 2, 3)


@needs_compiled
def test_born_timestamp_defaults_to_now():
    import time

    before = int(time.time() * 1000)
    rec = COMPILED.prepare_record(message.Message("T", b"x"), "127.0.0.1:1", 100)
    assert before <= rec.born_timestamp <= int(time.time() * 1000)


@needs_compiled
@SETTINGS
@given(text=st.text(max_size=300))
def test_compiled_java_string_hash_is_the_reference(text: str) -> None:
    """The compiled String.hashCode (every IndexFile key and tag code) equals the reference's,
    surrogate pairs for characters past U+FFFF included."""
    assert message.java_string_hash is COMPILED.java_string_hash
    assert COMPILED.java_string_hash(text) == message.reference_java_string_hash(text)


@needs_compiled
@SETTINGS
@given(puts=st.lists(st.tuples(st.text(max_size=12), st.integers(0, 2**62), st.integers(-10_000, 10**7)),
                     min_size=1, max_size=40), slots=st.integers(1, 17))
def test_compiled_index_puts_write_the_references_bytes(tmp_path_factory: pytest.TempPathFactory,
                                                         puts: list[tuple[str, int, int]], slots: int) -> None:
    """IndexFile.put_key through store._accel's index_put writes the file the reference's
    struct writes do, byte for byte: entries, chains, slots and header, a full file included."""
    from store import index_file

    files = []
    for compiled in (COMPILED, None):
        path = tmp_path_factory.mktemp("index") / "20240101000000000"
        original, index_file.COMPILED = index_file.COMPILED, compiled
        try:
            f = index_file.IndexFile(str(path), slots, 30)
            results = [f.put_key(key, phy, 1_700_000_000_000 + ts) for key, phy, ts in puts]
            state = (results, f.index_count, f.hash_slot_count, f.begin_phy_offset, f.end_phy_offset,
                     f.begin_timestamp, f.end_timestamp)
            f.shutdown()
        finally:
            index_file.COMPILED = original
        files.append((state, path.read_bytes()))
    assert files[0] == files[1]
