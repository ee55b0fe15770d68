"""Processes the benchmark starts, and the guarantee that each one is stopped.

Every server runs in its own session (its own process group), so a Ctrl-C at the terminal
reaches only the harness, which then stops the servers in order; `Processes.stop_all`
sends SIGTERM to each group, then SIGKILL to what is left after a grace period. The
harness calls it from a `finally`, so a failure, a trio cancellation or Ctrl-C all end
with nothing of ours left running.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import attrs
import psutil
import trio

from cluster.launch.layout import free_port

__all__ = ["Processes", "Started", "ensure_tools", "free_port", "wait_port"]

STOP_GRACE_S = 10.0
POLL_S = 0.05


@attrs.define(eq=False)
class Started:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def cpu_seconds(self) -> float:
        """User + system CPU of the process and its children so far (0 once it is gone)."""
        try:
            p = psutil.Process(self.pid)
            total = sum(p.cpu_times()[:2])
            for child in p.children(recursive=True):
                total += sum(child.cpu_times()[:2])
            return total
        except psutil.Error:
            return 0.0


class Processes:
    """The servers one benchmark started; `stop_all` ends them (idempotent)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[Started] = []

    def start(self, name: str, argv: list[str], *, cwd: Path | None = None) -> Started:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        started = Started(name, proc, log)
        self.started.append(started)
        return started

    def alive(self) -> list[Started]:
        return [s for s in self.started if s.proc.poll() is None]

    def stop(self, targets: list[Started], grace_s: float = STOP_GRACE_S) -> None:
        """SIGTERM each process group, SIGKILL the groups still there after `grace_s`."""
        for s in targets:
            _signal_group(s, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for s in targets:
            try:
                s.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(s, signal.SIGKILL)
                s.proc.wait()
            _signal_group(s, signal.SIGKILL)  # anything the process left behind in its group
        for s in targets:
            if s in self.started:
                self.started.remove(s)

    def stop_all(self, grace_s: float = STOP_GRACE_S) -> None:
        self.stop(list(reversed(self.started)), grace_s)


def _signal_group(s: Started, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(s.pid, sig)  # start_new_session: the group id is the pid


async def wait_port(port: int, started: Started, timeout_s: float = 20.0) -> None:
    """Wait until 127.0.0.1:`port` accepts a connection; fails early when the server exits."""
    deadline = trio.current_time() + timeout_s
    while True:
        if started.proc.poll() is not None:
            raise RuntimeError(f"{started.name} exited with {started.proc.returncode} before listening "
                               f"on {port}; see {started.log}")
        try:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
        except OSError:
            if trio.current_time() > deadline:
                raise RuntimeError(f"{started.name} does not listen on {port} after {timeout_s:g} s; "
                                   f"see {started.log}") from None
            await trio.sleep(POLL_S)  # poll: the server binds its port when it is ready
            continue
        await stream.aclose()
        return


TOOLS = {"redis-server": "redis-server", "nats-server": "nats-server", "fio": "fio"}


def ensure_tools(tools: list[str], *, install: bool = True) -> list[str]:
    """Install the Debian packages of the missing `tools` with apt-get (as root) when
    `install`; returns what was installed. RuntimeError names what stays missing."""
    unknown = [t for t in tools if t not in TOOLS]
    if unknown:
        raise ValueError(f"no Debian package known for {', '.join(unknown)}")
    missing = [t for t in tools if shutil.which(t) is None]
    if not missing:
        return []
    packages = sorted({TOOLS[t] for t in missing})
    if not install:
        raise RuntimeError(f"{', '.join(missing)} not installed (--no-install): "
                           f"apt-get install {' '.join(packages)}, or leave out the systems that need them")
    if os.geteuid() != 0:
        raise RuntimeError(f"{', '.join(missing)} missing and not root: apt-get install {' '.join(packages)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", *packages]):
        done = subprocess.run(argv, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    still = [t for t in tools if shutil.which(t) is None]
    if still:
        raise RuntimeError(f"still missing after apt-get install: {', '.join(still)}")
    return packages
