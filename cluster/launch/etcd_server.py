"""A local single-member etcd for the controller (tests, `tidemq cluster up --controller etcd`).

Runs Debian's `etcd` binary (package etcd-server, 3.4+) on loopback with its own data dir;
readiness is its `/health` answer, not a sleep. The JSON gateway is on the client port.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from .layout import free_port as _free_port

__all__ = ["EtcdServer", "EtcdUnavailable", "etcd_binary"]

START_TIMEOUT_S = 20.0


class EtcdUnavailable(Exception):
    """No etcd binary, or it did not become healthy."""


def etcd_binary() -> str | None:
    return os.environ.get("TIDEMQ_ETCD") or shutil.which("etcd") or (
        "/usr/bin/etcd" if os.path.exists("/usr/bin/etcd") else None)


class EtcdServer:
    """One etcd process; `start()` returns once it is healthy, `stop()` ends it."""

    def __init__(self, data_dir: Path, *, client_port: int = 0, peer_port: int = 0,
                 name: str = "tidemq") -> None:
        self.data_dir = Path(data_dir)
        self.client_port = client_port or _free_port()
        self.peer_port = peer_port or _free_port()
        self.name = name
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.log"

    @property
    def endpoint(self) -> str:
        """host:port of the client (and JSON gateway) port: a node's etcdEndpoints."""
        return f"127.0.0.1:{self.client_port}"

    def start(self, timeout: float = START_TIMEOUT_S) -> str:
        binary = etcd_binary()
        if binary is None:
            raise EtcdUnavailable("etcd is not installed (Debian: apt-get install etcd-server)")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        argv = [binary, "--name", self.name, "--data-dir", str(self.data_dir),
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"{self.name}={peer}", "--log-level", "warn"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EtcdUnavailable(f"etcd exited with {self.proc.returncode}: {self.log_tail()}")
            if self.healthy():
                return self.endpoint
            time.sleep(0.05)  # poll
        self.stop()
        raise EtcdUnavailable(f"etcd on {self.endpoint} not healthy after {timeout:g} s: {self.log_tail()}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=0.5) as r:
                return b'"true"' in r.read()
        except OSError:
            return False

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def pause(self) -> None:
        """SIGSTOP: etcd stops answering without closing its connections."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""
