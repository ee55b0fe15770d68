"""The node's remoting processors (RocketMQ's SendMessageProcessor, PullMessageProcessor,
ClientManageProcessor, ...): each request code is read into the CBOR op that does the same
thing, checked by the same schema and run by the same handler (node/ops/), and the answer is
written back in RocketMQ's terms. So both protocols share the topics, groups, offsets,
rebalancing and retry state, and a message sent through one is consumed through the other.

docs/remoting.md lists the codes answered and refused.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

from store.properties import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_WAIT, decode_properties
from wire.protocol import NODE_REQUESTS, InvalidRequest, Request, parse_with
from wire.remoting.bodies import BodyError, decode_batch
from wire.remoting.codes import RequestCode, ResponseCode
from wire.remoting.command import RemotingCommand
from wire.remoting.headers import HeaderError, send_header

from ..ops.dispatch import append_requests, finish_requests, handle_now
from ..ops.puts import PendingPut
from ..ops.services import NodeServices
from .channel import Finish, RemotingChannel

log = logging.getLogger("tidemq.remoting")

__all__ = ["NodeRemoting", "response_code"]

PROPERTY_TRAN_MSG = "TRAN_MSG"
MSG_SYSFLAG_COMPRESSED = 0x1
REGION_ID = "DefaultRegion"

_CODES = {
    "OK": ResponseCode.SUCCESS, "PUT_OK": ResponseCode.SUCCESS, "FOUND": ResponseCode.SUCCESS,
    "FLUSH_DISK_TIMEOUT": ResponseCode.FLUSH_DISK_TIMEOUT, "FLUSH_SLAVE_TIMEOUT": ResponseCode.FLUSH_SLAVE_TIMEOUT,
    "SLAVE_NOT_AVAILABLE": ResponseCode.SLAVE_NOT_AVAILABLE, "SERVICE_NOT_AVAILABLE": ResponseCode.SERVICE_NOT_AVAILABLE,
    "MESSAGE_ILLEGAL": ResponseCode.MESSAGE_ILLEGAL, "PROPERTIES_SIZE_EXCEEDED": ResponseCode.MESSAGE_ILLEGAL,
    "OS_PAGECACHE_BUSY": ResponseCode.SYSTEM_BUSY, "NO_PERMISSION": ResponseCode.NO_PERMISSION,
}


def response_code(status: str, not_found: int = ResponseCode.SYSTEM_ERROR) -> int:
    """A CBOR reply status as RocketMQ's response code (`not_found`: what NOT_FOUND means
    for the op: TOPIC_NOT_EXIST for a send, QUERY_NOT_FOUND for a lookup, ...). Everything
    without a RocketMQ twin (BAD_REQUEST, INDETERMINATE, INTERNAL_ERROR, ...) is
    SYSTEM_ERROR, which RocketMQ's clients retry on another broker."""
    if status == "NOT_FOUND":
        return not_found
    return _CODES.get(status, ResponseCode.SYSTEM_ERROR)


def _message_fields(properties: dict[str, str]) -> dict[str, Any]:
    """A message's tags, keys and other properties as the CBOR send's fields."""
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


class NodeRemoting:
    """The node's RemotingService (node/remoting/channel.py)."""

    ordered = frozenset({RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE})

    def __init__(self, services: NodeServices, checked_topics: set[str]) -> None:
        self.services = services
        self.checked_topics = checked_topics
        self._handlers: dict[int, Callable[[RemotingCommand, RemotingChannel], Awaitable[Any]]] = {
            RequestCode.SEND_MESSAGE: self._send,
            RequestCode.SEND_MESSAGE_V2: self._send,
            RequestCode.SEND_BATCH_MESSAGE: self._send,
        }

    def closed(self, channel: RemotingChannel) -> None:
        pass

    async def start(self, cmd: RemotingCommand, channel: RemotingChannel) -> RemotingCommand | Finish | None:
        handler = self._handlers.get(cmd.code)
        if handler is None:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
        try:
            result: RemotingCommand | Finish | None = await handler(cmd, channel)
            return result
        except (HeaderError, BodyError, InvalidRequest) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))

    def _request(self, frame: dict[str, Any]) -> Request:
        return parse_with(frame, NODE_REQUESTS, self.checked_topics)

    # ---------------------------------------------------------------- sends

    async def _send(self, cmd: RemotingCommand, channel: RemotingChannel) -> RemotingCommand | Finish:
        h = send_header(cmd.code, cmd.ext_fields)
        body = cmd.body
        if h.sys_flag & MSG_SYSFLAG_COMPRESSED:
            try:
                body = zlib.decompress(body)
            except zlib.error as e:
                return cmd.response(ResponseCode.MESSAGE_ILLEGAL, f"the message body cannot be inflated: {e}")
        props = decode_properties(h.properties)
        if props.get(PROPERTY_TRAN_MSG, "").lower() == "true":
            return cmd.response(ResponseCode.NO_PERMISSION,
                                "transactional (half) messages are not served yet; send them without TRAN_MSG")
        wait = props.get(PROPERTY_WAIT, "true").lower() != "false"
        frame: dict[str, Any] = {"v": 1, "id": 0, "topic": h.topic, "wait": wait}
        if h.queue_id >= 0:
            frame["queue_id"] = h.queue_id
        if h.batch:
            frame["op"] = "send_batch"
            frame["messages"] = [{"body": e.body, "flag": e.flag, **_message_fields(decode_properties(e.properties))}
                                 for e in decode_batch(body)]
        else:
            frame.update(op="send", body=body, flag=h.flag, **_message_fields(props))
            if h.born_timestamp > 0:
                frame["born_timestamp"] = h.born_timestamp
        try:
            request = self._request(frame)
        except InvalidRequest as e:
            return cmd.response(ResponseCode.MESSAGE_ILLEGAL, e.message)
        s = self.services
        pending = await handle_now(s, request, channel.peer)
        if not isinstance(pending, PendingPut):
            return self._send_answer(cmd, pending)
        append_requests(s, [pending])

        async def finish() -> RemotingCommand:
            (answer,) = await finish_requests(s, [pending])
            assert isinstance(answer, dict)  # not the compiled path's frame: a Request was handled
            return self._send_answer(cmd, answer)

        return finish if pending.waits else await finish()

    def _send_answer(self, cmd: RemotingCommand, answer: dict[str, Any]) -> RemotingCommand:
        status = answer["status"]
        code = response_code(status, ResponseCode.TOPIC_NOT_EXIST)
        if "msg_id" not in answer and "msg_ids" not in answer:
            return cmd.response(code if code != ResponseCode.SUCCESS else ResponseCode.SYSTEM_ERROR,
                                answer.get("error") or status)
        msg_id = answer["msg_id"] if "msg_id" in answer else ",".join(answer["msg_ids"])
        return cmd.response(code, ext_fields={
            "msgId": msg_id, "queueId": str(answer["queue_id"]), "queueOffset": str(answer["queue_offset"]),
            "MSG_REGION": REGION_ID, "TRACE_ON": "true"})
