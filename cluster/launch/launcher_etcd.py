"""The launcher's local etcd: `tidemq cluster up --controller etcd` (or a layout whose
nodes set controllerMode = "etcd") starts one beside the name server, `down` stops it.

It runs detached (its own session) with its data in `<base-dir>/etcd/data` and its log in
`<base-dir>/logs/etcd.out`; `<base-dir>/etcd.json` records pid, start time and endpoint so
a later `up` finds it running and `down` stops it. Its client port is the first port of the
layout's etcdEndpoints.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import psutil

from node.config import ConfigError, load_config
from store.address import split_host_port

from .etcd_server import EtcdServer, EtcdUnavailable
from .processes import terminate
from .state import LauncherError, LayoutError, NodeRecord, Stage

__all__ = ["ETCD_STATE", "etcd_endpoint", "start_etcd", "stop_etcd"]

ETCD_STATE = "etcd.json"


def etcd_endpoint(specs: list[NodeRecord], base: Path, controller: str | None) -> str | None:
    """The layout's etcd endpoint (host:port) when its nodes use etcd, else None; with
    `controller` = "etcd" a layout without one is an error."""
    endpoints = set()
    for spec in specs:
        if spec.stage is Stage.NAMESRV:
            continue
        try:
            cfg = load_config(spec.config, base_dir=str(base))
        except ConfigError as e:
            raise LayoutError(str(e)) from None
        if cfg.controller_mode == "etcd" and cfg.etcd_endpoints:
            endpoints.add(cfg.etcd_endpoints.split(";")[0].strip())
    if controller == "etcd" and not endpoints:
        raise LayoutError('--controller etcd needs a layout whose nodes set controllerMode = "etcd" '
                          "and etcdEndpoints (e.g. conf/2m-2s-sync-auto)")
    if len(endpoints) > 1:
        raise LayoutError(f"the layout's nodes name different etcd endpoints: {', '.join(sorted(endpoints))}")
    return endpoints.pop() if endpoints else None


def _running(base: Path) -> psutil.Process | None:
    try:
        state = json.loads((base / ETCD_STATE).read_text())
        proc = psutil.Process(state["pid"])
        if abs(proc.create_time() - state["create_time"]) > 1 or proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except (OSError, ValueError, KeyError, psutil.Error):
        return None


def start_etcd(base: Path, endpoint: str) -> str:
    """Start the local etcd unless it runs; a sentence saying which."""
    proc = _running(base)
    if proc is not None:
        return f"etcd           running  {endpoint} pid {proc.pid}"
    host, port = split_host_port(endpoint.split("://", 1)[-1].rstrip("/"))
    if host not in ("127.0.0.1", "localhost"):
        raise LayoutError(f"etcdEndpoints {endpoint}: the launcher starts etcd on 127.0.0.1 only")
    (base / "logs").mkdir(parents=True, exist_ok=True)
    server = EtcdServer(base / "etcd" / "data", client_port=int(port))
    server.log_path = base / "logs" / "etcd.out"
    try:
        server.start()
    except EtcdUnavailable as e:
        raise LauncherError(f"etcd did not start: {e}") from None
    assert server.proc is not None
    pid = server.proc.pid
    (base / ETCD_STATE).write_text(json.dumps({"pid": pid, "create_time": psutil.Process(pid).create_time(),
                                                "endpoint": endpoint}))
    return f"etcd           started  {endpoint} pid {pid}"


def stop_etcd(base: Path, grace_s: float = 10.0) -> str | None:
    """Stop the recorded etcd (SIGTERM, then SIGKILL after `grace_s`); None if none runs."""
    proc = _running(base)
    if proc is None:
        return None
    how = terminate(proc, grace_s)
    os.remove(base / ETCD_STATE)
    return f"etcd           pid {proc.pid} {how}"

