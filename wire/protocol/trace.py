"""RocketMQ's message trace format (client/trace/TraceDataEncoder), sans-IO.

A trace message's body is UTF-8 text: records, each ended by FIELD_SPLITOR (char 2), whose
fields are joined by CONTENT_SPLITOR (char 1). The first field names the record's type.
Written the way RocketMQ's clients write it, so a trace a RocketMQ client stored in
RMQ_SYS_TRACE_TOPIC reads here and ours read there (docs/trace.md):

    Pub            timestamp region group topic msgId tags keys storeHost bodyLength cost
                   msgType offsetMsgId success [clientHost]
    SubBefore      timestamp region group requestId msgId retryTimes keys
    SubAfter       requestId msgId cost success keys contextCode [timestamp group]
    EndTransaction timestamp region group topic msgId tags keys storeHost msgType
                   transactionId transactionState fromTransactionCheck
    Recall         timestamp region group topic msgId success

Keys inside a field are separated by a space (MessageConst.KEY_SEPARATOR). A trace
message's own KEYS are the traced msgIds and their keys, so a query by key finds it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence

import attrs

__all__ = [
    "CONTENT_SPLITOR",
    "DEFAULT_REGION",
    "FIELD_SPLITOR",
    "TRACE_TOPIC",
    "ConsumeReturn",
    "EndTransactionTrace",
    "MessageType",
    "PubTrace",
    "RecallTrace",
    "SubAfterTrace",
    "SubBeforeTrace",
    "TraceFormatError",
    "TraceRecord",
    "decode_traces",
    "encode_trace",
    "encode_traces",
    "trace_keys",
]

CONTENT_SPLITOR = "\x01"
FIELD_SPLITOR = "\x02"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
"""RocketMQ's default trace topic (TopicValidator.RMQ_SYS_TRACE_TOPIC)."""
DEFAULT_REGION = "DefaultRegion"
"""What a RocketMQ broker answers as its regionId unless configured."""


class TraceFormatError(ValueError):
    """A trace body that is not in RocketMQ's trace format (which record, and why)."""


class MessageType(enum.IntEnum):
    """RocketMQ's MessageType; its ordinal is what a trace holds."""

    NORMAL = 0
    TRANS_HALF = 1
    TRANS_COMMIT = 2
    DELAY = 3
    ORDER = 4


class ConsumeReturn(enum.IntEnum):
    """RocketMQ's ConsumeReturnType; its ordinal is a SubAfter's contextCode."""

    SUCCESS = 0
    TIME_OUT = 1
    EXCEPTION = 2
    RETURNNULL = 3
    FAILED = 4


@attrs.frozen
class PubTrace:
    """One send: who (producer group), where it was stored, how long it took."""

    timestamp: int
    region_id: str
    group: str
    topic: str
    msg_id: str
    tags: str
    keys: str
    store_host: str
    body_length: int
    cost_ms: int
    msg_type: MessageType
    offset_msg_id: str
    success: bool
    client_host: str | None = None  # old clients' 15th field; current ones leave it out

    TYPE = "Pub"


@attrs.frozen
class SubBeforeTrace:
    """A consumer group is about to hand the message to its listener."""

    timestamp: int
    region_id: str
    group: str
    request_id: str
    msg_id: str
    retry_times: int
    keys: str

    TYPE = "SubBefore"


@attrs.frozen
class SubAfterTrace:
    """The listener returned: `request_id` pairs it with its SubBefore. `timestamp` and
    `group` are absent in the cloud channel's (and old clients') records."""

    request_id: str
    msg_id: str
    cost_ms: int
    success: bool
    keys: str
    context_code: int = ConsumeReturn.SUCCESS
    timestamp: int | None = None
    group: str | None = None

    TYPE = "SubAfter"


@attrs.frozen
class EndTransactionTrace:
    """A transactional producer ended (or was checked about) a half message."""

    timestamp: int
    region_id: str
    group: str
    topic: str
    msg_id: str
    tags: str
    keys: str
    store_host: str
    msg_type: MessageType
    transaction_id: str
    transaction_state: str  # COMMIT_MESSAGE | ROLLBACK_MESSAGE | UNKNOW
    from_transaction_check: bool

    TYPE = "EndTransaction"


@attrs.frozen
class RecallTrace:
    timestamp: int
    region_id: str
    group: str
    topic: str
    msg_id: str
    success: bool

    TYPE = "Recall"


TraceRecord = PubTrace | SubBeforeTrace | SubAfterTrace | EndTransactionTrace | RecallTrace


def _fields(record: TraceRecord) -> list[str]:
    r = record
    if isinstance(r, PubTrace):
        out = [str(r.timestamp), r.region_id, r.group, r.topic, r.msg_id, r.tags, r.keys, r.store_host,
               str(r.body_length), str(r.cost_ms), str(int(r.msg_type)), r.offset_msg_id, _bool(r.success)]
        return out + ([r.client_host] if r.client_host is not None else [])
    if isinstance(r, SubBeforeTrace):
        return [str(r.timestamp), r.region_id, r.group, r.request_id, r.msg_id, str(r.retry_times), r.keys]
    if isinstance(r, SubAfterTrace):
        out = [r.request_id, r.msg_id, str(r.cost_ms), _bool(r.success), r.keys, str(r.context_code)]
        if r.timestamp is None and r.group is None:
            return out + [""]  # the cloud channel's: a CONTENT_SPLITOR right before the record's end
        if r.timestamp is None or r.group is None:
            raise ValueError("a SubAfter trace has both timestamp and group, or neither")
        return out + [str(r.timestamp), r.group]
    if isinstance(r, EndTransactionTrace):
        return [str(r.timestamp), r.region_id, r.group, r.topic, r.msg_id, r.tags, r.keys, r.store_host,
                str(int(r.msg_type)), r.transaction_id, r.transaction_state, _bool(r.from_transaction_check)]
    return [str(r.timestamp), r.region_id, r.group, r.topic, r.msg_id, _bool(r.success)]


def encode_trace(record: TraceRecord) -> str:
    """One record as RocketMQ's encoder writes it, FIELD_SPLITOR included. A field holding
    a splitter character cannot be written (it would change the record): ValueError."""
    fields = [record.TYPE, *_fields(record)]
    for f in fields:
        if CONTENT_SPLITOR in f or FIELD_SPLITOR in f:
            raise ValueError(f"{record.TYPE} trace field {f!r} holds a trace splitter character (\\x01 or \\x02)")
    return CONTENT_SPLITOR.join(fields) + FIELD_SPLITOR


def encode_traces(records: Iterable[TraceRecord]) -> bytes:
    """A trace message's body: the records one after another, UTF-8."""
    return "".join(encode_trace(r) for r in records).encode("utf-8")


def trace_keys(record: TraceRecord) -> list[str]:
    """The KEYS a trace message carries for this record: its msgId, then its keys."""
    return [record.msg_id, *(k for k in _keys_of(record).split(" ") if k)]


def _keys_of(record: TraceRecord) -> str:
    return "" if isinstance(record, RecallTrace) else record.keys


def decode_traces(data: bytes | str) -> list[TraceRecord]:
    """Every record of a trace message's body. Unknown record types are skipped (as
    RocketMQ's decoder skips them); a known one with missing or malformed fields raises
    TraceFormatError naming it."""
    if isinstance(data, bytes | bytearray | memoryview):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise TraceFormatError(f"a trace body is UTF-8 text: {e}") from None
    else:
        text = data
    out: list[TraceRecord] = []
    for n, chunk in enumerate(_java_split(text, FIELD_SPLITOR)):
        line = _java_split(chunk, CONTENT_SPLITOR)
        try:
            record = _decode_line(line)
        except (IndexError, ValueError) as e:
            shown = chunk.replace(CONTENT_SPLITOR, "|")
            raise TraceFormatError(f"trace record {n} ({shown[:120]!r}) is malformed: {e}") from None
        if record is not None:
            out.append(record)
    return out


def _decode_line(line: Sequence[str]) -> TraceRecord | None:
    kind = line[0]
    if kind == PubTrace.TYPE:
        offset_msg_id, success, client_host = "", "true", None
        if len(line) == 13:
            success = line[12]
        elif len(line) >= 14:
            offset_msg_id, success = line[12], line[13]
            if len(line) >= 15:
                client_host = line[14]
        else:
            raise IndexError(f"a Pub record has 13 to 15 fields, this one {len(line)}")
        return PubTrace(timestamp=int(line[1]), region_id=line[2], group=line[3], topic=line[4], msg_id=line[5],
                        tags=line[6], keys=line[7], store_host=line[8], body_length=int(line[9]),
                        cost_ms=int(line[10]), msg_type=MessageType(int(line[11])), offset_msg_id=offset_msg_id,
                        success=_parse_bool(success), client_host=client_host)
    if kind == SubBeforeTrace.TYPE:
        return SubBeforeTrace(timestamp=int(line[1]), region_id=line[2], group=line[3], request_id=line[4],
                              msg_id=line[5], retry_times=int(line[6]), keys=_at(line, 7))
    if kind == SubAfterTrace.TYPE:
        code = int(line[6]) if len(line) >= 7 else ConsumeReturn.SUCCESS
        # an empty group, last, is dropped by the split: a timestamp alone means group ""
        timestamp, group = (int(line[7]), _at(line, 8)) if len(line) >= 8 else (None, None)
        return SubAfterTrace(request_id=line[1], msg_id=line[2], cost_ms=int(line[3]),
                             success=_parse_bool(line[4]), keys=_at(line, 5), context_code=code,
                             timestamp=timestamp, group=group)
    if kind == EndTransactionTrace.TYPE:
        return EndTransactionTrace(timestamp=int(line[1]), region_id=line[2], group=line[3], topic=line[4],
                                   msg_id=line[5], tags=line[6], keys=line[7], store_host=line[8],
                                   msg_type=MessageType(int(line[9])), transaction_id=line[10],
                                   transaction_state=line[11], from_transaction_check=_parse_bool(line[12]))
    if kind == RecallTrace.TYPE:
        return RecallTrace(timestamp=int(line[1]), region_id=line[2], group=line[3], topic=line[4],
                           msg_id=line[5], success=_parse_bool(line[6]))
    return None


def _java_split(text: str, sep: str) -> list[str]:
    """Java's String.split: trailing empty strings are dropped (an empty text gives none)."""
    parts = text.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def _at(line: Sequence[str], i: int) -> str:
    """A last field Java's split dropped because it was empty."""
    return line[i] if i < len(line) else ""


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _parse_bool(text: str) -> bool:
    """Java's Boolean.parseBoolean: "true" in any case, anything else false."""
    return text.lower() == "true"
