"""cluster.json and its lock: what a local cluster's base dir runs (cluster/launch/launcher.py).

`<base-dir>/cluster.json` records the layout and, per node, its config, pid, process start
time, address and role, so later commands find the processes after the launcher exited. It
is written atomically (tmp + fsync + rename). Mutating commands hold `<base-dir>/cluster.lock`
(flock), so two launchers on one base dir never start a node twice.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import json
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

__all__ = [
    "LOCK_FILE",
    "STATE_FILE",
    "ClusterState",
    "LauncherError",
    "LayoutError",
    "NodeRecord",
    "ProxyRecord",
    "Stage",
    "load_state",
    "locked",
    "require_state",
    "save_state",
]

STATE_FILE = "cluster.json"
LOCK_FILE = "cluster.lock"


class LauncherError(Exception):
    """A launcher command cannot do what was asked; the message names the node and why."""


class LayoutError(LauncherError):
    """The layout or its base dir is unusable (bad config file, unknown node): a usage error."""


class Stage(enum.IntEnum):
    """Start order (stop order is the reverse): slaves need their master, brokers the namesrv."""

    NAMESRV = 0
    MASTER = 1
    SLAVE = 2


@attrs.define
class NodeRecord:
    """One node of a layout, and (once started) its process: a row of cluster.json."""

    name: str
    stage: Stage = attrs.field(converter=Stage)
    role: str  # SYNC_MASTER, ASYNC_MASTER, SLAVE or NAMESRV
    config: str  # absolute path of the config file
    address: str  # client address: from the config, then as printed on READY
    store_root: str | None = None  # brokers: storePathRootDir (the abort file lives there)
    broker_name: str | None = None
    broker_id: int | None = None
    log: str = ""
    pid: int | None = None
    create_time: float | None = None  # psutil's process start time: tells a recycled pid apart
    started_at: float | None = None  # epoch seconds of the READY line

    @property
    def kind(self) -> str:
        return "namesrv" if self.stage is Stage.NAMESRV else "node"

    def to_json(self) -> dict[str, Any]:
        d = attrs.asdict(self)
        d["stage"] = self.stage.name
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> NodeRecord:
        d = dict(d)
        d["stage"] = Stage[d["stage"]]
        known = {f.name for f in attrs.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


@attrs.define
class ProxyRecord:
    """A Toxiproxy proxy in front of one link of one node (cluster/launch/proxies.py)."""

    name: str  # `<prefix><node>-<link>`
    node: str
    link: str  # "client" (listenPort) or "ha" (haListenPort)
    upstream: str  # the node's bound address
    listen: str = ""  # the proxy's address, advertised by the node; "" until created


@attrs.define
class ClusterState:
    """cluster.json: the layout a base dir runs and its nodes, in start order, and the
    proxies its links go through when it was started with a proxy URL."""

    layout: str
    base_dir: str
    nodes: dict[str, NodeRecord] = attrs.field(factory=dict)
    proxy_url: str | None = None
    proxy_prefix: str = ""
    proxies: dict[str, ProxyRecord] = attrs.field(factory=dict)

    def ordered(self, *, reverse: bool = False) -> list[NodeRecord]:
        return sorted(self.nodes.values(), key=lambda r: (r.stage, r.name), reverse=reverse)

    def node(self, name: str) -> NodeRecord:
        try:
            return self.nodes[name]
        except KeyError:
            raise LayoutError(
                f"no node {name!r} in {self.base_dir}/{STATE_FILE}; nodes: {', '.join(self.nodes) or 'none'}"
            ) from None


# ---------------------------------------------------------------------------------------
# cluster.json and the lock


def _state_path(base_dir: Path) -> Path:
    return base_dir / STATE_FILE


def load_state(base_dir: str | os.PathLike[str]) -> ClusterState | None:
    """The recorded cluster of `base_dir`, or None when nothing was ever started there."""
    path = _state_path(Path(base_dir).resolve())
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise LauncherError(f"{path}: cannot read: {e}") from None
    try:
        nodes = {n["name"]: NodeRecord.from_json(n) for n in raw["nodes"]}
        proxies = {p["name"]: ProxyRecord(**p) for p in raw.get("proxies") or ()}
        return ClusterState(layout=raw["layout"], base_dir=raw["base_dir"], nodes=nodes,
                            proxy_url=raw.get("proxy_url"), proxy_prefix=raw.get("proxy_prefix", ""),
                            proxies=proxies)
    except (KeyError, TypeError, ValueError) as e:
        raise LauncherError(f"{path}: not a cluster file ({e!r})") from None


def save_state(state: ClusterState) -> None:
    """tmp + fsync + rename: a reader sees the old or the new file, never half of one."""
    path = _state_path(Path(state.base_dir))
    obj = {"layout": state.layout, "base_dir": state.base_dir, "updated_at": time.time(),
           "nodes": [r.to_json() for r in state.ordered()]}
    if state.proxy_url:
        obj.update(proxy_url=state.proxy_url, proxy_prefix=state.proxy_prefix, proxies=[attrs.asdict(p) for p in state.proxies.values()])
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@contextlib.contextmanager
def locked(base_dir: Path) -> Iterator[None]:
    base_dir.mkdir(parents=True, exist_ok=True)
    with open(base_dir / LOCK_FILE, "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)



def require_state(base: Path) -> ClusterState:
    state = load_state(base)
    if state is None:
        raise LayoutError(f"no cluster recorded in {base} (no {STATE_FILE}); start one with `tidemq cluster up`")
    return state
