"""One or two broker groups and their name server as tasks of one trio run, on a `SimNetwork`.

Each node is the production `Broker` (node/broker.py) with real store files under its own
directory (tmpfs), its connections on its simulated host, and its tasks marked as that
host's (store/runtime.py `hosted`), so a fault can strike it as it would strike a process:

- kill: the node's task is cancelled with `killed` set, so the store is abandoned as
  SIGKILL leaves it (mapped bytes stay in the files, nothing is flushed, the abort file
  stays) and no offsets are persisted; `restart` starts a new Broker on the same files;
- pause / resume: the network freezes the host's sockets and `runtime.sleep` its timers;
- slow disk: every blocking file operation of the host waits `disk_delay` first.
"""

from __future__ import annotations

import os
from typing import Any

import trio

from cluster.namesrv.config import NamesrvConfig
from cluster.namesrv.server import NameServer
from node.broker import Broker
from node.config import BrokerConfig
from node.failover.truncation import CutFailed
from store import runtime

from .disk import SimDisk
from .etcd_link import ETCD_ADDRESS, ETCD_HOST, SimEtcd
from .etcd_model import EtcdModel
from .network import SimNetwork

__all__ = ["BROKER_NAMES", "CLIENT_HOST", "NAMESRV_ADDRESS", "NAMESRV_HOST", "SimCluster", "SimGroup", "SimNode",
           "node_config"]

BROKER_NAMES = ("broker-a", "broker-b")  # the groups' brokerNames, in order
NODES_PER_GROUP = 3  # hosts and node names each group reserves (a master and up to two slaves)
NAMESRV_HOST = "10.0.0.9"
NAMESRV_ADDRESS = f"{NAMESRV_HOST}:9876"
CLIENT_HOST = "10.0.1.1"
CLIENT_PORT, HA_PORT = 10911, 10912

SMALL_FILES = {
    "mappedFileSizeCommitLog": 1024 * 1024,
    "mappedFileSizeConsumeQueue": 6000,
    "maxMessageSize": 64 * 1024,
    "maxHashSlotNum": 500,
    "maxIndexNum": 2000,
    # a run's records stay in the first 1 MiB segment: every read checks the CRC, as reads of
    # a sealed segment do (the `corrupt` fault strikes records durable long ago, chaos/sim/corrupt.py)
    "checkCrcOnRead": "all",
}


def node_config(root: str, host: str, broker_id: int, *, replication: str, flush: str,
                master_host: str, etcd: bool = False, broker_name: str = BROKER_NAMES[0]) -> BrokerConfig:
    """A node of group `broker_name`: brokerId 0 is the master (`replication`), the others its
    slaves; with `etcd`, the group elects its master (controllerMode etcd)."""
    values: dict[str, Any] = {
        "brokerClusterName": "SimCluster", "brokerName": broker_name, "brokerId": broker_id,
        "brokerRole": replication if broker_id == 0 else "SLAVE", "flushDiskType": flush,
        "brokerIP1": host, "listenPort": CLIENT_PORT, "haListenPort": HA_PORT, "namesrvAddr": NAMESRV_ADDRESS,
        "storePathRootDir": root, **SMALL_FILES,
        # the check service runs within a simulated run (chaos/sim/transactions.py); simulated time is cheap
        "transactionCheckInterval": 1000, "transactionTimeOut": 2000,
    }
    if broker_id != 0:
        values["haMasterAddress"] = f"{master_host}:{HA_PORT}"
        values["masterAddr"] = f"{master_host}:{CLIENT_PORT}"
    if etcd:
        values.update(controllerMode="etcd", etcdEndpoints=ETCD_ADDRESS)
    return BrokerConfig.from_mapping(values, source=f"sim node {host}")


class SimNode:
    """One node's process: a `runtime.Gate` for its tasks, and its Broker while it runs."""

    def __init__(self, name: str, host: str, cfg: BrokerConfig, network: SimNetwork,
                 etcd: EtcdModel | None = None) -> None:
        self.name = name
        self.group = cfg.broker_name
        self.etcd = etcd  # controllerMode etcd: the group's etcd, reached over the network
        self.host = host
        self.cfg = cfg
        self.network = network
        self.killed = False
        self.disk_delay = 0.0
        self.disk: SimDisk | None = None  # the durability model, when the run strikes power losses (disk.py)
        self.broker: Broker | None = None
        self.restarts = 0
        self.exited: str | None = None
        """Why the process last stopped itself (node/failover/truncation.py CutFailed), if it did."""
        self._scope: trio.CancelScope | None = None
        self._done = trio.Event()
        self._done.set()

    @property
    def root(self) -> str:
        return self.cfg.store.store_path_root_dir

    @property
    def address(self) -> str:
        return f"{self.host}:{CLIENT_PORT}"

    async def wait_running(self) -> None:
        await self.network.wait_running(self.host)

    async def run(self, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """The process: serves until stopped or killed."""
        runtime.hosted(self)
        self._done = trio.Event()
        try:
            with trio.CancelScope() as self._scope:
                self.broker = Broker(self.cfg, handle_signals=False, net=self.network.host(self.host),
                                     etcd=self._etcd_client if self.etcd is not None else None)
                await self.broker.run(task_status=task_status)
        except* CutFailed as stopped:
            # the process stops itself, as `tidemq node start` exits 1 (the operator restarts it)
            self.exited = str(stopped.exceptions[0])
        finally:
            self._done.set()

    def _etcd_client(self, _endpoints: list[str], timeout_s: float) -> SimEtcd:
        assert self.etcd is not None
        return SimEtcd(self.etcd, self.network, self.host, timeout_s)

    @property
    def up(self) -> bool:
        return not self._done.is_set()

    async def kill(self) -> None:
        """SIGKILL: the process ends now, leaving its files as they are."""
        if not self.up:
            return
        self.killed = True
        assert self._scope is not None
        self._scope.cancel()
        await self._done.wait()
        self.killed = False
        self.broker = None
        self.network.resume(self.host)  # a killed process is not paused any more

    async def stop(self) -> None:
        """SIGTERM: a graceful stop."""
        if self.up and self.broker is not None:
            self.broker.stop()
            await self._done.wait()

    def serving(self) -> tuple[str, int] | None:
        """(role, epoch) of the running node, None while it is down, between terms, or an
        etcd-mode candidate no election has made master yet."""
        broker = self.broker
        if broker is None or broker.services is None or not self.up or broker.failover.transition is not None:
            return None
        if broker.failover.candidate:  # etcd mode, started as master: not serving until elected
            return None
        return broker.cfg.role.value, broker.failover.epoch

    def store_max_offset(self) -> int | None:
        broker = self.broker
        if broker is None or broker.services is None:
            return None
        return broker.services.store.commit_log.max_offset()

    def recovered_end(self) -> int | None:
        """Where its store's last recovery ended the CommitLog, before anything it fetched
        since (a slave may have replicated past it by the time a restart returns)."""
        broker = self.broker
        if broker is None or broker.services is None or broker.services.store.recovery_cut is None:
            return self.store_max_offset()
        return broker.services.store.recovery_cut.end

    def dispatched(self) -> bool:
        """Its dispatch reached its CommitLog's end (or stopped at a record it cannot read):
        a slave holds dispatch at the confirm offset it knows until its master sends one."""
        broker = self.broker
        if broker is None or broker.services is None:
            return False
        store = broker.services.store
        return store.reput.dispatch_behind_bytes() == 0 or store.reput.stopped_at_error is not None


class SimGroup:
    """A broker group: its nodes (the first starts as master) and the node the producers
    write to (`master`: the promoted or elected one after a promotion or an election)."""

    def __init__(self, name: str, nodes: list[SimNode]) -> None:
        self.name = name
        self.nodes = nodes
        self.master = nodes[0]

    def role_node(self, role: str) -> SimNode:
        """"master": the node producers write to; "slave": the first other node; "slave2":
        the second other node (a group of two slaves)."""
        if role == "master":
            return self.master
        others = [n for n in self.nodes if n is not self.master]
        return others[1] if role == "slave2" else others[0]


class SimCluster:
    """The name server, the groups (broker-a's nodes are a, b, c on 10.0.0.1-3; broker-b's
    d, e, f on 10.0.0.4-6) and, with `etcd`, the in-memory etcd that elects each group's
    master."""

    def __init__(self, base: str, network: SimNetwork, *, replication: str, flush: str, slaves: int = 1,
                 etcd: bool = False, groups: int = 1) -> None:
        self.network = network
        self.etcd = EtcdModel() if etcd else None
        self.groups: list[SimGroup] = []
        for g in range(groups):
            first = g * NODES_PER_GROUP
            hosts = [f"10.0.0.{first + i + 1}" for i in range(1 + slaves)]
            names = [chr(ord("a") + first + i) for i in range(1 + slaves)]
            self.groups.append(SimGroup(BROKER_NAMES[g], [
                SimNode(name, host, node_config(os.path.join(base, name), host, i, replication=replication,
                                                flush=flush, master_host=hosts[0], etcd=etcd,
                                                broker_name=BROKER_NAMES[g]), network, self.etcd)
                for i, (name, host) in enumerate(zip(names, hosts, strict=True))]))
        self.nodes = [n for group in self.groups for n in group.nodes]
        self.namesrv = NameServer(NamesrvConfig(listen_address=NAMESRV_HOST, listen_port=9876),
                                  handle_signals=False, net=network.host(NAMESRV_HOST))

    @property
    def master(self) -> SimNode:
        """The first group's master."""
        return self.groups[0].master

    def node(self, name: str) -> SimNode:
        return next(n for n in self.nodes if n.name == name)

    def host_of(self, role: str, group: int = 0) -> str:
        """A role's host: a node's ("master", "slave", "slave2") of the group, or a host every
        group shares ("namesrv", "client", "etcd")."""
        if role == "namesrv":
            return NAMESRV_HOST
        if role == "client":
            return CLIENT_HOST
        if role == "etcd":
            return ETCD_HOST
        return self.groups[group].role_node(role).host

    async def start(self, nursery: trio.Nursery) -> None:
        if self.etcd is not None:
            nursery.start_soon(self.etcd.run)
        await nursery.start(self.namesrv.run)
        for node in self.nodes:
            await nursery.start(node.run)

    async def restart(self, nursery: trio.Nursery, node: SimNode) -> None:
        node.restarts += 1
        await nursery.start(node.run)

    async def stop(self) -> None:
        for node in self.nodes:
            await node.stop()
        self.namesrv.stop()
