"""The processes of a local cluster: spawn a node, wait for its READY line, tell a live
node from a recycled pid, signal and stop them stage by stage.

Every node runs as `python -m tidemq {node|namesrv} start -c FILE --base-dir DIR` in a new
session, so it outlives the launcher, with stdout and stderr appended to
`<base-dir>/logs/<node>.out`; the READY line it prints there is the readiness signal. A
recorded pid only counts as the node while the process with that pid has the recorded
start time and a command line naming the node's config: a recycled pid is never taken for
the node, and never signalled.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import attrs
import psutil

from store.layout import ABORT_FILE

from .state import LauncherError, NodeRecord

__all__ = ["Launch", "StopResult", "abandon", "process", "spawn", "state_of", "stop", "terminate", "wait_gone", "wait_ready"]

TAIL_LINES = 25
POLL_S = 0.02
_READY = re.compile(rb"^READY (\S+)(?: (\S+))? (\S+)\s*$", re.MULTILINE)


@attrs.define
class StopResult:
    name: str
    pid: int | None
    outcome: str  # "stopped" (exited after SIGTERM), "killed" (SIGKILL) or "not running"
    seconds: float = 0.0
    abort_file_left: bool = False  # the store was not closed cleanly (recovery will run)


# ---------------------------------------------------------------------------------------
# processes

# Popen objects of the nodes this process started: polled so a dead child is reaped (a
# zombie still has its pid) when a launcher runs in-process, e.g. in the benchmark.
_children: dict[int, subprocess.Popen[bytes]] = {}


def process(record: NodeRecord) -> psutil.Process | None:
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


def state_of(record: NodeRecord) -> str:
    if record.pid is None:  # `down` clears the pid: stopped on purpose, not crashed
        return "never started" if record.started_at is None else "down"
    proc = process(record)
    if proc is None:
        return "dead"
    try:
        return "stopped" if proc.status() == psutil.STATUS_STOPPED else "running"
    except psutil.Error:
        return "dead"


def _command(record: NodeRecord, base_dir: Path) -> list[str]:
    argv = [sys.executable, "-m", "tidemq", record.kind, "start", "-c", record.config]
    if record.kind == "node":  # a name server keeps no files
        argv += ["--base-dir", str(base_dir)]
    return argv


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
class Launch:
    record: NodeRecord
    proc: subprocess.Popen[bytes]
    log_offset: int


def spawn(record: NodeRecord, base_dir: Path) -> Launch:
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
    return Launch(record, proc, offset)


def wait_ready(launches: list[Launch], timeout_s: float) -> None:
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
        time.sleep(POLL_S)  # poll: wait for READY lines with a deadline


def abandon(launches: list[Launch]) -> None:
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


def wait_gone(procs: Iterable[tuple[NodeRecord, psutil.Process]], timeout_s: float) -> list[NodeRecord]:
    """Wait until the processes exit; the records of those still alive at the deadline."""
    deadline = time.monotonic() + timeout_s
    left = list(procs)
    while True:
        left = [(r, p) for r, p in left if process(r) is not None]
        if not left or time.monotonic() >= deadline:
            return [r for r, _ in left]
        time.sleep(POLL_S)  # poll: wait for exits with a deadline


def terminate(proc: psutil.Process, grace_s: float) -> str:
    """SIGTERM a helper process (the console, etcd), SIGKILL it after `grace_s`: how it went."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace_s)
        return "stopped by SIGTERM"
    except psutil.TimeoutExpired:
        proc.kill()
        return "KILLED"


def _signal(proc: psutil.Process, sig: int) -> None:
    with contextlib.suppress(psutil.NoSuchProcess):
        proc.send_signal(sig)


def stop(records: list[NodeRecord], grace_s: float,
          on_result: Callable[[StopResult], None] | None = None) -> list[StopResult]:
    """SIGTERM (and SIGCONT, so a SIGSTOPped node can act on it) in reverse start order,
    one stage at a time; SIGKILL what is left of a stage after `grace_s`."""
    results = []
    stages = sorted({r.stage for r in records}, reverse=True)
    for stage in stages:
        group = [r for r in records if r.stage is stage]
        running = []
        for rec in group:
            proc = process(rec)
            if proc is None:
                results.append(StopResult(rec.name, rec.pid, "not running"))
                continue
            _signal(proc, signal.SIGTERM)
            _signal(proc, signal.SIGCONT)
            running.append((rec, proc))
        t0 = time.monotonic()
        stubborn = {r.name for r in wait_gone(running, grace_s)}
        for rec, proc in running:
            if rec.name in stubborn:
                _signal(proc, signal.SIGKILL)
        wait_gone([(r, p) for r, p in running if r.name in stubborn], 10.0)
        for rec, _proc in running:
            abort = bool(rec.store_root) and os.path.exists(os.path.join(rec.store_root or "", ABORT_FILE))
            results.append(StopResult(rec.name, rec.pid, "killed" if rec.name in stubborn else "stopped",
                                      round(time.monotonic() - t0, 2), abort))
        for res in results[-len(group):]:
            if on_result:
                on_result(res)
    return results

