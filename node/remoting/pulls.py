"""Reads over remoting: PULL_MESSAGE (long polling), consumer offsets, queue offsets and
message lookups.

Each request is read into the CBOR op that does the same thing (`proc.request`), so both
protocols share the field checks, and run by that op's handler where its answer is all
RocketMQ needs (offsets). A pull and the lookups answer with the CommitLog records byte for
byte (RocketMQ's clients decode them), so they share the handler's code instead: the pull
runs node/ops/pulls.py `read_queue` (its consume check and long polling) and the store
hands over the records' bytes (`records_bytes`, `message_bytes`).
"""

from __future__ import annotations

import logging
from typing import Any

from store.message_store import StoreUnavailableError
from store.status import GetMessageStatus
from wire.protocol import Pull
from wire.protocol.checks import parse_tag_filter
from wire.protocol.sql92 import SQL92
from wire.remoting.codes import RequestCode, ResponseCode
from wire.remoting.command import RemotingCommand
from wire.remoting.headers import ext_bool, ext_int, ext_str

from ..ops.dispatch import handle_request
from ..ops.pulls import PullOutcome, check_consume, property_filter, read_queue
from ..ops.services import OpError
from .answers import response_code
from .channel import Processor, ProcessorContext, RemotingChannel
from .subscriptions import sql_subscriptions

__all__ = ["PULL_PROCESSORS"]

log = logging.getLogger("tidemq.remoting")

FLAG_COMMIT_OFFSET = 0x1
FLAG_SUSPEND = 0x2
FLAG_SUBSCRIPTION = 0x4
MASTER_ID = "0"
"""suggestWhichBrokerId: always the master's id, slaves serve pulls without redirecting."""
DEFAULT_QUERY_MAX_NUM = 32
"""BrokerConfig defaultQueryMaxNum: a `_UNIQUE_KEY_QUERY` lookup's limit."""

# store status → (response code, or None for "PULL_OFFSET_MOVED unless the offset asked was 0")
_PULL_CODES: dict[GetMessageStatus, int | None] = {
    GetMessageStatus.FOUND: ResponseCode.SUCCESS,
    GetMessageStatus.NO_MESSAGE_IN_QUEUE: None,
    GetMessageStatus.NO_MATCHED_LOGIC_QUEUE: None,
    GetMessageStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
}


def _pull_code(status: GetMessageStatus, offset: int) -> int:
    code = _PULL_CODES[status]
    if code is None:
        return ResponseCode.PULL_NOT_FOUND if offset == 0 else ResponseCode.PULL_OFFSET_MOVED
    return code


def _suspends(status: GetMessageStatus, offset: int) -> bool:
    """RocketMQ parks a pull only on PULL_NOT_FOUND; filtered units (RETRY_IMMEDIATELY,
    which the client would re-ask at once) are scanned past while it waits."""
    return (status is GetMessageStatus.NO_MATCHED_MESSAGE
            or _pull_code(status, offset) == ResponseCode.PULL_NOT_FOUND)


async def _op(proc: ProcessorContext, channel: RemotingChannel, frame: dict[str, Any]) -> dict[str, Any]:
    """Run a CBOR op through the node's own handler: its answer map."""
    answer = await handle_request(proc.services, proc.request({"id": 0, **frame}), channel.peer)
    assert isinstance(answer, dict)  # only the compiled send path answers bytes
    return answer


def _failed(cmd: RemotingCommand, answer: dict[str, Any], not_found: int = ResponseCode.SYSTEM_ERROR) -> RemotingCommand:
    return cmd.response(response_code(answer["status"], not_found), answer.get("error") or answer["status"])


# ---------------------------------------------------------------- PULL_MESSAGE


async def _pull(proc: ProcessorContext, cmd: RemotingCommand, channel: RemotingChannel) -> RemotingCommand:
    """PullMessageProcessor's checks in its order (each with its code, which the clients
    act on), the commit a master takes with the pull, then the CBOR pull's read with
    RocketMQ's parking rule. The park never outlasts suspendTimeoutMillis, which the clients
    keep below their RPC timeout (15 s against 30 s)."""
    ext = cmd.ext_fields
    group, topic = ext_str(ext, "consumerGroup"), ext_str(ext, "topic")
    queue_id, offset = ext_int(ext, "queueId"), ext_int(ext, "queueOffset")
    sys_flag = ext_int(ext, "sysFlag")
    s = proc.services
    # the account's permission first (with aclEnable), as RocketMQ's ACL hook runs before the
    # processor: a topic the account may not read is refused before its existence is told
    proc.request({"op": "pull", "id": 0, "topic": topic, "queue_id": max(queue_id, 0), "offset": max(offset, 0),
                  "group": group})
    try:
        check_consume(s, group)
    except OpError as e:
        return cmd.response(ResponseCode.NO_PERMISSION, e.message)
    config = s.topics.get(topic)
    if config is None:
        return cmd.response(ResponseCode.TOPIC_NOT_EXIST,
                            f"topic[{topic}] not exist, apply first please! (tidemq {s.cfg.broker_name})")
    if not config.readable:
        return cmd.response(ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden")
    if not 0 <= queue_id < config.read_queue_nums:
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                            f"topicConfig.readQueueNums:[{config.read_queue_nums}] consumer:[{channel.peer}]")
    tag_filter, sql_filter = "*", None
    expression_type: str | None = None
    if sys_flag & FLAG_SUBSCRIPTION:
        expression_type = ext_str(ext, "expressionType", "TAG") or "TAG"
        subscription = ext_str(ext, "subscription", "*")
    elif (declared := sql_subscriptions(s.consumers).sql92(group, topic)) is not None:
        expression_type, subscription = SQL92, declared  # a Java push consumer's: its heartbeat's
    if expression_type is not None:
        if expression_type.upper() not in ("TAG", SQL92):
            return cmd.response(ResponseCode.SYSTEM_ERROR,
                                f"the broker does not support consumer to filter message by {expression_type}")
        # RocketMQ's order: the expression is parsed first, then enablePropertyFilter is checked
        try:
            if expression_type.upper() == SQL92:
                sql_filter = subscription
                property_filter(s, sql_filter)
            else:
                tag_filter = subscription
                parse_tag_filter(tag_filter)
        except ValueError as e:
            return cmd.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                f"parse the consumer's subscription[{subscription}] failed: {e}")
        except OpError as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, e.message)
    timeout_ms = min(max(ext_int(ext, "suspendTimeoutMillis", 0), 0), 0x7FFFFFFF) if sys_flag & FLAG_SUSPEND else 0
    request = proc.request({"op": "pull", "id": 0, "topic": topic, "queue_id": queue_id, "offset": offset,
                            "max_msgs": ext_int(ext, "maxMsgNums"), "tag_filter": tag_filter,
                            "timeout_ms": timeout_ms, "group": group,
                            **({"sql_filter": sql_filter} if sql_filter is not None else {})})
    assert isinstance(request.fields, Pull)
    if sys_flag & FLAG_COMMIT_OFFSET and s.is_master:
        commit = ext_int(ext, "commitOffset", -1)
        if commit >= 0:
            await _op(proc, channel, {"op": "commit_offset", "group": group, "topic": topic, "queue_id": queue_id,
                                      "offset": commit})
    try:
        got = await read_queue(s, request.fields, _suspends)
    except OpError as e:
        return cmd.response(response_code(e.status.value), e.message)
    except StoreUnavailableError as e:
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"store getMessage return null: {e}")
    return _pull_answer(proc, cmd, offset, got)


def _pull_answer(proc: ProcessorContext, cmd: RemotingCommand, offset: int, got: PullOutcome) -> RemotingCommand:
    """The response to a pull: its code and header per the store's status and, when found,
    the records as the CommitLog holds them."""
    status, next_begin = got.result.status, got.next_begin_offset
    records: list[bytes] = []
    for m, raw in zip(got.messages, proc.services.store.records_bytes(got.messages), strict=True):
        if raw is None:  # removed since the read: continue there
            next_begin = m.queue_offset
            break
        records.append(raw)
    if status is GetMessageStatus.FOUND and not records:
        status = GetMessageStatus.MESSAGE_WAS_REMOVING
    header = {"suggestWhichBrokerId": MASTER_ID, "nextBeginOffset": str(next_begin),
              "minOffset": str(got.result.min_offset), "maxOffset": str(got.result.max_offset)}
    return cmd.response(_pull_code(status, offset), status.value, header, b"".join(records))


# ---------------------------------------------------------------- offsets


def _queue(ext: dict[str, str] | None) -> dict[str, Any]:
    return {"topic": ext_str(ext, "topic"), "queue_id": ext_int(ext, "queueId")}


async def _query_consumer_offset(proc: ProcessorContext, cmd: RemotingCommand,
                                 channel: RemotingChannel) -> RemotingCommand:
    """The group's committed offset; a group that never committed on a queue that still
    starts at 0 starts there (RocketMQ's "new group on a young queue"), else QUERY_NOT_FOUND
    and the client picks its start itself (consumeFromWhere)."""
    ext = cmd.ext_fields
    queue = _queue(ext)
    answer = await _op(proc, channel, {"op": "fetch_offset", "group": ext_str(ext, "consumerGroup"), **queue})
    if answer["status"] == "OK":
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": str(answer["offset"])})
    if answer["status"] != "NOT_FOUND":
        return _failed(cmd, answer)
    least = await _op(proc, channel, {"op": "min_offset", **queue})
    if least["status"] != "OK":
        return _failed(cmd, least)
    if least["offset"] <= 0:
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": "0"})
    return cmd.response(ResponseCode.QUERY_NOT_FOUND, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")


async def _update_consumer_offset(proc: ProcessorContext, cmd: RemotingCommand,
                                  channel: RemotingChannel) -> RemotingCommand:
    """Commits through the CBOR commit_offset op. RocketMQ answers SUCCESS whatever the
    table did (its clients send this "oneway" and drop the answer), so a slave, which
    refuses commits (the master's offsets reach it by SlaveSync), answers SUCCESS too."""
    ext = cmd.ext_fields
    answer = await _op(proc, channel, {"op": "commit_offset", "group": ext_str(ext, "consumerGroup"), **_queue(ext),
                                       "offset": ext_int(ext, "commitOffset")})
    if answer["status"] != "OK":
        log.debug("UPDATE_CONSUMER_OFFSET from %s not stored: %s", channel.peer, answer.get("error"))
    return cmd.response(ResponseCode.SUCCESS, ext_fields={})


def _offset_op(op: str, *names: tuple[str, str]) -> Processor:
    """A queue-offset request answered by the CBOR op `op` (extra fields: (CBOR, RocketMQ) names)."""

    async def process(proc: ProcessorContext, cmd: RemotingCommand, channel: RemotingChannel) -> RemotingCommand:
        ext = cmd.ext_fields
        frame = {"op": op, **_queue(ext), **{ours: ext_int(ext, theirs) for ours, theirs in names}}
        answer = await _op(proc, channel, frame)
        if answer["status"] != "OK":
            return _failed(cmd, answer)
        return cmd.response(ResponseCode.SUCCESS, ext_fields={"offset": str(answer["offset"])})

    return process


async def _earliest_store_time(proc: ProcessorContext, cmd: RemotingCommand,
                               channel: RemotingChannel) -> RemotingCommand:
    """The store time of the queue's oldest message (-1 when it has none); no CBOR op
    answers this, so the fields are checked as min_offset's."""
    request = proc.request({"op": "min_offset", "id": 0, **_queue(cmd.ext_fields)})
    try:
        when = proc.services.store.get_earliest_message_time(request.fields.topic, request.fields.queue_id)
    except StoreUnavailableError as e:
        return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
    return cmd.response(ResponseCode.SUCCESS, ext_fields={"timestamp": str(-1 if when is None else when)})


# ---------------------------------------------------------------- lookups


async def _query_message(proc: ProcessorContext, cmd: RemotingCommand, channel: RemotingChannel) -> RemotingCommand:
    """Messages by key (KEYS or UNIQ_KEY), the records concatenated; fields checked as the
    CBOR query_by_key's."""
    ext = cmd.ext_fields
    max_num = DEFAULT_QUERY_MAX_NUM if ext_bool(ext, "_UNIQUE_KEY_QUERY") else ext_int(ext, "maxNum")
    request = proc.request({"op": "query_by_key", "id": 0, "topic": ext_str(ext, "topic"), "key": ext_str(ext, "key"),
                            "max_num": max_num, "begin_ts": ext_int(ext, "beginTimestamp"),
                            "end_ts": ext_int(ext, "endTimestamp")})
    f = request.fields
    store = proc.services.store
    try:
        found = store.query_message_result(f.topic, f.key, f.max_num, f.begin_ts, f.end_ts)
        records = [raw for raw in store.records_bytes(found.messages) if raw is not None]
    except StoreUnavailableError as e:
        return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
    header = {"indexLastUpdateTimestamp": str(found.index_last_update_timestamp),
              "indexLastUpdatePhyoffset": str(found.index_last_update_phyoffset)}
    if not records:
        return cmd.response(ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", header)
    return cmd.response(ResponseCode.SUCCESS, None, header, b"".join(records))


async def _view_message(proc: ProcessorContext, cmd: RemotingCommand, channel: RemotingChannel) -> RemotingCommand:
    """The one record at a CommitLog offset (an offset msgId's)."""
    offset = ext_int(cmd.ext_fields, "offset")
    try:
        raw = proc.services.store.message_bytes(offset) if offset >= 0 else None
    except StoreUnavailableError as e:
        return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
    if raw is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
    return cmd.response(ResponseCode.SUCCESS, ext_fields={}, body=raw)


PULL_PROCESSORS: dict[int, Processor] = {
    RequestCode.PULL_MESSAGE: _pull,
    RequestCode.QUERY_CONSUMER_OFFSET: _query_consumer_offset,
    RequestCode.UPDATE_CONSUMER_OFFSET: _update_consumer_offset,
    RequestCode.GET_MAX_OFFSET: _offset_op("max_offset"),
    RequestCode.GET_MIN_OFFSET: _offset_op("min_offset"),
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: _offset_op("offset_by_time", ("timestamp", "timestamp")),
    RequestCode.GET_EARLIEST_MSG_STORETIME: _earliest_store_time,
    RequestCode.QUERY_MESSAGE: _query_message,
    RequestCode.VIEW_MESSAGE_BY_ID: _view_message,
}
