"""Registration with the name servers (RocketMQ's BrokerController.registerBrokerAll).

With `namesrvAddr` set, the node registers with every name server listed there: at start,
every `registerNameServerPeriod`, at once when its topics change (a created topic is
routable without waiting a period), and at once on a fresh connection when the old one
closed (a restarted name server learns the node again right away). A registration carries
the node's identity, addresses, topic table and max CommitLog offset; the answer names
the group's master, which a slave without a static `haMasterAddress` / `masterAddr`
follows (RocketMQ's haServerAddr). A failing name server is logged and retried with a
back-off (0.5 s doubling up to the period); it never stops the node. A graceful shutdown
unregisters, so clients stop routing to the node before it closes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import trio

from ha.net import TCP, Network
from store import runtime
from store.message_store import MessageStore
from wire.client import Connection, TidemqError, connect
from wire.options import ConnectOptions
from wire.protocol.namesrv import RegisterBroker, RegisterReply, UnregisterBroker

from .config import BrokerConfig
from .tables.changes import Changes
from .tables.topics import TopicConfigManager

AUTO_CREATE_TOPIC = "TBW102"
"""RocketMQ's TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC."""

log = logging.getLogger("tidemq.node")

__all__ = ["NameServerRegistration"]

BACKOFF_START_S = 0.5
CONNECT_TIMEOUT_S = 3.0
REQUEST_TIMEOUT_S = 5.0

MasterListener = Callable[[RegisterReply], None]
"""Called with every registration answer (the group's master as the name server knows it)."""


@attrs.define(eq=False)
class _Target:
    """One name server and the state of our registration with it."""

    address: str
    conn: Connection | None = None
    wake: trio.Event = attrs.field(factory=trio.Event)
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    last_register_ms: int | None = None
    last_error: str | None = None
    registered: bool = False


class NameServerRegistration:
    """Keeps this node registered with each name server; run with `nursery.start(reg.run)`."""

    def __init__(
        self,
        cfg: BrokerConfig,
        topics: TopicConfigManager,
        store: MessageStore,
        *,
        on_master: MasterListener | None = None,
        epoch: Callable[[], int] | None = None,
        controller: Callable[[], dict[str, Any]] | None = None,
        changes: Sequence[Changes] = (),
        hold: Callable[[], bool] | None = None,
        net: Network = TCP,
    ) -> None:
        self.net = net  # where the name servers are reached (ha/net.py)
        if not cfg.namesrv_addr:
            raise ValueError("namesrvAddr is not set")
        self.cfg = cfg
        self.topics = topics
        self.store = store
        self.on_master = on_master
        self.epoch = epoch
        self.controller = controller
        """controllerMode etcd: the lease holder and in-sync set to register (routes show them)."""
        self.hold = hold
        """While it answers True the node does not register (an etcd-mode candidate: no
        mandate to be listed as master yet); a change in `changes` ends the wait."""
        self.changes = tuple(changes)
        """What makes it register again at once: the topic table, the controller's route view."""
        self.period_s = cfg.register_name_server_period / 1000
        self.targets = [_Target(a) for a in cfg.namesrv_addresses]
        self._nursery: trio.Nursery | None = None
        self._stopping = False

    def trigger(self) -> None:
        """Register again now (the topic table changed)."""
        for target in self.targets:
            target.wake.set()

    def status(self) -> list[dict[str, Any]]:
        """Per name server: address, last successful registration (epoch ms), last error."""
        return [
            {"address": t.address, "last_register_ms": t.last_register_ms, "last_error": t.last_error}
            for t in self.targets
        ]

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for target in self.targets:
                nursery.start_soon(self._loop, target)
            for changes in self.changes:
                nursery.start_soon(self._register_on, changes)
            task_status.started()

    async def _register_on(self, changes: Changes) -> None:
        seen = changes.version
        while True:
            seen = await changes.wait_after(seen)
            self.trigger()

    async def announce(self, cfg: BrokerConfig, epoch: int, timeout_s: float) -> None:
        """Stop registering, then register once more as `cfg` with `epoch` (a promoted node
        announces itself before it restarts its services in the new role)."""
        self._stopping = True
        for target in self.targets:
            target.scope.cancel()
        self.cfg, self.epoch = cfg, (lambda: epoch)
        self.on_master = None
        with trio.move_on_after(timeout_s):
            async with trio.open_nursery() as nursery:
                for target in self.targets:
                    nursery.start_soon(self._announce_one, target)
        for target in self.targets:
            if target.conn is not None:
                await target.conn.aclose()

    async def _announce_one(self, target: _Target) -> None:
        try:
            await self._register(target)
        except TidemqError as e:
            log.warning("cannot announce the promotion to name server %s: %s", target.address, e)

    async def shutdown(self, timeout_s: float) -> None:
        """Stop registering and unregister from every name server (bounded by `timeout_s`)."""
        self._stopping = True
        for target in self.targets:
            target.scope.cancel()
        with trio.move_on_after(timeout_s):
            async with trio.open_nursery() as nursery:
                for target in self.targets:
                    if target.registered:
                        nursery.start_soon(self._unregister, target)
        for target in self.targets:
            if target.conn is not None:
                await target.conn.aclose()

    # ---- internals ----------------------------------------------------------------------

    async def _loop(self, target: _Target) -> None:
        backoff = BACKOFF_START_S
        with target.scope:
            while True:
                target.wake = trio.Event()
                if self.hold is not None and self.hold():
                    await target.wake.wait()
                    continue
                try:
                    await self._register(target)
                except TidemqError as e:
                    if target.last_error != str(e):
                        log.warning("cannot register with name server %s: %s (retrying)", target.address, e)
                    target.last_error = str(e)
                    if target.conn is not None:
                        await target.conn.aclose()
                        target.conn = None
                    wait = min(backoff, self.period_s)
                    backoff = min(backoff * 2, self.period_s)
                else:
                    backoff = BACKOFF_START_S
                    wait = self.period_s
                with trio.move_on_after(wait):
                    await target.wake.wait()

    async def _connection(self, target: _Target) -> Connection:
        if target.conn is None or target.conn.closed:
            assert self._nursery is not None
            target.conn = await Connection.open(target.address, self._nursery, self._connect_options())
            self._nursery.start_soon(self._watch, target, target.conn)
        return target.conn

    def _connect_options(self) -> ConnectOptions:
        """How a name server is reached: the node's login, TLS and frame cap (of the config
        it registers as now: a promotion announces with a new one)."""
        return ConnectOptions(connect_timeout=CONNECT_TIMEOUT_S, request_timeout=REQUEST_TIMEOUT_S,
                              max_frame_size=self.cfg.max_frame_size, credentials=self.cfg.credentials,
                              tls=self.cfg.client_tls, net=self.net)

    async def _watch(self, target: _Target, conn: Connection) -> None:
        """A registration connection that closes means the name server forgot we are alive:
        register again at once over a new one."""
        await conn.wait_closed()
        if not self._stopping and target.conn is conn:
            target.wake.set()

    async def _register(self, target: _Target) -> None:
        cfg = self.cfg
        conn = await self._connection(target)
        extra: dict[str, Any] = {}  # the optional fields: epoch, the controller's view
        if self.epoch is not None and self.epoch() >= 0:
            extra["epoch"] = self.epoch()
        if self.controller is not None:
            extra.update(self.controller())
        answer = await conn.request(RegisterBroker(
            **extra,
            cluster=cfg.broker_cluster_name,
            broker_name=cfg.broker_name,
            broker_id=cfg.broker_id,
            role=cfg.role.value,
            address=cfg.address,
            ha_address=cfg.ha_address,
            topics=self._registered_topics(),
            max_offset=self.store.get_max_phy_offset(),
        ))
        if not target.registered or target.last_error is not None:
            log.info("registered with name server %s", target.address)
        target.registered = True
        target.last_error = None
        target.last_register_ms = int(runtime.wall_clock() * 1000)
        if self.on_master is not None:
            self.on_master(RegisterReply.from_wire(answer))

    def _registered_topics(self) -> dict[str, dict[str, int]]:
        """The topic table, and with autoCreateTopicEnable RocketMQ's `TBW102` (8 queues,
        inherit + read + write), through whose route a RocketMQ client sends a topic's first
        message (docs/remoting.md). The node creates the topic itself on that send."""
        topics = {c.topic: c.to_json() for c in self.topics.list()}
        if self.cfg.auto_create_topic_enable:
            topics.setdefault(AUTO_CREATE_TOPIC, {"read_queue_nums": 8, "write_queue_nums": 8, "perm": 7})
        return topics

    async def _unregister(self, target: _Target) -> None:
        cfg = self.cfg
        request = UnregisterBroker(cluster=cfg.broker_cluster_name, broker_name=cfg.broker_name,
                                   broker_id=cfg.broker_id, address=cfg.address)
        try:
            if target.conn is not None and not target.conn.closed:
                await target.conn.request(request)
            else:  # the run nursery may be gone: a connection of its own
                async with connect(target.address, self._connect_options()) as conn:
                    await conn.request(request)
            log.info("unregistered from name server %s", target.address)
        except TidemqError as e:
            log.warning("cannot unregister from name server %s: %s", target.address, e)
