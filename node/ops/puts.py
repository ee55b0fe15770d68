"""The put pipeline: a send is checked (role, write permission, failover's epoch check,
topic and queue) and encoded, appended with the rest of its receive as one CommitLog group,
and answered after the flush or slave its WAIT asks for."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Literal, cast, overload

import attrs
import trio

from store.message import Message
from store.message_store import StoreUnavailableError
from store.properties import PROPERTY_WAIT
from store.puts import Appended, Prepared
from store.status import PutMessageResult, PutMessageStatus
from store.transaction import NOT_SENDABLE_TOPICS, is_prepared
from wire.protocol import (
    BatchMessage,
    Request,
    Send,
    SendBatch,
    SendBatchReply,
    SendReply,
    Status,
    WireRequest,
    error_response,
)
from wire.remoting.plain_send import RemotingSend
from wire.send_codec import PlainBatch, PlainSend, send_batch_reply_frame, send_reply_frame

from .services import (
    NodeServices,
    OpError,
    check_writeable,
    confirm_write,
)
from .transactions import check_sendable, half_of, note_prepared

__all__ = ["PUT_HANDLERS", "Handler", "PendingPut", "append_sends", "finish_sends", "prepare_remoting_sends", "prepare_plain_sends", "put_response"]


async def _checked_topic(services: NodeServices, topic: str, queue_id: int | None) -> int:
    """The queue to write to: the topic must exist (or be auto-created), be writeable, and
    not be one only the broker writes."""
    check_sendable(topic)
    config = services.topics.get(topic) or await services.topics.for_send(topic)
    if config is None:
        raise OpError(
            Status.NOT_FOUND,
            f"topic {topic!r} does not exist on {services.cfg.broker_name} and autoCreateTopicEnable is off; "
            "create it with topic_create",
        )
    if not config.writeable:
        raise OpError(Status.SERVICE_NOT_AVAILABLE, f"topic {topic!r} is not writeable here (perm {config.perm})")
    if queue_id is None:
        return services.topics.select_queue(config)
    if queue_id >= config.write_queue_nums:
        raise OpError(
            Status.BAD_REQUEST,
            f"queue_id {queue_id} is out of range: topic {topic!r} has {config.write_queue_nums} write queues",
        )
    return queue_id


def _message(m: Send | BatchMessage, topic: str, queue_id: int, wait: bool, born_host: str | None,
             born_timestamp: int | None = None) -> Message:
    props = dict(m.properties)
    props[PROPERTY_WAIT] = "true" if wait else "false"
    return Message(
        topic=topic,
        body=m.body,
        queue_id=queue_id,
        tags=m.tags,
        keys=tuple(m.keys),
        properties=props,
        flag=m.flag,
        born_timestamp=born_timestamp,
        born_host=born_host,
    )


@overload
def put_response(request_id: int, result: PutMessageResult, queue_id: int, *, batch: bool,
                 encoded: Literal[False] = False) -> dict[str, Any]: ...


@overload
def put_response(request_id: int, result: PutMessageResult, queue_id: int, *, batch: bool,
                 encoded: bool) -> dict[str, Any] | bytes: ...


def put_response(request_id: int, result: PutMessageResult, queue_id: int, *, batch: bool,
                 encoded: bool = False) -> dict[str, Any] | bytes:
    """The answer to a put; a stored plain send's as its encoded frame when `encoded`."""
    status = result.status
    if not status.stored:  # a put whose flush failed may or may not last: INDETERMINATE
        wire_status = Status.INDETERMINATE if result.indeterminate else Status(status.value)
        return error_response(request_id, wire_status, result.error or status.value)
    append = result.append
    assert append is not None  # a stored put was appended
    if encoded:
        reply_frame = send_batch_reply_frame if batch else send_reply_frame
        return reply_frame(request_id, status.value, append.msg_id, queue_id, append.queue_offset, append.wrote_offset)
    reply_status = Status(status.value)  # a PutMessageStatus name is the Status name
    if batch:
        return SendBatchReply(status=reply_status, msg_ids=append.msg_id.split(","), queue_id=queue_id,
                              queue_offset=append.queue_offset, commitlog_offset=append.wrote_offset).to_wire(request_id)
    return SendReply(status=reply_status, msg_id=append.msg_id, queue_id=queue_id, queue_offset=append.queue_offset,
                     commitlog_offset=append.wrote_offset).to_wire(request_id)


@attrs.define(slots=True, eq=False)
class PendingPut:
    """A send checked and encoded: `append_sends` appends it with the rest of its group and
    `finish_sends` answers it after the flush or slave its WAIT asks for (one wait for the
    whole group)."""

    request_id: int
    prepared: Prepared | PutMessageResult
    wait: bool
    queue_id: int
    batch: bool
    waits: bool
    """Whether finishing may wait (SYNC_FLUSH / SYNC_MASTER and WAIT): the server finishes
    the others inline."""
    appended: Appended | None = None
    at: float = 0.0
    """trio time of the append: the group's timeouts count from its first append."""
    checked: float = 0
    """When the write check admitted it (trio time, `check_writeable`), for `confirm_write`."""
    encoded: bool = False
    """Answered with its encoded frame when stored (a plain send of the compiled path)."""
    topic: str = ""
    """For the per-topic stats (statsAll)."""
    on_append: Callable[[Appended], None] | None = None
    """Told the append's result (a half message's, for the transaction table)."""
    reply: Callable[[int, str, str, int, int], Any] | None = None
    """Answers it when stored, from (request id, status, msgId, queue id, queue offset), instead of the
    CBOR reply (the remoting fast path's templated answer, node/remoting/fastsend.py)."""


async def _send(s: NodeServices, r: Request, peer: str | None) -> PendingPut:
    checked = await check_writeable(s)
    f = r.fields
    queue_id = await _checked_topic(s, f.topic, f.queue_id)
    msg = _message(f, f.topic, queue_id, f.wait, peer, f.born_timestamp)
    on_append = None
    if is_prepared(msg.properties):  # a transaction's half message (node/ops/transactions.py)
        msg = await half_of(s, msg)
        on_append = partial(note_prepared, s.transactions, msg)
    prepared = s.store.puts.prepare_message(msg)
    return PendingPut(r.id, prepared, f.wait, queue_id, False, s.store.puts.put_waits(f.wait), checked=checked,
                      topic=msg.topic, on_append=on_append)


async def _send_batch(s: NodeServices, r: Request, peer: str | None) -> PendingPut:
    checked = await check_writeable(s)
    f = r.fields
    queue_id = await _checked_topic(s, f.topic, f.queue_id)
    if any(is_prepared(m.properties) for m in f.messages):
        raise OpError(Status.BAD_REQUEST, "a batch may not hold transactional messages (TRAN_MSG=true): send each alone")
    msgs = [_message(m, f.topic, queue_id, f.wait, peer) for m in f.messages]
    return PendingPut(r.id, s.store.puts.prepare_batch(msgs), f.wait, queue_id, True, s.store.puts.put_waits(f.wait),
                      checked=checked, topic=f.topic)


async def _fast_path_checked(s: NodeServices) -> float | None:
    """The write check's token for a run of sends on a compiled path, or None when the
    check or the store refuses (the reference path then answers each send why)."""
    try:
        checked = await check_writeable(s)
    except (OpError, StoreUnavailableError):
        return None
    return None if s.store.puts.refusal() is not None else checked


async def prepare_plain_sends(s: NodeServices, sends: list[PlainSend | PlainBatch], peer: str | None,
                              ) -> list[PendingPut | None]:
    """The compiled send path's step for a receive's run of plain sends and batches
    (wire/send_codec.py): one write check for the run, each record built without its
    Message, each answer to be encoded without a map. None for a send off that path (the
    write check or the store refuses, a topic to auto-create or not writeable, a queue out
    of range, a record the encoder refuses): the caller runs the reference path for it,
    which answers why."""
    checked = await _fast_path_checked(s)
    if checked is None:
        return [None] * len(sends)
    puts = s.store.puts
    topics = s.topics
    out: list[PendingPut | None] = []
    for p in sends:
        config = topics.get(p.topic)
        queue_id = p.queue_id
        if config is None or p.topic in NOT_SENDABLE_TOPICS or not config.writeable or (queue_id is not None and queue_id >= config.write_queue_nums):
            out.append(None)
            continue
        if queue_id is None:
            queue_id = topics.select_queue(config)
        batch = isinstance(p, PlainBatch)
        if isinstance(p, PlainBatch):
            prepared = puts.prepare_plain_batch(p.topic, queue_id, p.messages, peer)
        else:  # a PlainSend
            prepared = puts.prepare_plain(p.topic, p.body, queue_id, p.tags, p.flag, p.born_timestamp, peer)
        out.append(None if prepared is None else PendingPut(
            p.id, prepared, p.wait, queue_id, batch, puts.put_waits(p.wait), checked=checked, encoded=True,
            topic=p.topic))
    return out


async def prepare_remoting_sends(s: NodeServices, sends: Sequence[RemotingSend], peer: str | None,
                                 reply: Callable[[int, str, str, int, int], Any]) -> list[PendingPut | None]:
    """`prepare_plain_sends` for remoting sends the fast path read, with keys and other
    properties (their topics valid, their fields as the schema would take them): one write
    check for the run, each to be answered with `reply(opaque, status, msgId, queue id,
    queue offset)` when stored. None for a send off that path: the caller runs the
    reference path for it, which answers why."""
    checked = await _fast_path_checked(s)
    if checked is None:
        return [None] * len(sends)
    puts = s.store.puts
    topics = s.topics
    out: list[PendingPut | None] = []
    for f in sends:
        config = topics.get(f.topic)
        if config is None or f.topic in NOT_SENDABLE_TOPICS or is_prepared(f.properties) or not config.writeable or f.queue_id >= config.write_queue_nums:
            out.append(None)
            continue
        prepared = puts.prepare_plain(f.topic, f.body, f.queue_id, f.tags, f.flag, f.born_timestamp, peer,
                                      f.properties, f.keys)
        out.append(None if prepared is None else PendingPut(
            f.opaque, prepared, f.wait, f.queue_id, False, puts.put_waits(f.wait), checked=checked, topic=f.topic,
            reply=reply))
    return out


def append_sends(s: NodeServices, pending: list[PendingPut]) -> None:
    """Append prepared sends, in order, as one CommitLog group."""
    s.stats.send_requests += len(pending)
    s.stats.send_groups += 1
    now = trio.current_time()
    for p, appended in zip(pending, s.store.puts.append_prepared([p.prepared for p in pending]), strict=True):
        p.appended = appended
        p.at = now
        if p.on_append is not None:
            p.on_append(appended)


async def finish_sends(s: NodeServices, pending: list[PendingPut]) -> list[dict[str, Any] | bytes]:
    """The responses to appended sends, in order: one wait for the group (store.finish_puts)."""
    since = min(p.at for p in pending)
    if any(p.appended is None for p in pending):  # a send finished on its own
        append_sends(s, [p for p in pending if p.appended is None])
        since = min(p.at for p in pending)
    results = await s.store.puts.finish_puts([(cast(Appended, p.appended), p.wait) for p in pending], since=since)
    stored = 0
    by_topic: dict[str, list[int]] = {}  # topic → [messages, bytes]
    for p, result in zip(pending, results, strict=True):
        if result.status.stored:
            stored += result.msg_num
            counts = by_topic.get(p.topic)
            if counts is None:
                counts = by_topic[p.topic] = [0, 0]
            counts[0] += result.msg_num
            counts[1] += result.append.wrote_bytes if result.append is not None else 0
    stats = s.stats
    if stored:
        stats.put.add(stored)
        for topic, (n, size) in by_topic.items():
            stats.add_put(topic, n)
            stats.add_put_bytes(topic, n, size)
    stats.add_send_latency((trio.current_time() - since) * 1000, len(pending), stored > 0)
    try:
        unreplicated = any(r.status is PutMessageStatus.SLAVE_NOT_AVAILABLE for r in results)
        await confirm_write(s, min(p.checked for p in pending), unreplicated=unreplicated)
    except OpError as e:  # stored, but this node may no longer acknowledge it
        return [error_response(p.request_id, e.status, e.message) if result.status.stored
                else put_response(p.request_id, result, p.queue_id, batch=p.batch)
                for p, result in zip(pending, results, strict=True)]
    return [put_response(p.request_id, result, p.queue_id, batch=p.batch, encoded=p.encoded)
            if p.reply is None or result.append is None or not result.status.stored
            else p.reply(p.request_id, result.status.value, result.append.msg_id, p.queue_id,
                         result.append.queue_offset)
            for p, result in zip(pending, results, strict=True)]


Handler = Callable[[NodeServices, Request, "str | None"], Awaitable["dict[str, Any] | PendingPut"]]
"""An op's handler: a response map, or a checked send to append and answer later."""

PUT_HANDLERS: dict[type[WireRequest], Handler] = {
    Send: _send,
    SendBatch: _send_batch,
}
