"""CommitLog record codec: round trips, a hand-built record, v2, vectors, limits, garbage."""

from __future__ import annotations

import ipaddress
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.message import (
    Message,
    decode_msg_id,
    encode_msg_id,
    java_string_hash,
    tags_code,
    topic_error,
)
from store.properties import decode_properties, encode_properties
from store.record_codec import (
    BLANK_MAGIC_CODE,
    MAX_PROPERTIES_LENGTH,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    EncodeError,
    RecordKind,
    decode_record,
    encode_blank,
    encode_record,
    masked_crc32,
    patch_record,
)
from store.sysflag import SysFlag
from tests.examples import examples

pytestmark = pytest.mark.usefixtures("both_codecs")  # compiled and pure (conftest.py)

MAX_MESSAGE_SIZE = 4 * 1024 * 1024
STORE_V4 = "10.0.0.1:10911"

# ---------------------------------------------------------------------------------------
# strategies

int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
ports = st.integers(0, 65535)


def _host(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> str:
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


hosts = st.builds(_host, st.ip_addresses(), ports)
# the codec takes any UTF-8 topic of at most 127 bytes without NUL (a NUL last byte reads as torn)
topics = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=60).map(
    lambda t: t.encode("utf-8")[:127].decode("utf-8", "ignore"))
valid_topics = st.from_regex(r"[%|a-zA-Z0-9_-]{1,127}", fullmatch=True)
# property names/values: non-empty, no separators (the reader drops empty names/values), no NUL
prop_text = st.text(
    st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)),
    min_size=1, max_size=20,
)
prop_names = prop_text.filter(lambda n: n not in ("TAGS", "KEYS", "WAIT"))
key_text = st.text(
    st.characters(blacklist_characters="\x00\x01\x02 ", blacklist_categories=("Cs",)),
    min_size=1, max_size=16,
)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    return Message(
        topic=draw(topics),
        body=draw(st.binary(max_size=64 * 1024)),
        queue_id=draw(int32),
        tags=draw(st.none() | prop_text),
        keys=draw(st.lists(key_text, max_size=4)),
        properties=draw(st.dictionaries(prop_names, prop_text, max_size=6)),
        flag=draw(int32),
        born_timestamp=draw(int64),
        born_host=draw(hosts),
        sys_flag=draw(int32),
        reconsume_times=draw(int32),
        prepared_transaction_offset=draw(int64),
    )


def _canonical(host: str) -> str:
    addr, _, port = host.rpartition(":")
    return _host(ipaddress.ip_address(addr.strip("[]")), int(port))


# ---------------------------------------------------------------------------------------
# round trips


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msg=messages(), store_host=hosts, queue_offset=int64, phys=int64, store_ts=int64)
def test_round_trip(msg: Message, store_host: str, queue_offset: int, phys: int, store_ts: int):
    buf = encode_record(msg, store_host, MAX_MESSAGE_SIZE)
    patch_record(buf, queue_offset, phys, store_ts)
    props_len = len(encode_properties(msg.all_properties()).encode("utf-8"))
    v6 = (":" in msg.born_host.rpartition(":")[0]) + (":" in store_host.rpartition(":")[0])
    assert len(buf) == 91 + 12 * v6 + len(msg.body) + len(msg.topic.encode()) + props_len

    d = decode_record(bytes(buf))
    assert d.kind is RecordKind.MESSAGE, d.error
    m = d.message
    assert d.size == m.size == len(buf)
    assert m.magic_version == 1
    assert m.body == msg.body
    assert m.body_crc == masked_crc32(msg.body) and m.crc_ok
    assert m.topic == msg.topic
    assert m.queue_id == msg.queue_id
    assert m.flag == msg.flag
    assert m.queue_offset == queue_offset
    assert m.commitlog_offset == phys
    assert m.store_timestamp == store_ts
    assert m.born_timestamp == msg.born_timestamp
    assert m.born_host == _canonical(msg.born_host)
    assert m.store_host == _canonical(store_host)
    assert m.reconsume_times == msg.reconsume_times
    assert m.prepared_transaction_offset == msg.prepared_transaction_offset
    assert m.properties == msg.all_properties()
    assert m.tags == msg.tags
    assert m.keys == msg.keys
    assert m.tags_code == tags_code(msg.tags)
    v6_bits = int(SysFlag.BORNHOST_V6 | SysFlag.STOREHOST_V6)
    assert m.sys_flag & ~v6_bits == msg.sys_flag & ~v6_bits  # every other bit kept
    assert bool(m.sys_flag & SysFlag.BORNHOST_V6) == m.born_host.startswith("[")
    assert bool(m.sys_flag & SysFlag.STOREHOST_V6) == m.store_host.startswith("[")
    assert decode_msg_id(m.msg_id) == (m.store_host, phys)


@given(msg=messages(), phys=int64)
@settings(max_examples=examples(50), deadline=None)
def test_round_trip_inside_a_larger_buffer(msg: Message, phys: int):
    """A record at a non-zero position, followed by other bytes, decodes the same."""
    buf = encode_record(msg, STORE_V4, MAX_MESSAGE_SIZE)
    patch_record(buf, 7, phys, 1)
    data = b"\xaa" * 13 + bytes(buf) + b"\x55" * 40
    d = decode_record(data, 13)
    assert d.kind is RecordKind.MESSAGE and d.size == len(buf)
    assert d.message.body == msg.body
    # bounded by limit: one byte short is a torn record, never a raise
    short = decode_record(data, 13, limit=13 + len(buf) - 1)
    assert short.kind is RecordKind.INVALID and short.error


@given(valid_topics)
def test_topics_matching_the_topic_rule_round_trip(topic: str):
    assert topic_error(topic) is None
    d = decode_record(encode_record(Message(topic=topic, body=b"b"), STORE_V4, MAX_MESSAGE_SIZE))
    assert d.message.topic == topic


def test_topic_rule():
    assert topic_error("TopicTest") is None
    assert topic_error("") is not None
    assert topic_error("a b") is not None
    assert topic_error("中文") is not None
    assert topic_error("x" * 128) is not None


def test_read_body_false_skips_the_body():
    buf = encode_record(Message(topic="T", body=b"hello"), STORE_V4, MAX_MESSAGE_SIZE)
    d = decode_record(buf, read_body=False)
    assert d.kind is RecordKind.MESSAGE and d.message.body == b"" and d.size == len(buf)


# ---------------------------------------------------------------------------------------
# a record assembled field by field (FORMATS.md)


def _hand_built(*, magic: int = MESSAGE_MAGIC_CODE, topic: bytes = b"TopicTest") -> bytes:
    body = b"Hello RocketMQ"
    props = b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ABC"
    born = bytes([192, 168, 1, 2]) + struct.pack(">i", 50123)
    store = bytes([10, 0, 0, 1]) + struct.pack(">i", 10911)
    topic_len = struct.pack(">b", len(topic)) if magic == MESSAGE_MAGIC_CODE else struct.pack(">h", len(topic))
    rest = b"".join([
        struct.pack(">I", magic),                 # MAGICCODE
        struct.pack(">i", masked_crc32(body)),    # BODYCRC
        struct.pack(">i", 3),                     # QUEUEID
        struct.pack(">i", 77),                    # FLAG
        struct.pack(">q", 42),                    # QUEUEOFFSET
        struct.pack(">q", 1 << 33),               # PHYSICALOFFSET
        struct.pack(">i", 0x2 | 0x8),             # SYSFLAG: multi tags, commit
        struct.pack(">q", 1_700_000_000_000),     # BORNTIMESTAMP
        born,                                     # BORNHOST
        struct.pack(">q", 1_700_000_000_123),     # STORETIMESTAMP
        store,                                    # STOREHOSTADDRESS
        struct.pack(">i", 2),                     # RECONSUMETIMES
        struct.pack(">q", 99),                    # PREPARED TRANSACTION OFFSET
        struct.pack(">i", len(body)), body,       # BODYLENGTH, BODY
        topic_len, topic,                         # TOPICLENGTH, TOPIC
        struct.pack(">h", len(props)), props,     # PROPERTIESLENGTH, PROPERTIES
    ])
    return struct.pack(">i", 4 + len(rest)) + rest


def test_decode_hand_built_record():
    raw = _hand_built()
    assert len(raw) == 91 + len(b"Hello RocketMQ") + len(b"TopicTest") + 33
    d = decode_record(raw)
    assert d.kind is RecordKind.MESSAGE, d.error
    m = d.message
    assert d.size == m.size == len(raw)
    assert m.magic_version == 1
    assert m.body_crc == masked_crc32(b"Hello RocketMQ") and m.crc_ok
    assert m.queue_id == 3
    assert m.flag == 77
    assert m.queue_offset == 42
    assert m.commitlog_offset == 1 << 33
    assert m.sys_flag == 0xA
    assert m.born_timestamp == 1_700_000_000_000
    assert m.born_host == "192.168.1.2:50123"
    assert m.store_timestamp == 1_700_000_000_123
    assert m.store_host == "10.0.0.1:10911"
    assert m.reconsume_times == 2
    assert m.prepared_transaction_offset == 99
    assert m.body == b"Hello RocketMQ"
    assert m.topic == "TopicTest"
    assert m.properties == {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABC"}
    assert m.tags == "TagA" and m.keys == ("k1", "k2") and m.uniq_key == "ABC"
    assert m.tags_code == 2598919
    assert m.msg_id == "0A00000100002A9F0000000200000000"


def test_encoder_matches_the_hand_built_bytes():
    msg = Message(
        topic="TopicTest", body=b"Hello RocketMQ", queue_id=3, flag=77,
        properties={"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "ABC"},
        born_timestamp=1_700_000_000_000, born_host="192.168.1.2:50123",
        sys_flag=0xA, reconsume_times=2, prepared_transaction_offset=99,
    )
    buf = encode_record(msg, "10.0.0.1:10911", MAX_MESSAGE_SIZE)
    patch_record(buf, 42, 1 << 33, 1_700_000_000_123)
    assert bytes(buf) == _hand_built()


def test_decode_v2_magic_two_byte_topic_length():
    long_topic = b"%RETRY%" + b"g" * 193  # 200 bytes: only v2 can hold it
    for topic in (b"TopicTest", long_topic):
        raw = _hand_built(magic=MESSAGE_MAGIC_CODE_V2, topic=topic)
        d = decode_record(raw)
        assert d.kind is RecordKind.MESSAGE, d.error
        assert d.message.magic_version == 2
        assert d.message.topic == topic.decode()
        assert d.message.body == b"Hello RocketMQ"
        assert d.message.tags == "TagA"
        assert d.size == len(raw)


def test_blank_filler():
    raw = encode_blank(300) + bytes(292)
    assert raw[:8] == struct.pack(">iI", 300, BLANK_MAGIC_CODE)
    d = decode_record(raw)
    assert d.kind is RecordKind.BLANK and d.size == 300
    assert decode_record(encode_blank(301) + bytes(292)).kind is RecordKind.INVALID
    assert decode_record(encode_blank(4)).kind is RecordKind.INVALID


# ---------------------------------------------------------------------------------------
# test vectors (ROCKETMQ-FACTS.md)


def test_masked_crc_vector():
    assert zlib.crc32(b"123456789") == 0xCBF43926
    assert masked_crc32(b"123456789") == 0x4BF43926 == 1274296614


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("TagA", 2598919),
        ("polygenelubricants", -2147483648),
        ("中文", 646394),
        ("TopicTest#KEY1", -1656969516),
        ("", 0),
        ("😀", 31 * 0xD83D + 0xDE00),  # UTF-16 code units, not code points
    ],
)
def test_java_string_hash(text: str, expected: int):
    assert java_string_hash(text) == expected


def test_tags_code():
    assert tags_code("TagA") == 2598919
    assert tags_code(None) == 0
    assert tags_code("") == 0


def test_msg_id_vector():
    msg_id = encode_msg_id("10.0.0.1:10911", 1073741824)
    assert msg_id == "0A00000100002A9F0000000040000000"
    assert decode_msg_id(msg_id) == ("10.0.0.1:10911", 1073741824)
    v6 = encode_msg_id("[::1]:10911", 5)
    assert len(v6) == 56 and v6 == v6.upper()
    assert decode_msg_id(v6) == ("[::1]:10911", 5)
    for bad in ("", "0A", "Z" * 32):
        with pytest.raises(ValueError):
            decode_msg_id(bad)


@pytest.mark.parametrize(
    ("born", "store", "overhead"),
    [
        ("10.0.0.2:1", "10.0.0.1:10911", 91),
        ("[::1]:1", "10.0.0.1:10911", 103),
        ("10.0.0.2:1", "[::1]:10911", 103),
        ("[fe80::1]:1", "[::1]:10911", 115),
    ],
)
def test_fixed_overhead(born: str, store: str, overhead: int):
    buf = encode_record(Message(topic="", body=b"", born_host=born), store, MAX_MESSAGE_SIZE)
    assert len(buf) == overhead
    assert decode_record(buf).message.born_host == born


# ---------------------------------------------------------------------------------------
# properties


def test_properties_reader_accepts_a_trailing_separator():
    assert decode_properties("a\x01b\x02c\x01d\x02") == {"a": "b", "c": "d"}
    assert decode_properties("a\x01b\x02c\x01d") == {"a": "b", "c": "d"}
    assert decode_properties("") == {}
    # malformed segments are skipped, as RocketMQ 4.9.8 does
    assert decode_properties("\x02x\x02\x01v\x02n\x01\x02ok\x011") == {"ok": "1"}


@given(st.dictionaries(prop_names, prop_text, max_size=8))
def test_properties_writer_never_writes_a_trailing_separator(props: dict[str, str]):
    text = encode_properties(props)
    assert not text.endswith("\x02")
    assert decode_properties(text) == props
    assert decode_properties(text + "\x02") == props


def test_record_properties_have_no_trailing_separator():
    buf = encode_record(
        Message(topic="T", body=b"x", tags="TagA", keys=["a", "b"], properties={"p": "中文"}),
        STORE_V4, MAX_MESSAGE_SIZE,
    )
    assert not bytes(buf).endswith(b"\x02")
    m = decode_record(buf).message
    assert m.properties == {"p": "中文", "TAGS": "TagA", "KEYS": "a b"}


def test_wait_is_not_persisted():
    msg = Message(topic="T", body=b"x", properties={"WAIT": "false", "X": "y"})
    assert msg.wait_store_msg_ok is False
    assert Message(topic="T", body=b"x").wait_store_msg_ok is True
    buf = encode_record(msg, STORE_V4, MAX_MESSAGE_SIZE)
    assert b"WAIT" not in buf
    assert decode_record(buf).message.properties == {"X": "y"}
    assert msg.properties["WAIT"] == "false"  # the in-memory message keeps it


# ---------------------------------------------------------------------------------------
# limits


def test_properties_too_large():
    fits = {"p": "v" * (MAX_PROPERTIES_LENGTH - 2)}  # "p\x01" + value = 32767 bytes
    assert decode_record(encode_record(Message(topic="T", body=b"", properties=fits), STORE_V4, MAX_MESSAGE_SIZE)).kind is RecordKind.MESSAGE
    too_big = {"p": "v" * (MAX_PROPERTIES_LENGTH - 1)}
    with pytest.raises(EncodeError) as e:
        encode_record(Message(topic="T", body=b"", properties=too_big), STORE_V4, MAX_MESSAGE_SIZE)
    assert e.value.status == "PROPERTIES_SIZE_EXCEEDED"
    # counted in UTF-8 bytes, not characters
    with pytest.raises(EncodeError) as e:
        encode_record(Message(topic="T", body=b"", properties={"p": "中" * 11000}), STORE_V4, MAX_MESSAGE_SIZE)
    assert e.value.status == "PROPERTIES_SIZE_EXCEEDED"


def test_body_larger_than_max_message_size():
    assert encode_record(Message(topic="T", body=b"x" * 1000), STORE_V4, 1000)
    with pytest.raises(EncodeError) as e:
        encode_record(Message(topic="T", body=b"x" * 1001), STORE_V4, 1000)
    assert e.value.status == "MESSAGE_ILLEGAL"


def test_topic_longer_than_127_bytes():
    assert encode_record(Message(topic="t" * 127, body=b""), STORE_V4, MAX_MESSAGE_SIZE)
    with pytest.raises(EncodeError) as e:
        encode_record(Message(topic="中" * 43, body=b""), STORE_V4, MAX_MESSAGE_SIZE)  # 129 bytes
    assert e.value.status == "MESSAGE_ILLEGAL"


# ---------------------------------------------------------------------------------------
# bad input never raises


def _record() -> bytes:
    buf = encode_record(Message(topic="TopicTest", body=b"payload" * 10, tags="TagA"), STORE_V4, MAX_MESSAGE_SIZE)
    patch_record(buf, 1, 0, 2)
    return bytes(buf)


def test_zeros_are_invalid():
    d = decode_record(bytes(4096))
    assert d.kind is RecordKind.INVALID and "zero" in d.error


def test_truncated_record_is_invalid():
    raw = _record()
    assert decode_record(raw).kind is RecordKind.MESSAGE
    for keep in (0, 4, 7, 8, 47, 60, 100, len(raw) - 1):
        d = decode_record(raw[:keep])
        assert d.kind is RecordKind.INVALID and d.error, keep


def test_garbage_is_invalid():
    d = decode_record(b"\x12\x34\x56\x78" * 64)
    assert d.kind is RecordKind.INVALID and "magic" in d.error


def test_body_crc_mismatch():
    raw = bytearray(_record())
    raw[90] ^= 0x01  # a body byte
    d = decode_record(raw)
    assert d.kind is RecordKind.INVALID and "CRC" in d.error
    d = decode_record(raw, check_crc=False)
    assert d.kind is RecordKind.MESSAGE and d.message.body_crc != masked_crc32(d.message.body)


def test_wrong_total_size_is_invalid():
    raw = bytearray(_record() + bytes(16))
    struct.pack_into(">i", raw, 0, len(_record()) + 8)
    d = decode_record(raw)
    assert d.kind is RecordKind.INVALID and "TOTALSIZE" in d.error


@settings(max_examples=examples(300))
@given(data=st.binary(max_size=512), pos=st.integers(0, 520))
def test_random_bytes_never_raise(data: bytes, pos: int):
    d = decode_record(data, min(pos, len(data)))
    assert d.kind in RecordKind
    if d.kind is RecordKind.INVALID:
        assert d.error


@settings(max_examples=examples(300))
@given(
    header=st.sampled_from([MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, BLANK_MAGIC_CODE]),
    size=st.integers(-10, 600),
    tail=st.binary(max_size=512),
)
def test_random_bytes_behind_a_real_magic_never_raise(header: int, size: int, tail: bytes):
    d = decode_record(struct.pack(">iI", size, header) + tail)
    assert d.kind in RecordKind
    if d.kind is RecordKind.INVALID:
        assert d.error


@settings(max_examples=examples(300))
@given(flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=4))
def test_corrupted_records_never_raise(flips: list[tuple[int, int]]):
    raw = bytearray(_record())
    for where, xor in flips:
        raw[where % len(raw)] ^= xor
    for check_crc in (True, False):
        d = decode_record(raw, check_crc=check_crc)
        assert d.kind in RecordKind
        if d.kind is RecordKind.INVALID:
            assert d.error
