"""The name server: brokers register and heartbeat, clients ask where a topic lives.

Like RocketMQ's NameServer it keeps no state on disk: every broker re-registers every
`registerNameServerPeriod` (node/registration.py) with its identity, addresses, topic
configs and max CommitLog offset, so a restarted name server is whole again within one
period. A broker is dropped when it has not registered for `brokerExpireMs` (default 30 s),
and it is marked `alive: false` at once when the connection it registered over closes
(a SIGKILLed broker's socket is closed by its kernel), as RocketMQ's
BrokerHousekeepingService does on a channel close, so clients stop routing to it before
it expires.

The name server speaks the client protocol's framing and envelope (wire/protocol.py) with
its own op table, `NAMESRV_REQUESTS` (wire/protocol/namesrv.py); docs/protocol.md ("Name server") is the reference.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import trio

from ha.net import TCP, Network
from node.security.guard import Guard
from node.server import ClientServer
from store import runtime
from store.address import format_host_port
from wire.protocol import (
    Request,
    Status,
    WritePermReply,
    error_response,
)
from wire.protocol.namesrv import (
    NAMESRV_REQUESTS,
    ClusterInfoReply,
    NamesrvStatusReply,
    RegisterReply,
    RouteReply,
    UnregisterReply,
)

from .config import NamesrvConfig
from .remoting import NamesrvRemoting
from .route_table import RouteTable

if TYPE_CHECKING:
    from node.metrics.endpoint import MetricsEndpoint

log = logging.getLogger("tidemq.namesrv")

__all__ = ["NameServer"]

SHUTDOWN_GRACE_S = 3.0



class NameServer:
    """The name server process's services: `await NameServer(cfg).run()`."""

    def __init__(self, cfg: NamesrvConfig, *, handle_signals: bool = True, net: Network = TCP) -> None:
        self.cfg = cfg
        self.net = net  # where its port listens (ha/net.py): TCP, or a simulated network
        self.handle_signals = handle_signals
        self.table = RouteTable(cfg.broker_expire_ms)
        # aclEnable: brokers register as an admin account, clients log in (AclError: the file is wrong)
        self.guard = Guard(cfg.acl_file) if cfg.acl_enable else None
        # tlsMode: TLS on the port (TlsError: a file is wrong)
        self.tls = (cfg.tls.server_context(), cfg.tls_mode) if cfg.tls.enabled else None
        self.server: ClientServer | None = None
        self.address = ""
        # metricsExporterType PROM: /metrics (MetricsError: the bearer token file is wrong)
        self.metrics: MetricsEndpoint | None = None
        if cfg.metrics_enabled:  # imported here: prometheus_client is for PROM name servers only
            from .metrics import NamesrvCollector, namesrv_endpoint

            self.metrics = namesrv_endpoint(cfg, NamesrvCollector(self.table, lambda: self.address,
                                                                  self.guard.view if self.guard else lambda: None),
                                            self.tls)
        self.started_ms = 0
        self._stop = trio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until stopped (SIGTERM/SIGINT); `task_status.started(address)` when serving."""
        receiver = (
            trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT)
            if self.handle_signals
            else contextlib.nullcontext()
        )
        with receiver as signals:
            async with trio.open_nursery() as nursery:
                if signals is not None:
                    nursery.start_soon(self._watch_signals, signals)
                self.server = ClientServer(
                    self._handle,
                    host=self.cfg.listen_address,
                    port=self.cfg.listen_port,
                    max_frame_size=self.cfg.max_frame_size,
                    requests=NAMESRV_REQUESTS,
                    on_disconnect=self.table.connection_closed,
                    guard=self.guard, tls=self.tls, net=self.net,
                    remoting=NamesrvRemoting(self.table, self.guard),
                )
                await nursery.start(self.server.run)
                nursery.start_soon(self._expire_loop)
                if self.metrics is not None:
                    await nursery.start(self.metrics.run)
                self.address = format_host_port(self.cfg.listen_address, self.server.port)
                self.started_ms = int(runtime.wall_clock() * 1000)
                log.info("name server serving on %s (brokerExpireMs %d)", self.address, self.cfg.broker_expire_ms)
                task_status.started(self.address)
                await self._stop.wait()
                log.info("name server shutting down")
                await self.server.drain(SHUTDOWN_GRACE_S)
                nursery.cancel_scope.cancel()

    async def _watch_signals(self, signals: AsyncIterator[int]) -> None:
        async for signum in signals:
            log.info("received %s: shutting down", signal.Signals(signum).name)
            self.stop()

    async def _expire_loop(self) -> None:
        interval = min(1.0, self.table.expire_s / 4)
        while True:
            await runtime.sleep(interval)
            self.table.expire()

    async def _handle(self, request: Request, peer: str | None) -> dict[str, Any]:
        try:
            return self._dispatch(request, peer)
        except Exception as e:  # a bug costs one request, never the name server
            log.exception("op %s (id %s) failed", request.op, request.id)
            return error_response(request.id, Status.INTERNAL_ERROR, f"{request.op} failed: {type(e).__name__}: {e}")

    def _dispatch(self, request: Request, peer: str | None) -> dict[str, Any]:
        f, table = request.fields, self.table
        table.expire()
        if request.op == "register_broker":
            registered = table.register(f, peer) is not None
            master = table.master_of(f.broker_name)
            return RegisterReply(
                registered=registered,
                master_address=master.address if master else None,
                master_ha_address=master.ha_address if master else None,
                master_epoch=master.epoch if master else None,
                master_role=master.role if master else None,
                broker_expire_ms=self.cfg.broker_expire_ms,
            ).to_wire(request.id)
        if request.op == "unregister_broker":
            return UnregisterReply(removed=table.unregister(f.broker_name, f.broker_id, f.address)).to_wire(request.id)
        if request.op == "get_route":
            groups = table.route(f.topic)
            if not groups:
                return error_response(request.id, Status.NOT_FOUND, f"no broker serves topic {f.topic!r}")
            return RouteReply(topic=f.topic, groups=groups).to_wire(request.id)
        if request.op == "get_cluster_info":
            return ClusterInfoReply(brokers=table.cluster_info(), broker_expire_ms=self.cfg.broker_expire_ms).to_wire(request.id)
        if request.op in ("wipe_write_perm", "add_write_perm"):
            writeable = request.op == "add_write_perm"
            topics = table.set_write_perm(f.broker_name, writeable)
            if topics is None:
                known = ", ".join(sorted({b["broker_name"] for b in table.cluster_info()})) or "none"
                return error_response(request.id, Status.NOT_FOUND,
                                      f"no broker {f.broker_name!r} is registered (broker groups: {known})")
            return WritePermReply(writeable=writeable, topics=topics).to_wire(request.id)
        if request.op == "status":
            return NamesrvStatusReply(role="NAMESRV", address=self.address, brokers=len(table),
                                      broker_expire_ms=self.cfg.broker_expire_ms,
                                      started_ms=self.started_ms,
                                      security=self.guard.view() if self.guard else None).to_wire(request.id)
        raise AssertionError(f"op {request.op!r} has a schema but no handler")
