"""The remoting send fast path's reading of a request, sans-IO: the common SEND_MESSAGE /
SEND_MESSAGE_V2 (one message, not deflated, not transactional, no DELAY, a JSON header, to
a topic the server's schema already found valid) as the fields the node stores, or None
for the reference path (node/remoting/sends.py through the CBOR send's schema), which
answers everything else word for word.

`plain_send` reads a decoded command's extFields; it is the reference. The compiled reader
(wire/_remoting_codec.pyx, `read_plain_send`) reads a frame's JSON header bytes straight to
the same fields, without the RemotingCommand, and takes fewer: anything it is not sure of
is None and goes through `decode_payload` and the reference. tests/wire/
test_remoting_plain_send.py holds the two to each other; tests/remoting/test_fast_send.py
holds the fast path to the reference path, stored record and answer byte for byte.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, NamedTuple

from store.accel import forced_pure
from store.properties import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_TRAN_MSG,
    PROPERTY_WAIT,
    decode_properties,
)

from .codes import RequestCode
from .command import RemotingCommand, SerializeType, Splitter, decode_payload
from .headers import v1_names

__all__ = ["COMPILED", "RemotingSend", "plain_splitter", "plain_send", "read_plain_send", "reference_read_plain_send"]

_INT_FIELDS = ("queueId", "sysFlag", "bornTimestamp", "flag", "defaultTopicQueueNums", "reconsumeTimes")
_SPECIAL = (PROPERTY_TRAN_MSG, PROPERTY_DELAY)
"""Properties the reference treats specially (a half message refused, a delayed message
rewritten onto SCHEDULE_TOPIC_XXXX): their sends take the reference path."""
INT32_MAX = 2**31 - 1


class RemotingSend(NamedTuple):
    """A send as the fast path stores it: the fields the CBOR send would have, and what
    its answer (or, off the fast path, the reference) needs of the request."""

    code: int
    opaque: int
    oneway: bool
    topic: str
    queue_id: int
    flag: int
    born_timestamp: int | None
    tags: str | None
    keys: tuple[str, ...]
    properties: dict[str, str]
    wait: bool
    body: bytes
    header: bytes
    """The JSON header's bytes: `command()` decodes them when the send leaves the fast path."""

    @property
    def is_oneway(self) -> bool:
        return self.oneway

    def command(self) -> RemotingCommand:
        """The request as the reference decoder reads it."""
        cmd = decode_payload(len(self.header).to_bytes(4, "big") + self.header + self.body)
        assert isinstance(cmd, RemotingCommand)  # the fast path read this header
        return cmd


def _plain_number(value: str | None) -> bool:
    """Whether ext_int reads `value` as the same non-negative number int() does."""
    return value is not None and value.isdigit() and value.isascii() and len(value) <= 18


def plain_send(code: int, ext: Mapping[str, str] | None, body: bytes, checked_topics: set[str],
               ) -> tuple[str, int, int, int | None, str | None, tuple[str, ...], dict[str, str], bool] | None:
    """The fast path's reading of a send's extFields: (topic, queue id, flag, born
    timestamp, tags, keys, other properties, wait), or None for the reference path."""
    if ext is None or not body or (code != RequestCode.SEND_MESSAGE and code != RequestCode.SEND_MESSAGE_V2):
        return None
    if code == RequestCode.SEND_MESSAGE_V2:
        ext = v1_names(ext)
    topic = ext.get("topic")
    if topic not in checked_topics or ext.get("producerGroup") is None:
        return None
    for name in _INT_FIELDS:
        value = ext.get(name)
        if value is not None and not _plain_number(value):
            return None
    max_reconsume = ext.get("maxReconsumeTimes")
    if max_reconsume and not _plain_number(max_reconsume):
        return None
    batch = ext.get("batch")
    if batch is not None and (batch == "1" or batch.lower() == "true"):
        return None
    queue_id = ext.get("queueId")
    if queue_id is None or int(ext.get("sysFlag") or 0) & 1:  # required; a deflated body
        return None
    flag = int(ext.get("flag") or 0)
    q = int(queue_id)
    if flag > INT32_MAX or q > INT32_MAX:
        return None
    props = decode_properties(ext.get("properties") or "")
    for name in _SPECIAL:
        if name in props:
            return None
    wait = props.pop(PROPERTY_WAIT, "true").lower() != "false"
    tags = props.pop(PROPERTY_TAGS, None)
    keys = tuple(props.pop(PROPERTY_KEYS, "").split())
    for value in props.values():
        if "\x01" in value:  # the schema refuses it
            return None
    if (tags is not None and "\x01" in tags) or any("\x01" in k for k in keys):
        return None
    born = int(ext.get("bornTimestamp") or 0)
    assert topic is not None
    return topic, q, flag, born if born > 0 else None, tags, keys, props, wait


def reference_read_plain_send(payload: bytes, checked_topics: set[str]) -> RemotingSend | None:
    """A frame (without its length prefix) as a RemotingSend, through the reference decoder:
    what the compiled `read_plain_send` must give, or None."""
    cmd = decode_payload(payload)
    if (not isinstance(cmd, RemotingCommand) or cmd.serialize_type is not SerializeType.JSON
            or cmd.is_response):
        return None
    fields = plain_send(cmd.code, cmd.ext_fields, cmd.body, checked_topics)
    if fields is None:
        return None
    header_len = int.from_bytes(payload[:4], "big") & 0xFFFFFF
    return RemotingSend(cmd.code, cmd.opaque, cmd.is_oneway, *fields, cmd.body, bytes(payload[4:4 + header_len]))


def _load_compiled() -> Any:
    if forced_pure():
        return None
    try:
        compiled = importlib.import_module("wire._remoting_codec")
    except ImportError:  # built without a C compiler: the reference decoder and plain_send
        return None
    compiled.bind(RemotingSend)
    return compiled


COMPILED = _load_compiled()
"""wire._remoting_codec when it was built (and TIDEMQ_PURE is not set), else None."""


def read_plain_send(buf: bytes | bytearray, start: int, end: int, checked_topics: set[str]) -> RemotingSend | None:
    """The compiled reading of the frame in buf[start:end] (without its length prefix), or
    None: the frame is then decoded by `decode_payload` (and its send read by `plain_send`)."""
    if COMPILED is None:
        return None
    send: RemotingSend | None = COMPILED.read_plain_send(buf, start, end, checked_topics)
    return send


def plain_splitter(checked_topics: set[str]) -> Splitter | None:
    """CommandDecoder's `split` reading sends to `checked_topics` (a set the server keeps
    adding to), or None when the compiled reader is not built."""
    if COMPILED is None:
        return None
    split = COMPILED.split_frames

    def splitter(data: bytes | bytearray, max_frame_size: int) -> tuple[list[Any], int, int]:
        got: tuple[list[Any], int, int] = split(data, max_frame_size, checked_topics)
        return got
    return splitter
