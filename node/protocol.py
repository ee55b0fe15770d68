"""The client protocol, sans-IO: bytes in, request objects out; dicts in, bytes out.

Frames (a 4-byte big-endian length, then one CBOR map) are `framing.py`'s. Requests are `{"v": 1, "op": str, "id": int, ...fields}`; every request gets exactly one
response `{"id": ..., "status": str, ...}` with the same id. No sockets or trio here (same
style as h11/wsproto), so the codec is tested without I/O and reused by the client library
and tools. docs/protocol.md is the reference for ops and fields.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from store.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_WAIT,
    decode_msg_id,
    topic_error,
)
from store.status import GetMessageStatus, PutMessageStatus
from store.tag_filter import parse_tag_expression

from .framing import type_name as _type_name

PROTOCOL_VERSION = 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
MAX_GROUP_LENGTH = 255  # RocketMQ Validators.CHARACTER_MAX_LENGTH
MAX_QUEUE_NUMS = 1024

__all__ = [
    "BOOL",
    "FIELD_TYPES",
    "INT",
    "OPS",
    "STR",
    "PROTOCOL_VERSION",
    "InvalidRequest",
    "Field",
    "FieldType",
    "Request",
    "Status",
    "error_response",
    "ok_response",
    "parse_request",
    "parse_tag_filter",
    "wrong_type",
]


# Response statuses: the node's own plus the store's PutMessageStatus and GetMessageStatus
# names, spelled exactly as the store (RocketMQ 4.9) spells them. The wire carries the name.
# INDETERMINATE: a write this node stored but may no longer acknowledge (it was fenced, or
# its lease ran out, while the write waited): it may or may not survive the failover, so a
# client reports it as neither acknowledged nor failed.
Status = enum.Enum(
    "Status",
    [(n, n) for n in ("OK", "BAD_REQUEST", "NOT_FOUND", "INTERNAL_ERROR", "INDETERMINATE")]
    + [(m.name, m.value) for m in PutMessageStatus]
    + [(m.name, m.value) for m in GetMessageStatus],
    module=__name__,
)


# ---------------------------------------------------------------- requests


class InvalidRequest(Exception):
    """A well-framed request that is not valid (raised by `parse_request` and schemas on
    the serving side); answered with BAD_REQUEST, which a client raises as
    node.client.BadRequest. The connection stays usable. `request_id` is the frame's id
    when it had a usable one, else None."""

    def __init__(self, message: str, request_id: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.request_id = request_id


@attrs.frozen
class Request:
    """A validated request: every field of the op present (defaults filled in), typed."""

    op: str
    id: int
    fields: dict[str, Any]


@attrs.frozen
class FieldType:
    """A wire type: `check(value, path)` returns the value or raises InvalidRequest."""

    name: str
    check: Callable[[Any, str], Any]


@attrs.frozen
class Field:
    """One request field: its type, whether it is required, the default when it is not,
    and optional extra value checks (`check(value) -> problem | None`)."""

    name: str
    type: FieldType
    required: bool = True
    default: Any = None
    check: Callable[[Any], str | None] | None = None


def wrong_type(path: str, expected: str, value: Any) -> InvalidRequest:
    """The InvalidRequest for a field of the wrong wire type (for schemas built elsewhere)."""
    return InvalidRequest(f"field {path!r} must be {expected}, got {_type_name(value)}")


_wrong_type = wrong_type


def _simple(name: str, *types: type) -> FieldType:
    def check(value: Any, path: str) -> Any:
        # bool is an int subclass in Python, but never a valid int on the wire
        if type(value) not in types:
            raise _wrong_type(path, name, value)
        return value

    return FieldType(name, check)


STR = _simple("a text string", str)
BYTES = _simple("a byte string", bytes)
INT = _simple("an integer", int)
BOOL = _simple("a boolean", bool)


def _list_of(item_type: type, name: str, item_name: str) -> FieldType:
    def check(value: Any, path: str) -> list[Any]:
        if type(value) is not list:
            raise _wrong_type(path, name, value)
        for i, item in enumerate(value):
            if type(item) is not item_type:
                raise _wrong_type(f"{path}[{i}]", item_name, item)
        return list(value)

    return FieldType(name, check)


def _check_dict_str(value: Any, path: str) -> dict[str, str]:
    if type(value) is not dict:
        raise _wrong_type(path, "a map of text strings to text strings", value)
    for k, v in value.items():
        if type(k) is not str:
            raise _wrong_type(f"{path} key {k!r}", "a text string", k)
        if type(v) is not str:
            raise _wrong_type(f"{path}[{k!r}]", "a text string", v)
    return dict(value)


LIST_STR = _list_of(str, "an array of text strings", "a text string")
LIST_INT = _list_of(int, "an array of integers", "an integer")
DICT_STR_STR = FieldType("a map of text strings to text strings", _check_dict_str)


# value checks (return a problem or None)


def _range(lo: int, hi: int) -> Callable[[int], str | None]:
    def check(v: int) -> str | None:
        if not lo <= v <= hi:
            return f"must be in {lo}..{hi}, got {v}"
        return None

    return check


_INT64 = _range(INT64_MIN, INT64_MAX)
_NON_NEG64 = _range(0, INT64_MAX)
_QUEUE_ID = _range(0, INT32_MAX)
_POSITIVE32 = _range(1, INT32_MAX)
_INT32 = _range(-(2**31), INT32_MAX)


_GOOD_TOPICS: set[str] = set()
"""Topics that passed the check (a send names the same few topics over and over)."""


def _topic(v: str) -> str | None:
    if v in _GOOD_TOPICS:
        return None
    problem = topic_error(v)
    if problem is None and len(_GOOD_TOPICS) < 4096:
        _GOOD_TOPICS.add(v)
    return problem


def _group(v: str) -> str | None:
    problem = topic_error(v[:127])  # same character set as a topic
    if problem:
        return problem.replace("topic", "group")
    if len(v) > MAX_GROUP_LENGTH:
        return f"group is {len(v)} characters long; the limit is {MAX_GROUP_LENGTH}"
    return None


def _body(v: bytes) -> str | None:
    return "message body is empty; an empty body is not sent" if not v else None


def _tags(v: str) -> str | None:
    if not v:
        return "must not be empty (omit the field for no tag)"
    if NAME_VALUE_SEPARATOR in v or PROPERTY_SEPARATOR in v:
        return "must not contain the characters \\x01 or \\x02"
    return None


def _keys(v: list[str]) -> str | None:
    for k in v:
        if not k or " " in k:
            return f"each key must be non-empty and without spaces (keys are stored space-separated), got {k!r}"
        if NAME_VALUE_SEPARATOR in k or PROPERTY_SEPARATOR in k:
            return f"key {k!r} contains \\x01 or \\x02"
    return None


_DEDICATED = {PROPERTY_TAGS: "tags", PROPERTY_KEYS: "keys", PROPERTY_WAIT: "wait"}


def _properties(v: dict[str, str]) -> str | None:
    for name, value in v.items():
        if name in _DEDICATED:
            return f"property {name!r} is set through the field {_DEDICATED[name]!r}"
        if not name or not value:
            return f"property names and values must be non-empty, got {name!r}={value!r}"
        for s in (name, value):
            if NAME_VALUE_SEPARATOR in s or PROPERTY_SEPARATOR in s:
                return f"property {name!r} contains \\x01 or \\x02"
    return None


def _msg_id(v: str) -> str | None:
    try:
        decode_msg_id(v)
    except ValueError as e:
        return str(e)
    return None


def _perm(v: int) -> str | None:
    return None if 0 <= v <= 7 else f"must be READ(4) | WRITE(2) | INHERIT(1), 0..7, got {v}"


def _non_empty(v: str) -> str | None:
    return None if v else "must not be empty"


parse_tag_filter = parse_tag_expression
"""RocketMQ subscription expression → the set of tags, or None for "all" ("*" or ""): the
store's parser (store/tag_filter.py), so a request is checked exactly as the pull reads it."""


def _client_id(v: str) -> str | None:
    if not v or len(v) > MAX_GROUP_LENGTH:
        return f"must be 1..{MAX_GROUP_LENGTH} characters, got {len(v)}"
    if any(c.isspace() or not c.isprintable() for c in v):
        return "must not contain spaces or control characters"
    return None


def _queue_ids(v: list[int]) -> str | None:
    if len(v) > MAX_QUEUE_NUMS or any(not 0 <= q <= INT32_MAX for q in v):
        return f"must hold at most {MAX_QUEUE_NUMS} queue ids in 0..{INT32_MAX}"
    return None


def _topics(v: list[str]) -> str | None:
    for t in v:
        problem = topic_error(t)
        if problem:
            return problem
    return None


def _tag_filter(v: str) -> str | None:
    try:
        parse_tag_filter(v)
    except ValueError as e:
        return str(e)
    return None


def _master_role(v: str) -> str | None:
    return None if v in ("SYNC_MASTER", "ASYNC_MASTER") else f"must be SYNC_MASTER or ASYNC_MASTER, got {v!r}"


def _f(name: str, type_: FieldType, check: Callable[[Any], str | None] | None = None) -> Field:
    if check is None and type_ is INT:
        check = _INT64
    return Field(name, type_, True, None, check)


def _opt(
    name: str, type_: FieldType, default: Any, check: Callable[[Any], str | None] | None = None
) -> Field:
    if check is None and type_ is INT:
        check = _INT64
    return Field(name, type_, False, default, check)


TOPIC = _f("topic", STR, _topic)
QUEUE_ID = _f("queue_id", INT, _QUEUE_ID)
GROUP = _f("group", STR, _group)

BODY = _f("body", BYTES, _body)
TAGS = _opt("tags", STR, None, _tags)
KEYS = _opt("keys", LIST_STR, [], _keys)
PROPERTIES = _opt("properties", DICT_STR_STR, {}, _properties)
FLAG = _opt("flag", INT, 0, _INT32)
WAIT = _opt("wait", BOOL, True)
OPT_QUEUE_ID = _opt("queue_id", INT, None, _QUEUE_ID)
_MESSAGE_FIELDS: tuple[Field, ...] = (BODY, TAGS, KEYS, PROPERTIES, FLAG)


def _check_messages(value: Any, path: str) -> list[dict[str, Any]]:
    if type(value) is not list:
        raise _wrong_type(path, "an array of maps", value)
    if not value:
        raise InvalidRequest(f"field {path!r} must hold at least one message")
    out = []
    for i, item in enumerate(value):
        if type(item) is not dict:
            raise _wrong_type(f"{path}[{i}]", "a map", item)
        parsed = _plain_message(item)
        out.append(parsed if parsed is not None else _parse_fields(item, _MESSAGE_FIELDS, f"{path}[{i}].", "send_batch"))
    return out


_MESSAGE_NAMES = frozenset(f.name for f in _MESSAGE_FIELDS)


def _plain_message(item: dict) -> dict[str, Any] | None:
    """A batch message of a body and optional tags (the common case), as `_parse_fields`
    would return it; None for anything else: the schema path then checks it and names any
    problem. A batch of 32 spent most of its parsing walking the schema per message."""
    if len(item) > 2 or not _MESSAGE_NAMES.issuperset(item):
        return None
    body = item.get("body")
    if type(body) is not bytes or not body:
        return None
    tags = item.get("tags")
    if tags is None:
        if len(item) == 2:  # the other field is not tags (or tags is null): the schema path
            return None
    elif type(tags) is not str or _tags(tags):
        return None
    return {"body": body, "tags": tags, "keys": [], "properties": {}, "flag": 0}


MESSAGES = FieldType("an array of maps", _check_messages)

OPS: dict[str, tuple[Field, ...]] = {
    "send": (
        TOPIC,
        BODY,
        OPT_QUEUE_ID,
        TAGS,
        KEYS,
        PROPERTIES,
        FLAG,
        _opt("born_timestamp", INT, None, _NON_NEG64),
        WAIT,
    ),
    "send_batch": (TOPIC, _f("messages", MESSAGES), OPT_QUEUE_ID, WAIT),
    "pull": (
        TOPIC,
        QUEUE_ID,
        _f("offset", INT, _NON_NEG64),
        _opt("max_msgs", INT, 32, _POSITIVE32),
        _opt("tag_filter", STR, "*", _tag_filter),
        _opt("timeout_ms", INT, 0, _range(0, INT32_MAX)),
        _opt("group", STR, None, _group),
    ),
    "query_by_key": (
        TOPIC,
        _f("key", STR, _non_empty),
        _opt("max_num", INT, 32, _POSITIVE32),
        _opt("begin_ts", INT, 0, _NON_NEG64),
        _opt("end_ts", INT, INT64_MAX, _NON_NEG64),
    ),
    "get_by_msg_id": (_f("msg_id", STR, _msg_id),),
    "offset_by_time": (TOPIC, QUEUE_ID, _f("timestamp", INT)),
    "min_offset": (TOPIC, QUEUE_ID),
    "max_offset": (TOPIC, QUEUE_ID),
    "commit_offset": (GROUP, TOPIC, QUEUE_ID, _f("offset", INT, _NON_NEG64)),
    "fetch_offset": (GROUP, TOPIC, QUEUE_ID),
    "offset_list": (),
    "topic_create": (
        TOPIC,
        _opt("read_queue_nums", INT, 4, _range(1, MAX_QUEUE_NUMS)),
        _opt("write_queue_nums", INT, 4, _range(1, MAX_QUEUE_NUMS)),
        _opt("perm", INT, 6, _perm),
    ),
    "topic_list": (),
    "consumer_heartbeat": (
        GROUP,
        _f("client_id", STR, _client_id),
        _opt("topics", LIST_STR, [], _topics),
        _opt("heartbeat_interval_ms", INT, 30_000, _range(1, 3_600_000)),
    ),
    "consumer_watch": (
        GROUP,
        _opt("since", INT, -1, _range(-1, 2**62)),
        _opt("timeout_ms", INT, 30_000, _range(0, 600_000)),
    ),
    "consumer_unregister": (GROUP, _f("client_id", STR, _client_id)),
    "consumer_list": (GROUP,),
    "consumer_lock": (GROUP, _f("client_id", STR, _client_id), TOPIC, _f("queue_ids", LIST_INT, _queue_ids)),
    "consumer_unlock": (GROUP, _f("client_id", STR, _client_id), TOPIC, _f("queue_ids", LIST_INT, _queue_ids)),
    "consumer_send_back": (
        GROUP,
        _f("commitlog_offset", INT, _NON_NEG64),
        _opt("delay_level", INT, 0, _range(-1, 1000)),
        _opt("max_reconsume_times", INT, 16, _range(0, 10_000)),
        _opt("origin_msg_id", STR, None, _non_empty),
    ),
    "status": (),
    "admin.delete_expired_files": (),
    "epoch": (),
    "promote": (_opt("role", STR, None, _master_role),),
}

# Every scalar/compound wire type a field can have, for docs and tests.
FIELD_TYPES = (STR, BYTES, INT, BOOL, LIST_STR, LIST_INT, DICT_STR_STR, MESSAGES)
_ENVELOPE = ("v", "op", "id")


@attrs.frozen
class _Compiled:
    """A schema worked out once (op tables are constants) rather than per request: the
    field names a map may hold, and per field what `_parse_fields` needs, unpacked."""

    schema: tuple[Field, ...]
    allowed: frozenset[str]
    fields: tuple[tuple[str, bool, Any, bool, Callable[[Any, str], Any], Callable[[Any], str | None] | None], ...]


_COMPILED: dict[tuple[int, bool], _Compiled] = {}


def _compiled(schema: tuple[Field, ...], top_level: bool) -> _Compiled:
    key = (id(schema), top_level)
    known = _COMPILED.get(key)
    if known is None or known.schema is not schema:  # the schema is kept, so its id stays its own
        names = frozenset({f.name for f in schema} | (set(_ENVELOPE) if top_level else set()))
        fields = tuple((f.name, f.required, f.default, type(f.default) in (list, dict), f.type.check, f.check)
                       for f in schema)
        known = _COMPILED[key] = _Compiled(schema, names, fields)
    return known


def _parse_fields(
    frame: Mapping[Any, Any], schema: tuple[Field, ...], prefix: str, op: str
) -> dict[str, Any]:
    compiled = _compiled(schema, not prefix)
    allowed = compiled.allowed
    if not allowed.issuperset(frame):
        names = sorted(f.name for f in schema)
        for key in frame:
            if key in allowed:
                continue
            close = difflib.get_close_matches(str(key), names, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise InvalidRequest(f"unknown field {prefix + str(key)!r} for op {op!r}{hint}")
    out: dict[str, Any] = {}
    for name, required, default, copy_default, type_check, value_check in compiled.fields:
        if name not in frame:
            if required:
                raise InvalidRequest(f"missing field {prefix + name!r} for op {op!r}")
            out[name] = default.copy() if copy_default else default
            continue
        value = type_check(frame[name], prefix + name)
        if value_check is not None:
            problem = value_check(value)
            if problem:
                raise InvalidRequest(f"field {prefix + name!r} of op {op!r}: {problem}")
        out[name] = value
    return out


def parse_request(frame: Mapping[Any, Any], ops: Mapping[str, tuple[Field, ...]] = OPS) -> Request:
    """Validate a decoded frame against its op's schema; InvalidRequest names what is wrong.

    Unknown fields are refused (with the nearest valid name) rather than ignored, so a
    misspelt optional field such as `queueId` never silently falls back to its default.
    `ops` is the server's op table: the node's `OPS` by default; the name server passes its
    own (cluster/namesrv/server.py), so both share the framing, envelope and field rules.
    """
    raw_id = frame.get("id")
    request_id = raw_id if type(raw_id) is int and INT64_MIN <= raw_id <= INT64_MAX else None
    try:
        if "v" not in frame:
            raise InvalidRequest("missing field 'v' (protocol version)")
        if type(frame["v"]) is not int or frame["v"] != PROTOCOL_VERSION:
            raise InvalidRequest(
                f"unsupported protocol version {frame['v']!r}; this node speaks v {PROTOCOL_VERSION}"
            )
        if "id" not in frame:
            raise InvalidRequest("missing field 'id'")
        if request_id is None:
            raise InvalidRequest(f"field 'id' must be a 64-bit integer, got {_type_name(raw_id)}")
        if "op" not in frame:
            raise InvalidRequest("missing field 'op'")
        op = frame["op"]
        if type(op) is not str:
            raise _wrong_type("op", "a text string", op)
        if op not in ops:
            close = difflib.get_close_matches(op, list(ops), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise InvalidRequest(f"unknown op {op!r}{hint}")
        fields = _parse_fields(frame, ops[op], "", op)
    except InvalidRequest as e:
        e.request_id = request_id
        raise
    return Request(op=op, id=request_id, fields=fields)


# ---------------------------------------------------------------- responses


def _status_name(status: Status | str) -> str:
    if isinstance(status, Status):
        return status.value
    try:
        return Status(status).value
    except ValueError:
        raise ValueError(f"unknown response status {status!r}") from None


def ok_response(id: int, status: Status | str = Status.OK, **fields: Any) -> dict[str, Any]:
    """A success response map; `status` defaults to OK (send uses PUT_OK, pull FOUND, ...)."""
    for reserved in ("id", "error"):
        if reserved in fields:
            raise ValueError(f"{reserved!r} is not a response field of ok_response")
    return {"id": id, "status": _status_name(status), **fields}


def error_response(id: int | None, status: Status | str, error: str) -> dict[str, Any]:
    """A failure response: status name + human-readable `error`. `id` is None only when the
    request had no usable id."""
    return {"id": id, "status": _status_name(status), "error": error}
