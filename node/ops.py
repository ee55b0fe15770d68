"""The client protocol's operations: one validated Request in, one response map out.

docs/protocol.md is the contract. Every failure becomes a response here (store statuses,
BAD_REQUEST, NOT_FOUND, SERVICE_NOT_AVAILABLE, INTERNAL_ERROR with the cause), so the
connection layer (node/server.py) only moves frames.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol

import attrs
import psutil
import trio

from ha.master import HAService
from ha.slave import HAClient
from store import runtime
from store.message import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_WAIT, Message, StoredMessage
from store.message_store import GetMessageResult, MessageStore, StoreUnavailableError
from store.puts import Appended, Prepared
from store.status import GetMessageStatus, PutMessageResult, PutMessageStatus
from wire.protocol import (
    BatchMessage,
    BrokerConfigReply,
    BrokerConfigUpdateReply,
    DeletedFilesReply,
    EmptyReply,
    EpochReply,
    MessageReply,
    MessagesReply,
    OffsetListReply,
    OffsetReply,
    ProducerListReply,
    ProducerUnregisterReply,
    PromoteReply,
    PullReply,
    Request,
    Send,
    SendBatchReply,
    SendReply,
    StatsAllReply,
    Status,
    StatusReply,
    SubGroupDeleteReply,
    SubGroupListReply,
    SubGroupReply,
    TopicDeleteReply,
    TopicListReply,
    TopicReply,
    TopicStatusReply,
    WritePermReply,
    error_response,
)
from wire.send_codec import PlainBatch, PlainSend, send_batch_reply_frame, send_reply_frame

from .config import BrokerConfig, ConfigError
from .live_config import LIVE_KEYS, apply_live_value, config_view
from .schedule import ScheduleMessageService
from .stats import BrokerStats
from .tables.consumers import ConsumerManager
from .tables.jsonfile import ConfigFileError, read_json, write_json_atomic
from .tables.offsets import ConsumerOffsetManager
from .tables.producers import ProducerManager
from .tables.subscription_groups import SubscriptionGroupManager
from .tables.topics import TopicConfigManager


class FailoverHooks(Protocol):
    """What the ops ask of node/failover/promotion.py's Failover: typed here, so ops (below failover,
    which raises OpError and is handed NodeServices) does not import it."""

    async def before_write(self) -> int: ...

    async def after_write(self, checked: int) -> None: ...

    def status(self) -> dict[str, Any]: ...

    def epoch_answer(self) -> dict[str, Any]: ...

    async def promote(self, role: str | None) -> dict[str, Any]: ...

log = logging.getLogger("tidemq.node")

__all__ = ["CORE_HANDLERS", "Handler", "NodeServices", "OpError", "PendingPut", "append_sends", "finish_sends", "message_map",
           "prepare_plain_sends"]

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


class OpError(Exception):
    """A request that fails with a node status (not a store status)."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@attrs.define(eq=False)
class NodeServices:
    """What the operations act on: one node's store, tables and replication services."""

    cfg: BrokerConfig
    store: MessageStore
    topics: TopicConfigManager
    offsets: ConsumerOffsetManager
    ha_master: HAService | None = None
    ha_client: HAClient | None = None
    slave_sync_status: Callable[[], dict[str, Any]] | None = None
    registration_status: Callable[[], list[dict[str, Any]]] | None = None
    security_status: Callable[[], dict[str, Any]] | None = None  # the client port's Guard, with aclEnable
    consumers: ConsumerManager = attrs.field(
        default=attrs.Factory(lambda s: ConsumerManager(expire_s=s.cfg.channel_expired_timeout / 1000),
                              takes_self=True))
    schedule: ScheduleMessageService | None = None
    subgroups: SubscriptionGroupManager = attrs.field(
        default=attrs.Factory(lambda s: SubscriptionGroupManager(s.cfg.store.store_path_root_dir), takes_self=True))
    stats: BrokerStats = attrs.field(factory=BrokerStats)
    producers: ProducerManager = attrs.field(
        default=attrs.Factory(lambda s: ProducerManager(expire_s=s.cfg.channel_expired_timeout / 1000),
                              takes_self=True))
    write_wiped: bool = attrs.field(default=attrs.Factory(lambda s: _read_write_wiped(s.cfg), takes_self=True))
    """mqadmin wipeWritePerm: the node refuses sends until addWritePerm (kept in
    `config/writePerm.json`, so a restart or a promotion keeps it)."""
    failover: FailoverHooks | None = None
    stopping: bool = False
    _long_polls: set[trio.CancelScope] = attrs.field(factory=set)

    @property
    def is_master(self) -> bool:
        return self.cfg.role.is_master

    @contextlib.contextmanager
    def long_poll(self, deadline: float) -> Iterator[trio.CancelScope]:
        """A cancel scope for one pull's wait, cancelled early by `stop_long_polls`."""
        with trio.CancelScope(deadline=deadline) as scope:
            self._long_polls.add(scope)
            try:
                yield scope
            finally:
                self._long_polls.discard(scope)

    def stop_long_polls(self) -> None:
        """Shutdown: pulls waiting for messages answer now with what they have."""
        self.stopping = True
        for scope in list(self._long_polls):
            scope.cancel()


def _write_perm_path(cfg: BrokerConfig) -> str:
    return cfg.store.path("config", "writePerm.json")


def _read_write_wiped(cfg: BrokerConfig) -> bool:
    path = _write_perm_path(cfg)
    raw = read_json(path)
    if raw is None:
        return False
    if not isinstance(raw, dict) or type(raw.get("writeable")) is not bool:
        raise ConfigFileError(f"{path}: expected {{\"writeable\": true|false}}, got {raw!r}")
    return not raw["writeable"]


def _refuse_on_slave(services: NodeServices, what: str) -> None:
    if not services.is_master:
        raise OpError(
            Status.SERVICE_NOT_AVAILABLE,
            f"this node is a SLAVE and refuses {what}; send it to the master of {services.cfg.broker_name}",
        )


def message_map(m: StoredMessage) -> dict[str, Any]:
    """A stored message as the protocol's message map (TAGS/KEYS have their own fields)."""
    return {
        "topic": m.topic,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "commitlog_offset": m.commitlog_offset,
        "msg_id": m.msg_id,
        "body": m.body,
        "tags": m.tags,
        "keys": list(m.keys),
        "properties": {k: v for k, v in m.properties.items() if k not in (PROPERTY_TAGS, PROPERTY_KEYS)},
        "born_timestamp": m.born_timestamp,
        "store_timestamp": m.store_timestamp,
        "flag": m.flag,
        "reconsume_times": m.reconsume_times,
        # the record's own fields, so a reader (the pipeline's live source) sees what a
        # store scan sees and can check the body against the stored CRC
        "size": m.size,
        "sys_flag": m.sys_flag,
        "born_host": m.born_host,
        "body_crc": m.body_crc,
    }


def _fit(messages: list[StoredMessage], budget: int) -> list[StoredMessage]:
    """The longest prefix whose maps fit a response frame (at least one message: the
    config guarantees a maxMessageSize body fits maxFrameSize)."""
    total = 0
    for i, m in enumerate(messages):
        total += len(m.body) + _MESSAGE_OVERHEAD + sum(len(k) + len(v) for k, v in m.properties.items())
        if total > budget and i > 0:
            return messages[:i]
    return messages


# ---------------------------------------------------------------- writes


async def _checked_topic(services: NodeServices, topic: str, queue_id: int | None) -> int:
    """The queue to write to: the topic must exist (or be auto-created) and be writeable."""
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


def _put_response(request_id: int, result: PutMessageResult, queue_id: int, *, batch: bool,
                  encoded: bool = False) -> dict[str, Any] | bytes:
    """The answer to a put; a stored plain send's as its encoded frame when `encoded`."""
    status = result.status
    if not status.stored:
        return error_response(request_id, Status(status.value), result.error or status.value)
    append = result.append
    if encoded:
        reply_frame = send_batch_reply_frame if batch else send_reply_frame
        return reply_frame(request_id, status.value, append.msg_id, queue_id, append.queue_offset, append.wrote_offset)
    reply_status = Status(status.value)  # a PutMessageStatus name is the Status name
    if batch:
        return SendBatchReply(status=reply_status, msg_ids=append.msg_id.split(","), queue_id=queue_id,
                              queue_offset=append.queue_offset, commitlog_offset=append.wrote_offset).to_wire(request_id)
    return SendReply(status=reply_status, msg_id=append.msg_id, queue_id=queue_id, queue_offset=append.queue_offset,
                     commitlog_offset=append.wrote_offset).to_wire(request_id)


async def _check_writeable(s: NodeServices) -> int:
    """A slave refuses writes; a master asks for the group's epoch first when it must
    (fencing). Returns the token `_confirm_write` takes (Failover's stall count)."""
    _refuse_on_slave(s, "writes")
    if s.write_wiped:
        raise OpError(Status.SERVICE_NOT_AVAILABLE,
                      f"{s.cfg.broker_name}'s write permission is wiped (admin wipeWritePerm): it refuses sends "
                      "until admin addWritePerm")
    if s.failover is not None:
        return await s.failover.before_write()
    return 0


async def _confirm_write(s: NodeServices, checked: int, *, unreplicated: bool = False) -> None:
    """A stored write is not acknowledged by a node that a newer epoch replaced, or whose
    lease ran out, or that stalled since `checked` and cannot confirm its epoch, or (some
    of it `unreplicated`, SLAVE_NOT_AVAILABLE) whose in-sync set cannot shrink: raises
    OpError(INDETERMINATE)."""
    if s.failover is not None:
        await s.failover.after_write(checked, unreplicated=unreplicated)


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
    checked: int = 0
    """What the write check returned (`_check_writeable`), for `_confirm_write`."""
    encoded: bool = False
    """Answered with its encoded frame when stored (a plain send of the compiled path)."""
    topic: str = ""
    """For the per-topic stats (statsAll)."""


async def _send(s: NodeServices, r: Request, peer: str | None) -> PendingPut:
    checked = await _check_writeable(s)
    f = r.fields
    queue_id = await _checked_topic(s, f.topic, f.queue_id)
    prepared = s.store.puts.prepare_message(_message(f, f.topic, queue_id, f.wait, peer, f.born_timestamp))
    return PendingPut(r.id, prepared, f.wait, queue_id, False, s.store.puts.put_waits(f.wait), checked=checked,
                      topic=f.topic)


async def _send_batch(s: NodeServices, r: Request, peer: str | None) -> PendingPut:
    checked = await _check_writeable(s)
    f = r.fields
    queue_id = await _checked_topic(s, f.topic, f.queue_id)
    msgs = [_message(m, f.topic, queue_id, f.wait, peer) for m in f.messages]
    return PendingPut(r.id, s.store.puts.prepare_batch(msgs), f.wait, queue_id, True, s.store.puts.put_waits(f.wait),
                      checked=checked, topic=f.topic)


async def prepare_plain_sends(s: NodeServices, sends: list[PlainSend | PlainBatch], peer: str | None,
                              ) -> list[PendingPut | None]:
    """The compiled send path's step for a receive's run of plain sends and batches
    (wire/send_codec.py): one write check for the run, each record built without its
    Message, each answer to be encoded without a map. None for a send off that path (the
    write check or the store refuses, a topic to auto-create or not writeable, a queue out
    of range, a record the encoder refuses): the caller runs the reference path for it,
    which answers why."""
    try:
        checked = await _check_writeable(s)
    except (OpError, StoreUnavailableError):
        return [None] * len(sends)
    puts = s.store.puts
    if puts.refusal() is not None:
        return [None] * len(sends)
    topics = s.topics
    out: list[PendingPut | None] = []
    for p in sends:
        config = topics.get(p.topic)
        queue_id = p.queue_id
        if config is None or not config.writeable or (queue_id is not None and queue_id >= config.write_queue_nums):
            out.append(None)
            continue
        if queue_id is None:
            queue_id = topics.select_queue(config)
        batch = type(p) is PlainBatch
        if batch:
            prepared = puts.prepare_plain_batch(p.topic, queue_id, p.messages, peer)
        else:
            prepared = puts.prepare_plain(p.topic, p.body, queue_id, p.tags, p.flag, p.born_timestamp, peer)
        out.append(None if prepared is None else PendingPut(
            p.id, prepared, p.wait, queue_id, batch, puts.put_waits(p.wait), checked=checked, encoded=True,
            topic=p.topic))
    return out


def append_sends(s: NodeServices, pending: list[PendingPut]) -> None:
    """Append prepared sends, in order, as one CommitLog group."""
    s.stats.send_requests += len(pending)
    s.stats.send_groups += 1
    now = trio.current_time()
    for p, appended in zip(pending, s.store.puts.append_prepared([p.prepared for p in pending]), strict=True):
        p.appended = appended
        p.at = now


async def finish_sends(s: NodeServices, pending: list[PendingPut]) -> list[dict[str, Any] | bytes]:
    """The responses to appended sends, in order: one wait for the group (store.finish_puts)."""
    since = min(p.at for p in pending)
    if any(p.appended is None for p in pending):  # a send finished on its own
        append_sends(s, [p for p in pending if p.appended is None])
        since = min(p.at for p in pending)
    results = await s.store.puts.finish_puts([(p.appended, p.wait) for p in pending], since=since)
    stored = 0
    by_topic: dict[str, int] = {}
    for p, result in zip(pending, results, strict=True):
        if result.status.stored:
            stored += result.msg_num
            by_topic[p.topic] = by_topic.get(p.topic, 0) + result.msg_num
    if stored:
        s.stats.put.add(stored)
        for topic, n in by_topic.items():
            s.stats.add_put(topic, n)
    try:
        unreplicated = any(r.status is PutMessageStatus.SLAVE_NOT_AVAILABLE for r in results)
        await _confirm_write(s, min(p.checked for p in pending), unreplicated=unreplicated)
    except OpError as e:  # stored, but this node may no longer acknowledge it
        return [error_response(p.request_id, e.status, e.message) if result.status.stored
                else _put_response(p.request_id, result, p.queue_id, batch=p.batch)
                for p, result in zip(pending, results, strict=True)]
    return [_put_response(p.request_id, result, p.queue_id, batch=p.batch, encoded=p.encoded)
            for p, result in zip(pending, results, strict=True)]


# ---------------------------------------------------------------- reads


async def _pull(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    f = r.fields
    if f.group is not None:
        settings = s.subgroups.get(f.group)
        if settings is not None and not settings.consume_enable:
            raise OpError(Status.NO_PERMISSION, f"consumer group {f.group!r} may not consume on {s.cfg.broker_name} "
                                                "(its consumption is disabled: updateSubGroup --consumeEnable)")
    topic, queue_id, offset = f.topic, f.queue_id, f.offset
    deadline = trio.current_time() + f.timeout_ms / 1000

    def read(at: int) -> GetMessageResult:
        return s.store.get_message(f.group or "", topic, queue_id, at, f.max_msgs, f.tag_filter)

    result = read(offset)
    while result.status in _WAITABLE and not s.stopping and trio.current_time() < deadline:
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
        s.stats.add_get(topic, f.group, len(messages))
    next_begin = result.next_begin_offset
    if len(messages) < len(result.messages):
        next_begin = result.messages[len(messages)].queue_offset
    return PullReply(status=Status(result.status.value), messages=[message_map(m) for m in messages],
                     next_begin_offset=next_begin, min_offset=result.min_offset,
                     max_offset=result.max_offset).to_wire(r.id)


async def _query_by_key(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    f = r.fields
    found = s.store.query_message(f.topic, f.key, f.max_num, f.begin_ts, f.end_ts)
    found = _fit(found, s.cfg.max_frame_size - _FRAME_MARGIN)
    return MessagesReply(messages=[message_map(m) for m in found]).to_wire(r.id)


async def _get_by_msg_id(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    msg = s.store.look_message_by_msg_id(r.fields.msg_id)
    if msg is None:
        raise OpError(Status.NOT_FOUND, f"no message with msgId {r.fields.msg_id} on this node")
    return MessageReply(message=message_map(msg)).to_wire(r.id)


async def _offset_by_time(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    f = r.fields
    return OffsetReply(offset=s.store.get_offset_in_queue_by_time(f.topic, f.queue_id, f.timestamp)).to_wire(r.id)


async def _min_offset(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    return OffsetReply(offset=s.store.get_min_offset_in_queue(r.fields.topic, r.fields.queue_id)).to_wire(r.id)


async def _max_offset(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    return OffsetReply(offset=s.store.get_max_offset_in_queue(r.fields.topic, r.fields.queue_id)).to_wire(r.id)


# ---------------------------------------------------------------- offsets and topics


async def _commit_offset(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    _refuse_on_slave(s, "offset commits")
    f = r.fields
    s.offsets.commit(f.group, f.topic, f.queue_id, f.offset)
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
    return OffsetListReply(offsets=[e.to_wire() for e in s.offsets.entries()]).to_wire(r.id)


async def _topic_create(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    _refuse_on_slave(s, "topic changes")
    f = r.fields
    config = await s.topics.create(f.topic, f.read_queue_nums, f.write_queue_nums, f.perm)
    return TopicReply(topic=config.to_wire()).to_wire(r.id)


async def _topic_delete(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    """Drop the topic from this master's table: routes lose it when the node registers
    again (at once), its slaves at their next topic sync; its files age out as usual."""
    _refuse_on_slave(s, "topic changes")
    return TopicDeleteReply(deleted=await s.topics.delete(r.fields.topic)).to_wire(r.id)


async def _subgroup_update(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    _refuse_on_slave(s, "subscription group changes")
    f = r.fields
    config = await s.subgroups.update(f.group, consume_enable=f.consume_enable, retry_max_times=f.retry_max_times)
    return SubGroupReply(group=config.to_wire()).to_wire(r.id)


async def _subgroup_list(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    return SubGroupListReply(groups=[c.to_wire() for c in s.subgroups.list()]).to_wire(r.id)


async def _topic_list(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    return TopicListReply(topics=[c.to_wire() for c in s.topics.list()]).to_wire(r.id)


async def _subgroup_delete(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    _refuse_on_slave(s, "subscription group changes")
    return SubGroupDeleteReply(deleted=await s.subgroups.delete(r.fields.group)).to_wire(r.id)


def _last_store_time(s: NodeServices, topic: str, queue_id: int, max_offset: int) -> int | None:
    """Store time of the queue's newest message (RocketMQ topicStatus's "last updated")."""
    cq = s.store.consume_queues.find(topic, queue_id)
    unit = cq.get_unit(max_offset - 1) if cq is not None and max_offset > 0 else None
    if unit is None:
        return None
    msg = s.store.look_message_by_offset(unit[0], unit[1])
    return msg.store_timestamp if msg is not None else None


async def _topic_status(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    topic = r.fields.topic
    config = s.topics.get(topic)
    if config is not None:
        queue_ids = list(range(max(config.read_queue_nums, config.write_queue_nums)))
    else:  # deleted from the table, its files not yet aged out
        queue_ids = sorted(s.store.consume_queues.topics().get(topic, []))
    if not queue_ids:
        raise OpError(Status.NOT_FOUND, f"topic {topic!r} is not on {s.cfg.broker_name}")
    queues = []
    for queue_id in queue_ids:
        max_offset = s.store.get_max_offset_in_queue(topic, queue_id)
        queues.append({"queue_id": queue_id, "min_offset": s.store.get_min_offset_in_queue(topic, queue_id),
                       "max_offset": max_offset,
                       "last_update_timestamp": _last_store_time(s, topic, queue_id, max_offset)})
    return TopicStatusReply(queues=queues).to_wire(r.id)


# ---------------------------------------------------------------- producer groups


async def _producer_heartbeat(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    f = r.fields
    s.producers.heartbeat(f.group, f.client_id, f.heartbeat_interval_ms, peer)
    return EmptyReply().to_wire(r.id)


async def _producer_unregister(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    return ProducerUnregisterReply(removed=s.producers.unregister(r.fields.group, r.fields.client_id)).to_wire(r.id)


async def _producer_list(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    return ProducerListReply(producers=s.producers.members(r.fields.group)).to_wire(r.id)


# ---------------------------------------------------------------- admin


def _ha_status(s: NodeServices) -> dict[str, Any]:
    if s.ha_master is not None:
        return {"slaves": [attrs.asdict(x) for x in s.ha_master.status()]}
    if s.ha_client is not None:
        return attrs.asdict(s.ha_client.status())
    return {}


async def _status(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    cfg, store = s.cfg, s.store
    root = store.config.store_path_root_dir
    disk = await runtime.run_sync(psutil.disk_usage, root)
    fields: dict[str, Any] = {
        "broker_cluster_name": cfg.broker_cluster_name,
        "broker_name": cfg.broker_name,
        "broker_id": cfg.broker_id,
        "role": cfg.role.value,
        "address": cfg.address,  # advertised (registered): a proxy's when one stands in front
        "ha_address": cfg.ha_address,
        "bind_address": cfg.bind_address,
        "ha_bind_address": cfg.ha_bind_address,
        "min_phy_offset": store.get_min_phy_offset(),
        "max_phy_offset": store.get_max_phy_offset(),
        "flushed_offset": store.replica_log.flushed(),
        "dispatch_behind_bytes": store.dispatch_behind_bytes(),
        "running_flags": store.flags.names(),
        # store time of the newest record dispatched: a slave's lag in seconds is the
        # master's minus its own
        "last_store_timestamp": store.checkpoint.logics_msg_timestamp if store.checkpoint else 0,
        "stats": s.stats.to_json(),
        "ha": _ha_status(s),
        "disk": {
            "path": root,
            "total": disk.total,
            "used": disk.used,
            "free": disk.free,
            "used_ratio": round(disk.used / disk.total, 4) if disk.total else 0.0,
        },
    }
    if s.slave_sync_status is not None:
        fields["sync"] = s.slave_sync_status()
    if s.registration_status is not None:
        fields["namesrv"] = s.registration_status()
    if s.schedule is not None:
        fields["schedule"] = s.schedule.status()
    if s.security_status is not None:
        fields["security"] = s.security_status()
    fields["consumer_groups"] = {g: s.consumers.members(g) for g in s.consumers.groups()}
    if s.failover is not None:
        fields.update(s.failover.status())
    return StatusReply(**fields).to_wire(r.id)


def _failover(s: NodeServices) -> FailoverHooks:
    if s.failover is None:
        raise OpError(Status.INTERNAL_ERROR, "this node runs without failover support")
    return s.failover


async def _epoch(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    return EpochReply(**_failover(s).epoch_answer()).to_wire(r.id)


async def _promote(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    failover = _failover(s)
    if failover.controller is not None:  # a manual promotion would be fenced at the next tick
        raise OpError(Status.BAD_REQUEST,
                      f"controllerMode etcd: etcd elects {s.cfg.broker_name}'s master, so a manual promotion "
                      "is refused; stop the current master (its lease is revoked and an in-sync slave is "
                      "elected) to move the leadership")
    return PromoteReply(**await failover.promote(r.fields.role)).to_wire(r.id)


async def _broker_config(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    return BrokerConfigReply(config=config_view(s.cfg), live_keys=list(LIVE_KEYS)).to_wire(r.id)


async def _broker_config_update(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    """mqadmin updateBrokerConfig: one key the node reads live (node/live_config.py)."""
    try:
        key, old, new = apply_live_value(s.cfg, r.fields.key, r.fields.value)
    except ConfigError as e:
        raise OpError(Status.BAD_REQUEST, str(e)) from None
    if key == "channelExpiredTimeout":  # the tables keep it in seconds
        s.consumers.expire_s = s.producers.expire_s = new / 1000
    log.warning("updateBrokerConfig: %s %r -> %r (until the node restarts)", key, old, new)
    return BrokerConfigUpdateReply(key=key, old=old, new=new).to_wire(r.id)


async def _broker_write_perm(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    """wipeWritePerm / addWritePerm on this node: persisted before the answer."""
    writeable = r.fields.writeable
    if s.write_wiped == (not writeable):
        return WritePermReply(writeable=writeable).to_wire(r.id)
    await runtime.run_sync(write_json_atomic, _write_perm_path(s.cfg), {"writeable": writeable})
    s.write_wiped = not writeable
    log.warning("%s: sends are %s (%s)", s.cfg.broker_name, "accepted again" if writeable else "REFUSED",
                "addWritePerm" if writeable else "wipeWritePerm")
    return WritePermReply(writeable=writeable).to_wire(r.id)


async def _stats_all(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    topics, groups = s.stats.by_topic()
    return StatsAllReply(topics=topics, groups=groups).to_wire(r.id)


async def _delete_expired_files(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    delete = getattr(s.store, "delete_expired_files_manually", None)
    if delete is None:
        raise OpError(Status.INTERNAL_ERROR, "manual deletion of expired files is not available in this build")
    result = delete()
    if inspect.isawaitable(result):
        result = await result
    if isinstance(result, bool) or not isinstance(result, int):
        result = len(result) if isinstance(result, list | tuple) else 0
    return DeletedFilesReply(deleted_files=result).to_wire(r.id)


Handler = Callable[[NodeServices, Request, "str | None"], Awaitable["dict[str, Any] | PendingPut"]]
CORE_HANDLERS: dict[str, Handler] = {
    "send": _send,
    "send_batch": _send_batch,
    "pull": _pull,
    "query_by_key": _query_by_key,
    "get_by_msg_id": _get_by_msg_id,
    "offset_by_time": _offset_by_time,
    "min_offset": _min_offset,
    "max_offset": _max_offset,
    "commit_offset": _commit_offset,
    "fetch_offset": _fetch_offset,
    "offset_list": _offset_list,
    "topic_create": _topic_create,
    "topic_delete": _topic_delete,
    "subgroup_update": _subgroup_update,
    "subgroup_list": _subgroup_list,
    "subgroup_delete": _subgroup_delete,
    "producer_heartbeat": _producer_heartbeat,
    "producer_unregister": _producer_unregister,
    "producer_list": _producer_list,
    "topic_status": _topic_status,
    "broker_config": _broker_config,
    "broker_config_update": _broker_config_update,
    "broker_write_perm": _broker_write_perm,
    "stats_all": _stats_all,
    "topic_list": _topic_list,
    "status": _status,
    "admin.delete_expired_files": _delete_expired_files,
    "epoch": _epoch,
    "promote": _promote,
}
