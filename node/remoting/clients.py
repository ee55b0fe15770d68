"""Clients and groups over remoting: heartbeats, unregistration, the member list and its
change notices, queue locks for orderly consumers, and consume retries (send-back).

Everything goes through the CBOR ops' schema and tables (node/ops/consumers.py,
node/tables/consumers.py), so one consumer group may mix tidemq and RocketMQ members: they
see each other in the member list, share queue locks, and send back into one retry topic.

A remoting member's heartbeat also records its channel per (group, client id), and the
consumer table's membership listener pushes NOTIFY_CONSUMER_IDS_CHANGED to every remoting
member of a group on each join or leave, whichever protocol caused it (a heartbeat, an
unregister, a closed connection, an expiry). The C++ client rebalances at once on it. An
expiry is recorded at the group's next access, so no timer runs: a live member's member
list (C++ rebalances every 10 s) or heartbeat (30 s) records it and sends the notices.
A producer group in a heartbeat registers the channel for that producer's transaction
checks (CHECK_TRANSACTION_STATE, transactions.py) until it closes or unregisters.

A member whose heartbeat says messageModel BROADCASTING is listed with its group but takes
no share: GET_CONSUMER_LIST_BY_GROUP (what clustering members allocate by) leaves it out.
It keeps its offsets itself and never sends UPDATE_CONSUMER_OFFSET or a pull's commit flag.
"""

from __future__ import annotations

import logging
import weakref
from collections import defaultdict
from typing import Any

import attrs

from wire.protocol import LOCK_LIFE_MS
from wire.remoting.bodies import BodyError, json_body, parse_json_body
from wire.remoting.codes import RequestCode, ResponseCode
from wire.remoting.command import RemotingCommand
from wire.remoting.headers import ext_int, ext_str

from ..ops.dispatch import handle_request
from ..ops.services import NodeServices
from ..tables.consumers import ConsumerManager
from .answers import response_code
from .channel import Processor, ProcessorContext, RemotingChannel
from .subscriptions import heartbeat_subscriptions, sql_subscriptions
from .transactions import push_checks

__all__ = ["CLIENT_PROCESSORS", "HEARTBEAT_INTERVAL_MS", "LOCK_LIFE_S", "Heartbeat", "RemotingMembers",
           "channel_closed", "parse_heartbeat", "remoting_members"]

log = logging.getLogger("tidemq.remoting")

HEARTBEAT_INTERVAL_MS = 30_000
"""RocketMQ's clients heartbeat every 30 s; with it the table drops a silent member after
its 120 s channelExpiredTimeout, as RocketMQ's broker does."""
LOCK_LIFE_S = LOCK_LIFE_MS / 1000
"""RocketMQ's lockMaxLiveTime: a queue lock not taken again within it may go to another
member (C++ re-locks every 20 s)."""


# ---------------------------------------------------------------- HeartbeatData


@attrs.frozen
class Heartbeat:
    """What a HEART_BEAT body says that the tables keep: the client, its producer groups,
    per consumer group the topics it subscribes to (its retry topic among them), and which
    of its consumer groups it consumes in BROADCASTING (every queue, its own offsets)."""

    client_id: str
    producer_groups: tuple[str, ...]
    consumer_groups: tuple[tuple[str, tuple[str, ...]], ...]
    broadcasting: frozenset[str] = frozenset()


def _objects(value: Any, what: str) -> list[dict[str, Any]]:
    """A JSON array of objects; absent (C++ leaves out empty arrays) is empty."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise BodyError(f"the heartbeat's {what} is not an array of objects")
    return value


def _name(obj: dict[str, Any], key: str, what: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise BodyError(f"the heartbeat's {what} has no {key}")
    return value


def _broadcasting(obj: dict[str, Any]) -> bool:
    """Whether a consumerDataSet entry's messageModel is BROADCASTING: the name from Java,
    the ordinal 0 from C++; absent is CLUSTERING (RocketMQ's default)."""
    model = obj.get("messageModel", "CLUSTERING")
    if model in ("BROADCASTING", 0):
        return True
    if model in ("CLUSTERING", 1):
        return False
    raise BodyError(f"the heartbeat's consumerDataSet has an unknown messageModel {model!r}")


def parse_heartbeat(body: bytes) -> Heartbeat:
    """A HeartbeatData body (facts §3.5). Names and the message model are read: the other
    enums (names from Java, ordinals from C++), subVersion (a number or a string), codeSet
    (wrong from C++) and the filter fields do not change what the tables keep."""
    data = parse_json_body(body, "heartbeat")
    client_id = data.get("clientID")
    if not isinstance(client_id, str) or not client_id:
        raise BodyError("the heartbeat has no clientID")
    producers = tuple(_name(p, "groupName", "producerDataSet") for p in _objects(data.get("producerDataSet"),
                                                                                 "producerDataSet"))
    consumers = []
    broadcasting = set()
    for c in _objects(data.get("consumerDataSet"), "consumerDataSet"):
        group = _name(c, "groupName", "consumerDataSet")
        subs = _objects(c.get("subscriptionDataSet"), "subscriptionDataSet")
        topics = tuple(dict.fromkeys(_name(s, "topic", "subscriptionDataSet") for s in subs))
        consumers.append((group, topics))
        if _broadcasting(c):
            broadcasting.add(group)
    return Heartbeat(client_id, producers, tuple(consumers), frozenset(broadcasting))


# ---------------------------------------------------------------- remoting members


class RemotingMembers:
    """(group, client id) → the channel its last heartbeat came on, so a change of the group
    reaches its remoting members (one per consumer table: `remoting_members`)."""

    def __init__(self) -> None:
        self._channels: dict[str, dict[str, RemotingChannel]] = defaultdict(dict)

    def attach(self, group: str, client_id: str, channel: RemotingChannel) -> None:
        self._channels[group][client_id] = channel

    def detach(self, group: str, client_id: str) -> None:
        members = self._channels.get(group)
        if members is not None:
            members.pop(client_id, None)
            if not members:
                del self._channels[group]

    def channel_closed(self, channel: RemotingChannel) -> None:
        for group, members in list(self._channels.items()):
            for client_id in [c for c, ch in members.items() if ch is channel]:
                self.detach(group, client_id)

    def channels(self, group: str) -> list[RemotingChannel]:
        return list(self._channels.get(group, {}).values())

    def notify(self, group: str) -> None:
        """The consumer table's membership listener: NOTIFY_CONSUMER_IDS_CHANGED (oneway)
        to each remoting member of the group, which rebalances at once."""
        for channel in self.channels(group):
            channel.push(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group})


_MEMBERS: weakref.WeakKeyDictionary[ConsumerManager, RemotingMembers] = weakref.WeakKeyDictionary()


def remoting_members(consumers: ConsumerManager) -> RemotingMembers:
    """The registry for this consumer table, listening to its membership changes (a node's
    new term builds a new table, and so gets a new registry)."""
    members = _MEMBERS.get(consumers)
    if members is None:
        members = _MEMBERS[consumers] = RemotingMembers()
        consumers.listeners.append(members.notify)
    return members


def channel_closed(services: NodeServices, channel: RemotingChannel) -> None:
    """A remoting connection ended: its members leave (as a CBOR disconnect makes them),
    which notifies the rest of their groups, and its channel is forgotten."""
    services.consumers.disconnected(channel.peer)
    remoting_members(services.consumers).channel_closed(channel)
    services.checks.forget_owner(channel)


# ---------------------------------------------------------------- processors


async def _run(proc: ProcessorContext, frame: dict[str, Any], peer: str | None) -> dict[str, Any]:
    """A CBOR op's map through the node's schema and handler: its answer map."""
    answer = await handle_request(proc.services, proc.request({"id": 0, **frame}), peer)
    assert isinstance(answer, dict)  # only sends answer with pre-encoded frames
    return answer


def _failed(cmd: RemotingCommand, answer: dict[str, Any]) -> RemotingCommand | None:
    """The error response for a CBOR answer that is not OK (None when it is)."""
    code = response_code(answer["status"])
    if code == ResponseCode.SUCCESS:
        return None
    return cmd.response(code, answer.get("error") or answer["status"])


async def _heart_beat(proc: ProcessorContext, cmd: RemotingCommand, channel: RemotingChannel) -> RemotingCommand:
    hb = parse_heartbeat(cmd.body)
    channel.client_id = hb.client_id
    beats = [proc.request({"op": "consumer_heartbeat", "id": 0, "group": group, "client_id": hb.client_id,
                           "topics": list(topics), "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
                           "message_model": "BROADCASTING" if group in hb.broadcasting else "CLUSTERING"})
             for group, topics in hb.consumer_groups]
    producers = [proc.request({"op": "producer_heartbeat", "id": 0, "group": group, "client_id": hb.client_id,
                               "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS})
                 for group in hb.producer_groups]
    members = remoting_members(proc.services.consumers)
    for (group, _), beat in zip(hb.consumer_groups, beats, strict=True):
        members.attach(group, hb.client_id, channel)  # before the join, whose notice it gets too
        answer = await handle_request(proc.services, beat, channel.peer)  # creates %RETRY%<group> on a master
        assert isinstance(answer, dict)
        if (failed := _failed(cmd, answer)) is not None:
            return failed
    declared = sql_subscriptions(proc.services.consumers)
    for group, topic, expression_type, expression, version in heartbeat_subscriptions(cmd.body):
        declared.declare(group, topic, expression_type, expression, version)
    for group, beat in zip(hb.producer_groups, producers, strict=True):
        answer = await handle_request(proc.services, beat, channel.peer)
        assert isinstance(answer, dict)
        if (failed := _failed(cmd, answer)) is not None:
            return failed
        push_checks(proc.services, group, channel, beat.publisher)  # CHECK_TRANSACTION_STATE
    return cmd.response(ResponseCode.SUCCESS)


async def _unregister_client(proc: ProcessorContext, cmd: RemotingCommand, channel: RemotingChannel,
                             ) -> RemotingCommand:
    client_id = ext_str(cmd.ext_fields, "clientID")
    producer_group = ext_str(cmd.ext_fields, "producerGroup", "")
    consumer_group = ext_str(cmd.ext_fields, "consumerGroup", "")
    if consumer_group:
        remoting_members(proc.services.consumers).detach(consumer_group, client_id)  # the rest hear of it
        await _run(proc, {"op": "consumer_unregister", "group": consumer_group, "client_id": client_id},
                   channel.peer)
    if producer_group:
        proc.services.checks.forget_pusher(producer_group, client_id)
        await _run(proc, {"op": "producer_unregister", "group": producer_group, "client_id": client_id},
                   channel.peer)
    return cmd.response(ResponseCode.SUCCESS)


async def _consumer_list(proc: ProcessorContext, cmd: RemotingCommand, channel: RemotingChannel) -> RemotingCommand:
    group = ext_str(cmd.ext_fields, "consumerGroup")
    answer = await _run(proc, {"op": "consumer_list", "group": group}, channel.peer)
    if (failed := _failed(cmd, answer)) is not None:
        return failed
    if not answer["members"]:
        return cmd.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
    return cmd.response(ResponseCode.SUCCESS, body=json_body({"consumerIdList": answer["members"]}))


def _lock_body(body: bytes, what: str) -> tuple[str, str, dict[str, list[dict[str, Any]]]]:
    """A LOCK/UNLOCK_BATCH_MQ body: group, client id, and its queues by topic."""
    data = parse_json_body(body, what)
    group, client_id = data.get("consumerGroup"), data.get("clientId")
    if not isinstance(group, str) or not isinstance(client_id, str):
        raise BodyError(f"the {what} body needs consumerGroup and clientId")
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for mq in data.get("mqSet") or []:
        if not isinstance(mq, dict) or not isinstance(mq.get("topic"), str) or not isinstance(mq.get("queueId"), int):
            raise BodyError(f"the {what} body has a queue without topic and queueId: {mq!r}")
        by_topic[mq["topic"]].append(mq)
    return group, client_id, by_topic


async def _lock_batch(proc: ProcessorContext, cmd: RemotingCommand, channel: RemotingChannel) -> RemotingCommand:
    group, client_id, by_topic = _lock_body(cmd.body, "lock batch")
    locked: list[dict[str, Any]] = []
    for topic, mqs in by_topic.items():
        answer = await _run(proc, {"op": "consumer_lock", "group": group, "client_id": client_id, "topic": topic,
                                   "queue_ids": [mq["queueId"] for mq in mqs], "life_ms": LOCK_LIFE_MS},
                            channel.peer)
        if (failed := _failed(cmd, answer)) is not None:
            return failed
        held = set(answer["locked"])
        locked.extend(mq for mq in mqs if mq["queueId"] in held)
    return cmd.response(ResponseCode.SUCCESS, body=json_body({"lockOKMQSet": locked}))


async def _unlock_batch(proc: ProcessorContext, cmd: RemotingCommand, channel: RemotingChannel) -> RemotingCommand:
    group, client_id, by_topic = _lock_body(cmd.body, "unlock batch")
    for topic, mqs in by_topic.items():
        answer = await _run(proc, {"op": "consumer_unlock", "group": group, "client_id": client_id, "topic": topic,
                                   "queue_ids": [mq["queueId"] for mq in mqs]}, channel.peer)
        if (failed := _failed(cmd, answer)) is not None:
            return failed
    return cmd.response(ResponseCode.SUCCESS)


async def _send_back(proc: ProcessorContext, cmd: RemotingCommand, channel: RemotingChannel) -> RemotingCommand:
    ext = cmd.ext_fields
    frame: dict[str, Any] = {"op": "consumer_send_back", "group": ext_str(ext, "group"),
                             "commitlog_offset": ext_int(ext, "offset"),
                             "delay_level": max(-1, ext_int(ext, "delayLevel", 0))}  # < 0: the DLQ
    max_times = ext_int(ext, "maxReconsumeTimes", -1)
    if max_times >= 0:
        frame["max_reconsume_times"] = max_times
    origin = ext_str(ext, "originMsgId", "")
    if origin:
        frame["origin_msg_id"] = origin
    answer = await _run(proc, frame, channel.peer)
    return _failed(cmd, answer) or cmd.response(ResponseCode.SUCCESS)


CLIENT_PROCESSORS: dict[int, Processor] = {
    RequestCode.HEART_BEAT: _heart_beat,
    RequestCode.UNREGISTER_CLIENT: _unregister_client,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: _consumer_list,
    RequestCode.LOCK_BATCH_MQ: _lock_batch,
    RequestCode.UNLOCK_BATCH_MQ: _unlock_batch,
    RequestCode.CONSUMER_SEND_MSG_BACK: _send_back,
}
