"""The CommitLog record codec (FORMATS.md, message format v1; v2 decoded too): encoding a
record, decoding one, the dispatch fast path, the BLANK filler, the masked body CRC and the
few fixed-position reads (TOTALSIZE and MAGIC, PHYSICALOFFSET, STORETIMESTAMP).

Everything is big-endian and signed, as a RocketMQ 4.x broker writes it, so stores are
interchangeable byte for byte. The puts, reads, dispatch, recovery, the segment walker and
the offline tools all read records through here, and store/_accel.pyx is its compiled twin
(bound at the end of this module; the pure functions stay as py_*, the reference).
"""

from __future__ import annotations

import enum
import mmap
import struct
import sys
import zlib
from collections.abc import Mapping, Sequence
from typing import Literal, NamedTuple, overload

import attrs

from . import runtime
from .accel import COMPILED
from .message import MAX_TOPIC_LENGTH, Message, StoredMessage, tags_code
from .msg_id import decode_host, encode_host
from .msg_id import msg_id_prefix as msg_id_prefix  # the compiled decoder binds it from here
from .properties import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    decode_properties,
    encode_properties,
)
from .sysflag import BORNHOST_V6_FLAG, STOREHOST_V6_FLAG, TRANSACTION_MASK, SysFlag

Buffer = bytes | bytearray | memoryview | mmap.mmap
"""What records are read from: a segment's map, a slice of it, or bytes."""

MESSAGE_MAGIC_CODE = 0xDAA320A7
MESSAGE_MAGIC_CODE_V2 = 0xDAA320AB
BLANK_MAGIC_CODE = 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8

MAX_PROPERTIES_LENGTH = 32767
MAX_RECORD_EXTRA = 64 * 1024  # a record may exceed maxMessageSize by this much (4.9.4+)

# offsets of the fields patched under the put lock
QUEUE_OFFSET_POSITION = 20
PHYSICAL_OFFSET_POSITION = 28
SYSFLAG_POSITION = 36
BORN_HOST_POSITION = 48

# TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSICALOFFSET SYSFLAG BORNTIMESTAMP
_HEAD = struct.Struct(">iIiiiqqiq")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I8 = struct.Struct(">b")
_SIZE_MAGIC = struct.Struct(">iI")
# RECONSUMETIMES PREPAREDTRANSACTIONOFFSET BODYLENGTH
_TAIL = struct.Struct(">iqi")


def masked_crc32(data: bytes | bytearray | memoryview) -> int:
    """IEEE CRC-32 masked to a non-negative int32, as RocketMQ stores BODYCRC."""
    return zlib.crc32(data) & 0x7FFFFFFF


class EncodeError(ValueError):
    """The message cannot be encoded; `status` names the PutMessageStatus to report."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


class PreparedRecord(NamedTuple):
    """A record encoded but for QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP, which are
    only known at append time (`record_parts` adds them)."""

    total: int
    queue_id: int
    flag: int
    body_crc: int
    sys_flag: int
    born_timestamp: int
    born_host: bytes
    store_host: bytes
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    tail: bytes
    """TOPICLENGTH TOPIC PROPERTIESLENGTH PROPERTIES."""


# the fixed part of a record up to BODYLENGTH when both hosts are IPv4 (the common case)
_FIXED_V4 = struct.Struct(">iIiiiqqiq8sq8siqi")
_RANGES = struct.Struct(">iiiqiq")  # QUEUEID FLAG SYSFLAG BORNTIMESTAMP RECONSUMETIMES PREPAREDTRANSACTIONOFFSET


def prepare_record(msg: Message, store_host: str, max_message_size: int) -> PreparedRecord:
    """Validate and encode `msg` but for the three fields known only at append time.

    Raises EncodeError with the PutMessageStatus to report.
    """
    props = msg.all_properties()
    props.pop(PROPERTY_WAIT, None)  # RocketMQ 4.9.8 keeps WAIT out of the persisted record
    props_bytes = encode_properties(props).encode("utf-8")
    if b"\x00" in props_bytes:
        raise EncodeError("MESSAGE_ILLEGAL", "a property name or value holds a NUL character")
    if len(props_bytes) > MAX_PROPERTIES_LENGTH:
        raise EncodeError(
            "PROPERTIES_SIZE_EXCEEDED",
            f"properties are {len(props_bytes)} bytes; the limit is {MAX_PROPERTIES_LENGTH}",
        )
    topic_bytes = msg.topic.encode("utf-8")
    if b"\x00" in topic_bytes:
        raise EncodeError("MESSAGE_ILLEGAL", "the topic holds a NUL character")
    if len(topic_bytes) > MAX_TOPIC_LENGTH:
        raise EncodeError(
            "MESSAGE_ILLEGAL", f"topic is {len(topic_bytes)} bytes; the limit is {MAX_TOPIC_LENGTH}"
        )
    body = msg.body
    if len(body) > max_message_size:
        raise EncodeError(
            "MESSAGE_ILLEGAL",
            f"body is {len(body)} bytes; maxMessageSize is {max_message_size}",
        )
    born = encode_host(msg.born_host or store_host)
    store = encode_host(store_host)
    # int(): ~ on an IntFlag only inverts the defined bits, which would drop 0x40 and up
    sys_flag = int(msg.sys_flag) & ~(BORNHOST_V6_FLAG | STOREHOST_V6_FLAG)
    if len(born) == 20:
        sys_flag |= BORNHOST_V6_FLAG
    if len(store) == 20:
        sys_flag |= STOREHOST_V6_FLAG
    total = (
        _HEAD.size + len(born) + 8 + len(store) + _TAIL.size
        + len(body) + 1 + len(topic_bytes) + 2 + len(props_bytes)
    )
    if total > max_message_size + MAX_RECORD_EXTRA:
        raise EncodeError(
            "MESSAGE_ILLEGAL",
            f"record is {total} bytes; the limit is maxMessageSize + 64 KiB = "
            f"{max_message_size + MAX_RECORD_EXTRA}",
        )
    born_ts = msg.born_timestamp if msg.born_timestamp is not None else int(runtime.wall_clock() * 1000)
    tail = b"".join((bytes((len(topic_bytes),)), topic_bytes, _I16.pack(len(props_bytes)), props_bytes))
    # fields out of their wire range fail here (struct.error), not later at append time
    _RANGES.pack(msg.queue_id, msg.flag, sys_flag, born_ts, msg.reconsume_times, msg.prepared_transaction_offset)
    return PreparedRecord(
        total, msg.queue_id, msg.flag, masked_crc32(body), sys_flag, born_ts, born, store,
        msg.reconsume_times, msg.prepared_transaction_offset, body, tail,
    )


def prepare_plain(topic: str, body: bytes, queue_id: int, tags: str | None, flag: int, born_timestamp: int | None,
                  born_host: str | None, store_host: str, max_message_size: int,
                  properties: Mapping[str, str] | None = None, keys: Sequence[str] = ()) -> PreparedRecord:
    """The record of a plain send (a topic, a body, tags, and for a remoting send its keys
    and other properties) as `prepare_record` encodes its Message; the compiled send paths
    build it without the Message. Raises EncodeError."""
    msg = Message(topic=topic, body=body, queue_id=queue_id, tags=tags, keys=tuple(keys), properties=properties,
                  flag=flag, born_timestamp=born_timestamp, born_host=born_host)
    return prepare_record(msg, store_host, max_message_size)


def record_parts(
    rec: PreparedRecord, queue_offset: int, physical_offset: int, store_timestamp: int
) -> tuple[bytes, bytes, bytes]:
    """The record's bytes, in three pieces to join: fixed fields, body, topic and properties."""
    if len(rec.born_host) == 8 and len(rec.store_host) == 8:
        fixed = _FIXED_V4.pack(
            rec.total, MESSAGE_MAGIC_CODE, rec.body_crc, rec.queue_id, rec.flag, queue_offset,
            physical_offset, rec.sys_flag, rec.born_timestamp, rec.born_host, store_timestamp,
            rec.store_host, rec.reconsume_times, rec.prepared_transaction_offset, len(rec.body),
        )
    else:
        fixed = b"".join((
            _HEAD.pack(rec.total, MESSAGE_MAGIC_CODE, rec.body_crc, rec.queue_id, rec.flag, queue_offset,
                       physical_offset, rec.sys_flag, rec.born_timestamp),
            rec.born_host, _I64.pack(store_timestamp), rec.store_host,
            _TAIL.pack(rec.reconsume_times, rec.prepared_transaction_offset, len(rec.body)),
        ))
    return fixed, rec.body, rec.tail


def place_records(records: Sequence[PreparedRecord], parts: list[bytes], queue_offset: int, physical_offset: int,
                  store_timestamp: int, id_prefix: str) -> tuple[str, int]:
    """Place a put's records from `physical_offset` on: their bytes go to `parts` (to be
    written with one append), and the answer is their msgIds joined by commas and the queue
    offset after them (transaction prepare and rollback records take none, and store 0)."""
    ids = []
    for rec in records:
        counts = rec.sys_flag & TRANSACTION_MASK in (0, SysFlag.TRANSACTION_COMMIT)
        parts += record_parts(rec, queue_offset if counts else 0, physical_offset, store_timestamp)
        ids.append(f"{id_prefix}{physical_offset:016X}")
        physical_offset += rec.total
        if counts:
            queue_offset += 1
    return ",".join(ids), queue_offset


def encode_record(msg: Message, store_host: str, max_message_size: int) -> bytearray:
    """Encode `msg` with QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP as placeholders
    (zeros; `patch_record` fills them). Raises EncodeError."""
    return bytearray(b"".join(record_parts(prepare_record(msg, store_host, max_message_size), 0, 0, 0)))


def store_timestamp_position(sys_flag: int) -> int:
    return BORN_HOST_POSITION + (20 if sys_flag & BORNHOST_V6_FLAG else 8)


def patch_record(
    buf: bytearray, queue_offset: int, physical_offset: int, store_timestamp: int
) -> None:
    """Fill the three fields only known under the put lock."""
    _I64.pack_into(buf, QUEUE_OFFSET_POSITION, queue_offset)
    _I64.pack_into(buf, PHYSICAL_OFFSET_POSITION, physical_offset)
    sys_flag = _I32.unpack_from(buf, SYSFLAG_POSITION)[0]
    _I64.pack_into(buf, store_timestamp_position(sys_flag), store_timestamp)


def encode_blank(size: int) -> bytes:
    """END_OF_FILE filler header: TOTALSIZE = bytes left in the segment, MAGIC = BLANK."""
    return _SIZE_MAGIC.pack(size, BLANK_MAGIC_CODE)


class RecordKind(enum.Enum):
    MESSAGE = "message"
    BLANK = "blank"
    INVALID = "invalid"


@attrs.frozen
class Decoded:
    """Outcome of reading one record at a position."""

    kind: RecordKind
    size: int
    message: StoredMessage | None = None
    error: str = ""


def decode_record(
    buf: Buffer,
    pos: int = 0,
    *,
    check_crc: bool = True,
    read_body: bool = True,
    limit: int | None = None,
) -> Decoded:
    """Decode the record at `buf[pos:]` (bounded by `limit`, default len(buf)).

    Never raises on bad data: a torn, zeroed or garbage record is `INVALID` with the reason.
    """
    return _decode(buf, pos, check_crc, read_body, limit, build=True)


def message_extent(buf: Buffer, pos: int, *, check_crc: bool) -> tuple[int, int] | None:
    """(TOTALSIZE, PHYSICALOFFSET) of the message record at `pos` when `decode_record` would
    decode it, else None: decode_record's own checks, building nothing (the segment walker's
    bulk path when pure)."""
    got = _decode(buf, pos, check_crc, check_crc, None, build=False)
    return got if type(got) is tuple else None


@overload
def _decode(buf: Buffer, pos: int, check_crc: bool, read_body: bool, limit: int | None, *,
            build: Literal[True]) -> Decoded: ...
@overload
def _decode(buf: Buffer, pos: int, check_crc: bool, read_body: bool, limit: int | None, *,
            build: Literal[False]) -> Decoded | tuple[int, int]: ...
def _decode(buf: Buffer, pos: int, check_crc: bool, read_body: bool, limit: int | None, *,
            build: bool) -> Decoded | tuple[int, int]:
    """decode_record's rules; with `build` False, (TOTALSIZE, PHYSICALOFFSET) stands for a
    valid message record (nothing built). A Decoded is always built when `build`."""
    end = len(buf) if limit is None else limit
    avail = end - pos
    if avail < 8:
        return Decoded(RecordKind.INVALID, -1, error=f"only {avail} bytes left, no record header")
    total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    if magic == BLANK_MAGIC_CODE:
        if total < 8 or total > avail:
            return Decoded(RecordKind.INVALID, -1, error=f"BLANK filler with impossible size {total}")
        return Decoded(RecordKind.BLANK, total)
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        if total == 0 and magic == 0:
            return Decoded(RecordKind.INVALID, -1, error="zeroed bytes (end of written data)")
        return Decoded(RecordKind.INVALID, -1, error=f"illegal magic code 0x{magic:08X}")
    if total < _HEAD.size or total > avail:
        return Decoded(
            RecordKind.INVALID, -1, error=f"record size {total} does not fit the {avail} bytes left"
        )
    try:
        return _decode_message(buf, pos, total, magic, check_crc, read_body, build)
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        return Decoded(RecordKind.INVALID, -1, error=f"malformed record: {e}")


def _decode_message(buf: Buffer, pos: int, total: int, magic: int, check_crc: bool, read_body: bool,
                    build: bool) -> Decoded | tuple[int, int]:
    """Without `build`, (total, phys) once every check passed; host decoding is skipped then,
    as it can only fail past the buffer's end, where a later read fails too."""
    (
        _, _, body_crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts,
    ) = _HEAD.unpack_from(buf, pos)
    p = pos + _HEAD.size
    born_len = 20 if sys_flag & BORNHOST_V6_FLAG else 8
    store_len = 20 if sys_flag & STOREHOST_V6_FLAG else 8
    born_host = decode_host(buf[p : p + born_len]) if build else ""
    p += born_len
    store_ts = _I64.unpack_from(buf, p)[0]
    p += 8
    store_host = decode_host(buf[p : p + store_len]) if build else ""
    p += store_len
    reconsume, prepared, body_len = _TAIL.unpack_from(buf, p)
    p += _TAIL.size
    if body_len < 0 or p + body_len > pos + total:
        return Decoded(RecordKind.INVALID, total, error=f"body length {body_len} runs past the record")
    body_view = buf[p : p + body_len]
    crc_ok = True
    if check_crc and read_body:
        crc_ok = masked_crc32(body_view) == body_crc
        if not crc_ok:
            return Decoded(
                RecordKind.INVALID, -1,
                error=f"body CRC mismatch at offset {phys}: stored {body_crc}, computed {masked_crc32(body_view)}",
            )
    body = bytes(body_view) if read_body and build else b""
    p += body_len
    if magic == MESSAGE_MAGIC_CODE:
        topic_len = _I8.unpack_from(buf, p)[0]
        p += 1
    else:
        topic_len = _I16.unpack_from(buf, p)[0]
        p += 2
    if topic_len < 0:
        return Decoded(RecordKind.INVALID, total, error=f"negative topic length {topic_len}")
    topic = bytes(buf[p : p + topic_len]).decode("utf-8")
    p += topic_len
    props_len = _I16.unpack_from(buf, p)[0]
    p += 2
    if props_len < 0:
        return Decoded(RecordKind.INVALID, total, error=f"negative properties length {props_len}")
    props_text = bytes(buf[p : p + props_len]).decode("utf-8")
    p += props_len
    if p - pos != total:
        return Decoded(
            RecordKind.INVALID, total,
            error=f"TOTALSIZE {total} differs from the {p - pos} bytes its fields take",
        )
    torn = torn_end_error(buf, p, topic_len, props_len)
    if torn:
        return Decoded(RecordKind.INVALID, -1, error=f"{torn} at offset {phys}")
    if not build:
        return total, phys
    msg = StoredMessage(
        size=total, magic_version=1 if magic == MESSAGE_MAGIC_CODE else 2, body_crc=body_crc,
        queue_id=queue_id, flag=flag, queue_offset=queue_offset, commitlog_offset=phys,
        sys_flag=sys_flag, born_timestamp=born_ts, born_host=born_host, store_timestamp=store_ts,
        store_host=store_host, reconsume_times=reconsume, prepared_transaction_offset=prepared,
        body=body, topic=topic, properties=decode_properties(props_text), crc_ok=crc_ok,
    )
    return Decoded(RecordKind.MESSAGE, total, msg)


def torn_end_error(
    buf: Buffer, end: int, topic_len: int, props_len: int
) -> str | None:
    """Why a record whose lengths add up still looks torn, or None.

    The body CRC covers only the body (RocketMQ 4.x), so a crash that zeroed the last page
    of a record inside its topic or properties would pass every other check. A record's last
    byte is its last property character, or with no properties the topic's last character
    before the 2-byte zero length; neither is ever NUL (topics are [A-Za-z0-9_%|-], puts
    refuse NUL in properties), so a NUL there is zeroed, unwritten bytes.
    """
    if props_len:
        last = end - 1
    elif topic_len:
        last = end - 3
    else:
        return None
    return "the record ends in zeroed bytes (a torn write)" if buf[last] == 0 else None


def read_total_size(buf: Buffer, pos: int) -> tuple[int, int]:
    """(TOTALSIZE, MAGIC) at pos, without decoding the rest."""
    total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    return total, magic


def read_physical_offset(buf: Buffer, pos: int) -> int:
    """PHYSICALOFFSET of the record at pos, without decoding the rest."""
    offset: int = _I64.unpack_from(buf, pos + PHYSICAL_OFFSET_POSITION)[0]
    return offset


def read_store_timestamp(buf: Buffer, pos: int) -> int:
    sys_flag: int = _I32.unpack_from(buf, pos + SYSFLAG_POSITION)[0]
    timestamp: int = _I64.unpack_from(buf, pos + store_timestamp_position(sys_flag))[0]
    return timestamp


class DispatchRequest(NamedTuple):
    """What dispatch needs from a record, read without building a StoredMessage."""

    topic: str
    queue_id: int
    commitlog_offset: int
    size: int
    tags_code: int
    store_timestamp: int
    queue_offset: int
    keys: str  # the raw KEYS property ("" when absent)
    uniq_key: str | None
    sys_flag: int


_DISPATCH_HEAD = struct.Struct(">iIiiiqqi")  # ... up to SYSFLAG


def decode_dispatch(
    buf: Buffer, pos: int, limit: int
) -> tuple[RecordKind, int, DispatchRequest | None, str]:
    """(kind, size, request, error) for the record at `pos`: the dispatch fast path (no
    body copy, no host decoding, no message object). Checks structure, not the CRC."""
    avail = limit - pos
    if avail < 8:
        return RecordKind.INVALID, -1, None, f"only {avail} bytes left, no record header"
    total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    if magic == BLANK_MAGIC_CODE:
        if total < 8 or total > avail:
            return RecordKind.INVALID, -1, None, f"BLANK filler with impossible size {total}"
        return RecordKind.BLANK, total, None, ""
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        return RecordKind.INVALID, -1, None, f"illegal magic code 0x{magic:08X}"
    if total < _HEAD.size + 16 + _TAIL.size or total > avail:
        return RecordKind.INVALID, -1, None, f"record size {total} does not fit the {avail} bytes left"
    _, _, _, queue_id, _, queue_offset, phys, sys_flag = _DISPATCH_HEAD.unpack_from(buf, pos)
    p = pos + _HEAD.size + (20 if sys_flag & BORNHOST_V6_FLAG else 8)
    store_ts = _I64.unpack_from(buf, p)[0]
    p += 8 + (20 if sys_flag & STOREHOST_V6_FLAG else 8) + 12
    end = pos + total
    body_len = _I32.unpack_from(buf, p)[0]
    p += 4 + body_len
    if body_len < 0 or p + 3 > end:
        return RecordKind.INVALID, -1, None, f"body length {body_len} runs past the record"
    if magic == MESSAGE_MAGIC_CODE:
        topic_len = buf[p] if buf[p] < 128 else -1
        p += 1
    else:
        topic_len = _I16.unpack_from(buf, p)[0]
        p += 2
    if topic_len < 0 or p + topic_len + 2 > end:
        return RecordKind.INVALID, -1, None, f"topic length {topic_len} runs past the record"
    try:
        topic = str(buf[p : p + topic_len], "utf-8")
        p += topic_len
        props_len = _I16.unpack_from(buf, p)[0]
        p += 2
        if props_len < 0 or p + props_len != end:
            return RecordKind.INVALID, -1, None, f"TOTALSIZE {total} differs from what its fields take"
        props = decode_properties(str(buf[p:end], "utf-8")) if props_len else {}
    except UnicodeDecodeError as e:
        return RecordKind.INVALID, -1, None, f"malformed record: {e}"
    tags = props.get(PROPERTY_TAGS)
    request = DispatchRequest(
        topic, queue_id, phys, total, tags_code(tags) if tags else 0, store_ts, queue_offset,
        props.get(PROPERTY_KEYS, ""), props.get(PROPERTY_UNIQ_KEY), sys_flag,
    )
    return RecordKind.MESSAGE, total, request, ""


# The compiled accelerator (store/_accel.pyx, see store/accel.py) replaces the decoders when
# it was built and TIDEMQ_PURE is not set; the pure functions stay as py_* (the reference).
py_decode_record, py_decode_dispatch = decode_record, decode_dispatch
py_prepare_record, py_record_parts, py_prepare_plain = prepare_record, record_parts, prepare_plain
py_place_records = place_records
if COMPILED is not None:
    COMPILED.bind(sys.modules[__name__])
    COMPILED.bind_encoder(sys.modules[__name__])
    decode_record, decode_dispatch = COMPILED.decode_record, COMPILED.decode_dispatch
    prepare_record, record_parts = COMPILED.prepare_record, COMPILED.record_parts
    COMPILED.bind_plain(sys.modules[__name__])
    COMPILED.bind_place(sys.modules[__name__])
    prepare_plain, place_records = COMPILED.prepare_plain, COMPILED.place_records

