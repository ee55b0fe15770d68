"""The protocol's wire rules, sans-IO: statuses, field types, the request envelope, the
parser that turns a decoded frame into a typed request, and response maps.

Frames (a 4-byte big-endian length, then one CBOR map) are `framing.py`'s. Requests are
`{"v": 1, "op": str, "id": int, ...fields}`; every request gets exactly one response
`{"id": ..., "status": str, ...}` with the same id. Each op's fields are an attrs class
(`requests.py`, `namesrv.py`) whose attributes are declared with `wire()`: the class is
the op's schema, `parse_request` validates a frame into it and `to_wire` builds the map
a client sends. No sockets or trio here (same style as h11/wsproto).
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar, cast

import attrs

from ..framing import type_name as _type_name

PROTOCOL_VERSION = 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
MAX_GROUP_LENGTH = 255  # RocketMQ Validators.CHARACTER_MAX_LENGTH
MAX_QUEUE_NUMS = 1024
CHECKED_LIMIT = 4096
"""How many remembered values a parser's `checked` set holds at most."""

__all__ = [
    "BOOL",
    "CHECKED_LIMIT",
    "BYTES",
    "DICT_STR_STR",
    "INT",
    "LIST_INT",
    "LIST_STR",
    "PROTOCOL_VERSION",
    "STR",
    "Field",
    "FieldType",
    "InvalidRequest",
    "Request",
    "Status",
    "WireRequest",
    "error_response",
    "ok_response",
    "parse_with",
    "schema_of",
    "wire",
    "wrong_type",
]


# Response statuses: the node's own plus the store's PutMessageStatus and GetMessageStatus
# names, spelled exactly as the store (RocketMQ 4.9) spells them. The wire carries the name.
# INDETERMINATE: a write this node stored but may no longer acknowledge (it was fenced, or
# its lease ran out, while the write waited): it may or may not survive the failover, so a
# client reports it as neither acknowledged nor failed. NO_PERMISSION: the node's settings
# forbid it (a consumer group whose consumption is disabled). TRANSACTION_ENDED: an
# end_transaction asking the other outcome than the one the transaction already has.
class Status(enum.Enum):
    """A response's status; each value is its name. Spelled out (not built from the store's
    enums) so a type checker sees the members; tests/wire/test_protocol.py holds it to
    the store's PutMessageStatus and GetMessageStatus."""

    OK = "OK"
    BAD_REQUEST = "BAD_REQUEST"
    NOT_FOUND = "NOT_FOUND"
    INTERNAL_ERROR = "INTERNAL_ERROR"
    INDETERMINATE = "INDETERMINATE"
    NO_PERMISSION = "NO_PERMISSION"
    TRANSACTION_ENDED = "TRANSACTION_ENDED"
    # PutMessageStatus
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPEDFILE_FAILED = "CREATE_MAPEDFILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    # GetMessageStatus
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


# ---------------------------------------------------------------- requests


class InvalidRequest(Exception):
    """A well-framed request that is not valid (raised by `parse_request` and schemas on
    the serving side); answered with BAD_REQUEST, which a client raises as
    wire.client.BadRequest. The connection stays usable. `request_id` is the frame's id
    when it had a usable one, else None."""

    def __init__(self, message: str, request_id: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.request_id = request_id


@attrs.frozen
class Request:
    """A validated request: its envelope and its op's typed fields (a WireRequest with
    every field present, defaults filled in).

    `reader`, set by a server that checks logins, says why the connection's account may not
    read a stored message (`reader(topic, properties)`, None when it may): an op that copies
    a stored message asks it before writing. `publisher(topic)` says why it may not publish
    to a topic the op learns only from a stored message (a transaction's END: the half
    message's real topic). None: no account checks on this server."""

    op: str
    id: int
    fields: Any
    reader: Callable[[str, Mapping[str, str]], str | None] | None = attrs.field(default=None, eq=False)
    publisher: Callable[[str], str | None] | None = attrs.field(default=None, eq=False)


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
    remember: bool = False
    """Values that passed `check` are remembered in the parser's `checked` set and not
    checked again (a send names the same few topics over and over)."""


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


def value_range(lo: int, hi: int) -> Callable[[int], str | None]:
    def check(v: int) -> str | None:
        if not lo <= v <= hi:
            return f"must be in {lo}..{hi}, got {v}"
        return None

    return check


INT64 = value_range(INT64_MIN, INT64_MAX)
NON_NEG64 = value_range(0, INT64_MAX)
QUEUE_ID_RANGE = value_range(0, INT32_MAX)
POSITIVE32 = value_range(1, INT32_MAX)
INT32 = value_range(-(2**31), INT32_MAX)


# ---------------------------------------------------------------- request classes

_REQUIRED = attrs.NOTHING


def wire(type_: FieldType, check: Callable[[Any], str | None] | None = None, *, default: Any = _REQUIRED,
         remember: bool = False) -> Any:
    """An attrs field that is also a wire field: its wire type, an optional value check
    (`check(value) -> problem | None`; integers default to the int64 range), its default
    when the request leaves it out (a list or map default is copied per request), and
    whether values that pass are remembered (`Field.remember`)."""
    if check is None and type_ is INT:
        check = INT64
    metadata = {"wire": type_, "check": check, "remember": remember}
    if default is _REQUIRED:
        return attrs.field(metadata=metadata)
    if type(default) in (list, dict):
        return attrs.field(metadata=metadata, factory=type(default), kw_only=True)
    return attrs.field(metadata=metadata, default=default, kw_only=True)


class WireRequest:
    """Base of the request classes: `OP` is the op name; the attrs fields declared with
    `wire()` are its schema (`schema_of`). `to_wire(id)` is the map a client sends: the
    required fields and every optional one that differs from its default."""

    __slots__ = ()
    OP: ClassVar[str]
    REPLY: ClassVar[type]
    """The reply class its OK answer reads as (replies.py)."""

    def to_wire(self, request_id: int) -> dict[str, Any]:
        out: dict[str, Any] = {"v": PROTOCOL_VERSION, "op": self.OP, "id": request_id}
        out.update(self.wire_fields())
        return out

    def wire_fields(self) -> dict[str, Any]:
        """The fields as the wire carries them (nested requests as maps), defaults left out."""
        out: dict[str, Any] = {}
        for field in schema_of(type(self)):
            value = getattr(self, field.name)
            if field.required or value != field.default:
                out[field.name] = [v.wire_fields() if isinstance(v, WireRequest) else v for v in value] \
                    if type(value) is list else value
        return out


W = TypeVar("W", bound=WireRequest)
_SCHEMAS: dict[type, tuple[Field, ...]] = {}
_FACTORY: type = attrs.Factory  # type: ignore[assignment]  # a class at run time, typed as a function


def schema_of(cls: type[WireRequest]) -> tuple[Field, ...]:
    """A request class's fields as the parser's Field tuple (worked out once per class)."""
    schema = _SCHEMAS.get(cls)
    if schema is None:
        fields = []
        for a in attrs.fields(cls):  # type: ignore[arg-type]  # request classes are attrs classes
            declared: Any = a.default
            required = declared is attrs.NOTHING
            default = None if required else (cast(Any, declared).factory() if isinstance(declared, _FACTORY)
                                              else declared)
            fields.append(Field(a.name, a.metadata["wire"], required, default, a.metadata["check"],
                                a.metadata.get("remember", False)))
        schema = _SCHEMAS[cls] = tuple(fields)
    return schema


_ENVELOPE = ("v", "op", "id")


@attrs.frozen
class _Compiled:
    """A schema worked out once (op tables are constants) rather than per request: the
    field names a map may hold, and per field what `_parse_fields` needs, unpacked."""

    schema: tuple[Field, ...]
    allowed: frozenset[str]
    fields: tuple[tuple[str, bool, Any, bool, Callable[[Any, str], Any], Callable[[Any], str | None] | None, bool],
                  ...]


_COMPILED: dict[tuple[int, bool], _Compiled] = {}


def _compiled(schema: tuple[Field, ...], top_level: bool) -> _Compiled:
    key = (id(schema), top_level)
    known = _COMPILED.get(key)
    if known is None or known.schema is not schema:  # the schema is kept, so its id stays its own
        names = frozenset({f.name for f in schema} | (set(_ENVELOPE) if top_level else set()))
        fields = tuple((f.name, f.required, f.default, type(f.default) in (list, dict), f.type.check, f.check,
                        f.remember) for f in schema)
        known = _COMPILED[key] = _Compiled(schema, names, fields)
    return known


def _parse_fields(
    frame: Mapping[Any, Any], schema: tuple[Field, ...], prefix: str, op: str, checked: set[str] | None = None
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
    for name, required, default, copy_default, type_check, value_check, remember in compiled.fields:
        if name not in frame:
            if required:
                raise InvalidRequest(f"missing field {prefix + name!r} for op {op!r}")
            out[name] = default.copy() if copy_default else default
            continue
        value = type_check(frame[name], prefix + name)
        if value_check is not None and not (remember and checked is not None and value in checked):
            problem = value_check(value)
            if problem:
                raise InvalidRequest(f"field {prefix + name!r} of op {op!r}: {problem}")
            if remember and checked is not None and len(checked) < CHECKED_LIMIT:
                checked.add(value)
        out[name] = value
    return out


def parse_fields(frame: Mapping[Any, Any], cls: type[W], prefix: str, op: str) -> W:
    """`frame`'s fields as a `cls` (nested maps such as a batch's messages use a prefix
    for their paths, "messages[0]."); InvalidRequest names what is wrong."""
    return cls(**_parse_fields(frame, schema_of(cls), prefix, op))


def parse_with(frame: Mapping[Any, Any], requests: Mapping[str, type[WireRequest]],
               checked: set[str] | None = None) -> Request:
    """Validate a decoded frame against its op's request class; InvalidRequest names what
    is wrong.

    `checked` is the caller's set of values that passed a `remember` field's check (the
    node's topics): each server keeps its own, and its compiled send codec decodes sends to
    those topics only (wire/send_codec.py). None: check every value.

    Unknown fields are refused (with the nearest valid name) rather than ignored, so a
    misspelt optional field such as `queueId` never silently falls back to its default.
    `requests` is the server's op table (op → class): the node's (`requests.NODE_REQUESTS`)
    or the name server's (`namesrv.NAMESRV_REQUESTS`), so both share the framing, envelope
    and field rules.
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
        cls = requests.get(op)
        if cls is None:
            close = difflib.get_close_matches(op, list(requests), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise InvalidRequest(f"unknown op {op!r}{hint}")
        fields = cls(**_parse_fields(frame, schema_of(cls), "", op, checked))
    except InvalidRequest as e:
        e.request_id = request_id
        raise
    return Request(op=op, id=request_id, fields=fields)


# ---------------------------------------------------------------- responses


def _status_name(status: Status | str) -> str:
    if isinstance(status, Status):
        return str(status.value)
    try:
        return str(Status(status).value)
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
