"""A chaos cluster: one group (master + slave) and a name server, started with
cluster.launch.launcher's proxy routing, so every broker's client link and HA link go through a
Toxiproxy proxy.

This module writes a plain layout (the slave names its master's bound addresses) and
starts it with `launcher.up(..., proxy_url=...)`: the launcher creates
`<prefix><node>-client` and `<prefix><node>-ha` for both brokers, each broker advertises
its proxies to the name server, and the slave's haMasterAddress / masterAddr are
rewritten to the master's proxies. Producers send to the serving master's client proxy,
the consumer is routed there by the name server (and to the slave's client proxy while
the master is unreachable), the slave replicates through the master's HA proxy. A
scenario can then cut, slow or slice exactly one link. Nodes are named as in conf/:
`namesrv`, `broker-a` (master), `broker-a-s` (slave).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
from toxiproxy import Toxiproxy
from toxiproxy.proxy import Proxy

from cluster.launch import launcher, processes
from cluster.launch.secrets import NAMESRV_KEYS, NODE_KEYS, make_dev_secrets

from .network import api_address

MASTER, SLAVE, NAMESRV = "broker-a", "broker-a-s", "namesrv"
BROKER_NAME = "broker-a"

SMALL_STORE: dict[str, Any] = {
    "mappedFileSizeCommitLog": 1024 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 4000,
    "maxHashSlotNum": 1000,
    "maxIndexNum": 4000,
    "haHousekeepingInterval": 3000,
    "haSendHeartbeatInterval": 500,
    "slaveTimeout": 1000,
    "syncFlushTimeout": 2000,
    "cleanResourceInterval": 500,
    "registerNameServerPeriod": 2000,
    "flushIntervalCommitLog": 100,
}
"""Small files and short intervals: a scenario of seconds sees rolls, timeouts, recovery."""


def parse_mode(mode: str) -> tuple[str, str]:
    """"SYNC_MASTER+SYNC_FLUSH" → (brokerRole, flushDiskType); ValueError names the choices."""
    role, _, flush = mode.partition("+")
    if role not in ("SYNC_MASTER", "ASYNC_MASTER") or flush not in ("SYNC_FLUSH", "ASYNC_FLUSH"):
        raise ValueError(f"mode must be (SYNC_MASTER|ASYNC_MASTER)+(SYNC_FLUSH|ASYNC_FLUSH), got {mode!r}")
    return role, flush


MODES = tuple(f"{r}+{f}" for r in ("SYNC_MASTER", "ASYNC_MASTER") for f in ("SYNC_FLUSH", "ASYNC_FLUSH"))


@attrs.define
class ChaosCluster:
    """The files, addresses and proxies of one scenario's cluster under `base_dir`."""

    base_dir: Path
    mode: str
    ports: dict[str, int]
    store_roots: dict[str, str]
    proxy_url: str
    proxy_prefix: str
    client: Toxiproxy
    proxies: dict[tuple[str, str], Proxy] = attrs.field(factory=dict)  # (node, link) → proxy, after up()
    serving_master: str = MASTER  # the node that serves as master now: SLAVE after a promotion

    @property
    def serving_slave(self) -> str:
        return SLAVE if self.serving_master == MASTER else MASTER

    @property
    def conf_dir(self) -> Path:
        return self.base_dir / "conf"

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.ports['namesrv']}"

    @property
    def master_address(self) -> str:
        return f"127.0.0.1:{self.ports['master']}"

    @property
    def slave_address(self) -> str:
        return f"127.0.0.1:{self.ports['slave']}"

    @property
    def master_ha_address(self) -> str:
        return f"127.0.0.1:{self.ports['master_ha']}"

    def proxy(self, link: str, node: str | None = None) -> Proxy:
        """The proxy in front of `node`'s (default: the serving master's) "client" or "ha" link."""
        return self.proxies[(node or self.serving_master, link)]

    @property
    def client_address(self) -> str:
        """Where producers send: the client proxy in front of the serving master."""
        return self.proxy("client").listen

    def address_of(self, node: str) -> str:
        return {MASTER: self.master_address, SLAVE: self.slave_address, NAMESRV: self.namesrv}[node]

    # ---- lifecycle (blocking: call through trio.to_thread from async code)

    def up(self) -> None:
        launcher.up(self.conf_dir, self.base_dir, proxy_url=self.proxy_url, proxy_prefix=self.proxy_prefix)
        state = launcher.load_state(self.base_dir)
        assert state is not None
        live = self.client.proxies()
        self.proxies = {(p.node, p.link): live[p.name] for p in state.proxies.values()}

    def down(self) -> list[launcher.StopResult]:
        return launcher.down(self.base_dir)

    def signal(self, node: str, sig: str) -> str:
        return launcher.kill(self.base_dir, node, sig)

    def start(self, node: str) -> None:
        launcher.start_node(self.base_dir, node)

    def alive(self, node: str) -> bool:
        """Whether the node's recorded process still exists (a paused one counts)."""
        state = launcher.load_state(self.base_dir)
        record = state.nodes.get(node) if state else None
        return record is not None and processes.process(record) is not None

    def heal_proxies(self) -> None:
        """Enable this cluster's proxies and remove their toxics (not POST /reset, which
        would touch every proxy of a shared Toxiproxy). `down()` deletes them."""
        for proxy in self.proxies.values():
            proxy.enable()
            for name in proxy.toxics():
                proxy.destroy_toxic(name)


def write_cluster(
    base_dir: str | os.PathLike[str],
    mode: str,
    client: Toxiproxy,
    *,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    store_roots: Mapping[str, str] | None = None,
    secure: bool = False,
) -> ChaosCluster:
    """Write the layout's config files under `base_dir/conf`; `up()` starts it with its
    links through proxies on `client`'s Toxiproxy server.

    `overrides` maps a node name to extra keys; `store_roots` replaces a node's
    storePathRootDir (e.g. a tmpfs mount for the full-disk scenario). `secure`: accounts,
    permissions and TLS on every link (docs/security.md), with fresh secrets; `up()` logs
    this process's clients in as the layout's admin account."""
    role, flush = parse_mode(mode)
    base = Path(base_dir).resolve()
    conf = base / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    ports = dict(zip(("namesrv", "master", "master_ha", "slave", "slave_ha"), launcher.free_ports(5), strict=True))
    roots = {MASTER: str(base / "store" / MASTER), SLAVE: str(base / "store" / SLAVE)}
    roots.update(store_roots or {})
    # proxy names unique per run: a shared TOXIPROXY_URL may serve several runs at once
    cluster = ChaosCluster(base, mode, ports, roots, proxy_url=f"http://{api_address()}",
                           proxy_prefix=f"c{os.getpid()}-{ports['master']}-", client=client)
    common = {"brokerClusterName": "ChaosCluster", "brokerName": BROKER_NAME, "brokerIP1": "127.0.0.1",
              "namesrvAddr": cluster.namesrv, "flushDiskType": flush, **SMALL_STORE}
    nodes: dict[str, dict[str, Any]] = {
        MASTER: {**common, "brokerId": 0, "brokerRole": role, "listenPort": ports["master"],
                 "haListenPort": ports["master_ha"], "storePathRootDir": roots[MASTER]},
        SLAVE: {**common, "brokerId": 1, "brokerRole": "SLAVE", "listenPort": ports["slave"],
                "haListenPort": ports["slave_ha"], "storePathRootDir": roots[SLAVE],
                "haMasterAddress": cluster.master_ha_address, "masterAddr": cluster.master_address},
        NAMESRV: {"listenPort": ports["namesrv"], "brokerExpireMs": 10_000},
    }
    if secure:
        make_dev_secrets(conf)
        for name, values in nodes.items():
            values.update(NAMESRV_KEYS if name == NAMESRV else NODE_KEYS)
    for name, values in nodes.items():
        values.update((overrides or {}).get(name) or {})
        text = "".join(f"{key} = {json.dumps(value)}\n" for key, value in values.items())
        (conf / f"{name}.toml").write_text(f"# written by chaos.layout for mode {mode}\n{text}", encoding="utf-8")
    return cluster
