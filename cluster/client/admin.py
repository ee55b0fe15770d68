"""Admin: status, topics, queries and maintenance across a cluster (see cluster.client)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any, Unpack

import attrs
import trio

from store.msg_id import decode_msg_id
from wire.client import (
    BadRequest,
    NotFound,
    OutcomeUnknown,
    ServiceUnavailable,
    TidemqError,
)
from wire.options import ConnectKeywords, ConnectOptions
from wire.protocol import (
    INT64_MAX,
    AclChangeReply,
    AclList,
    AclListReply,
    AclPut,
    AclRemove,
    BrokerConfigReply,
    BrokerConfigUpdateReply,
    BrokerWritePerm,
    CommitOffset,
    ConsumerList,
    ConsumerListReply,
    CountMessages,
    CountMessagesReply,
    DeleteExpiredFiles,
    FetchOffset,
    GetBrokerConfig,
    GetByMsgId,
    GetStatus,
    MaxOffset,
    MessageReply,
    MinOffset,
    OffsetByTime,
    OffsetList,
    ProducerList,
    ProducerListReply,
    Promote,
    PromoteCheck,
    PromoteCheckReply,
    PromoteReply,
    QueryByKey,
    StatsAll,
    Status,
    StatusReply,
    SubGroupDelete,
    SubGroupDeleteReply,
    SubGroupList,
    SubGroupReply,
    SubGroupUpdate,
    TopicCreate,
    TopicDelete,
    TopicDeleteReply,
    TopicReply,
    TopicStatus,
    TopicStatusReply,
    TransactionList,
    TransactionListReply,
    TransactionResume,
    TransactionResumeReply,
    UpdateBrokerConfig,
    WireRequest,
    WritePermReply,
)
from wire.protocol.namesrv import AddWritePerm, WipeWritePerm
from wire.protocol.trace import TRACE_TOPIC

from .base import (
    CLIENT_OPTIONS,
    BrokerStatus,
    ReceivedMessage,
    TopicInfo,
    _Client,
    _with_message,
)
from .routing import (
    UNREACHABLE,
    BrokerInfo,
    MessageQueue,
)
from .trace_view import MessageLife, message_life

log = logging.getLogger("tidemq.client")


# ---------------------------------------------------------------- Admin


class Admin(_Client):
    """Cluster-wide inspection and operations."""

    def __init__(
        self,
        namesrv: str | Sequence[str] | None = None,
        brokers: Sequence[str] | str | None = None,
        *,
        options: ConnectOptions | None = None,
        **connection: Unpack[ConnectKeywords],
    ) -> None:
        super().__init__(namesrv, brokers, options=ConnectOptions.of(options, connection, CLIENT_OPTIONS),
                         route_ttl_s=0.0)

    async def status(self) -> list[BrokerStatus]:
        """Every known broker's `status` answer (concurrently), or the reason it gave none."""
        infos = await self.cluster_info()
        out: list[BrokerStatus | None] = [None] * len(infos)

        async def one(i: int, info: BrokerInfo) -> None:
            try:
                answer: StatusReply = await self.pool.call(info.address, GetStatus())
            except TidemqError as e:
                out[i] = BrokerStatus(info.address, info.broker_name, info.broker_id, info.role,
                                      error=str(e), registration=info)
                return
            out[i] = BrokerStatus(info.address, answer.broker_name or info.broker_name,
                                  info.broker_id if answer.broker_id is None else answer.broker_id,
                                  answer.role or info.role, status=answer, registration=info)

        async with trio.open_nursery() as nursery:
            for i, info in enumerate(infos):
                nursery.start_soon(one, i, info)
        return [s for s in out if s is not None]

    async def topics(self, *, cluster: str | None = None) -> list[TopicInfo]:
        """Every topic per group (of `cluster` when given: NotFound when none of its brokers
        is registered), from the masters' registrations (a slave's when its master is gone)."""
        infos = await self.cluster_info()
        if cluster is not None:
            infos = self._of_cluster(infos, cluster)
        by_group: dict[str, BrokerInfo] = {}
        for info in sorted(infos, key=lambda b: b.broker_id, reverse=True):
            by_group[info.broker_name] = info  # the lowest id (master) wins
        return sorted(
            (TopicInfo(t, name, q.read_queue_nums, q.write_queue_nums, q.perm)
             for name, info in by_group.items() for t, q in info.topics.items()),
            key=lambda t: (t.topic, t.broker_name),
        )

    @staticmethod
    def _of_cluster(infos: list[BrokerInfo], cluster: str) -> list[BrokerInfo]:
        """The brokers of `cluster`; NotFound naming the known clusters when it has none."""
        picked = [b for b in infos if b.cluster == cluster]
        if not picked:
            known = sorted({b.cluster for b in infos})
            raise NotFound(Status.NOT_FOUND.value,
                           f"no broker of cluster {cluster!r} is registered (clusters: {', '.join(known) or 'none'})")
        return picked

    async def brokers(self, *, cluster: str | None = None, brokers: Iterable[str] | None = None) -> list[BrokerInfo]:
        """Every registered broker, master or slave, of `cluster`, or named by `brokers`
        (an address: that broker; a broker name: every broker of the group), or all;
        NotFound names what is known when a cluster or broker is not."""
        infos = await self.cluster_info()
        if cluster is not None:
            infos = self._of_cluster(infos, cluster)
        if brokers is not None:
            infos = _picked(infos, brokers, "broker")
        if not infos:
            raise NotFound(Status.NOT_FOUND.value, "no broker is registered")
        return sorted(infos, key=lambda b: (b.cluster, b.broker_name, b.broker_id))

    async def masters(self, *, cluster: str | None = None, brokers: Iterable[str] | None = None) -> list[BrokerInfo]:
        """The masters of `cluster` (a brokerClusterName), or of `brokers` (broker names or
        addresses), or all; NotFound names what is known when a cluster or broker is not."""
        infos = await self.cluster_info()
        masters = [b for b in infos if b.is_master]
        if cluster is not None:
            known = sorted({b.cluster for b in infos})
            masters = [b for b in masters if b.cluster == cluster]
            if not masters:
                raise NotFound(Status.NOT_FOUND.value,
                               f"no master of cluster {cluster!r} is registered (clusters: {', '.join(known) or 'none'})")
        if brokers is not None:
            masters = _picked(masters, brokers, "master")
        if not masters:
            raise NotFound(Status.NOT_FOUND.value, "no master is registered")
        return sorted(masters, key=lambda b: b.broker_name)

    async def create_topic(
        self,
        topic: str,
        *,
        read_queue_nums: int = 4,
        write_queue_nums: int = 4,
        perm: int = 6,
        broker_names: Iterable[str] | None = None,
        cluster: str | None = None,
    ) -> list[TopicInfo]:
        """Create (or update) the topic on every master (or those of `cluster`, or of
        `broker_names`: names or addresses); mqadmin updateTopic."""
        masters = await self.masters(cluster=cluster, brokers=broker_names)
        out = []
        for master in masters:
            answer: TopicReply = await self.pool.call(master.address, TopicCreate(
                topic=topic, read_queue_nums=read_queue_nums, write_queue_nums=write_queue_nums, perm=perm))
            t = answer.topic
            out.append(TopicInfo(t["topic"], master.broker_name, t["read_queue_nums"],
                                 t["write_queue_nums"], t["perm"]))
        self.invalidate(topic)
        return out

    async def delete_topic(self, topic: str, *, cluster: str | None = None,
                           broker_names: Iterable[str] | None = None) -> dict[str, bool]:
        """Delete the topic on every master (or those of `cluster` / `broker_names`):
        broker name → whether it had the topic. Routes lose it as the masters register
        again; its files age out (mqadmin deleteTopic)."""
        out = {}
        for master in await self.masters(cluster=cluster, brokers=broker_names):
            answer: TopicDeleteReply = await self.pool.call(master.address, TopicDelete(topic=topic))
            out[master.broker_name] = answer.deleted
        self.invalidate(topic)
        return out

    async def update_sub_group(self, group: str, *, consume_enable: bool | None = None,
                               retry_max_times: int | None = None, cluster: str | None = None,
                               broker_names: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        """Set a consumer group's broker-side settings on every master (or those of
        `cluster` / `broker_names`); their slaves copy them (mqadmin updateSubGroup).
        Returns broker name → the settings as stored."""
        out = {}
        request = SubGroupUpdate(group=group, consume_enable=consume_enable, retry_max_times=retry_max_times)
        for master in await self.masters(cluster=cluster, brokers=broker_names):
            answer: SubGroupReply = await self.pool.call(master.address, request)
            out[master.broker_name] = answer.group
        return out

    async def delete_sub_group(self, group: str, *, cluster: str | None = None,
                               broker_names: Iterable[str] | None = None) -> dict[str, bool]:
        """Drop a consumer group's broker-side settings on every master (or those of
        `cluster` / `broker_names`); their slaves copy that (mqadmin deleteSubGroup).
        Returns broker name → whether it had settings for the group."""
        out = {}
        for master in await self.masters(cluster=cluster, brokers=broker_names):
            answer: SubGroupDeleteReply = await self.pool.call(master.address, SubGroupDelete(group=group))
            out[master.broker_name] = answer.deleted
        return out

    async def _answers(self, brokers: Sequence[Any], request: Any, what: str) -> AsyncIterator[tuple[Any, Any]]:
        """(broker, its answer to `request`) for each of `brokers` that answers; one that
        cannot is logged (as `what`) and left out."""
        for broker in brokers:
            try:
                answer = await self.pool.call(broker.address, request)
            except (*UNREACHABLE, ServiceUnavailable) as e:
                log.info("%s on %s failed: %s", what, broker.address, e)
                continue
            yield broker, answer

    async def group_topics(self, group: str) -> list[str]:
        """The topics a consumer group has committed offsets for on any master, or that its
        live members subscribe (mqadmin consumerProgress without a topic)."""
        topics: set[str] = set()
        async for _master, answer in self._answers(await self.masters(), OffsetList(), "offset_list"):
            topics.update(e["topic"] for e in answer.offsets if e.get("group") == group)
        for view in (await self.consumer_list(group)).values():
            for detail in view.details:
                topics.update(detail.get("topics") or ())
        return sorted(topics)

    async def committed_offsets(self, *, topic: str | None = None, group: str | None = None) -> list[dict[str, Any]]:
        """The committed offsets on every master that answers (of `topic` and/or `group`
        when given): group, topic, broker_name, queue_id, offset (the console's Consumer
        page and a topic's consumers)."""
        rows: list[dict[str, Any]] = []
        async for master, answer in self._answers(await self.masters(), OffsetList(), "offset_list"):
            rows += [{"group": e["group"], "topic": e["topic"], "broker_name": master.broker_name,
                      "queue_id": e["queue_id"], "offset": e["offset"]} for e in answer.offsets
                     if topic in (None, e.get("topic")) and group in (None, e.get("group"))]
        return rows

    async def sub_groups(self) -> dict[str, dict[str, Any]]:
        """Every consumer group with settings of its own on any master that answers (mqadmin
        updateSubGroup's): group → its settings (consume_enable, retry_max_times, ...), the
        first master's when they differ."""
        out: dict[str, dict[str, Any]] = {}
        async for _master, answer in self._answers(await self.masters(), SubGroupList(), "subgroup_list"):
            for g in answer.groups:
                out.setdefault(g["group"], g)
        return out

    async def acl_accounts(self) -> AclListReply:
        """The ACL's accounts and their permissions, from the first registered master that
        answers (every node reads the same file in a secure layout); admin-only (NoPermission)."""
        errors: list[TidemqError] = []
        for master in await self.masters():
            try:
                answer: AclListReply = await self.pool.call(master.address, AclList())
                return answer
            except (*UNREACHABLE, ServiceUnavailable) as e:
                errors.append(e)
        raise errors[-1]

    async def acl_put(self, access_key: str, *, scram: str | None = None, admin: bool = False,
                      default_topic_perm: str = "DENY", default_group_perm: str = "DENY",
                      topic_perms: Sequence[str] = (), group_perms: Sequence[str] = (),
                      white_remote_address: Sequence[str] = ()) -> tuple[dict[str, bool], dict[str, str]]:
        """Add or replace an account in every broker's ACL file (admin-only), one broker
        after another: brokers may share one file, which then changes once and stays the
        same. `scram` is a verifier (node/security/acl.py make_verifier), never a secret;
        None keeps the account's. Returns (broker → whether it had the account, broker →
        why it was not reached); a refusal (a bad permission, a new account without a
        verifier) raises at the first broker, before any file changed."""
        request = AclPut(access_key=access_key, scram=scram, admin=admin, default_topic_perm=default_topic_perm,
                         default_group_perm=default_group_perm, topic_perms=list(topic_perms),
                         group_perms=list(group_perms), white_remote_address=list(white_remote_address))
        return await self._acl_change(request)

    async def acl_remove(self, access_key: str) -> tuple[dict[str, bool], dict[str, str]]:
        """Remove an account from every broker's ACL file (admin-only); as `acl_put`."""
        return await self._acl_change(AclRemove(access_key=access_key))

    async def _acl_change(self, request: AclPut | AclRemove) -> tuple[dict[str, bool], dict[str, str]]:
        done: dict[str, bool] = {}
        missed: dict[str, str] = {}
        for broker in await self.brokers():
            name = f"{broker.broker_name}/{broker.broker_id}"
            try:
                answer: AclChangeReply = await self.pool.call(broker.address, request)
            except (*UNREACHABLE, ServiceUnavailable) as e:
                missed[name] = str(e)
                continue
            done[name] = answer.existed
        return done, missed

    async def topic_status(self, topic: str) -> list[dict[str, Any]]:
        """Per queue of the topic on each group serving it (its master, else a slave):
        broker_name, queue_id, min_offset, max_offset, last_update_timestamp (mqadmin
        topicStatus)."""
        route = await self.route(topic)
        rows = []
        for group in route.groups:
            answer, _ = await self._read_group(group, TopicStatus(topic=topic))
            reply: TopicStatusReply = answer
            rows += [{"broker_name": group.broker_name, **q} for q in reply.queues]
        return rows

    async def broker_config(self, address: str) -> BrokerConfigReply:
        """The node's config as it runs (mqadmin getBrokerConfig)."""
        return await self.pool.call(address, GetBrokerConfig())

    async def update_broker_config(self, address: str, key: str, value: str) -> BrokerConfigUpdateReply:
        """Change one key the node reads live (mqadmin updateBrokerConfig); BadRequest names
        a key that cannot change live or a bad value."""
        return await self.pool.call(address, UpdateBrokerConfig(key=key, value=value))

    async def set_write_perm(self, broker_name: str, writeable: bool) -> list[dict[str, Any]]:
        """mqadmin wipeWritePerm (`writeable` False) / addWritePerm of a broker group: every
        name server shows the group's topics without (with) the write bit in routes, and
        every registered broker of the group refuses (accepts) sends. One row per name
        server and per broker: `where`, `address`, `topics` (a name server's count),
        `writeable`, `error` (one that could not be told)."""
        if not self._namesrv:
            raise BadRequest(Status.BAD_REQUEST.value,
                             "wipeWritePerm / addWritePerm change the name servers' routes: give --namesrv")
        members = [b for b in await self.cluster_info() if b.broker_name == broker_name]
        if not members:
            known = ", ".join(sorted({b.broker_name for b in await self.cluster_info()})) or "none"
            raise NotFound(Status.NOT_FOUND.value, f"no broker {broker_name!r} is registered (broker groups: {known})")
        rows: list[dict[str, Any]] = []
        for b in sorted(members, key=lambda b: b.broker_id):
            row: dict[str, Any] = {"where": f"broker {b.broker_id} ({b.role})", "address": b.address, "topics": None,
                   "writeable": None, "error": None}
            try:
                answer: WritePermReply = await self.pool.call(b.address, BrokerWritePerm(writeable=writeable))
                row["writeable"] = answer.writeable
            except (*UNREACHABLE, ServiceUnavailable) as e:
                row["error"] = str(e)
            rows.append(row)
        request = AddWritePerm(broker_name=broker_name) if writeable else WipeWritePerm(broker_name=broker_name)
        for address in self._namesrv:
            row = {"where": "name server", "address": address, "topics": None, "writeable": None, "error": None}
            try:
                answer = await self.pool.call(address, request)
                row["topics"], row["writeable"] = answer.topics, answer.writeable
            except (*UNREACHABLE, NotFound) as e:
                row["error"] = str(e)
            rows.append(row)
        return rows

    async def producer_connections(self, group: str, topic: str) -> list[dict[str, Any]]:
        """The live producers of `group` that the masters serving `topic` know (mqadmin
        producerConnection): client_id, address, heartbeat_interval_ms, silent_ms and
        broker_name, one row per producer and master."""
        route = await self.route(topic)
        rows = []
        for g in route.groups:
            if g.master is None:
                continue
            try:
                answer: ProducerListReply = await self.pool.call(g.master.address, ProducerList(group=group))
            except (*UNREACHABLE, ServiceUnavailable) as e:
                log.info("producer_list on %s failed: %s", g.master.address, e)
                continue
            rows += [{**p, "broker_name": g.broker_name} for p in answer.producers]
        return rows

    async def stats_all(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """mqadmin statsAll: (per topic: put_tps, put_total; per topic and consumer group:
        get_tps, get_total), summed over every broker that answers (puts land on masters,
        pulls on masters and slaves)."""
        puts: dict[str, dict[str, Any]] = {}
        gets: dict[tuple[str, str], dict[str, Any]] = {}
        async for _broker, answer in self._answers(await self.cluster_info(), StatsAll(), "stats_all"):
            for t in answer.topics:
                row = puts.setdefault(t["topic"], {"topic": t["topic"], "put_tps": 0.0, "put_total": 0})
                row["put_tps"] = round(row["put_tps"] + t["put_tps"], 1)
                row["put_total"] += t["put_total"]
            for g in answer.groups:
                row = gets.setdefault((g["topic"], g["group"]),
                                      {"topic": g["topic"], "group": g["group"], "get_tps": 0.0, "get_total": 0})
                row["get_tps"] = round(row["get_tps"] + g["get_tps"], 1)
                row["get_total"] += g["get_total"]
        return [puts[t] for t in sorted(puts)], [gets[k] for k in sorted(gets)]

    async def consumer_list(self, group: str) -> dict[str, ConsumerListReply]:
        """Each master's view of the consumer group: broker name → its members (with their
        addresses and subscriptions) and queue locks. Masters that cannot be reached are
        left out; an empty answer means no master knows a live member."""
        out: dict[str, ConsumerListReply] = {}
        for master in await self.masters():
            try:
                out[master.broker_name] = await self.pool.call(master.address, ConsumerList(group=group))
            except (*UNREACHABLE, ServiceUnavailable) as e:
                log.info("consumer_list on %s failed: %s", master.address, e)
        return out

    async def commit_offset(self, queue: MessageQueue, group: str, offset: int) -> None:
        """Set the group's committed offset of `queue` on its group's master."""
        master = next((b for b in await self.masters() if b.broker_name == queue.broker_name), None)
        if master is None:
            raise NotFound(Status.NOT_FOUND.value, f"no master of {queue.broker_name!r} is registered")
        await self.pool.call(master.address, CommitOffset(group=group, topic=queue.topic, queue_id=queue.queue_id,
                                                          offset=offset))

    async def query_by_key(
        self, topic: str, key: str, *, max_num: int = 32, begin_ts: int = 0, end_ts: int | None = None
    ) -> list[ReceivedMessage]:
        """Messages whose KEYS include `key`, from every group serving the topic (master,
        else a slave), newest first."""
        route = await self.route(topic)
        found: dict[str, ReceivedMessage] = {}
        request = QueryByKey(topic=topic, key=key, max_num=max_num, begin_ts=begin_ts,
                             end_ts=INT64_MAX if end_ts is None else end_ts)
        for group in route.groups:
            response, _ = await self._read_group(group, request)  # a MessagesReply
            for raw in response.messages:
                msg = ReceivedMessage.from_wire(raw, group.broker_name)
                found.setdefault(msg.msg_id, msg)
        messages = sorted(found.values(), key=lambda m: (m.store_timestamp, m.commitlog_offset), reverse=True)
        return messages[:max_num]

    async def query_by_unique_key(self, topic: str, uniq_key: str, *, max_num: int = 32) -> list[ReceivedMessage]:
        """The messages of `topic` whose UNIQ_KEY property (RocketMQ's client message id) is
        `uniq_key` (mqadmin queryMsgByUniqueKey): several when the message was retried or
        reconsumed, newest first."""
        return [m for m in await self.query_by_key(topic, uniq_key, max_num=max_num)
                if m.properties.get("UNIQ_KEY") == uniq_key]

    async def query_msg_trace(self, msg_id: str, *, trace_topic: str | None = None,
                              max_num: int = 64) -> MessageLife:
        """The message's life from its traces (mqadmin queryMsgTraceById;
        cluster/client/trace_view.py)."""
        return await message_life(self, msg_id, trace_topic=trace_topic or TRACE_TOPIC, max_num=max_num)

    async def get_by_msg_id(self, msg_id: str) -> ReceivedMessage:
        """The message with this offset msgId. The msgId names the broker that stored it,
        which is asked directly; when it does not answer, the other brokers of its group
        (a slave finds its master's msgIds), or every known broker when its group is
        unknown: a node answers only for the exact msgId, so asking others is safe."""
        try:
            address, _ = decode_msg_id(msg_id)
        except ValueError as e:
            raise BadRequest(Status.BAD_REQUEST.value, str(e)) from None
        try:
            infos = await self.cluster_info()
        except TidemqError as e:  # the name server is down: the msgId still names the broker
            log.info("no cluster info (%s); asking %s only", e, address)
            infos = []
        names = {b.address: b.broker_name for b in infos}
        home = names.get(address)
        others = sorted((b for b in infos if b.address != address and home in (None, b.broker_name)),
                        key=lambda b: (b.broker_name != home, b.broker_id))
        errors: list[TidemqError] = []
        for candidate in [address, *(b.address for b in others)]:
            try:
                response: MessageReply = await self.pool.call(candidate, GetByMsgId(msg_id=msg_id))
            except NotFound as e:
                if candidate == address:
                    raise  # the broker that stored it no longer has it
                errors.append(e)
                continue
            except (*UNREACHABLE, ServiceUnavailable) as e:
                errors.append(e)
                continue
            return ReceivedMessage.from_wire(response.message, names.get(candidate, home))
        not_found = [e for e in errors if isinstance(e, NotFound)]
        last = not_found[-1] if not_found else errors[-1]
        raise _with_message(last, f"message {msg_id} not found: "
                            + "; ".join(str(e) for e in errors))

    async def _queue_read(self, queue: MessageQueue, request: Callable[..., WireRequest], **fields: Any) -> Any:
        """`request` (a class taking topic and queue_id) for `queue`, on its group."""
        route = await self.route(queue.topic)
        group = route.group(queue.broker_name)
        if group is None:
            raise NotFound(Status.NOT_FOUND.value, f"group {queue.broker_name!r} does not serve {queue.topic!r}")
        response, _ = await self._read_group(group, request(topic=queue.topic, queue_id=queue.queue_id, **fields))
        return response

    async def offset_by_time(self, queue: MessageQueue, timestamp_ms: int) -> int:
        """The first logical offset stored at or after `timestamp_ms`."""
        return int((await self._queue_read(queue, OffsetByTime, timestamp=timestamp_ms)).offset)

    async def min_offset(self, queue: MessageQueue) -> int:
        return int((await self._queue_read(queue, MinOffset)).offset)

    async def max_offset(self, queue: MessageQueue) -> int:
        return int((await self._queue_read(queue, MaxOffset)).offset)

    async def consumer_offset(self, queue: MessageQueue, group: str) -> int | None:
        """The offset `group` committed for `queue` (its master's, else a slave's copy), or
        None when it never committed there."""
        try:
            return int((await self._queue_read(queue, FetchOffset, group=group)).offset)
        except NotFound:
            return None

    async def _slave_of(self, broker_name: str, broker_id: int) -> tuple[BrokerInfo, list[BrokerInfo]]:
        """The registered slave `broker_id` of `broker_name` (NotFound, BadRequest for a master)."""
        infos = await self.cluster_info()
        target = next((b for b in infos if b.broker_name == broker_name and b.broker_id == broker_id), None)
        if target is None:
            known = ", ".join(f"{b.broker_name}/{b.broker_id}" for b in infos) or "none"
            raise NotFound(Status.NOT_FOUND.value,
                           f"no broker {broker_name}/{broker_id} is registered (known: {known})")
        if target.is_master:
            raise BadRequest(Status.BAD_REQUEST.value, f"{broker_name}/0 ({target.address}) is already the master")
        return target, infos

    async def promote_check(self, broker_name: str, broker_id: int) -> dict[str, Any]:
        """Whether `promote` would take slave `broker_id` of `broker_name` without `unclean`
        (node op `promote_check`: its master's in-sync set and the confirm offset,
        docs/failover.md), and what a promotion drops: `drop_from` .. `drop_to` and
        `drop_count`, the messages the master stores there (None when it cannot be
        counted: `count_note` says why)."""
        target, _ = await self._slave_of(broker_name, broker_id)
        reply: PromoteCheckReply = await self.pool.call(target.address, PromoteCheck())
        check = attrs.asdict(reply.check)
        check.update(await self._count_dropped(reply))
        return check

    async def _count_dropped(self, reply: PromoteCheckReply) -> dict[str, Any]:
        c = reply.check
        if c.drop_to <= c.drop_from:
            return {"drop_count": 0, "count_note": "nothing to drop"}
        if not c.master_reachable or c.master_address is None:
            return {"drop_count": None, "count_note": f"unknown: the records past offset {c.drop_from} are only "
                                                      f"on the master ({c.master_address or 'unknown'}), which "
                                                      "did not answer"}
        try:
            counted: CountMessagesReply = await self.pool.call(
                c.master_address, CountMessages(from_offset=c.drop_from, to_offset=c.drop_to))
        except TidemqError as e:
            return {"drop_count": None, "count_note": f"unknown: the master did not count them ({e})"}
        if not counted.complete:
            return {"drop_count": None, "count_note": f"unknown: at least {counted.count} (counted up to offset "
                                                      f"{counted.counted_to} in the time allowed)"}
        return {"drop_count": counted.count, "count_note": "counted on the master"}

    async def promote(
        self, broker_name: str, broker_id: int, *, role: str | None = None, timeout: float = 30.0,
        unclean: bool = False, answer_timeout: float | None = None,
    ) -> dict[str, Any]:
        """Make slave `broker_id` of `broker_name` the group's master (node op `promote`) and
        wait until it serves as brokerId 0 with its new epoch (or a newer one: it may have
        restarted since). `role` (SYNC_MASTER or ASYNC_MASTER) defaults to the role the
        group's master registered, else the one the slave last learnt. A slave outside its
        master's in-sync set or behind the confirm offset is refused (BadRequest naming both)
        unless `unclean` (see `promote_check`). Returns the node's answer plus `address`,
        `serving_epoch` and `start_offset`. When the answer is lost (no answer within
        `answer_timeout`, default `timeout`, or the connection broke), the node is watched
        for `timeout`: serving as master in a newer epoch than before, that is returned with
        `answer_lost` (why); else OutcomeUnknown, for the promotion may still take."""
        target, infos = await self._slave_of(broker_name, broker_id)
        if role is None:
            master = next((b for b in infos if b.broker_name == broker_name and b.is_master), None)
            role = master.role if master is not None and master.role != "SLAVE" else None
        before = await self._status_or_none(target.address)
        try:
            answer: PromoteReply = await self.pool.call(target.address, Promote(role=role, unclean=unclean),
                                                        timeout=timeout if answer_timeout is None else answer_timeout)
        except OutcomeUnknown as e:
            # the answer was lost (the node killed mid-promotion, say): it may have taken
            status = await self._serving_as_master(target.address, ((before.epoch or 0) if before else 0) + 1,
                                                   timeout)
            if status is None:
                raise OutcomeUnknown(e.status, f"{target.address} did not answer the promotion ({e}) and does "
                                     f"not serve as master {timeout:.0f} s later: it may still take; see "
                                     "`tidemq status`", address=target.address) from None
            return {"epoch": status.epoch, "max_offset": status.max_phy_offset, "broker_id": 0, "role": status.role,
                    "check": None, "offsets_clamped": 0, "answer_lost": str(e),
                    **self._promoted(broker_name, target.address, status)}
        status = await self._serving_as_master(target.address, answer.epoch, timeout)
        if status is None:
            raise ServiceUnavailable(Status.SERVICE_NOT_AVAILABLE.value,
                                     f"{target.address} accepted the promotion to epoch {answer.epoch} but does "
                                     f"not serve as master {timeout:.0f} s later")
        return {**attrs.asdict(answer), **self._promoted(broker_name, target.address, status)}

    async def _status_or_none(self, address: str) -> StatusReply | None:
        try:
            reply: StatusReply = await self.pool.call(address, GetStatus())
        except TidemqError:
            return None
        return reply

    async def _serving_as_master(self, address: str, epoch: int, timeout: float) -> StatusReply | None:
        """The node's status once it serves as brokerId 0 in `epoch` or a newer one (it may
        have restarted since it took the promotion: a new epoch begins then), None if not
        within `timeout`."""
        with trio.move_on_after(timeout):
            while True:
                status = await self._status_or_none(address)
                if status is not None and status.broker_id == 0 and (status.epoch or 0) >= epoch:
                    return status
                await trio.sleep(0.1)
        return None

    @staticmethod
    def _promoted(broker_name: str, address: str, status: StatusReply) -> dict[str, Any]:
        entries = status.epochs
        return {"broker_name": broker_name, "address": address, "serving_epoch": status.epoch,
                "start_offset": entries[-1][1] if entries else None}

    async def transactions(self, address: str, *, topic: str | None = None, limit: int = 1000) -> TransactionListReply:
        """The open half messages of the master at `address` (of `topic`, their real topic, or
        all), oldest first, at most `limit` (docs/transactions.md)."""
        reply: TransactionListReply = await self.pool.call(address, TransactionList(topic=topic, limit=limit))
        return reply

    async def transaction_resume(self, address: str, offsets: Iterable[int] | None = None) -> TransactionResumeReply:
        """Write discarded half messages (TRANS_CHECK_MAX_TIME_TOPIC) back as open ones on the
        master at `address`: those whose transaction has an origin CommitLog offset in
        `offsets`, or all (docs/transactions.md)."""
        request = TransactionResume(offsets=None if offsets is None else list(offsets))
        reply: TransactionResumeReply = await self.pool.call(address, request)
        return reply

    async def delete_expired_files(self, broker: str) -> int:
        """Run the expired-file cleanup now on `broker` (an address, or a brokerName for its
        master); returns the number of CommitLog files removed."""
        address = broker
        if ":" not in broker:
            master = next((b for b in await self.cluster_info() if b.broker_name == broker and b.is_master), None)
            if master is None:
                raise NotFound(Status.NOT_FOUND.value, f"no master of {broker!r} is known")
            address = master.address
        return int((await self.pool.call(address, DeleteExpiredFiles())).deleted_files)


def _picked(infos: list[BrokerInfo], names: Iterable[str], what: str) -> list[BrokerInfo]:
    """The registrations each of `names` (a broker name or address) matches, once each, in
    the order named; NotFound names the broker groups known when one matches none."""
    picked: list[BrokerInfo] = []
    for name in names:
        found = [b for b in infos if name in (b.broker_name, b.address)]
        if not found:
            known = ", ".join(sorted({b.broker_name for b in infos})) or "none"
            raise NotFound(Status.NOT_FOUND.value, f"no {what} {name!r} is registered (broker groups: {known})")
        picked += [b for b in found if b not in picked]
    return picked
