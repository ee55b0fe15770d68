"""Real node processes for tests: config files, free ports, start/stop with deadlines.

Nodes run as `python -m tidemq node start -c FILE`, exactly as a user starts one; the
READY line on stdout is the readiness signal, stderr goes to a file shown on failure.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from cluster.launch.layout import free_port

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 20.0

# small files: segments roll quickly, nothing big is mapped or pre-allocated
SMALL = {
    "mappedFileSizeCommitLog": 256 * 1024,
    "mappedFileSizeConsumeQueue": 6000,
    "maxMessageSize": 64 * 1024,
    "maxHashSlotNum": 1000,
    "maxIndexNum": 4000,
    "flushDiskType": "ASYNC_FLUSH",
}




def toml_value(v: Any) -> str:
    """A TOML literal for a config value (bool, string or number)."""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, str):
        return f'"{v}"'
    return str(v)


def write_conf(directory: Path, name: str, values: dict[str, Any]) -> Path:
    path = directory / f"{name}.toml"
    path.write_text("".join(f"{k} = {toml_value(v)}\n" for k, v in values.items()))
    return path


def master_conf(directory: Path, name: str = "m", role: str = "SYNC_MASTER", **extra: Any) -> Path:
    listen = free_port()
    values = {
        "brokerName": "broker-t", "brokerId": 0, "brokerRole": role, "brokerIP1": "127.0.0.1",
        "listenPort": listen, "haListenPort": free_port(),
        "storePathRootDir": str(directory / "store" / name), **SMALL, **extra,
    }
    return write_conf(directory, name, values)


def slave_conf(directory: Path, master: Path, name: str = "s", **extra: Any) -> Path:
    m = _read_conf(master)
    values = {
        "brokerName": m["brokerName"], "brokerId": 1, "brokerRole": "SLAVE", "brokerIP1": "127.0.0.1",
        "listenPort": free_port(), "haListenPort": free_port(),
        "haMasterAddress": f"127.0.0.1:{m['haListenPort']}",
        "masterAddr": f"127.0.0.1:{m['listenPort']}",
        "storePathRootDir": str(directory / "store" / name), **SMALL, **extra,
    }
    return write_conf(directory, name, values)


def _read_conf(path: Path) -> dict[str, Any]:
    return tomllib.loads(path.read_text())


def store_root(conf: Path) -> Path:
    return Path(_read_conf(conf)["storePathRootDir"])


class NodeProcess:
    """One running node (or, with `argv`, another `tidemq` server such as `namesrv start`);
    `address` is its client address once READY."""

    def __init__(self, conf: Path, argv: list[str] | None = None) -> None:
        self.conf = conf
        self.stderr_path = conf.with_suffix(f".stderr.{time.monotonic_ns()}")
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in _reap
        argv = argv if argv is not None else ["node", "start", "-c", str(conf)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tidemq", *argv],
            cwd=conf.parent, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._stderr,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        self.address = ""

    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> str:
        """Read stdout up to the READY line; AssertionError (with the node's stderr) otherwise."""
        deadline = time.monotonic() + timeout
        buf = b""
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while b"\n" not in buf:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):  # poll: wait for output with a deadline
                    self.kill()
                    raise AssertionError(f"node {self.conf.name} not READY in {timeout} s:\n{self.stderr()}")
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    code = self.proc.wait(5)
                    raise AssertionError(f"node {self.conf.name} exited {code} before READY:\n{self.stderr()}")
                buf += chunk
        line = buf.split(b"\n", 1)[0].decode()
        parts = line.split()
        # "READY <brokerName> <brokerId> <address>" (node) or "READY namesrv <address>"
        assert parts[0] == "READY" and len(parts) in (3, 4), line
        self.address = parts[-1]
        return line

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_S) -> int:
        """Send `sig` and wait for the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"node {self.conf.name} did not exit {timeout} s after {sig}:\n{self.stderr()}") from None
        finally:
            self._reap()

    def kill(self) -> int:
        if self.proc.poll() is None:
            self.proc.kill()
        code = self.proc.wait(STOP_TIMEOUT_S)
        self._reap()
        return code

    def _reap(self) -> None:
        if self.proc.stdout and not self.proc.stdout.closed and self.proc.poll() is not None:
            self.proc.stdout.close()
        if not self._stderr.closed and self.proc.poll() is not None:
            self._stderr.close()


class Nodes:
    """Starts nodes and kills whatever is still running at teardown."""

    def __init__(self) -> None:
        self.started: list[NodeProcess] = []

    def start(self, conf: Path, argv: list[str] | None = None) -> NodeProcess:
        node = NodeProcess(conf, argv)
        self.started.append(node)
        node.wait_ready()
        return node

    def cleanup(self) -> None:
        for node in self.started:
            node.kill()
