"""Real name server and node processes for the cluster tests, on tests/node/nodeproc.py.

Everything runs as `python -m tidemq ...` processes on 127.0.0.1 with free ports and
config files in tmp_path. Waits are on conditions with deadlines (`wait_for`, tests/waiting.py).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import trio

from tests.node.nodeproc import REPO, NodeProcess, Nodes, master_conf, slave_conf, write_conf
from tests.waiting import wait_until
from wire.client import TidemqError, connect
from wire.protocol import GetStatus, WireRequest

__all__ = [
    "broker_conf",
    "call",
    "cli",
    "slave_of",
    "start_namesrv",
    "wait_for",
    "wait_slave_connected",
]


async def wait_for(check: Callable[[], Awaitable[Any]], timeout: float = 20.0, what: str = "") -> Any:
    """tests/waiting.wait_until with client errors counting as "not yet" (a node starting)."""
    return await wait_until(check, timeout=timeout, what=what, retry_on=(TidemqError,))


def start_namesrv(nodes: Nodes, directory: Path, *, port: int = 0, expire_ms: int | None = None) -> NodeProcess:
    """A name server from a config file (listenPort 0 = a free port; READY gives it)."""
    values: dict[str, Any] = {"listenPort": port}
    if expire_ms is not None:
        values["brokerExpireMs"] = expire_ms
    conf = write_conf(directory, f"namesrv-{port}-{len(nodes.started)}", values)
    return nodes.start(conf, ["namesrv", "start", "-c", str(conf)])


def broker_conf(directory: Path, name: str, broker_name: str, namesrv: str | None,
                role: str = "ASYNC_MASTER", **extra: Any) -> Path:
    """A master of group `broker_name` that registers with `namesrv`."""
    if namesrv is not None:
        extra["namesrvAddr"] = namesrv
    return master_conf(directory, name, role, brokerName=broker_name, **extra)


def slave_of(directory: Path, master: Path, name: str, namesrv: str | None, **extra: Any) -> Path:
    if namesrv is not None:
        extra["namesrvAddr"] = namesrv
    return slave_conf(directory, master, name, **extra)


async def call(address: str, request: WireRequest) -> Any:
    """One typed request on a fresh connection: its reply object (`request.REPLY`; typed
    errors), as `Connection.call` gives it."""
    async with connect(address, connect_timeout=3.0, request_timeout=10.0) as conn:
        return await conn.call(request)


async def wait_slave_connected(master_address: str) -> None:
    """Until the master reports a slave that has acknowledged an offset (so a SYNC_MASTER's
    sends get PUT_OK)."""

    async def connected() -> bool:
        slaves = (await call(master_address, GetStatus())).ha.slaves or []
        return any(s.ack_offset >= 0 for s in slaves)

    await wait_for(connected, what=f"a slave acknowledging {master_address}")


def cli(*args: str, stdin: bytes | None = None, timeout: float = 60.0) -> subprocess.CompletedProcess[bytes]:
    """`tidemq ARGS...` as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "tidemq", *args], cwd=REPO, input=stdin, capture_output=True,
        timeout=timeout, env={**os.environ, "PYTHONPATH": str(REPO)},
    )


@contextlib.contextmanager
def sync_group(directory: Path) -> Iterator[dict[str, str]]:
    """A name server, a SYNC_MASTER broker-a and its slave (connected), as processes stopped
    on exit: the addresses by "namesrv", "master" and "slave"."""
    nodes = Nodes()
    try:
        ns = start_namesrv(nodes, directory)
        mconf = broker_conf(directory, "m", "broker-a", ns.address, role="SYNC_MASTER")
        master = nodes.start(mconf)
        slave = nodes.start(slave_of(directory, mconf, "s", ns.address))
        trio.run(wait_slave_connected, master.address)
        yield {"namesrv": ns.address, "master": master.address, "slave": slave.address}
    finally:
        nodes.cleanup()
