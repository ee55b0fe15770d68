"""Sends over remoting: SEND_MESSAGE (the C++ client's, batches too), SEND_MESSAGE_V2 and
SEND_BATCH_MESSAGE (the Java client's), through the CBOR send path (node/ops/puts.py): one
message store, one write check, one answer per status.

A body the client deflated (sysFlag bit 0) is stored inflated, so a CBOR consumer reads it
as sent. A C++ batch (code 10 with batch "1") is a batch (wire/remoting/headers.py).
A transactional half message (TRAN_MSG=true, RocketMQ's prepared send) is the CBOR prepared
send: its producer group (PGROUP) is the header's producerGroup when the properties lack it,
and the answer's msgId and queueOffset are what END_TRANSACTION names it by
(node/remoting/transactions.py). A batch may not hold one, as over CBOR.
"""

from __future__ import annotations

import zlib
from functools import partial
from typing import Any

from store.properties import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_WAIT,
    decode_properties,
)
from store.transaction import PROPERTY_PRODUCER_GROUP, is_prepared
from wire.protocol import InvalidRequest
from wire.remoting.bodies import decode_batch
from wire.remoting.codes import RequestCode, ResponseCode
from wire.remoting.command import RemotingCommand
from wire.remoting.headers import send_header

from ..ops.dispatch import handle_now
from ..ops.puts import PendingPut
from .answers import response_code
from .channel import Finish, GroupedSend, Processor, ProcessorContext, RemotingChannel
from .fastsend import REGION_ID, fast_send

__all__ = ["SEND_PROCESSORS", "message_fields", "send_answer"]

MSG_SYSFLAG_COMPRESSED = 0x1


def message_fields(properties: dict[str, str]) -> dict[str, Any]:
    """A message's tags, keys and other properties as the CBOR send's fields (WAIT is the
    send's `wait`; empty names and values are dropped, as the C++ client drops them)."""
    props = {k: v for k, v in properties.items() if k and v}
    out: dict[str, Any] = {}
    tags = props.pop(PROPERTY_TAGS, None)
    if tags:
        out["tags"] = tags
    keys = props.pop(PROPERTY_KEYS, "").split()
    if keys:
        out["keys"] = keys
    props.pop(PROPERTY_WAIT, None)
    if props:
        out["properties"] = props
    return out


async def _send(proc: ProcessorContext, cmd: RemotingCommand, channel: RemotingChannel) -> RemotingCommand | Finish:
    if proc.fast_sends:
        fast = await fast_send(proc, cmd, channel, partial(send_answer, cmd))
        if fast is not None:
            return fast
    h = send_header(cmd.code, cmd.ext_fields)
    body = cmd.body
    if h.sys_flag & MSG_SYSFLAG_COMPRESSED:
        try:
            body = zlib.decompress(body)
        except zlib.error as e:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"the message body cannot be inflated: {e}")
    props = decode_properties(h.properties)
    if is_prepared(props):
        if h.batch:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL,
                                "a batch may not hold transactional messages (TRAN_MSG=true): send each alone")
        if not props.get(PROPERTY_PRODUCER_GROUP) and h.producer_group:
            props[PROPERTY_PRODUCER_GROUP] = h.producer_group  # the CBOR op reads the group from PGROUP
    wait = props.get(PROPERTY_WAIT, "true").lower() != "false"
    frame: dict[str, Any] = {"id": 0, "topic": h.topic, "wait": wait}
    if h.queue_id >= 0:
        frame["queue_id"] = h.queue_id
    if h.batch:
        frame["op"] = "send_batch"
        frame["messages"] = [{"body": e.body, "flag": e.flag, **message_fields(decode_properties(e.properties))}
                             for e in decode_batch(body)]
    else:
        frame.update(op="send", body=body, flag=h.flag, **message_fields(props))
        if h.born_timestamp > 0:
            frame["born_timestamp"] = h.born_timestamp
    try:
        request = proc.request(frame)
    except InvalidRequest as e:
        return cmd.response(ResponseCode.MESSAGE_ILLEGAL, e.message)
    s = proc.services
    pending = await handle_now(s, request, channel.peer)
    if not isinstance(pending, PendingPut):
        return _response(cmd, pending)
    return GroupedSend(pending, partial(send_answer, cmd), s)


def send_answer(cmd: RemotingCommand, answer: dict[str, Any] | bytes) -> RemotingCommand | bytes:
    """A send's answer to its CBOR response (the fast path's templated frame passes through)."""
    if isinstance(answer, bytes):  # the fast path's templated answer frame (fastsend.py)
        return answer
    return _response(cmd, answer)


def _response(cmd: RemotingCommand, answer: dict[str, Any]) -> RemotingCommand:
    status = answer["status"]
    code = response_code(status, ResponseCode.TOPIC_NOT_EXIST)
    if "msg_id" not in answer and "msg_ids" not in answer:
        return cmd.response(code if code != ResponseCode.SUCCESS else ResponseCode.SYSTEM_ERROR,
                            answer.get("error") or status)
    msg_id = answer["msg_id"] if "msg_id" in answer else ",".join(answer["msg_ids"])
    return cmd.response(code, ext_fields={
        "msgId": msg_id, "queueId": str(answer["queue_id"]), "queueOffset": str(answer["queue_offset"]),
        "MSG_REGION": REGION_ID, "TRACE_ON": "true"})


SEND_PROCESSORS: dict[int, Processor] = {
    RequestCode.SEND_MESSAGE: _send,
    RequestCode.SEND_MESSAGE_V2: _send,
    RequestCode.SEND_BATCH_MESSAGE: _send,
}
