"""Reads: pulls (with long polling), lookups by key, msgId and time, queue offsets, and the
consumer offsets a group commits and fetches."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import trio

from store.message import StoredMessage
from store.message_store import GetMessageResult
from store.status import GetMessageStatus
from store.tag_filter import MessageFilter
from wire.protocol import (
    CommitOffset,
    EmptyReply,
    FetchOffset,
    GetByMsgId,
    MaxOffset,
    MessageReply,
    MessagesReply,
    MinOffset,
    OffsetByTime,
    OffsetForEpoch,
    OffsetForEpochReply,
    OffsetList,
    OffsetListReply,
    OffsetReply,
    Pull,
    PullReply,
    QueryByKey,
    Request,
    Status,
    WireMessage,
    WireRequest,
)
from wire.protocol.sql92 import SQL92, Sql92Error, compile_sql92

from ..offset_stream import replicate_commit
from ..tables.offsets import OffsetEntry
from .puts import Handler
from .services import (
    NodeServices,
    OpError,
    check_committable,
    confirm_write,
)

__all__ = ["PULL_HANDLERS", "PullOutcome", "check_consume", "property_filter", "read_queue", "waits_for_more"]

# Long polling waits only when a later message could turn the answer into FOUND
# (RocketMQ's PULL_NOT_FOUND family; NO_MATCHED_MESSAGE continues from next_begin_offset).
_WAITABLE = {
    GetMessageStatus.NO_MESSAGE_IN_QUEUE,
    GetMessageStatus.OFFSET_OVERFLOW_ONE,
    GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
    GetMessageStatus.NO_MATCHED_MESSAGE,
}
# Room left in a response frame for everything but the messages' bodies and properties.
_FRAME_MARGIN = 64 * 1024
_MESSAGE_OVERHEAD = 512


def _fit(messages: list[StoredMessage], budget: int) -> list[StoredMessage]:
    """The longest prefix whose maps fit a response frame (at least one message: the
    config guarantees a maxMessageSize body fits maxFrameSize)."""
    total = 0
    for i, m in enumerate(messages):
        total += len(m.body) + _MESSAGE_OVERHEAD + sum(len(k) + len(v) for k, v in m.properties.items())
        if total > budget and i > 0:
            return messages[:i]
    return messages


def check_consume(s: NodeServices, group: str | None) -> None:
    """Refuse a pull for a group whose consumption is disabled (OpError NO_PERMISSION)."""
    if group is None:
        return
    settings = s.subgroups.get(group)
    if settings is not None and not settings.consume_enable:
        raise OpError(Status.NO_PERMISSION, f"consumer group {group!r} may not consume on {s.cfg.broker_name} "
                                            "(its consumption is disabled: updateSubGroup --consumeEnable)")


def property_filter(s: NodeServices, expression: str | None) -> MessageFilter | None:
    """A SQL92 subscription's per-message test (None without one). Compiled through
    `compile_sql92`'s bounded cache, so a subscription is parsed once, not per pull. Refused
    (BAD_REQUEST, RocketMQ's remark) unless the node has enablePropertyFilter; Sql92Error
    when it does not parse (the request check has normally caught that already)."""
    if expression is None:
        return None
    compiled = compile_sql92(expression)
    if not s.cfg.enable_property_filter:
        raise OpError(Status.BAD_REQUEST, f"The broker does not support consumer to filter message by {SQL92} "
                                          f"(enablePropertyFilter is false on {s.cfg.broker_name})")
    return lambda m: compiled.matches(m.properties)


def waits_for_more(status: GetMessageStatus, offset: int) -> bool:
    """The CBOR pull's long polling: every answer a later message could turn into FOUND."""
    return status in _WAITABLE


@attrs.frozen
class PullOutcome:
    """What a pull read: the store's last answer, the messages that fit a response, and
    where the consumer continues."""

    result: GetMessageResult
    messages: list[StoredMessage]
    next_begin_offset: int


async def read_queue(s: NodeServices, f: Pull,
                     waits: Callable[[GetMessageStatus, int], bool] = waits_for_more) -> PullOutcome:
    """A pull's read, shared by the CBOR op and RocketMQ's PULL_MESSAGE (node/remoting/):
    the group's consume check, the store read, and long polling for up to `f.timeout_ms`
    while `waits(status, offset)` says a later message could answer it (filtered units are
    scanned past meanwhile), woken as soon as one lands."""
    check_consume(s, f.group)
    try:
        matches = property_filter(s, f.sql_filter)
    except Sql92Error as e:
        raise OpError(Status.BAD_REQUEST, f"sql_filter: {e}") from None
    topic, queue_id, offset = f.topic, f.queue_id, f.offset
    deadline = trio.current_time() + f.timeout_ms / 1000

    def read(at: int) -> GetMessageResult:
        return s.store.get_message(f.group or "", topic, queue_id, at, f.max_msgs, f.tag_filter, matches)

    result = read(offset)
    while waits(result.status, offset) and not s.stopping and trio.current_time() < deadline:
        if result.status is GetMessageStatus.NO_MATCHED_MESSAGE:
            offset = result.next_begin_offset  # filtered units: scan on from there
            if offset < result.max_offset:
                await trio.lowlevel.checkpoint()
                result = read(offset)
                continue
        with s.long_poll(deadline):
            await s.store.wait_for_message(topic, queue_id, offset, deadline - trio.current_time())
        result = read(offset)
    messages = _fit(result.messages, s.cfg.max_frame_size - _FRAME_MARGIN)
    s.stats.get.add(len(messages))
    if messages:
        s.stats.add_get(topic, f.group, len(messages), sum(m.size for m in messages))
    next_begin = result.next_begin_offset
    if len(messages) < len(result.messages):
        next_begin = result.messages[len(messages)].queue_offset
    return PullOutcome(result, messages, next_begin)


async def _pull(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    got = await read_queue(s, r.fields)
    result = got.result
    history = s.failover.epochs if s.failover is not None else None
    epoch = None
    if history is not None and got.messages:
        # -1: written before any epoch this node recorded. A slave that replicated while a
        # term began holds such records until it takes its master's history; a consumer
        # that read them is checked like any other when a node in an epoch answers next
        # (storage seed 7566: the records were cut and the new epoch's took their offsets)
        found = history.epoch_at(got.messages[-1].commitlog_offset)
        epoch = -1 if found is None else found
    return PullReply(status=Status(result.status.value), messages=[WireMessage.of(m) for m in got.messages],
                     next_begin_offset=got.next_begin_offset, min_offset=result.min_offset,
                     max_offset=result.max_offset, epoch=epoch,
                     node_epoch=history.last_epoch() if history is not None else None).to_wire(r.id)


async def _offset_for_epoch(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    """KIP-320's check, for a consumer whose last record (CommitLog offset P, epoch E) came
    from a node in an older epoch: this log holds E's records up to end(E), the start of
    its first newer epoch (or its end). Past P: the consumer's next offset stands. At or
    before P: the records from end(E) on are not the ones it read (an unclean promotion
    cut them), so it goes back to the first queue offset at or past end(E) and reads again:
    duplicates, never a skip."""
    f: OffsetForEpoch = r.fields
    check_consume(s, f.group)
    history = s.failover.epochs if s.failover is not None else None
    log_end = s.store.get_max_phy_offset()
    if history is None or not len(history):  # no epochs here (a RocketMQ 4.x history): nothing to check
        return OffsetForEpochReply(offset=f.offset, end_offset=log_end, node_epoch=-1, diverged=False).to_wire(r.id)
    end = history.end_after(f.epoch, log_end)
    if f.epoch < 0:
        pass  # read before any epoch: only what this log holds before its first one is shared
    elif history.entry(f.epoch) is None and f.epoch < history.last_epoch():
        # this log lacks the epoch the consumer read in (its writer's term was cut from
        # here: a master restarted after a power loss wrote it over a slave's longer log,
        # and that slave was promoted next): the records read may differ from here from the
        # start of the newest epoch before it, which both logs share up to wherever that
        # term ended (storage seed 3026: Kafka's rule, the next epoch's start, kept a
        # consumer past records it had never read)
        end = min(end, max((e.start_offset for e in history.entries if e.epoch < f.epoch), default=0))
    offset = f.offset
    if end <= f.commitlog_offset:
        offset = min(offset, s.store.get_queue_offset_at_or_after(f.topic, f.queue_id, end))
    return OffsetForEpochReply(offset=offset, end_offset=end, node_epoch=history.last_epoch(),
                               diverged=end <= f.commitlog_offset).to_wire(r.id)


async def _query_by_key(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    f = r.fields
    found = s.store.query_message(f.topic, f.key, f.max_num, f.begin_ts, f.end_ts)
    found = _fit(found, s.cfg.max_frame_size - _FRAME_MARGIN)
    return MessagesReply(messages=[WireMessage.of(m) for m in found]).to_wire(r.id)


async def _get_by_msg_id(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    msg = s.store.look_message_by_msg_id(r.fields.msg_id)
    if msg is None:
        raise OpError(Status.NOT_FOUND, f"no message with msgId {r.fields.msg_id} on this node")
    return MessageReply(message=WireMessage.of(msg)).to_wire(r.id)


async def _offset_by_time(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    f = r.fields
    return OffsetReply(offset=s.store.get_offset_in_queue_by_time(f.topic, f.queue_id, f.timestamp)).to_wire(r.id)


async def _min_offset(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    return OffsetReply(offset=s.store.get_min_offset_in_queue(r.fields.topic, r.fields.queue_id)).to_wire(r.id)


async def _max_offset(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    return OffsetReply(offset=s.store.get_max_offset_in_queue(r.fields.topic, r.fields.queue_id)).to_wire(r.id)


async def _commit_offset(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    checked = await check_committable(s)
    f = r.fields
    s.offsets.commit(f.group, f.topic, f.queue_id, f.offset)
    store_cfg = s.store.config
    short = await replicate_commit(s.ha_master, store_cfg.broker_role,
                                   OffsetEntry(f.group, f.topic, f.queue_id, f.offset), store_cfg.slave_timeout / 1000)
    await confirm_write(s, checked)  # (SLAVE_NOT_AVAILABLE here promises nothing: no shrink first)
    if short is not None:  # stored on the master, not confirmed on its slaves (as a put's status)
        return {**EmptyReply().to_wire(r.id), "status": short.value}
    return EmptyReply().to_wire(r.id)


async def _fetch_offset(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    f = r.fields
    offset = s.offsets.fetch(f.group, f.topic, f.queue_id)
    if offset is None:
        raise OpError(
            Status.NOT_FOUND,
            f"group {f.group!r} has no committed offset for {f.topic}:{f.queue_id}",
        )
    return OffsetReply(offset=offset).to_wire(r.id)


async def _offset_list(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    held = not s.is_master or (s.failover is not None and s.failover.candidate)  # not the group's table
    return OffsetListReply(offsets=[e.to_wire() for e in s.offsets.entries()], held=held).to_wire(r.id)


PULL_HANDLERS: dict[type[WireRequest], Handler] = {
    Pull: _pull,
    QueryByKey: _query_by_key,
    GetByMsgId: _get_by_msg_id,
    OffsetByTime: _offset_by_time,
    MinOffset: _min_offset,
    MaxOffset: _max_offset,
    CommitOffset: _commit_offset,
    FetchOffset: _fetch_offset,
    OffsetList: _offset_list,
    OffsetForEpoch: _offset_for_epoch,
}
