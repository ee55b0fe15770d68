"""The node's series, read from its state at scrape time (docs/metrics.md lists them).

Nothing here runs between scrapes: counts come from `BrokerStats` (fed once per send group
and per pull), the rest from the tables, the store, the HA service and the failover state
as they stand. RocketMQ 5's names and labels where RocketMQ has the series; the replication,
failover, security and disk series RocketMQ lacks are named in its style.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import psutil
from prometheus_client.metrics_core import Metric

from wire.tls import handshake_failures

from ..config import BrokerConfig
from ..ops.services import NodeServices
from ..security.rules import is_system_topic
from .endpoint import Checkpoint
from .series import Series

__all__ = ["BrokerCollector", "base_labels"]

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
SLICE = 50
"""Topics, groups or offset entries read between two checkpoints of a scrape."""
CONFIRM_HELP = ("The confirm offset: what every member of the in-sync set holds, consumers see up to it "
                "(a slave's: as it last learned it)")


def base_labels(cfg: BrokerConfig) -> dict[str, str]:
    """RocketMQ's process labels (node_id is the brokerName, as RocketMQ sets it), plus the
    brokerId that tells a group's master and slaves apart."""
    return {"cluster": cfg.broker_cluster_name, "node_type": "broker", "node_id": cfg.broker_name,
            "broker_id": str(cfg.broker_id)}


def _topic_labels(topic: str) -> dict[str, str]:
    """RocketMQ's labels of a stored topic: message_type (Transaction for half messages,
    Normal otherwise; tidemq has no per-topic message.type attribute) and is_system."""
    return {"topic": topic, "message_type": "Transaction" if topic == TRANS_HALF_TOPIC else "Normal",
            "is_system": _bool(is_system_topic(topic))}


def _group_labels(topic: str, group: str) -> dict[str, str]:
    return {"topic": topic, "consumer_group": group, "is_retry": _bool(topic.startswith(RETRY_PREFIX)),
            "is_system": _bool(is_system_topic(topic))}


def _bool(value: bool) -> str:
    return "true" if value else "false"


class BrokerCollector:
    """The node's series over `services()` (the node's current term; None between terms:
    then only the process's own series are given), read in slices of at most `SLICE` topics
    or offset entries (node/metrics/endpoint.py's SlicedCollector)."""

    def __init__(self, cfg: BrokerConfig, services: Callable[[], NodeServices | None],
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.cfg = cfg
        self.services = services
        self.wall_clock = wall_clock
        self.refused_total = 0

    async def collect_sliced(self, checkpoint: Checkpoint) -> list[Metric]:
        s = self.services()
        if s is not None and not s.store.running:  # between terms: the old term's store is closing
            s = None
        cfg = s.cfg if s is not None else self.cfg
        out = Series(base_labels(cfg), cfg.metrics_otel_cardinality_limit)
        _declare_all(out)
        if s is not None:
            await _traffic(out, s, checkpoint)
            await _consumers(out, s, int(self.wall_clock() * 1000), checkpoint)
            _storage(out, s, int(self.wall_clock() * 1000))
            _replication(out, s)
            _failover(out, s)
            _security(out, s)
        out.counter("rocketmq_tls_handshake_failures_total",
                    "TLS handshakes this process refused or that failed (all its ports)", handshake_failures())
        self.refused_total += out.refused
        out.gauge("rocketmq_metrics_series_refused",
                  "Per-topic and per-group series this scrape left out (metricsOtelCardinalityLimit)", out.refused)
        out.counter("rocketmq_metrics_series_refused_total",
                    "Series refused by the cardinality limit, over every scrape", self.refused_total)
        return list(out.families())


def _declare_all(out: Series) -> None:
    """Families whose samples may be absent (no traffic yet): listed all the same."""
    topic = ("topic", "message_type", "is_system")
    group = ("topic", "consumer_group", "is_retry", "is_system")
    out.declare("counter", "rocketmq_messages_in_total", "Messages stored by sends, by topic", topic)
    out.declare("counter", "rocketmq_throughput_in_total", "Bytes stored by sends (CommitLog records), by topic", topic)
    out.declare("histogram", "rocketmq_message_size", "Sizes of the stored messages in bytes", topic)
    out.declare("counter", "rocketmq_messages_out_total", "Messages returned by pulls, by topic and group", group)
    out.declare("counter", "rocketmq_throughput_out_total", "Bytes returned by pulls, by topic and group", group)
    out.declare("gauge", "rocketmq_consumer_lag_messages", "Messages stored past the group's committed offset", group)
    out.declare("gauge", "rocketmq_consumer_lag_latency",
                "Milliseconds since the group's oldest unconsumed message was stored", group)
    out.declare("counter", "rocketmq_send_to_dlq_messages_total",
                "Messages moved to the group's dead-letter queue (%DLQ%<group>)", ("consumer_group", "is_system"))
    out.declare("histogram", "rocketmq_rpc_latency", "Milliseconds from a send group's append to its answer",
                ("protocol_type", "request_code", "response_code"))
    out.declare("gauge", "rocketmq_consumer_connections", "Live members of the consumer group",
                ("consumer_group", "is_system"))
    out.declare("gauge", "rocketmq_half_messages", "Open transactional half messages, by real topic", ("topic",))
    out.declare("gauge", "rocketmq_replication_lag_bytes", "Bytes of the master's log a slave has not acknowledged",
                ("slave",))
    out.declare("gauge", "rocketmq_replication_lag_seconds",
                "Seconds since a slave last acknowledged the master's whole log (0 when caught up)", ("slave",))
    out.declare("gauge", "rocketmq_replication_slave_ack_offset", "A slave's acknowledged CommitLog offset", ("slave",))
    out.declare("counter", "rocketmq_failover_promotions_total", "Promotions this node attempted, by result",
                ("result",))


async def _traffic(out: Series, s: NodeServices, checkpoint: Checkpoint) -> None:
    stats = s.stats
    for i, (topic, counter) in enumerate(list(stats.topic_put.items())):
        if i and not i % SLICE:
            await checkpoint()
        labels = _topic_labels(topic)
        out.counter("rocketmq_messages_in_total", "", counter.total, labels, bounded=True)
        out.counter("rocketmq_throughput_in_total", "", stats.topic_put_bytes.get(topic, 0), labels, bounded=True)
        hist = stats.message_size.get(topic)
        if hist is not None:
            out.histogram("rocketmq_message_size", "", hist, labels, bounded=True)
    for i, ((topic, group), counter) in enumerate(list(stats.group_get.items())):
        if i and not i % SLICE:
            await checkpoint()
        labels = _group_labels(topic, group)
        out.counter("rocketmq_messages_out_total", "", counter.total, labels, bounded=True)
        out.counter("rocketmq_throughput_out_total", "", stats.group_get_bytes.get((topic, group), 0), labels,
                    bounded=True)
    for outcome, hist in stats.send_latency.items():
        out.histogram("rocketmq_rpc_latency", "", hist,
                      {"protocol_type": "tidemq", "request_code": "send", "response_code": outcome})


async def _consumers(out: Series, s: NodeServices, now_ms: int, checkpoint: Checkpoint) -> None:
    store = s.store
    lag: dict[tuple[str, str], list[int]] = {}  # (group, topic) → [messages, oldest unconsumed store time]
    for i, entry in enumerate(s.offsets.entries()):  # (a list: the table may change meanwhile)
        if i and not i % SLICE:
            await checkpoint()
        max_offset = store.get_max_offset_in_queue(entry.topic, entry.queue_id)
        behind = max(0, max_offset - entry.offset)
        row = lag.setdefault((entry.group, entry.topic), [0, 0])
        row[0] += behind
        if behind:
            stored = _store_time(s, entry.topic, entry.queue_id, max(entry.offset, 0))
            if stored and (row[1] == 0 or stored < row[1]):
                row[1] = stored
    await checkpoint()
    for i, ((group, topic), (behind, oldest)) in enumerate(sorted(lag.items())):
        if i and not i % SLICE:
            await checkpoint()
        labels = _group_labels(topic, group)
        out.gauge("rocketmq_consumer_lag_messages", "", behind, labels, bounded=True)
        out.gauge("rocketmq_consumer_lag_latency", "", max(0, now_ms - oldest) if oldest else 0, labels,
                  bounded=True)
    groups = {g.group for g in s.subgroups.list()} | {group for group, _ in lag}
    out.gauge("rocketmq_consumer_group_number", "Consumer groups known to this node (subscription groups and "
              "groups with committed offsets)", len(groups))
    for group in s.consumers.groups():
        out.gauge("rocketmq_consumer_connections", "", len(s.consumers.members(group)),
                  {"consumer_group": group, "is_system": _bool(is_system_topic(group))}, bounded=True)
    out.gauge("rocketmq_producer_connections", "Live producers (heartbeating members of producer groups)",
              sum(len(s.producers.members(g)) for g in s.producers.groups()))
    await checkpoint()
    topics = s.topics.list()
    out.gauge("rocketmq_topic_number", "Topics in this node's topic table", len(topics))
    for topic, queue_ids in store.consume_queues.topics().items():
        if topic.startswith(DLQ_PREFIX):
            group = topic[len(DLQ_PREFIX):]
            moved = sum(store.get_max_offset_in_queue(topic, q) for q in queue_ids)
            out.counter("rocketmq_send_to_dlq_messages_total", "", moved,
                        {"consumer_group": group, "is_system": _bool(is_system_topic(group))}, bounded=True)
    if s.is_master and s.transactions.loaded:  # never loaded by a scrape: the serving master's view
        status = s.transactions.status()
        out.counter("rocketmq_commit_messages_total", "Transactions ended by a commit (the ones the op log holds)",
                    _int(status.get("committed")))
        out.counter("rocketmq_rollback_messages_total", "Transactions ended by a rollback (the ones the op log holds)",
                    _int(status.get("rolled_back")))
        by_topic = status.get("open_by_topic")
        if isinstance(by_topic, dict):
            for topic, n in by_topic.items():
                out.gauge("rocketmq_half_messages", "", n, {"topic": topic}, bounded=True)


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0


def _store_time(s: NodeServices, topic: str, queue_id: int, offset: int) -> int | None:
    """Store time (epoch ms) of the message at `offset` of the queue, None when unreadable."""
    cq = s.store.consume_queues.find(topic, queue_id)
    unit = cq.get_unit(offset) if cq is not None else None
    if unit is None:
        return None
    msg = s.store.look_message_by_offset(unit[0], unit[1])
    return msg.store_timestamp if msg is not None else None


def _storage(out: Series, s: NodeServices, now_ms: int) -> None:
    store, cfg = s.store, s.store.config
    max_phy = store.get_max_phy_offset()
    out.gauge("rocketmq_storage_size", "Bytes of CommitLog the node holds (max minus min physical offset)",
              max(0, max_phy - store.get_min_phy_offset()), {"storage_type": "local", "storage_medium": "disk"})
    out.gauge("rocketmq_storage_flush_behind_bytes", "CommitLog bytes written but not yet flushed to disk",
              max(0, max_phy - store.replica_log.flushed()), {"storage_type": "local", "storage_medium": "disk"})
    out.gauge("rocketmq_storage_dispatch_behind_bytes", "CommitLog bytes not yet dispatched to the ConsumeQueues",
              store.dispatch_behind_bytes(), {"storage_type": "local", "storage_medium": "disk"})
    earliest = store.get_earliest_message_time()
    out.gauge("rocketmq_storage_message_reserve_time", "Milliseconds since the oldest stored message was stored",
              max(0, now_ms - earliest) if earliest else 0, {"storage_type": "local", "storage_medium": "disk"})
    disk = psutil.disk_usage(cfg.store_path_root_dir)  # statvfs: cheap
    out.gauge("rocketmq_storage_disk_used_ratio", "Used fraction of the store's file system",
              disk.used / disk.total if disk.total else 0.0)
    for level, ratio in (("clean", cfg.disk_max_used_space_ratio / 100),
                         ("clean_forcibly", cfg.disk_space_clean_forcibly_ratio),
                         ("warning", cfg.disk_space_warning_level_ratio)):
        out.gauge("rocketmq_storage_disk_ratio_threshold",
                  "The store's disk thresholds: diskMaxUsedSpaceRatio (clean), diskSpaceCleanForciblyRatio, "
                  "diskSpaceWarningLevelRatio (writes refused)", ratio, {"level": level})


def _replication(out: Series, s: NodeServices) -> None:
    master = s.ha_master
    out.gauge("rocketmq_broker_is_master", "1 when this node serves its group as master, 0 as a slave",
              1 if s.is_master else 0)
    if master is not None:
        lag_s = master.lag_seconds()
        slaves = master.status()
        for slave in slaves:
            labels = {"slave": slave.address}
            out.gauge("rocketmq_replication_lag_bytes", "", slave.lag_bytes, labels)
            out.gauge("rocketmq_replication_lag_seconds", "", lag_s.get(slave.address, 0.0), labels)
            out.gauge("rocketmq_replication_slave_ack_offset", "", max(slave.ack_offset, 0), labels)
        out.gauge("rocketmq_replication_confirm_offset", CONFIRM_HELP, master.confirm_seen())
        out.gauge("rocketmq_replication_in_sync_replicas", "Members of the in-sync set, the master included",
                  1 + len(master.members()))
        out.gauge("rocketmq_replication_slaves_connected", "Slaves connected to this master's HA port", len(slaves))
        out.gauge("rocketmq_replication_slaves_expected",
                  "Slaves this master's group should have (the most seen this term, or registered)",
                  master.acks_needed() if master.on_ack_timeout is None else len(master.ack_members or ()))
    elif s.ha_client is not None:
        status = s.ha_client.status()
        out.gauge("rocketmq_replication_master_connected", "1 while this slave's HA connection is up",
                  1 if status.connected else 0)
        out.gauge("rocketmq_replication_behind_bytes", "Bytes of the master's log this slave has not received "
                  "(as of the master's last frame)", status.lag_bytes)
        out.gauge("rocketmq_replication_confirm_offset", CONFIRM_HELP, s.store.replica_log.known_confirm or 0)


def _failover(out: Series, s: NodeServices) -> None:
    if s.failover is None:
        return
    status = s.failover.status()
    out.gauge("rocketmq_broker_epoch", "The epoch (master term) this node serves in", _int(status.get("epoch")))
    out.gauge("rocketmq_broker_fenced", "1 when a newer epoch fenced this master (it refuses writes)",
              1 if status.get("fenced") else 0)
    out.gauge("rocketmq_broker_writes_held", "1 while this master holds writes (a stall or a lost slave awaits "
              "an epoch check, or it is an unelected candidate)", 1 if status.get("writes_held") else 0)
    out.counter("rocketmq_broker_stalls_total", "Event-loop stalls (SIGSTOP, a VM pause) that made it re-check "
                "its epoch", _int(status.get("stalls")))
    elections = getattr(s.failover.controller, "elections", None)  # controllerMode etcd only
    if isinstance(elections, dict):
        for result, n in elections.items():
            out.counter("rocketmq_failover_elections_total", "Campaigns this node's etcd controller ran, by result",
                        n, {"result": result})
    promotions = getattr(s.failover, "promotions", None)
    if isinstance(promotions, dict):
        for result, n in promotions.items():
            out.counter("rocketmq_failover_promotions_total", "", n, {"result": result})


def _security(out: Series, s: NodeServices) -> None:
    if s.security_status is None:
        return
    view = s.security_status()
    out.counter("rocketmq_auth_logins_total", "Logins accepted on the client port", _int(view.get("logins")))
    out.counter("rocketmq_auth_failed_logins_total", "Logins refused on the client port (unknown account, "
                "bad signature)", _int(view.get("failed_logins")))
    out.counter("rocketmq_auth_refusals_total", "Requests refused for lack of permission", _int(view.get("refused")))
    out.counter("rocketmq_auth_rate_limited_total", "Logins refused by the failed-login rate limit",
                _int(view.get("rate_limited")))
