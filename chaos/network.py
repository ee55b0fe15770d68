"""Which Toxiproxy the chaos suite talks to, through the real toxiproxy-python client.

`TOXIPROXY_URL` (e.g. http://127.0.0.1:8474) names a running Toxiproxy, real or ours, and
is used unchanged. Without it, `toxiproxy()` starts chaos.proxy as a child process on a
free port for the duration of the block (a process of its own, so proxying does not share
a GIL with the workload).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

from toxiproxy import Toxiproxy
from toxiproxy.api import APIConsumer

READY_TIMEOUT_S = 30.0
_READY = re.compile(r"^READY (\S+):(\d+)\s*$")


class ProxyServerError(RuntimeError):
    """The Toxiproxy server could not be started or reached."""


def _point_client(host: str, port: int) -> Toxiproxy:
    client = Toxiproxy()
    client.update_api_consumer(host, port)
    return client


@contextlib.contextmanager
def toxiproxy(url: str | None = None) -> Iterator[Toxiproxy]:
    """A toxiproxy-python client for `url`, $TOXIPROXY_URL, or a chaos.proxy child process."""
    url = url or os.environ.get("TOXIPROXY_URL")
    if url:
        parts = urlsplit(url if "//" in url else f"http://{url}")
        client = _point_client(parts.hostname or "127.0.0.1", parts.port or 8474)
        if not client.running():
            raise ProxyServerError(f"no Toxiproxy answers at {url} (TOXIPROXY_URL)")
        yield client
        return
    with start_proxy_process() as (host, port):
        yield _point_client(host, port)


@contextlib.contextmanager
def start_proxy_process(port: int = 0) -> Iterator[tuple[str, int]]:
    """`python -m chaos.proxy --port PORT` until the block ends; yields its API address."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "chaos.proxy", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        line = proc.stdout.readline()  # blocks until READY or exit; the child prints one line
        match = _READY.match(line)
        if match is None or time.monotonic() > deadline:
            err = proc.stderr.read() if proc.stderr and proc.poll() is not None else ""
            raise ProxyServerError(f"chaos.proxy did not start: {line.strip()!r} {err.strip()}")
        yield match.group(1), int(match.group(2))
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def api_address() -> str:
    """host:port the client is pointed at (for reports)."""
    return f"{APIConsumer.host}:{APIConsumer.port}"
