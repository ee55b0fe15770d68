"""Local multi-process cluster: start a layout from `conf/`, track it, stop it.

A layout is a directory of config files: `namesrv.toml` (optional) and one broker file per
node (`.toml`; a `.properties` file only when no `.toml` has the same stem, since
conf/1m-1s-dev keeps a `.properties` twin of broker-a). A node is named by its file's stem.

Every node runs as its own OS process, `python -m node.cli {node|namesrv} start -c FILE
--base-dir DIR`, in a new session so it outlives the launcher, with stdout and stderr
appended to `<base-dir>/logs/<node>.out`. The READY line the process prints there is the
readiness signal. What was started is recorded in `<base-dir>/cluster.json` (written
atomically), so later commands (`status`, `down`, `kill`, `start`) can find the processes
after the launcher has exited. A recorded pid only counts as the node while the process
with that pid has the recorded start time and a command line naming the node's config:
a recycled pid is never taken for the node, and never signalled.

Start order is name server, masters, slaves (a slave's first report needs its master);
stop order is the reverse. Mutating commands take `<base-dir>/cluster.lock`, so two
launchers on one base dir do not start a node twice.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import psutil

from node.config import ConfigError, load_config

__all__ = [
    "STATE_FILE",
    "ClusterState",
    "LauncherError",
    "LayoutError",
    "NodeRecord",
    "NodeStatus",
    "Stage",
    "StopResult",
    "UpResult",
    "copy_layout",
    "down",
    "free_ports",
    "kill",
    "load_state",
    "query_status",
    "read_layout",
    "start_node",
    "status",
    "status_table",
    "up",
]

STATE_FILE = "cluster.json"
LOCK_FILE = "cluster.lock"
READY_TIMEOUT_S = 60.0
STOP_GRACE_S = 15.0
TAIL_LINES = 25
_POLL_S = 0.02
_READY = re.compile(rb"^READY (\S+)(?: (\S+))? (\S+)\s*$", re.MULTILINE)


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
class ClusterState:
    """cluster.json: the layout a base dir runs and its nodes, in start order."""

    layout: str
    base_dir: str
    nodes: dict[str, NodeRecord] = attrs.field(factory=dict)

    def ordered(self, *, reverse: bool = False) -> list[NodeRecord]:
        return sorted(self.nodes.values(), key=lambda r: (r.stage, r.name), reverse=reverse)

    def node(self, name: str) -> NodeRecord:
        try:
            return self.nodes[name]
        except KeyError:
            raise LayoutError(
                f"no node {name!r} in {self.base_dir}/{STATE_FILE}; nodes: {', '.join(self.nodes) or 'none'}"
            ) from None


@attrs.define
class UpResult:
    name: str
    action: str  # "started", "running" (already up) or "skipped"
    record: NodeRecord
    note: str = ""


@attrs.define
class StopResult:
    name: str
    pid: int | None
    outcome: str  # "stopped" (exited after SIGTERM), "killed" (SIGKILL) or "not running"
    seconds: float = 0.0
    abort_file_left: bool = False  # the store was not closed cleanly (recovery will run)


@attrs.define
class NodeStatus:
    name: str
    role: str
    pid: int | None
    state: str  # "running", "stopped" (SIGSTOP), "dead" (crashed/killed), "down", "never started"
    address: str
    answer: dict[str, Any] | None = None  # the node's `status` op response
    error: str | None = None

    @property
    def alive(self) -> bool:
        return self.state in ("running", "stopped")

    def to_json(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "alive": self.alive}


# ---------------------------------------------------------------------------------------
# layouts


def read_layout(conf_dir: str | os.PathLike[str], base_dir: str | os.PathLike[str]) -> list[NodeRecord]:
    """The nodes of a layout directory in start order; LauncherError names a bad file."""
    conf = Path(conf_dir).resolve()
    if not conf.is_dir():
        raise LayoutError(f"layout directory {conf_dir} does not exist")
    files = {p.stem: p for p in sorted(conf.glob("*.properties"))}
    files.update({p.stem: p for p in sorted(conf.glob("*.toml"))})  # .toml wins over a twin
    records = []
    for name, path in sorted(files.items()):
        if name == "namesrv":
            records.append(_namesrv_record(path))
            continue
        try:
            cfg = load_config(str(path), base_dir=str(base_dir))
        except ConfigError as e:
            raise LayoutError(str(e)) from None
        records.append(NodeRecord(
            name=name, stage=Stage.MASTER if cfg.role.is_master else Stage.SLAVE,
            role=cfg.role.value, config=str(path), address=cfg.address,
            store_root=cfg.store.store_path_root_dir, broker_name=cfg.broker_name,
            broker_id=cfg.broker_id,
        ))
    if not any(r.stage is not Stage.NAMESRV for r in records):
        raise LayoutError(f"layout {conf} has no broker config files (*.toml, *.properties)")
    return sorted(records, key=lambda r: (r.stage, r.name))


def _namesrv_record(path: Path) -> NodeRecord:
    try:
        values = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise LayoutError(f"{path}: cannot read: {e}") from None
    port = values.get("listenPort")
    host = values.get("listenAddress", values.get("brokerIP1", "127.0.0.1"))
    address = f"{host}:{port}" if isinstance(port, int) else ""
    return NodeRecord(name="namesrv", stage=Stage.NAMESRV, role="NAMESRV", config=str(path), address=address)


def free_ports(n: int) -> list[int]:
    """`n` distinct ports the OS calls free right now (held together, so never repeated)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(n):
            s = stack.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
        return ports


_PORT_KEYS = re.compile(r"^\s*(?:listenPort|haListenPort)\s*[=:]\s*(\d+)", re.MULTILINE)


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
    old_ports = sorted({int(m) for text in texts.values() for m in _PORT_KEYS.findall(text)})
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
            text = _set_key(text, key, value, properties=ext == ".properties")
        (dst_dir / filename).write_text(text, encoding="utf-8")
    return mapping


def _set_key(text: str, key: str, value: Any, *, properties: bool) -> str:
    if properties:
        line = f"{key}={str(value).lower() if isinstance(value, bool) else value}"
    else:
        line = f"{key} = {json.dumps(value)}"
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*=.*$", re.MULTILINE)
    if pattern.search(text):
        return pattern.sub(lambda _m: line, text, count=1)
    return text.rstrip("\n") + "\n" + line + "\n"


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
        return ClusterState(layout=raw["layout"], base_dir=raw["base_dir"], nodes=nodes)
    except (KeyError, TypeError, ValueError) as e:
        raise LauncherError(f"{path}: not a cluster file ({e!r})") from None


def _save_state(state: ClusterState) -> None:
    """tmp + fsync + rename: a reader sees the old or the new file, never half of one."""
    path = _state_path(Path(state.base_dir))
    obj = {"layout": state.layout, "base_dir": state.base_dir, "updated_at": time.time(),
           "nodes": [r.to_json() for r in state.ordered()]}
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@contextlib.contextmanager
def _locked(base_dir: Path) -> Iterator[None]:
    base_dir.mkdir(parents=True, exist_ok=True)
    with open(base_dir / LOCK_FILE, "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


# ---------------------------------------------------------------------------------------
# processes

# Popen objects of the nodes this process started: polled so a dead child is reaped (a
# zombie still has its pid) when a launcher runs in-process, e.g. in the benchmark.
_children: dict[int, subprocess.Popen[bytes]] = {}


def _process(record: NodeRecord) -> psutil.Process | None:
    """The live process of `record`, or None: exited, zombie, or the pid now belongs to
    another program (recycled pid)."""
    if record.pid is None:
        return None
    child = _children.get(record.pid)
    if child is not None and child.poll() is not None:
        del _children[record.pid]
        return None
    try:
        proc = psutil.Process(record.pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        if record.create_time is not None and abs(proc.create_time() - record.create_time) > 0.05:
            return None
        if not _cmdline_matches(proc.cmdline(), record):
            return None
        return proc
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.AccessDenied:  # another user's process: not ours
        return None


def _cmdline_matches(cmdline: list[str], record: NodeRecord) -> bool:
    try:
        i = cmdline.index("start")
    except ValueError:
        return False
    return cmdline[i - 1 : i] == [record.kind] and "-c" in cmdline[i:] and record.config in cmdline[i:]


def _state_of(record: NodeRecord) -> str:
    if record.pid is None:  # `down` clears the pid: stopped on purpose, not crashed
        return "never started" if record.started_at is None else "down"
    proc = _process(record)
    if proc is None:
        return "dead"
    try:
        return "stopped" if proc.status() == psutil.STATUS_STOPPED else "running"
    except psutil.Error:
        return "dead"


def _command(record: NodeRecord, base_dir: Path) -> list[str]:
    argv = [sys.executable, "-m", "node.cli", record.kind, "start", "-c", record.config]
    if record.kind == "node" or _namesrv_help().count("--base-dir"):
        argv += ["--base-dir", str(base_dir)]  # a name server keeps no files: optional there
    return argv


_namesrv_help_text: str | None = None


def _namesrv_help() -> str:
    """`tidemq namesrv start --help`, or "" when this installation has no name server."""
    global _namesrv_help_text
    if _namesrv_help_text is None:
        probe = subprocess.run([sys.executable, "-m", "node.cli", "namesrv", "start", "--help"],
                               stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
        _namesrv_help_text = probe.stdout if probe.returncode == 0 else ""
    return _namesrv_help_text


def namesrv_available() -> bool:
    """Whether this installation has `tidemq namesrv start` (the name server is optional)."""
    return bool(_namesrv_help())


def _tail(path: str, start: int = 0, lines: int = TAIL_LINES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read()
    except OSError as e:
        return f"(cannot read {path}: {e.strerror})"
    text = data.decode("utf-8", errors="replace").rstrip("\n").splitlines()
    return "\n".join(text[-lines:]) or "(empty)"


@attrs.define
class _Launch:
    record: NodeRecord
    proc: subprocess.Popen[bytes]
    log_offset: int


def _spawn(record: NodeRecord, base_dir: Path) -> _Launch:
    logs = base_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    record.log = str(logs / f"{record.name}.out")
    with open(record.log, "ab") as out:
        offset = out.tell()
        out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} launcher: {' '.join(_command(record, base_dir))}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            _command(record, base_dir), cwd=base_dir, stdin=subprocess.DEVNULL, stdout=out,
            stderr=out, start_new_session=True,  # own session: outlives the launcher, no ^C
        )
    _children[proc.pid] = proc
    return _Launch(record, proc, offset)


def _wait_ready(launches: list[_Launch], timeout_s: float) -> None:
    """Poll each log for its READY line; LauncherError (with the log's tail) when a node
    exits first or the deadline passes. Records pid, address and start time on success."""
    deadline = time.monotonic() + timeout_s
    pending = list(launches)
    while pending:
        for launch in list(pending):
            rec = launch.record
            try:
                with open(rec.log, "rb") as f:
                    f.seek(launch.log_offset)
                    match = _READY.search(f.read())
            except OSError:
                match = None
            if match:
                rec.address = match.group(3).decode()
                rec.pid = launch.proc.pid
                rec.started_at = time.time()
                with contextlib.suppress(psutil.Error):
                    rec.create_time = psutil.Process(launch.proc.pid).create_time()
                pending.remove(launch)
                continue
            code = launch.proc.poll()
            if code is not None:
                _children.pop(launch.proc.pid, None)
                raise LauncherError(
                    f"{rec.name} exited with code {code} before it was READY; "
                    f"the end of {rec.log}:\n{_tail(rec.log, launch.log_offset)}"
                )
        if not pending:
            return
        if time.monotonic() > deadline:
            rec = pending[0].record
            raise LauncherError(
                f"{rec.name} was not READY within {timeout_s:g} s; the end of {rec.log}:\n"
                f"{_tail(rec.log, pending[0].log_offset)}"
            )
        time.sleep(_POLL_S)  # poll: wait for READY lines with a deadline


def _abandon(launches: list[_Launch]) -> None:
    """Stop processes this launcher started (SIGTERM, then SIGKILL after 5 s) and forget them."""
    for launch in launches:
        if launch.proc.poll() is None:
            launch.proc.terminate()
    for launch in launches:
        try:
            launch.proc.wait(5)
        except subprocess.TimeoutExpired:
            launch.proc.kill()
            launch.proc.wait(10)
        _children.pop(launch.proc.pid, None)
        launch.record.pid = None
        launch.record.create_time = None


def _wait_gone(procs: Iterable[tuple[NodeRecord, psutil.Process]], timeout_s: float) -> list[NodeRecord]:
    """Wait until the processes exit; the records of those still alive at the deadline."""
    deadline = time.monotonic() + timeout_s
    left = list(procs)
    while True:
        left = [(r, p) for r, p in left if _process(r) is not None]
        if not left or time.monotonic() >= deadline:
            return [r for r, _ in left]
        time.sleep(_POLL_S)  # poll: wait for exits with a deadline


def _signal(proc: psutil.Process, sig: int) -> None:
    with contextlib.suppress(psutil.NoSuchProcess):
        proc.send_signal(sig)


def _stop(records: list[NodeRecord], grace_s: float,
          on_result: Callable[[StopResult], None] | None = None) -> list[StopResult]:
    """SIGTERM (and SIGCONT, so a SIGSTOPped node can act on it) in reverse start order,
    one stage at a time; SIGKILL what is left of a stage after `grace_s`."""
    results = []
    stages = sorted({r.stage for r in records}, reverse=True)
    for stage in stages:
        group = [r for r in records if r.stage is stage]
        running = []
        for rec in group:
            proc = _process(rec)
            if proc is None:
                results.append(StopResult(rec.name, rec.pid, "not running"))
                continue
            _signal(proc, signal.SIGTERM)
            _signal(proc, signal.SIGCONT)
            running.append((rec, proc))
        t0 = time.monotonic()
        stubborn = {r.name for r in _wait_gone(running, grace_s)}
        for rec, proc in running:
            if rec.name in stubborn:
                _signal(proc, signal.SIGKILL)
        _wait_gone([(r, p) for r, p in running if r.name in stubborn], 10.0)
        for rec, _proc in running:
            abort = bool(rec.store_root) and os.path.exists(os.path.join(rec.store_root or "", "abort"))
            results.append(StopResult(rec.name, rec.pid, "killed" if rec.name in stubborn else "stopped",
                                      round(time.monotonic() - t0, 2), abort))
        for res in results[-len(group):]:
            if on_result:
                on_result(res)
    return results


# ---------------------------------------------------------------------------------------
# commands


def up(
    conf_dir: str | os.PathLike[str] | None,
    base_dir: str | os.PathLike[str],
    *,
    timeout_s: float = READY_TIMEOUT_S,
    on_result: Callable[[UpResult], None] | None = None,
) -> list[UpResult]:
    """Start every node of the layout that is not already running, stage by stage.

    Nodes of one stage start together and are waited for together. On failure the nodes
    this call started are stopped again and LauncherError says which node failed and why.
    `conf_dir` None reuses the layout recorded in cluster.json.
    """
    base = Path(base_dir).resolve()
    with _locked(base):
        old = load_state(base)
        if conf_dir is None:
            if old is None:
                raise LayoutError(f"no cluster recorded in {base}; give the layout (--conf)")
            conf_dir = old.layout
        layout = str(Path(conf_dir).resolve())
        specs = read_layout(layout, base)
        if old is not None and old.layout != layout:
            alive = [r.name for r in old.ordered() if _process(r) is not None]
            if alive:
                raise LauncherError(
                    f"{base} runs layout {old.layout} ({', '.join(alive)} alive); "
                    f"stop it first (tidemq cluster down --base-dir {base_dir})"
                )
            old = None
        state = ClusterState(layout=layout, base_dir=str(base))
        results: list[UpResult] = []
        launched: list[_Launch] = []

        def add(result: UpResult) -> None:
            results.append(result)
            if on_result:
                on_result(result)

        try:
            for stage in Stage:
                launches = []
                for spec in (s for s in specs if s.stage is stage):
                    prev = old.nodes.get(spec.name) if old else None
                    if prev is not None and _process(prev) is not None:
                        state.nodes[spec.name] = prev
                        add(UpResult(spec.name, "running", prev, f"pid {prev.pid}"))
                        continue
                    if stage is Stage.NAMESRV and not namesrv_available():
                        add(UpResult(spec.name, "skipped", spec, "this installation has no `tidemq namesrv`"))
                        continue
                    state.nodes[spec.name] = spec
                    launches.append(_spawn(spec, base))
                launched += launches
                _wait_ready(launches, timeout_s)
                for launch in launches:
                    add(UpResult(launch.record.name, "started", launch.record, f"pid {launch.record.pid}"))
                _save_state(state)
        except BaseException:
            # give back what this call started: a half-started layout helps nobody
            _abandon(launched)
            _save_state(state)
            raise
        return results


def start_node(base_dir: str | os.PathLike[str], name: str, *, timeout_s: float = READY_TIMEOUT_S) -> NodeRecord:
    """(Re)start one recorded node from its config and wait for READY (failover drills)."""
    base = Path(base_dir).resolve()
    with _locked(base):
        state = _require_state(base)
        if name not in state.nodes:  # e.g. the namesrv skipped by `up`: take it from the layout
            specs = {s.name: s for s in read_layout(state.layout, base)}
            if name not in specs:
                state.node(name)  # raises, listing the nodes
            state.nodes[name] = specs[name]
        rec = state.nodes[name]
        proc = _process(rec)
        if proc is not None:
            raise LauncherError(f"{name} is already running (pid {rec.pid})")
        if not os.path.exists(rec.config):
            raise LauncherError(f"{name}: config file {rec.config} no longer exists")
        launch = _spawn(rec, base)
        try:
            _wait_ready([launch], timeout_s)
        except BaseException:
            _abandon([launch])
            _save_state(state)
            raise
        _save_state(state)
        return rec


SIGNALS = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM, "STOP": signal.SIGSTOP, "CONT": signal.SIGCONT}


def kill(base_dir: str | os.PathLike[str], name: str, sig: str = "KILL", *, timeout_s: float = 30.0) -> str:
    """Signal one node (KILL/TERM wait for the exit, STOP/CONT for the state change);
    returns what happened, as a sentence."""
    base = Path(base_dir).resolve()
    if sig not in SIGNALS:
        raise LayoutError(f"unknown signal {sig!r}; use one of {', '.join(SIGNALS)}")
    with _locked(base):
        rec = _require_state(base).node(name)
        proc = _process(rec)
        if proc is None:
            raise LauncherError(f"{name} is not running (recorded pid {rec.pid})")
        t0 = time.monotonic()
        proc.send_signal(SIGNALS[sig])
        if sig in ("KILL", "TERM"):
            if _wait_gone([(rec, proc)], timeout_s):
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
            time.sleep(_POLL_S)  # poll: the kernel applies STOP/CONT asynchronously


def down(
    base_dir: str | os.PathLike[str], *, grace_s: float = STOP_GRACE_S,
    on_result: Callable[[StopResult], None] | None = None,
) -> list[StopResult]:
    """Stop every recorded node: slaves, then masters, then the name server."""
    base = Path(base_dir).resolve()
    with _locked(base):
        state = load_state(base)
        if state is None:
            return []
        results = _stop(state.ordered(), grace_s, on_result)
        for rec in state.nodes.values():
            rec.pid = None
            rec.create_time = None
        _save_state(state)
        return results


def _require_state(base: Path) -> ClusterState:
    state = load_state(base)
    if state is None:
        raise LayoutError(f"no cluster recorded in {base} (no {STATE_FILE}); start one with `tidemq cluster up`")
    return state


def status(base_dir: str | os.PathLike[str], *, query: bool = True, timeout_s: float = 3.0) -> list[NodeStatus]:
    """Each recorded node's process state and, when `query`, its answer to the `status` op."""
    state = _require_state(Path(base_dir).resolve())
    rows = [NodeStatus(r.name, r.role, r.pid, _state_of(r), r.address) for r in state.ordered()]
    if query:
        targets = [row for row in rows if row.state == "running" and row.address]
        answers = query_status([row.address for row in targets], timeout_s=timeout_s)
        for row, (answer, error) in zip(targets, answers, strict=True):
            row.answer, row.error = answer, error
    for row in rows:
        if row.state == "stopped":
            row.error = "process is stopped (SIGSTOP); `tidemq cluster kill NODE --signal CONT` resumes it"
    return rows


def query_status(addresses: list[str], *, timeout_s: float = 3.0) -> list[tuple[dict[str, Any] | None, str | None]]:
    """Ask every address for `status` concurrently: (answer, None) or (None, error)."""
    import trio

    from node.client import TidemqError, connect

    out: list[tuple[dict[str, Any] | None, str | None]] = [(None, None)] * len(addresses)

    async def one(i: int, address: str) -> None:
        try:
            async with connect(address, connect_timeout=timeout_s, request_timeout=timeout_s) as conn:
                answer = await conn.request("status")
            out[i] = ({k: v for k, v in answer.items() if k not in ("id", "status")}, None)
        except TidemqError as e:
            out[i] = (None, str(e))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for i, address in enumerate(addresses):
                nursery.start_soon(one, i, address)

    trio.run(main)
    return out



def _detail(row: NodeStatus) -> str:
    """One line about a node's replication, or why it could not answer."""
    if row.error:
        return row.error
    answer = row.answer or {}
    ha = answer.get("ha")
    if isinstance(ha, dict) and "slaves" in ha:
        slaves = ha["slaves"] or []
        if not slaves:
            return "no slave connected"
        return "; ".join(f"slave {s.get('address')} lag {s.get('lag_bytes')} B" for s in slaves)
    if isinstance(ha, dict):
        link = "connected" if ha.get("connected") else "NOT connected"
        return f"master {ha.get('master_address')} {link}, lag {ha.get('lag_bytes')} B"
    keys = [k for k in answer if k not in ("role", "address")]
    return ", ".join(f"{k}={answer[k]}" for k in keys[:4] if not isinstance(answer[k], dict | list))


def status_table(rows: list[NodeStatus], title: str = "") -> Any:
    """A rich Table of `status` rows (rich is imported only by those who render)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title or None, title_justify="left")
    for column in ("node", "role", "pid", "state", "address", "max offset", "detail"):
        table.add_column(column, no_wrap=column != "detail")
    colors = {"running": "green", "stopped": "yellow", "dead": "red", "down": "dim", "never started": "dim"}
    for row in rows:
        answer = row.answer or {}
        offset = answer.get("max_phy_offset")
        table.add_row(  # Text, not markup: "[Errno 111]" in an error is not a style
            row.name, row.role, str(row.pid or "-"), Text(row.state, style=colors[row.state]),
            row.address, "-" if offset is None else str(offset),
            Text(row.error, style="red") if row.error else Text(_detail(row)),
        )
    return table
