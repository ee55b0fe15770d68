"""Local multi-process cluster: start a layout from `conf/`, track it, stop it.

The commands `tidemq cluster up/start/kill/down` run; `status` is cluster/launch/health.py (it
asks the nodes over the network) and the tables are cluster/cli/tables.py. A layout is read
by cluster/launch/layout.py, processes are spawned and watched by cluster/launch/processes.py, and
cluster.json with its lock is cluster/launch/state.py.

Start order is name server, masters, slaves (a slave's first report needs its master);
stop order is the reverse. Mutating commands hold `<base-dir>/cluster.lock`, so two
launchers on one base dir do not start a node twice.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import attrs
import psutil
import trio

from wire.protocol import StatusReply

from . import launcher_console, launcher_etcd, processes, proxies
from . import metrics as launch_metrics
from .health import query_status
from .layout import copy_layout, free_ports, read_layout
from .processes import StopResult
from .secrets import use_layout_secrets
from .state import (
    STATE_FILE,
    ClusterState,
    LauncherError,
    LayoutError,
    NodeRecord,
    Stage,
    load_state,
    locked,
    require_state,
    save_state,
)

__all__ = [  # the layout and state names are re-exported: drills and benchmarks use them
    "STATE_FILE",
    "ClusterState",
    "LauncherError",
    "LayoutError",
    "NodeRecord",
    "Stage",
    "StopResult",
    "UpResult",
    "copy_layout",
    "down",
    "free_ports",
    "kill",
    "load_state",
    "read_layout",
    "start_node",
    "up",
]

log = logging.getLogger("tidemq.cluster")

READY_TIMEOUT_S = 60.0
STOP_GRACE_S = 15.0


@attrs.define
class UpResult:
    name: str
    action: str  # "started" or "running" (already up)
    record: NodeRecord
    note: str = ""


# ---------------------------------------------------------------------------------------
# commands


def up(
    conf_dir: str | os.PathLike[str] | None,
    base_dir: str | os.PathLike[str],
    *,
    timeout_s: float = READY_TIMEOUT_S,
    on_result: Callable[[UpResult], None] | None = None,
    proxy_url: str | None = None,
    proxy_prefix: str = "",
    controller: str | None = None,
    on_etcd: Callable[[str], None] | None = None,
    metrics: bool = False,
) -> list[UpResult]:
    """Start every node of the layout that is not already running, stage by stage.

    Nodes of one stage start together and are waited for together. On failure the nodes
    this call started are stopped again and LauncherError says which node failed and why.
    `conf_dir` None reuses the layout (and proxy URL) recorded in cluster.json.
    `proxy_url` routes every broker's client and HA link through proxies on that
    Toxiproxy server, named `<proxy_prefix><node>-client` / `-ha` (cluster/launch/proxies.py).
    `metrics` gives every process /metrics on a port of its own (cluster/launch/metrics.py).
    """
    base = Path(base_dir).resolve()
    with locked(base):
        old = load_state(base)
        if conf_dir is None:
            if old is None:
                raise LayoutError(f"no cluster recorded in {base}; give the layout (--conf)")
            conf_dir = old.layout
            if proxy_url is None:
                proxy_url, proxy_prefix = old.proxy_url, old.proxy_prefix
        layout = str(Path(conf_dir).resolve())
        use_layout_secrets(layout)  # a secure layout: the launcher's probes log in and use TLS
        specs = read_layout(layout, base)
        alive = [r.name for r in old.ordered() if processes.process(r) is not None] if old else []
        if old is not None and alive and (old.layout, old.proxy_url, old.proxy_prefix if old.proxy_url else "") \
                != (layout, proxy_url, proxy_prefix if proxy_url else ""):
            runs = f"layout {old.layout}" + (
                f" through proxies {old.proxy_prefix}* at {old.proxy_url}" if old.proxy_url else "")
            raise LauncherError(
                f"{base} runs {runs} ({', '.join(alive)} alive); "
                f"stop it first (tidemq cluster down --base-dir {base_dir})"
            )
        endpoint = launcher_etcd.etcd_endpoint(specs, base, controller)
        if endpoint is not None and proxy_url:
            raise LayoutError(
                "proxies (--proxy-url) and controllerMode etcd do not go together: an etcd master names "
                "its in-sync slaves by the address of their HA connection, which a proxy replaces with "
                "its own, so no slave could join the in-sync set and no failover could happen "
                "(docs/auto-failover.md)")
        if old is not None and old.layout != layout:
            old = None
        state = ClusterState(layout=layout, base_dir=str(base), proxy_url=proxy_url,
                             proxy_prefix=proxy_prefix if proxy_url else "")
        if proxy_url:
            client = proxies.connect(proxy_url)
            # a fresh start takes fresh ports; a running cluster keeps the addresses it advertises
            state.proxies = proxies.plan(specs, proxy_prefix, old.proxies if old and alive else {})
            proxies.ensure(client, state.proxies.values(), proxies.listen_host(proxy_url))
            proxies.write_configs(specs, state.proxies, base)
        if metrics:
            launch_metrics.write_configs(specs, base)
        results: list[UpResult] = []
        launched: list[processes.Launch] = []

        def add(result: UpResult) -> None:
            results.append(result)
            if on_result:
                on_result(result)

        try:
            if endpoint is not None:  # beside the name server, before any node needs it
                said = launcher_etcd.start_etcd(base, endpoint)
                if on_etcd:
                    on_etcd(said)
            for stage in Stage:
                launches = []
                for spec in (s for s in specs if s.stage is stage):
                    prev = old.nodes.get(spec.name) if old else None
                    if prev is not None and processes.process(prev) is not None:
                        state.nodes[spec.name] = prev
                        add(UpResult(spec.name, "running", prev, f"pid {prev.pid}"))
                        continue
                    state.nodes[spec.name] = spec
                    launches.append(processes.spawn(spec, base))
                launched += launches
                processes.wait_ready(launches, timeout_s)
                for launch in launches:
                    add(UpResult(launch.record.name, "started", launch.record, f"pid {launch.record.pid}"))
                save_state(state)
            launch_metrics.write_targets(state.ordered(), base)
        except BaseException:
            # give back what this call started: a half-started layout helps nobody
            processes.abandon(launched)
            save_state(state)
            raise
        return results


def start_node(base_dir: str | os.PathLike[str], name: str, *, timeout_s: float = READY_TIMEOUT_S) -> NodeRecord:
    """(Re)start one recorded node from its config and wait for READY (failover drills)."""
    base = Path(base_dir).resolve()
    with locked(base):
        state = require_state(base)
        use_layout_secrets(state.layout)
        if name not in state.nodes:  # e.g. the namesrv skipped by `up`: take it from the layout
            specs = {s.name: s for s in read_layout(state.layout, base)}
            if name not in specs:
                state.node(name)  # raises, listing the nodes
            state.nodes[name] = specs[name]
        rec = state.nodes[name]
        proc = processes.process(rec)
        if proc is not None:
            raise LauncherError(f"{name} is already running (pid {rec.pid})")
        if state.proxy_url:  # `down` deleted them: back at the addresses the configs advertise
            mine = [p for p in state.proxies.values() if p.node == name]
            proxies.ensure(proxies.connect(state.proxy_url), mine, proxies.listen_host(state.proxy_url))
        if not os.path.exists(rec.config):
            raise LauncherError(f"{name}: config file {rec.config} no longer exists")
        launch = processes.spawn(rec, base)
        try:
            processes.wait_ready([launch], timeout_s)
        except BaseException:
            processes.abandon([launch])
            save_state(state)
            raise
        save_state(state)
        return rec


SIGNALS = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM, "STOP": signal.SIGSTOP, "CONT": signal.SIGCONT}


def kill(base_dir: str | os.PathLike[str], name: str, sig: str = "KILL", *, timeout_s: float = 30.0) -> str:
    """Signal one node (KILL/TERM wait for the exit, STOP/CONT for the state change);
    returns what happened, as a sentence."""
    base = Path(base_dir).resolve()
    if sig not in SIGNALS:
        raise LayoutError(f"unknown signal {sig!r}; use one of {', '.join(SIGNALS)}")
    with locked(base):
        rec = require_state(base).node(name)
        proc = processes.process(rec)
        if proc is None:
            raise LauncherError(f"{name} is not running (recorded pid {rec.pid})")
        t0 = time.monotonic()
        proc.send_signal(SIGNALS[sig])
        if sig in ("KILL", "TERM"):
            if processes.wait_gone([(rec, proc)], timeout_s):
                raise LauncherError(f"{name} (pid {rec.pid}) is still alive {timeout_s:g} s after SIG{sig}")
            return f"{name} (pid {rec.pid}) exited {time.monotonic() - t0:.2f} s after SIG{sig}"
        want = psutil.STATUS_STOPPED if sig == "STOP" else None
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                now = proc.status()
            except psutil.Error:
                raise LauncherError(f"{name} (pid {rec.pid}) exited after SIG{sig}") from None
            if (now == want) if want else (now != psutil.STATUS_STOPPED):
                return f"{name} (pid {rec.pid}) is {'stopped' if want else 'running'} after SIG{sig}"
            if time.monotonic() > deadline:
                raise LauncherError(f"{name} (pid {rec.pid}) is {now} {timeout_s:g} s after SIG{sig}")
            time.sleep(processes.POLL_S)  # poll: the kernel applies STOP/CONT asynchronously


def _by_served_role(state: ClusterState) -> list[NodeRecord]:
    """The nodes with the stage of the role each serves now (after a failover a config's
    slave may be the master), so `down` stops the slaves first; one that does not answer
    keeps its config's stage."""
    use_layout_secrets(state.layout)
    records = state.ordered()
    targets = [r for r in records if r.stage is not Stage.NAMESRV and r.address and processes.process(r) is not None]
    answers = trio.run(partial(query_status, [r.address for r in targets], timeout_s=2.0))
    served = {r.name: a.role for r, (a, _) in zip(targets, answers, strict=True)
              if isinstance(a, StatusReply) and a.role}
    return [attrs.evolve(r, stage=Stage.MASTER if served[r.name] != "SLAVE" else Stage.SLAVE)
            if r.name in served else r for r in records]


def down(
    base_dir: str | os.PathLike[str], *, grace_s: float = STOP_GRACE_S,
    on_result: Callable[[StopResult], None] | None = None,
) -> list[StopResult]:
    """Stop every recorded node: slaves, then masters, then the name server; then delete
    the cluster's proxies (kept in cluster.json: `start` and `up` bring them back)."""
    base = Path(base_dir).resolve()
    if not (base / STATE_FILE).exists():
        return []  # nothing was started here: leave no directory or lock file behind
    with locked(base):
        state = load_state(base)
        if state is None:
            return []
        launcher_console.stop_console(base, grace_s)  # first: it would only log the nodes going
        results = processes.stop(_by_served_role(state), grace_s, on_result)
        for rec in state.nodes.values():
            rec.pid = None
            rec.create_time = None
        save_state(state)
        if state.proxy_url and state.proxies:
            try:
                problems = proxies.remove(proxies.connect(state.proxy_url), state.proxies.values())
            except LauncherError as e:
                problems = [str(e)]
            for problem in problems:  # the nodes are down: a proxy left behind is only noted
                log.warning("%s", problem)
        launcher_etcd.stop_etcd(base, grace_s)
        return results
