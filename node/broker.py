"""One node's lifecycle: store, replication, client server, tables, graceful shutdown.

`Broker` is RocketMQ's BrokerController: `Broker(cfg).run()` opens the store, starts the HA service (master) or HA client (slave),
the client-protocol server on brokerIP1:listenPort, the consumer-offset persister and, on
a slave with `masterAddr`, the topic/offset sync. It reports the serving address to
`nursery.start` and runs until SIGTERM/SIGINT (or `stop()`): then it unregisters from
the name servers, stops accepting, answers the requests in flight (long polls return at
once) within a grace period, persists the offsets and closes the store (flush,
checkpoint, abort file removed last). With `namesrvAddr` it registers with the name
servers once serving (node/registration.py); a name server that fails never stops it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import ssl
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import TYPE_CHECKING

import trio

from ha.master import HAService
from ha.net import TCP, Network
from ha.slave import HAClient
from store import runtime
from store.message_store import MessageStore, open_store
from wire.protocol.namesrv import RegisterReply
from wire.tls import accept_replica, wrap_client

from .config import BrokerConfig, ConfigError
from .failover.controller import EtcdController
from .failover.etcd import EtcdClient
from .failover.promotion import Failover, Transition, effective_config
from .logs import name_role
from .offset_stream import OffsetFollower, offset_table
from .ops.dispatch import (
    BATCHED_OPS,
    append_requests,
    finish_requests,
    handle_now,
    handle_plain_sends,
)
from .ops.services import NodeServices
from .ops.transaction_checks import run_checks
from .registration import NameServerRegistration
from .remoting.processor import NodeRemoting
from .schedule import ScheduleMessageService
from .security.guard import Guard
from .server import ClientServer
from .slave_sync import SlaveSync
from .tables.consumers import LOCK_FENCE_S, ConsumerManager
from .tables.offsets import ConsumerOffsetManager
from .tables.subscription_groups import SubscriptionGroupManager
from .tables.topics import TopicConfigManager

if TYPE_CHECKING:
    from .metrics.endpoint import MetricsEndpoint

log = logging.getLogger("tidemq.node")

__all__ = ["Broker"]

SHUTDOWN_GRACE_S = 10.0
"""Upper bound for requests in flight at shutdown (a SYNC_MASTER send waits up to
slaveTimeout, 3 s by default; long polls are woken at once)."""
UNREGISTER_TIMEOUT_S = 2.0
"""How long a shutdown waits for the name servers to acknowledge the unregistration."""


def write_broker_properties(cfg: BrokerConfig) -> None:
    """`<storePathRootDir>/config/broker.properties` (RocketMQ keeps the broker's config
    there too): the offline tools read the index geometry from it, which index files do
    not record."""
    store = cfg.store
    values = {
        "brokerClusterName": cfg.broker_cluster_name, "brokerName": cfg.broker_name,
        "brokerId": cfg.broker_id, "brokerRole": cfg.role.value,
        "mappedFileSizeCommitLog": store.mapped_file_size_commit_log,
        "mappedFileSizeConsumeQueue": store.mapped_file_size_consume_queue,
        "maxHashSlotNum": store.max_hash_slot_num, "maxIndexNum": store.max_index_num,
    }
    path = os.path.join(store.store_path_root_dir, "config", "broker.properties")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    text = f"# written by the node at start ({cfg.source})\n" + "".join(f"{k}={v}\n" for k, v in values.items())
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


class Broker:
    """A broker process's services (RocketMQ's BrokerController), wired together; see the
    module docstring."""

    def __init__(
        self, cfg: BrokerConfig, *, handle_signals: bool = True, grace_s: float = SHUTDOWN_GRACE_S,
        recovery_progress: Callable[[int, int], None] | None = None, net: Network = TCP,
        etcd: Callable[[list[str], float], EtcdClient] | None = None,
    ) -> None:
        """`net`: where its connections go (ha/net.py); `etcd`: how its controller reaches
        etcd (controllerMode etcd; default HTTP to etcdEndpoints, node/failover/etcd.py)."""
        self.recovery_progress = recovery_progress  # (validated bytes, total) during recovery
        self.net = net  # every connection it opens or accepts (ha/net.py): TCP, or a simulated network
        self.handle_signals = handle_signals
        self.grace_s = grace_s
        root = cfg.store.store_path_root_dir
        self.topics = TopicConfigManager(
            root, auto_create=cfg.auto_create_topic_enable, default_queue_nums=cfg.default_topic_queue_nums
        )
        self.offsets = ConsumerOffsetManager(root)
        self.subgroups = SubscriptionGroupManager(root)
        cfg.check_security_files()
        # aclEnable: logins and permissions on the client port (AclError: the file is wrong)
        self.guard = Guard(cfg.acl_file) if cfg.acl_enable else None
        # tlsMode: TLS on the client port, mutual TLS on the HA port (TlsError: a file is wrong)
        self.client_port_tls = (cfg.tls.server_context(), cfg.tls_mode) if cfg.tls.enabled else None
        self.ha_port_tls = cfg.tls.server_context(client_certs=True) if cfg.tls.enabled else None
        if cfg.acl_enable and cfg.tls_mode != "enforcing":
            # the HA port sends the whole CommitLog to whoever connects: accounts do not guard
            # it, only a client certificate does (docs/security.md, what each op needs)
            log.warning("aclEnable is on but tlsMode is %s: the HA port %s serves every topic's messages "
                        "to any peer that connects without a certificate; set tlsMode = \"enforcing\"",
                        cfg.tls_mode, cfg.ha_bind_address)
        # the role stored beside the store overrides the file's; with controllerMode etcd the
        # election decides who is master
        controller = partial(EtcdController, etcd=etcd) if cfg.controller_mode == "etcd" else None
        self.failover = Failover(cfg, on_transition=self._end_term, controller=controller, net=net)
        self.cfg = self.failover.cfg
        self.controller: EtcdController | None = self.failover.controller  # type: ignore[assignment]
        self.services: NodeServices | None = None
        self.server: ClientServer | None = None
        self.metrics = self._metrics_endpoint(cfg) if cfg.metrics_enabled else None
        """/metrics with metricsExporterType PROM (node/metrics/), else None."""
        self._stop = trio.Event()
        self._term_end = trio.Event()

    def _metrics_endpoint(self, cfg: BrokerConfig) -> MetricsEndpoint:
        """The node's collector, served on metricsPromExporterPort
        (ConfigError: the bearer token file cannot be read). Imported here: prometheus_client
        is for nodes with metricsExporterType PROM (the default is DISABLE)."""
        from .metrics.broker import BrokerCollector
        from .metrics.endpoint import MetricsEndpoint, MetricsError, token_from

        try:
            token = token_from(cfg.metrics_prom_bearer_token_file)
        except MetricsError as e:
            raise ConfigError(f"{cfg.source}: metricsPromBearerTokenFile: {e}" if cfg.source else str(e)) from None
        return MetricsEndpoint([BrokerCollector(cfg, lambda: self.services)], host=cfg.metrics_bind_host, port=cfg.metrics_prom_exporter_port,
                               tls=self.client_port_tls, bearer_token=token)

    def stop(self) -> None:
        """Begin a graceful shutdown (what SIGTERM does)."""
        self._stop.set()
        self._term_end.set()

    def _end_term(self) -> None:
        """A role change (promotion, fencing, a divergent tail): serve again in the new role."""
        self._term_end.set()

    async def run(self, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until stopped; `task_status.started(address)` once clients can connect.

        Raises ConfigFileError (damaged topics, offsets or subscription group file), StoreLockedError (the store
        is open elsewhere) or OSError (a port cannot be bound) before serving.
        """
        cfg = self.cfg
        # opened first, so a SIGTERM during start-up is a graceful stop, not a kill
        receiver = (
            trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT)
            if self.handle_signals
            else contextlib.nullcontext()
        )
        with receiver as signals:
            await runtime.run_sync(self.topics.load)
            await runtime.run_sync(self.offsets.load)
            await runtime.run_sync(self.subgroups.load)
            await self._create_trace_topic()
            async with trio.open_nursery() as outer:
                if signals is not None:
                    outer.start_soon(self._watch_signals, signals)
                if self.controller is not None:
                    await outer.start(self.controller.run)
                if self.metrics is not None:  # across terms: a promotion keeps the endpoint
                    await outer.start(self.metrics.run)
                try:
                    while True:
                        self.cfg = self.failover.cfg
                        self._term_end = trio.Event()
                        if self._stop.is_set():
                            break
                        transition = await self._serve(task_status)
                        task_status = trio.TASK_STATUS_IGNORED
                        if transition is None or self._stop.is_set():
                            break
                        await runtime.run_sync(self.failover.apply, transition)
                        log.warning("serving again as %s/%d (%s)", self.cfg.broker_name,
                                    self.failover.cfg.broker_id, self.failover.cfg.role.value)
                finally:
                    outer.cancel_scope.cancel()
        log.info("node %s/%d stopped", cfg.broker_name, cfg.broker_id)

    async def _create_trace_topic(self) -> None:
        """traceTopicEnable: a master makes the trace topic (1 queue, as RocketMQ's
        TopicConfigManager does) if its table lacks it; a slave copies its master's table."""
        cfg = self.cfg
        if cfg.trace_topic_enable and cfg.role.is_master and self.topics.get(cfg.msg_trace_topic_name) is None:
            await self.topics.create(cfg.msg_trace_topic_name, 1, 1)

    async def _watch_signals(self, signals: AsyncIterator[int]) -> None:
        async for signum in signals:
            log.info("received %s: shutting down", signal.Signals(signum).name)
            self.stop()

    def _on_master(
        self, ha_client: HAClient | None, sync: SlaveSync | None, answer: RegisterReply
    ) -> None:
        """A registration answer named the group's master: a slave without a static
        haMasterAddress / masterAddr follows it (RocketMQ's haServerAddr from the name server),
        and so does every slave once the group moved on to a newer epoch (after a promotion the
        static address names the old master; Failover.follows_namesrv)."""
        cfg = self.cfg
        self.failover.on_registration(answer)
        if cfg.role.is_master:
            return
        address, ha_address = answer.master_address, answer.master_ha_address
        follow = self.failover.follows_namesrv(answer.master_epoch)
        if (isinstance(ha_address, str) and (follow or not cfg.store.ha_master_address)
                and ha_client is not None and ha_address not in cfg.own_addresses()):
            ha_client.update_master_address(ha_address)
        if isinstance(address, str) and (follow or not cfg.master_addr) and sync is not None \
                and address not in cfg.own_addresses():
            sync.set_master_addr(address)

    def _build_term(self, store: MessageStore) -> tuple[NodeServices, SlaveSync | None,
                                                        NameServerRegistration | None]:
        """One term's collaborators, each given what it needs at construction (started by
        `_serve`); NodeServices last, with all of them."""
        cfg, controller = self.cfg, self.controller
        ha_master: HAService | None = None
        ha_client: HAClient | None = None
        schedule: ScheduleMessageService | None = None
        sync: SlaveSync | None = None
        if cfg.role.is_master:
            # the controller shrinks the in-sync set past a lagging member
            ha_master = HAService(store.replica_log, store.config, host=cfg.broker_ip1, port=cfg.ha_listen_port,
                                  on_ack_timeout=controller.on_ack_timeout if controller else None,
                                  on_connections=self.failover.wake,
                                  secure_accept=partial(accept_replica, self.ha_port_tls, cfg.tls_mode)
                                  if self.ha_port_tls is not None else None, net=self.net,
                                  max_gap=cfg.ha_max_gap_not_in_sync,
                                  max_silence_s=cfg.ha_max_time_slave_not_catchup / 1000,
                                  offset_table=partial(offset_table, self.offsets, lambda: self.failover.candidate),
                                  offset_stale_keys=self.offsets.stale_keys,
                                  hold_start=self.failover.promoted_term(),
                                  hold_restart=bool(cfg.namesrv_addresses))
            schedule = ScheduleMessageService(store)
        else:
            # the controller names the slave's HA connection in etcd as soon as it is up
            follower = OffsetFollower(self.offsets)
            ha_client = HAClient(store.replica_log, store.config, admit=self.failover.admit,
                                 on_connect=controller.wake if controller else None,
                                 secure_connect=partial(_tls_to, cfg.client_tls)
                                 if cfg.client_tls is not None else None, net=self.net,
                                 on_offsets=follower.take)
            follower.source = lambda: ha_client.master_address if ha_client is not None else None
            if cfg.master_addr or cfg.namesrv_addr:  # else: no way to find the master
                sync = SlaveSync(cfg.master_addr, self.topics, self.offsets, max_frame_size=cfg.max_frame_size,
                                 delay_offset_path=ScheduleMessageService.path_in(store), subgroups=self.subgroups,
                                 credentials=cfg.credentials, tls=cfg.client_tls, net=self.net,
                                 offsets_stream=partial(_offsets_stream, ha_client))
        registration = None
        if cfg.namesrv_addr:
            registration = NameServerRegistration(
                cfg, self.topics, store, on_master=partial(self._on_master, ha_client, sync),
                epoch=lambda: self.failover.epoch,
                controller=controller.route_view if controller else None,
                changes=[self.topics.changes, self.failover.epoch_changes] + ([controller.changes] if controller else []),
                hold=lambda: self.failover.candidate, net=self.net,
            )
        services = NodeServices(
            cfg=cfg, store=store, topics=self.topics, offsets=self.offsets, subgroups=self.subgroups,
            ha_master=ha_master, ha_client=ha_client, schedule=schedule,
            slave_sync_status=sync.status if sync is not None else None,
            registration_status=registration.status if registration is not None else None,
            security_status=self.guard.view if self.guard is not None else None,
            acl_accounts=self.guard.accounts if self.guard is not None else None,
            acl_file=self.guard.path if self.guard is not None else None,
            acl_recheck=self.guard.recheck if self.guard is not None else None,
            failover=self.failover, consumers=self._consumer_table(store),
        )
        return services, sync, registration

    def _consumer_table(self, store: MessageStore) -> ConsumerManager:
        """A new term's consumer table; a master restarted over its data, or promoted after
        an epoch of another master, fences its queue-lock leases (node/tables/consumers.py:
        leases the old table granted may still be trusted by their holders). A group's first
        master (a fresh store, no epoch before: etcd's first election) had no predecessor."""
        after_a_master = self.failover.promoted_term() and self.failover.epoch > 0
        fenced = self.cfg.role.is_master and (store.get_max_phy_offset() > 0 or after_a_master)
        return ConsumerManager(expire_s=self.cfg.channel_expired_timeout / 1000,
                               fence_s=LOCK_FENCE_S if fenced else 0.0)

    async def _serve(self, task_status: trio.TaskStatus[str]) -> Transition | None:
        """One term: the store and services in the current role until a stop or a role change."""
        cfg = self.cfg
        name_role(cfg)  # log lines name the role this term serves
        async with open_store(cfg.store, recovery_progress=self.recovery_progress, replicated=True) as store:
            await runtime.run_sync(write_broker_properties, cfg)
            try:
                async with trio.open_nursery() as nursery:
                    services, sync, registration = self._build_term(store)
                    self.failover.start_term(services, sync)
                    self.services = services
                    if services.ha_master is not None:
                        await nursery.start(services.ha_master.run)  # attaches itself as the replicator
                    if services.schedule is not None:  # built with the HA service (a master's)
                        await runtime.run_sync(services.schedule.load)
                        await nursery.start(services.schedule.run)
                    if cfg.role.is_master:  # the serving master asks producers about open transactions
                        await nursery.start(run_checks, services)
                    if services.ha_client is not None:
                        await nursery.start(services.ha_client.run)
                    if sync is not None:
                        await nursery.start(sync.run)
                    elif not cfg.role.is_master:
                        log.warning("masterAddr is not set: topics and consumer offsets are not "
                                    "synced from the master")
                    await nursery.start(self.failover.watch)
                    await nursery.start(self.offsets.run_persister)
                    self.server = ClientServer(
                        partial(handle_now, services),
                        host=cfg.broker_ip1, port=cfg.listen_port, max_frame_size=cfg.max_frame_size,
                        batched_ops=BATCHED_OPS, commit=partial(append_requests, services),
                        finish=partial(finish_requests, services),
                        on_disconnect=partial(_disconnected, services),  # a member's connection closed: it left
                        guard=self.guard, tls=self.client_port_tls,
                        plain_sends=partial(handle_plain_sends, services), net=self.net,
                    )
                    # RocketMQ's clients on the same port (node/remoting/)
                    self.server.remoting = NodeRemoting(services, self.server.checked_topics, self.guard)
                    await nursery.start(self.server.run)
                    if registration is not None:
                        await nursery.start(registration.run)
                    log.info("node %s/%d (%s) serving on %s%s", cfg.broker_name, cfg.broker_id,
                             cfg.role.value, cfg.bind_address,
                             f", advertised as {cfg.address}" if cfg.address != cfg.bind_address else "")
                    task_status.started(f"{cfg.broker_ip1}:{self.server.port}")
                    await self._term_end.wait()
                    if registration is not None:
                        transition = None if self._stop.is_set() else self.failover.transition
                        if transition is not None and transition.role.pending_epoch is not None:
                            # a promotion: the name servers learn the new master and its epoch
                            # now, so the old master is fenced while this node restarts
                            promoted = effective_config(self.failover.base_cfg, transition.role)
                            await registration.announce(promoted, transition.role.pending_epoch,
                                                        UNREGISTER_TIMEOUT_S)
                        else:
                            await registration.shutdown(UNREGISTER_TIMEOUT_S)
                    log.info("shutting down: draining requests in flight")
                    self.server.stop_accepting()
                    services.stop_long_polls()
                    await self.server.drain(self.grace_s)
                    nursery.cancel_scope.cancel()
                    return None if self._stop.is_set() else self.failover.transition
            finally:
                with trio.CancelScope(shield=True):
                    try:
                        if not runtime.killed():  # a simulated SIGKILL writes nothing on the way out
                            await self.offsets.persist()
                    except OSError as e:
                        log.error("cannot persist consumer offsets to %s: %s", self.offsets.path, e)
        # leaving open_store: flush, checkpoint, abort file removed


def _disconnected(services: NodeServices, peer: str | None) -> None:
    """A client connection closed: the consumer and producer groups and the transaction
    checks' watches forget it at once."""
    services.consumers.disconnected(peer)
    services.producers.disconnected(peer)
    services.checks.disconnected(peer)


def _offsets_stream(ha_client: HAClient) -> tuple[bool, int]:
    """(the master streams offsets now, batches taken so far): SlaveSync pulls none then."""
    return ha_client.offsets_streamed(), ha_client.offsets_batches


async def _tls_to(context: ssl.SSLContext, stream: trio.SocketStream, host: str) -> trio.abc.Stream:
    """A slave's TLS (with its certificate) around its connection to the master's HA port."""
    return await wrap_client(stream, context, host)
