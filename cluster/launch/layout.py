"""Layouts: a directory of config files in conf/ read as the nodes of a local cluster,
and copies of one with other ports (tests, benchmarks, drills run beside the original).

A layout holds `namesrv.toml` (optional) and one broker file per node (`.toml`; a
`.properties` file only when no `.toml` has the same stem, since conf/1m-1s-dev keeps a
`.properties` twin of broker-a). A node is named by its file's stem. An ACL file kept beside
them (`acl.toml`, docs/security.md) is no node's: the launcher skips it and says so.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import random
import re
import socket
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from node.config import ConfigError, load_config

from .state import LayoutError, NodeRecord, Stage

__all__ = ["copy_layout", "free_ports", "layout_ports", "node_files", "read_layout", "set_key", "skipped_files"]


def read_layout(conf_dir: str | os.PathLike[str], base_dir: str | os.PathLike[str]) -> list[NodeRecord]:
    """The nodes of a layout directory in start order; LauncherError names a bad file."""
    conf = Path(conf_dir).resolve()
    if not conf.is_dir():
        raise LayoutError(f"layout directory {conf_dir} does not exist")
    files = node_files(conf)
    records = []
    for name, path in sorted(files.items()):
        if name == "namesrv":
            records.append(_namesrv_record(path))
            continue
        try:
            cfg = load_config(str(path), base_dir=str(base_dir))
            cfg.check_security_files()  # a secure layout's files must exist before its nodes start
        except ConfigError as e:
            hint = ""
            if cfg_names_secrets(path):
                hint = f"; a development layout makes them with: tidemq cluster make-secrets {conf_dir}"
            raise LayoutError(f"{e}{hint}") from None
        records.append(NodeRecord(
            name=name, stage=Stage.MASTER if cfg.role.is_master else Stage.SLAVE,
            role=cfg.role.value, config=str(path), address=cfg.bind_address,
            store_root=cfg.store.store_path_root_dir, broker_name=cfg.broker_name,
            broker_id=cfg.broker_id,
        ))
    if not any(r.stage is not Stage.NAMESRV for r in records):
        raise LayoutError(f"layout {conf} has no broker config files (*.toml, *.properties)")
    return sorted(records, key=lambda r: (r.stage, r.name))


def node_files(conf: Path) -> dict[str, Path]:
    """The layout's config files by node name: `.properties`, and `.toml` (which wins over a
    twin), leaving out the files `skipped_files` names."""
    files = {p.stem: p for p in sorted(conf.glob("*.properties"))}
    files.update({p.stem: p for p in sorted(conf.glob("*.toml"))})
    skipped = {p.name for p, _ in skipped_files(conf)}
    return {name: p for name, p in files.items() if p.name not in skipped}


def skipped_files(conf: str | os.PathLike[str]) -> list[tuple[Path, str]]:
    """Config-looking files of a layout that are no node's: an ACL file (`[[accounts]]`)
    kept beside the nodes' files, as docs/security.md does. Each with why."""
    out = []
    for path in sorted(Path(conf).glob("*.toml")):
        try:
            values = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue  # read_layout names the error
        if "accounts" in values:
            out.append((path, "an ACL file ([[accounts]]), not a node's config"))
    return out


def cfg_names_secrets(path: Path) -> bool:
    """Whether a config file names files under its layout's secrets/ (conf/2m-2s-secure)."""
    try:
        return '"secrets/' in path.read_text(encoding="utf-8")
    except OSError:
        return False


def _namesrv_record(path: Path) -> NodeRecord:
    try:
        values = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise LayoutError(f"{path}: cannot read: {e}") from None
    port = values.get("listenPort")
    host = values.get("listenAddress", values.get("brokerIP1", "127.0.0.1"))
    address = f"{host}:{port}" if isinstance(port, int) else ""
    return NodeRecord(name="namesrv", stage=Stage.NAMESRV, role="NAMESRV", config=str(path), address=address)


FREE_PORTS = range(20000, 30000)
"""Where free_ports looks first: below the kernel's ephemeral range (32768 on Linux), so an
outgoing connection cannot take a port between its choice and the server's bind (a port
from bind(0) is an ephemeral one: CI saw "Address already in use"), and below conf/'s
30876-30968, so a default cluster can run beside."""

FREE_PORTS_ENV = "TIDEMQ_FREE_PORTS"
"""`LO-HI` (inclusive) narrows FREE_PORTS for this process and its children: processes that
choose ports side by side (test workers) each get their own slice, since each remembers
only the ports it handed out itself."""


def _free_port_range() -> range:
    spec = os.environ.get(FREE_PORTS_ENV, "")
    if not spec:
        return FREE_PORTS
    try:
        lo, hi = (int(x) for x in spec.split("-"))
    except ValueError:
        raise LayoutError(f"{FREE_PORTS_ENV}={spec!r}: expected LO-HI, e.g. 20000-24999") from None
    if not 1024 <= lo <= hi <= 65535:
        raise LayoutError(f"{FREE_PORTS_ENV}={spec!r}: expected 1024 <= LO <= HI <= 65535")
    return range(lo, hi + 1)


_HANDED_OUT: collections.deque[int] = collections.deque(maxlen=2000)
"""Ports this process handed out lately: a port chosen but not yet bound (a node's config
written before it starts) must not be handed out again to the next caller."""


def free_ports(n: int) -> list[int]:
    """`n` distinct ports free right now (held together, so never repeated) and not handed
    out lately by this process: drawn from FREE_PORTS (or TIDEMQ_FREE_PORTS), or from the OS (bind to port 0) when
    fifty draws in a row were taken."""
    draw, pool = random.SystemRandom(), _free_port_range()
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        misses = 0
        while len(ports) < n:
            port = draw.choice(pool) if misses < 50 else 0
            if port in _HANDED_OUT:
                misses += 1
                continue
            s = stack.enter_context(socket.socket())
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                misses += 1
                continue
            ports.append(s.getsockname()[1])
            misses = 0
        _HANDED_OUT.extend(ports)
        return ports


def free_port() -> int:
    return free_ports(1)[0]


_PORT_KEYS = re.compile(r"^\s*(?:listenPort|haListenPort)\s*[=:]\s*(\d+)", re.MULTILINE)
_ETCD_PORTS = re.compile(r"^\s*etcdEndpoints\s*[=:]\s*\"?[^:\n]+:(\d+)", re.MULTILINE)


def layout_ports(text: str) -> list[int]:
    """The ports a config file's text listens on (listenPort, haListenPort, etcd's)."""
    return sorted({int(m) for keys in (_PORT_KEYS, _ETCD_PORTS) for m in keys.findall(text)})


def copy_layout(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    ports: Mapping[int, int] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[int, int]:
    """Copy a layout to `dst`, giving it other ports so it can run beside the original.

    Every listenPort/haListenPort found in the layout's files is replaced everywhere it
    appears in any of them (haMasterAddress, masterAddr, namesrvAddr, comments), by
    `ports[old]` or else by a free port, so the copy stays consistent. `overrides` maps a
    node name (file stem) to keys whose TOML values are replaced or appended, e.g.
    `{"broker-a": {"brokerRole": "ASYNC_MASTER"}}`. Returns the old → new port map.
    """
    src_dir, dst_dir = Path(src), Path(dst)
    texts = {p.name: p.read_text(encoding="utf-8") for p in sorted(src_dir.iterdir())
             if p.suffix in (".toml", ".properties")}
    old_ports = sorted({p for text in texts.values() for p in layout_ports(text)})
    mapping = dict(ports or {})
    missing = [p for p in old_ports if p not in mapping]
    mapping.update(zip(missing, free_ports(len(missing)), strict=True))
    pattern = re.compile(r"(?<!\d)(" + "|".join(map(str, old_ports)) + r")(?!\d)") if old_ports else None
    dst_dir.mkdir(parents=True, exist_ok=True)
    for filename, text in texts.items():
        if pattern is not None:
            text = pattern.sub(lambda m: str(mapping[int(m.group(1))]), text)
        stem, ext = os.path.splitext(filename)
        for key, value in ((overrides or {}).get(stem) or {}).items():
            text = set_key(text, key, value, properties=ext == ".properties")
        (dst_dir / filename).write_text(text, encoding="utf-8")
    return mapping


def set_key(text: str, key: str, value: Any, *, properties: bool) -> str:
    """`text` of a .toml or .properties file with `key` set to `value` (replaced or appended)."""
    if properties:
        line = f"{key}={str(value).lower() if isinstance(value, bool) else value}"
    else:
        line = f"{key} = {json.dumps(value)}"
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*=.*$", re.MULTILINE)
    if pattern.search(text):
        return pattern.sub(lambda _m: line, text, count=1)
    return text.rstrip("\n") + "\n" + line + "\n"
