"""The JSON and binary bodies of remoting requests and responses (RocketMQ's
RemotingSerializable classes and MessageDecoder's batch form), without I/O.

JSON bodies are written with quoted keys: fastjson's legacy form writes map keys such as
`brokerAddrs`'s broker ids unquoted, which the C++ client also accepts, but standard JSON
is what every client reads (4.9.8 sends it to clients of V4_9_4 and later).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

__all__ = ["BatchEntry", "BodyError", "decode_batch", "encode_batch", "json_body", "parse_json_body"]

_BATCH_HEAD = struct.Struct(">iiiii")  # totalSize, magic, bodyCRC, flag, bodyLen
_I16 = struct.Struct(">h")


class BodyError(ValueError):
    """A request body that cannot be read."""


def json_body(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def parse_json_body(body: bytes, what: str) -> dict[str, Any]:
    """A JSON object body; fastjson's unquoted numeric keys (`{0:"a"}`) are read too."""
    try:
        text = body.decode()
    except UnicodeDecodeError:
        raise BodyError(f"the {what} body is not UTF-8") from None
    try:
        value = _loads(text, what)
    except json.JSONDecodeError:
        try:
            value = _loads(_quote_numeric_keys(text), what)
        except json.JSONDecodeError as e:
            raise BodyError(f"the {what} body is not JSON: {e}") from None
    if type(value) is not dict:
        raise BodyError(f"the {what} body must be a JSON object")
    return value


def _loads(text: str, what: str) -> Any:
    """json.loads, with what else it raises on hostile input (nesting deeper than the parser
    goes, an integer of more than 4300 digits) as BodyError; JSONDecodeError passes."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except (RecursionError, ValueError) as e:
        raise BodyError(f"the {what} body cannot be read: {type(e).__name__}: {str(e)[:100]}") from None


def _quote_numeric_keys(text: str) -> str:
    """`{0:"a",1:"b"}` → `{"0":"a","1":"b"}`, outside strings."""
    out, i, in_string = [], 0, False
    while i < len(text):
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < len(text):
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif c in "{," and i + 1 < len(text):
            out.append(c)
            j = i + 1
            while j < len(text) and text[j] == " ":
                j += 1
            k = j
            while k < len(text) and (text[k].isdigit() or text[k] == "-"):
                k += 1
            if k > j and k < len(text) and text[k] == ":":
                out.append(f'"{text[j:k]}"')
                i = k
                continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


@attrs.frozen
class BatchEntry:
    """One message of a batch body: its flag, body and properties string."""

    flag: int
    body: bytes
    properties: str


def decode_batch(body: bytes) -> list[BatchEntry]:
    """MessageDecoder's batch form: each message `totalSize | magic | bodyCRC | flag |
    bodyLen | body | propLen(int16) | props`, concatenated."""
    out: list[BatchEntry] = []
    pos = 0
    while pos < len(body):
        if len(body) - pos < _BATCH_HEAD.size:
            raise BodyError(f"batch message {len(out)} is cut short at byte {pos}")
        total, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(body, pos)
        start = pos + _BATCH_HEAD.size
        if body_len < 0 or total < _BATCH_HEAD.size + body_len + 2 or pos + total > len(body):
            raise BodyError(f"batch message {len(out)} has a bad size (total {total}, body {body_len})")
        (prop_len,) = _I16.unpack_from(body, start + body_len)
        props_at = start + body_len + 2
        if prop_len < 0 or props_at + prop_len > pos + total:
            raise BodyError(f"batch message {len(out)} has a bad properties length {prop_len}")
        try:
            props = body[props_at:props_at + prop_len].decode()
        except UnicodeDecodeError:
            raise BodyError(f"batch message {len(out)}'s properties are not UTF-8") from None
        out.append(BatchEntry(flag, body[start:start + body_len], props))
        pos += total
    if not out:
        raise BodyError("the batch holds no message")
    return out


def encode_batch(entries: Sequence[BatchEntry]) -> bytes:
    """The batch body a Java or C++ producer sends (for tests and lean drivers)."""
    parts = []
    for e in entries:
        props = e.properties.encode()
        total = _BATCH_HEAD.size + len(e.body) + 2 + len(props)
        parts.append(_BATCH_HEAD.pack(total, 0, 0, e.flag, len(e.body)) + e.body + _I16.pack(len(props)) + props)
    return b"".join(parts)


def route_body(brokers: Iterable[Mapping[str, Any]], queues: Iterable[Mapping[str, Any]]) -> bytes:
    """TopicRouteData: `brokerDatas` ({brokerName, cluster, brokerAddrs {id: address}}) and
    `queueDatas` ({brokerName, perm, readQueueNums, writeQueueNums, topicSysFlag})."""
    return json_body({"brokerDatas": list(brokers), "filterServerTable": {}, "queueDatas": list(queues)})
