"""Consumer-group operations: member heartbeats, unregistration, the member list, and
consume-retry (RocketMQ's ClientManageProcessor and SendMessageProcessor.consumerSendMsgBack).

A heartbeat on a master also creates the group's retry topic `%RETRY%<group>` (1 queue),
as RocketMQ does, so every member finds it in the routes. `consumer_send_back` stores a
message the group failed to consume again on `%RETRY%<group>` with delay level
3 + reconsumeTimes (or the level asked for), or on `%DLQ%<group>` once reconsumeTimes
reaches the maximum (16 by default). Only a message the group could have received may go
back (a topic it consumes, or its retry topic), and with logins only one the caller may read
(`Request.reader`): otherwise it is NO_PERMISSION and nothing is written. tidemq's DLQ is readable and writeable (RocketMQ
creates it write-only), so `tidemq consume --topic %DLQ%<group>` shows what gave up.
"""

from __future__ import annotations

from typing import Any

import trio

from store.message import Message
from store.properties import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_WAIT,
)
from store.schedule import SCHEDULE_TOPIC
from wire.protocol import (
    ConsumerHeartbeat,
    ConsumerList,
    ConsumerListReply,
    ConsumerLock,
    ConsumerSendBack,
    ConsumerUnlock,
    ConsumerUnregister,
    ConsumerUnregisterReply,
    ConsumerWatch,
    EmptyReply,
    LockReply,
    MembersReply,
    Request,
    SendBackReply,
    Status,
    WireRequest,
)

from ..tables.topics import DEFAULT_PERM
from .puts import Handler, put_response
from .services import NodeServices, OpError, refuse_on_slave

__all__ = ["CONSUMER_HANDLERS", "DLQ_PREFIX", "RETRY_PREFIX", "dlq_topic", "retry_topic"]

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
RETRY_DELAY_BASE = 3
"""The n-th retry (reconsumeTimes n, from 0) goes back with delay level 3 + n."""


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group


async def _heartbeat(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    f = r.fields
    members = s.consumers.heartbeat(f.group, f.client_id, f.topics, f.heartbeat_interval_ms, peer,
                                    broadcasting=f.message_model == "BROADCASTING")
    if s.is_master and s.topics.get(retry_topic(f.group)) is None:
        await s.topics.create(retry_topic(f.group), 1, 1, DEFAULT_PERM)
    return MembersReply(members=members, version=s.consumers.version(f.group)).to_wire(r.id)


async def _watch(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    """Answer once the group changed since version `since` (a member joined or left, a
    queue lock was let go), or after `timeout_ms`: members rebalance at once on a change
    (RocketMQ's NOTIFY_CONSUMER_IDS_CHANGED, as a long poll on the member's connection)."""
    f = r.fields
    with s.long_poll(trio.current_time() + f.timeout_ms / 1000):
        await s.consumers.wait_changed(f.group, f.since)
    return MembersReply(members=s.consumers.members(f.group), version=s.consumers.version(f.group)).to_wire(r.id)


async def _unregister(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    f = r.fields
    removed = s.consumers.unregister(f.group, f.client_id)
    return ConsumerUnregisterReply(removed=removed, members=s.consumers.members(f.group)).to_wire(r.id)


async def _list(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    group = r.fields.group
    return ConsumerListReply(members=s.consumers.members(group), details=s.consumers.describe(group),
                             locks=s.consumers.lock_holders(group), version=s.consumers.version(group)).to_wire(r.id)


async def _lock(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    """Queue locks live on the master only (a slave's table would be a second one)."""
    refuse_on_slave(s, "queue locks")
    f = r.fields
    held = s.consumers.lock(f.group, f.client_id, f.topic, f.queue_ids, f.life_ms / 1000 if f.life_ms else None,
                            renew=f.renew)
    return LockReply(locked=held).to_wire(r.id)


async def _unlock(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    f = r.fields
    s.consumers.unlock(f.group, f.client_id, f.topic, f.queue_ids)
    return EmptyReply().to_wire(r.id)


def _delivery_topic(topic: str, properties: dict[str, str]) -> str:
    """The topic a stored message is delivered on: a delayed one waits on the schedule
    topic for its REAL_TOPIC."""
    if topic == SCHEDULE_TOPIC:
        return properties.get(PROPERTY_REAL_TOPIC) or topic
    return topic


def _may_have_received(s: NodeServices, group: str, topic: str, queue_id: int) -> bool:
    """Whether `group` could have been delivered a message of `topic`: its own retry topic,
    a topic a live member subscribes to here, or one it committed an offset for (a member
    whose heartbeat has not reached a new master yet)."""
    return (topic == retry_topic(group) or s.consumers.subscribes(group, topic)
            or s.offsets.fetch(group, topic, queue_id) is not None)


async def _send_back(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    refuse_on_slave(s, "consume retries")
    f = r.fields
    group = f.group
    old = s.store.look_message_by_offset(f.commitlog_offset)
    if old is None:
        raise OpError(Status.NOT_FOUND, f"no message at CommitLog offset {f.commitlog_offset} on "
                                        f"{s.cfg.broker_name}")
    lacking = r.reader(old.topic, old.properties) if r.reader is not None else None
    if lacking is not None:  # the copy would show the caller a message it may not read
        raise OpError(Status.NO_PERMISSION, f"consumer_send_back: {lacking} (the message at CommitLog offset "
                                            f"{f.commitlog_offset})")
    if not _may_have_received(s, group, _delivery_topic(old.topic, old.properties), old.queue_id):
        raise OpError(Status.NO_PERMISSION, f"consumer_send_back: the message at CommitLog offset "
                                            f"{f.commitlog_offset} is on topic {old.topic!r}, which group "
                                            f"{group!r} does not consume on {s.cfg.broker_name}")
    props = {k: v for k, v in old.properties.items() if k not in (PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_DELAY)}
    props.setdefault(PROPERTY_RETRY_TOPIC, old.topic)
    props[PROPERTY_ORIGIN_MESSAGE_ID] = (
        f.origin_msg_id or props.get(PROPERTY_ORIGIN_MESSAGE_ID) or old.uniq_key or old.msg_id
    )
    settings = s.subgroups.get(group)  # the broker's setting wins over the member's
    max_times = settings.retry_max_times if settings is not None else f.max_reconsume_times
    level = f.delay_level
    if old.reconsume_times >= max_times or level < 0:
        topic, level = dlq_topic(group), 0
    else:
        topic = retry_topic(group)
        level = level or RETRY_DELAY_BASE + old.reconsume_times
        props[PROPERTY_DELAY] = str(level)
    props[PROPERTY_RECONSUME_TIME] = str(old.reconsume_times + 1)
    props[PROPERTY_MAX_RECONSUME_TIMES] = str(max_times)
    props[PROPERTY_WAIT] = "true"
    if s.topics.get(topic) is None:
        await s.topics.create(topic, 1, 1, DEFAULT_PERM)
    msg = Message(
        topic=topic, body=old.body, queue_id=0, tags=old.tags, keys=old.keys, properties=props,
        flag=old.flag, born_timestamp=old.born_timestamp, born_host=old.born_host,
        reconsume_times=old.reconsume_times + 1,
    )
    result = await s.store.put_message(msg)
    if not result.status.stored:
        return put_response(r.id, result, 0, batch=False)
    append = result.append
    assert append is not None  # a stored put was appended
    return SendBackReply(status=Status(result.status.value), msg_id=append.msg_id, queue_id=0,
                         queue_offset=append.queue_offset, commitlog_offset=append.wrote_offset, topic=topic,
                         delay_level=level, reconsume_times=old.reconsume_times + 1).to_wire(r.id)


CONSUMER_HANDLERS: dict[type[WireRequest], Handler] = {
    ConsumerHeartbeat: _heartbeat,
    ConsumerUnregister: _unregister,
    ConsumerWatch: _watch,
    ConsumerList: _list,
    ConsumerLock: _lock,
    ConsumerUnlock: _unlock,
    ConsumerSendBack: _send_back,
}
