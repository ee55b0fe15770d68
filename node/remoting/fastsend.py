"""The remoting send fast path: the common SEND_MESSAGE / SEND_MESSAGE_V2 (one message, not
compressed, not transactional, no DELAY, a JSON header, to a topic this server's schema
already found valid) read straight from its extFields into a record with its properties
(store.record_codec.prepare_plain, compiled), and answered from a template
(wire/remoting/send_reply.py): no SendHeader, no CBOR op map, no schema parse, no Message,
no RemotingCommand for the answer.

`plain_send` takes only what the reference path (sends.py through the CBOR send's schema
and handler) would store the same way, and is stricter where that is cheaper: anything else
(a field it does not read as plain digits, a property the reference treats specially, a
topic not yet checked, a queue out of range, a refusal) is None, and the reference path
answers it word for word. tests/remoting/test_fast_send.py sends the same frames both ways
and compares the stored records and the answers byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from store.properties import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_TRAN_MSG,
    PROPERTY_WAIT,
    decode_properties,
)
from wire.remoting.codes import RequestCode
from wire.remoting.command import RemotingCommand, SerializeType
from wire.remoting.headers import v1_names
from wire.remoting.send_reply import send_reply_frame

from ..ops.puts import prepare_plain_send
from .answers import response_code
from .channel import GroupedSend, ProcessorContext, RemotingChannel

__all__ = ["FastSend", "fast_send", "plain_send"]

REGION_ID = "DefaultRegion"
_INT_FIELDS = ("queueId", "sysFlag", "bornTimestamp", "flag", "defaultTopicQueueNums", "reconsumeTimes")
_SPECIAL = (PROPERTY_TRAN_MSG, PROPERTY_DELAY)
"""Properties the reference treats specially (a half message refused, a delayed message
rewritten onto SCHEDULE_TOPIC_XXXX): their sends take the reference path."""
INT32_MAX = 2**31 - 1


class FastSend(NamedTuple):
    """A send as the fast path stores it: the fields the CBOR send would have."""

    topic: str
    queue_id: int
    flag: int
    born_timestamp: int | None
    tags: str | None
    keys: tuple[str, ...]
    properties: dict[str, str]
    wait: bool


def _plain_number(value: str | None) -> bool:
    """Whether ext_int reads `value` as the same non-negative number int() does."""
    return value is not None and value.isdigit() and value.isascii() and len(value) <= 18


def plain_send(code: int, ext: Mapping[str, str] | None, body: bytes, checked_topics: set[str]) -> FastSend | None:
    """The fast path's reading of a send request, or None for the reference path."""
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
    return FastSend(topic, q, flag, born if born > 0 else None, tags, keys, props, wait)


async def fast_send(proc: ProcessorContext, cmd: RemotingCommand, channel: RemotingChannel,
                    answer: Callable[[dict[str, Any] | bytes], RemotingCommand | bytes]) -> GroupedSend | None:
    """The send checked and encoded for the server's turn, or None for the reference path.
    `answer` is the reference's answer to a CBOR response, which a stored send's
    templated frame passes through (a refusal after the append is a map)."""
    if cmd.serialize_type is not SerializeType.JSON:
        return None
    f = plain_send(cmd.code, cmd.ext_fields, cmd.body, proc.checked_topics)
    if f is None:
        return None
    opaque = cmd.opaque

    def reply(status: str, msg_id: str, queue_id: int, queue_offset: int) -> bytes:
        return send_reply_frame(response_code(status), opaque, msg_id, queue_id, queue_offset, REGION_ID)

    s = proc.services
    pending = await prepare_plain_send(s, f.topic, cmd.body, f.queue_id, f.tags, f.keys, f.properties, f.flag,
                                       f.born_timestamp, f.wait, channel.peer, reply)
    if pending is None:
        return None
    return GroupedSend(pending, answer, s)
