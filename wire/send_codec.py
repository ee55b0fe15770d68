"""The compiled send path's codec, chosen here: a plain `send` or `send_batch` request
decoded to its fields without a map (wire/framing.py's decoder does it when built with
`plain_sends`), and their answers encoded without one.

The pure-Python path is the reference: a plain request's tuple holds exactly what
`parse_with` would put in its `Send` / `SendBatch`, and the reply frames are the bytes
`encode_frame(SendReply(...).to_wire(id))` gives (tests/wire/test_send_codec.py).
"""

from __future__ import annotations

from typing import NamedTuple

from .framing import COMPILED, encode_frame
from .protocol import BatchMessage, Request, Send, SendBatch

__all__ = ["PlainBatch", "PlainSend", "request_of", "send_batch_reply_frame", "send_reply_frame"]


class PlainSend(NamedTuple):
    """A `send` of a body to a known-valid topic, with at most tags, queue_id, wait,
    born_timestamp and flag: the common request, decoded in C (wire/_send_codec.pyx)."""

    id: int
    topic: str
    body: bytes
    tags: str | None
    queue_id: int | None
    wait: bool
    born_timestamp: int | None
    flag: int


class PlainBatch(NamedTuple):
    """A `send_batch` whose messages are each a body with optional tags, to a known-valid
    topic, with at most queue_id and wait: decoded in C."""

    id: int
    topic: str
    queue_id: int | None
    wait: bool
    messages: list[tuple[bytes, str | None]]
    """(body, tags) of each message."""


if COMPILED is not None:
    COMPILED.bind(PlainSend, PlainBatch)


def request_of(p: PlainSend | PlainBatch) -> Request:
    """The request `parse_with` makes of the frame `p` was decoded from (for the reference
    path: a refusal, a login check)."""
    if isinstance(p, PlainBatch):
        messages = [BatchMessage(body=body, tags=tags) for body, tags in p.messages]
        return Request(op=SendBatch.OP, id=p.id,
                       fields=SendBatch(topic=p.topic, messages=messages, queue_id=p.queue_id, wait=p.wait))
    return Request(op=Send.OP, id=p.id, fields=Send(topic=p.topic, body=p.body, queue_id=p.queue_id, tags=p.tags,
                                                    flag=p.flag, born_timestamp=p.born_timestamp, wait=p.wait))


def _reference_reply(request_id: int, status: str, msg_id: str, queue_id: int, queue_offset: int,
                     commitlog_offset: int) -> bytes:
    return encode_frame({"id": request_id, "status": status, "msg_id": msg_id, "queue_id": queue_id,
                         "queue_offset": queue_offset, "commitlog_offset": commitlog_offset})


def send_reply_frame(request_id: int, status: str, msg_id: str, queue_id: int, queue_offset: int,
                     commitlog_offset: int) -> bytes:
    """The frame answering a stored `send` (SendReply's map, as encode_frame writes it)."""
    if COMPILED is not None:
        frame = COMPILED.send_reply_frame(request_id, status, msg_id, queue_id, queue_offset, commitlog_offset)
        if frame is not None:
            return frame
    return _reference_reply(request_id, status, msg_id, queue_id, queue_offset, commitlog_offset)


def send_batch_reply_frame(request_id: int, status: str, msg_ids: str, queue_id: int, queue_offset: int,
                           commitlog_offset: int) -> bytes:
    """The frame answering a stored `send_batch` (SendBatchReply's map); `msg_ids` joined by
    commas, as the append result holds them."""
    if COMPILED is not None:
        frame = COMPILED.send_batch_reply_frame(request_id, status, msg_ids, queue_id, queue_offset,
                                                commitlog_offset)
        if frame is not None:
            return frame
    return encode_frame({"id": request_id, "status": status, "msg_ids": msg_ids.split(","), "queue_id": queue_id,
                         "queue_offset": queue_offset, "commitlog_offset": commitlog_offset})
