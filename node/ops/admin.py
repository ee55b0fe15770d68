"""Admin ops (mqadmin's): topics, subscription groups, producer groups, the node's status,
epochs and promotion, the live config, write permission, statistics, manual deletion."""

from __future__ import annotations

import inspect
import logging
from typing import Any

import psutil
import trio

from store import runtime
from store.record_codec import RecordKind
from wire.protocol import (
    AclChangeReply,
    AclList,
    AclListReply,
    AclPut,
    AclRemove,
    BrokerConfigReply,
    BrokerConfigUpdateReply,
    BrokerWritePerm,
    CountMessages,
    CountMessagesReply,
    DeletedFilesReply,
    DeleteExpiredFiles,
    EmptyReply,
    Epoch,
    EpochReply,
    GetBrokerConfig,
    GetStatus,
    ProducerHeartbeat,
    ProducerList,
    ProducerListReply,
    ProducerUnregister,
    ProducerUnregisterReply,
    Promote,
    PromoteCheck,
    PromoteCheckReply,
    PromoteReply,
    Request,
    StatsAll,
    StatsAllReply,
    Status,
    StatusReply,
    SubGroupDelete,
    SubGroupDeleteReply,
    SubGroupList,
    SubGroupListReply,
    SubGroupReply,
    SubGroupUpdate,
    TopicCreate,
    TopicDelete,
    TopicDeleteReply,
    TopicList,
    TopicListReply,
    TopicReply,
    TopicStatus,
    TopicStatusReply,
    UpdateBrokerConfig,
    WireControllerView,
    WireDiskUsage,
    WireHAClient,
    WireHASlave,
    WireHAView,
    WireRequest,
    WireTruncation,
    WritePermReply,
)

from ..config import ConfigError
from ..live_config import LIVE_KEYS, apply_live_value, config_view
from ..security.acl import AclError
from ..security.files import edit_account, remove_account
from ..tables.jsonfile import write_json_atomic
from .puts import Handler
from .services import (
    FailoverHooks,
    NodeServices,
    OpError,
    refuse_on_slave,
    write_perm_path,
)

log = logging.getLogger("tidemq.node")

__all__ = ["ADMIN_HANDLERS"]


async def _topic_create(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    refuse_on_slave(s, "topic changes")
    f = r.fields
    config = await s.topics.create(f.topic, f.read_queue_nums, f.write_queue_nums, f.perm)
    return TopicReply(topic=config.to_wire()).to_wire(r.id)


async def _topic_delete(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    """Drop the topic from this master's table: routes lose it when the node registers
    again (at once), its slaves at their next topic sync; its files age out as usual."""
    refuse_on_slave(s, "topic changes")
    return TopicDeleteReply(deleted=await s.topics.delete(r.fields.topic)).to_wire(r.id)


async def _subgroup_update(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    refuse_on_slave(s, "subscription group changes")
    f = r.fields
    config = await s.subgroups.update(f.group, consume_enable=f.consume_enable, retry_max_times=f.retry_max_times)
    return SubGroupReply(group=config.to_wire()).to_wire(r.id)


async def _subgroup_list(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    return SubGroupListReply(groups=[c.to_wire() for c in s.subgroups.list()]).to_wire(r.id)


async def _topic_list(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    return TopicListReply(topics=[c.to_wire() for c in s.topics.list()]).to_wire(r.id)


async def _subgroup_delete(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    refuse_on_slave(s, "subscription group changes")
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


async def _producer_heartbeat(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    f = r.fields
    s.producers.heartbeat(f.group, f.client_id, f.heartbeat_interval_ms, peer)
    return EmptyReply().to_wire(r.id)


async def _producer_unregister(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    return ProducerUnregisterReply(removed=s.producers.unregister(r.fields.group, r.fields.client_id)).to_wire(r.id)


async def _producer_list(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    return ProducerListReply(producers=s.producers.members(r.fields.group)).to_wire(r.id)


def _ha_status(s: NodeServices) -> WireHAView:
    if s.ha_master is not None:
        return WireHAView(slaves=[WireHASlave.of(x) for x in s.ha_master.status()])
    if s.ha_client is not None:
        return WireHAView(client=WireHAClient.of(s.ha_client.status()))
    return WireHAView()


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
        "not_writeable": None if store.flags.is_writeable() else store.flags.why_not_writeable(),
        "damaged": store.damaged(),
        # store time of the newest record dispatched: a slave's lag in seconds is the
        # master's minus its own
        "last_store_timestamp": store.checkpoint.logics_msg_timestamp if store.checkpoint else 0,
        "stats": s.stats.view(),
        "ha": _ha_status(s),
        # a master's as it tells its slaves now; a slave's as it last learned it
        "confirm_offset": s.ha_master.confirm_seen() if s.ha_master is not None else store.replica_log.known_confirm,
        "disk": WireDiskUsage(path=root, total=disk.total, used=disk.used, free=disk.free,
                              used_ratio=round(disk.used / disk.total, 4) if disk.total else 0.0),
    }
    if s.slave_sync_status is not None:
        fields["sync"] = s.slave_sync_status()
    if s.registration_status is not None:
        fields["namesrv"] = s.registration_status()
    if s.schedule is not None:
        fields["schedule"] = s.schedule.status()
    if s.is_master and (s.transactions.loaded or store.running):  # the serving master's view only
        s.transactions.ensure_loaded(store)
        fields["transactions"] = {**s.transactions.status(), **s.checks.status()}  # the log's, the mailboxes'
    if s.security_status is not None:
        fields["security"] = s.security_status()
    fields["consumer_groups"] = {g: s.consumers.members(g) for g in s.consumers.groups()}
    if s.failover is not None:
        fields.update(s.failover.status())
        cut = fields.get("last_truncation")  # the failover's own report is the file's map
        fields["last_truncation"] = None if cut is None else WireTruncation.from_wire(cut)
        view = fields.get("controller")
        fields["controller"] = None if view is None else WireControllerView.from_wire(view)
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
    return PromoteReply(**await failover.promote(r.fields.role, unclean=r.fields.unclean)).to_wire(r.id)


async def _promote_check(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    return PromoteCheckReply(check=await _failover(s).promotion_check()).to_wire(r.id)


COUNT_BUDGET_S = 1.0
"""How long `count_messages` decodes record headers before it answers a lower bound."""


async def _count_messages(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    """Messages stored in [from_offset, to_offset): what an unclean promotion drops, asked of
    the old master (headers only, within COUNT_BUDGET_S; a log's blanks are not messages)."""
    start, end = r.fields.from_offset, r.fields.to_offset
    log_min = s.store.get_min_phy_offset()
    if start < log_min:
        raise OpError(Status.BAD_REQUEST, f"offset {start} lies before the CommitLog's start {log_min}")
    count = 0
    deadline = trio.current_time() + COUNT_BUDGET_S
    for offset, decoded in s.store.commit_log.iter_records(start, read_body=False):
        if offset >= end or decoded.kind is RecordKind.INVALID:
            break
        if decoded.kind is RecordKind.MESSAGE:
            count += 1
            if count % 1000 == 0:
                await trio.lowlevel.checkpoint()
                if trio.current_time() > deadline:
                    return CountMessagesReply(count=count, counted_to=offset + decoded.size,
                                              complete=False).to_wire(r.id)
    counted_to = max(start, min(end, s.store.get_max_phy_offset()))
    return CountMessagesReply(count=count, counted_to=counted_to, complete=True).to_wire(r.id)


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
    await runtime.run_sync(write_json_atomic, write_perm_path(s.cfg), {"writeable": writeable})
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


async def _acl_list(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    """The ACL's accounts (admin-only: not in docs/security.md's table); none without aclEnable."""
    accounts = s.acl_accounts() if s.acl_accounts is not None else []
    return AclListReply(enabled=s.acl_accounts is not None, accounts=accounts).to_wire(r.id)


def _acl_file(s: NodeServices) -> str:
    if s.acl_file is None:
        raise OpError(Status.BAD_REQUEST, "aclEnable is off on this node: it has no ACL file to change")
    return s.acl_file


async def _acl_put(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    """Add or replace an account in this node's ACL file (admin-only); the file is checked
    whole before it is replaced, and the guard reads it at once."""
    path, f = _acl_file(s), r.fields
    try:
        existed = await trio.to_thread.run_sync(lambda: edit_account(
            path, f.access_key, scram=f.scram, admin=f.admin, default_topic_perm=f.default_topic_perm,
            default_group_perm=f.default_group_perm, topic_perms=f.topic_perms, group_perms=f.group_perms,
            white_remote_address=f.white_remote_address))
    except AclError as e:
        raise OpError(Status.BAD_REQUEST, str(e)) from None
    if s.acl_recheck is not None:
        s.acl_recheck()
    log.info("ACL account %s %s in %s (by %s)", f.access_key, "replaced" if existed else "added", path, peer)
    return AclChangeReply(existed=existed, acl_file=path).to_wire(r.id)


async def _acl_remove(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    path, key = _acl_file(s), r.fields.access_key
    try:
        existed = await trio.to_thread.run_sync(remove_account, path, key)
    except AclError as e:
        raise OpError(Status.BAD_REQUEST, str(e)) from None
    if s.acl_recheck is not None:
        s.acl_recheck()
    log.info("ACL account %s %s %s (by %s)", key, "removed from" if existed else "was not in", path, peer)
    return AclChangeReply(existed=existed, acl_file=path).to_wire(r.id)


ADMIN_HANDLERS: dict[type[WireRequest], Handler] = {
    AclList: _acl_list,
    AclPut: _acl_put,
    AclRemove: _acl_remove,
    TopicCreate: _topic_create,
    TopicDelete: _topic_delete,
    SubGroupUpdate: _subgroup_update,
    SubGroupList: _subgroup_list,
    SubGroupDelete: _subgroup_delete,
    ProducerHeartbeat: _producer_heartbeat,
    ProducerUnregister: _producer_unregister,
    ProducerList: _producer_list,
    TopicStatus: _topic_status,
    GetBrokerConfig: _broker_config,
    UpdateBrokerConfig: _broker_config_update,
    BrokerWritePerm: _broker_write_perm,
    StatsAll: _stats_all,
    TopicList: _topic_list,
    GetStatus: _status,
    DeleteExpiredFiles: _delete_expired_files,
    Epoch: _epoch,
    Promote: _promote,
    PromoteCheck: _promote_check,
    CountMessages: _count_messages,
}
