"""An in-memory network for a cluster run in one trio run (issue 26's network seam).

Each simulated host gets a `SimHost`, which is an ha/net.py `Network`: the client-protocol
server, the HA master and slave and the client library take it in place of TCP and run
unchanged. Connections are pairs of trio's in-memory streams, so bytes move only when both
ends' tasks run, in the order trio schedules them.

Faults, so far: `cut(a, b)` ends every connection between hosts a and b (each end sees the
stream end, as after a reset) and refuses new ones until `heal(a, b)`. Delayed, reordered
and one-way links come with the simulation's seeded schedules.
"""

from __future__ import annotations

import errno
import itertools
import math
from typing import Any

import trio
import trio.testing

__all__ = ["SimHost", "SimNetwork", "SimStream"]

FIRST_EPHEMERAL_PORT = 40000


class SimStream(trio.abc.HalfCloseableStream):
    """One end of a simulated connection; `local` and `peer` name the ends ("host:port")."""

    def __init__(self, inner: trio.StapledStream, local: str, peer: str) -> None:
        self._inner = inner
        self.local = local
        self.peer = peer

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._inner.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self._inner.send_eof()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        return await self._inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        self.close_now()
        await trio.lowlevel.checkpoint()

    def close_now(self) -> None:
        """Close both directions at once (the peer reads the end of its stream)."""
        self._inner.send_stream.close()
        self._inner.receive_stream.close()


class SimListener(trio.abc.Listener[SimStream]):
    def __init__(self, network: SimNetwork, address: tuple[str, int]) -> None:
        self.network = network
        self.address = address
        self._send, self._receive = trio.open_memory_channel[SimStream](math.inf)

    def arrive(self, stream: SimStream) -> None:
        self._send.send_nowait(stream)

    async def accept(self) -> SimStream:
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise trio.ClosedResourceError("listener closed") from None

    async def aclose(self) -> None:
        self.close_now()
        await trio.lowlevel.checkpoint()

    def close_now(self) -> None:
        self.network.listeners.pop(self.address, None)
        self._send.close()
        self._receive.close()


class SimNetwork:
    """The hosts' listeners and connections, and the links cut between hosts."""

    def __init__(self) -> None:
        self.listeners: dict[tuple[str, int], SimListener] = {}
        self.connections: list[tuple[str, str, SimStream, SimStream]] = []  # (host, host, end, end)
        self.cuts: set[frozenset[str]] = set()
        self._ports = itertools.count(FIRST_EPHEMERAL_PORT)

    def host(self, name: str) -> SimHost:
        return SimHost(self, name)

    def next_port(self) -> int:
        return next(self._ports)

    def cut(self, a: str, b: str) -> None:
        """End every connection between `a` and `b`; refuse new ones until `heal`."""
        self.cuts.add(frozenset((a, b)))
        for conn in [c for c in self.connections if {c[0], c[1]} == {a, b}]:
            conn[2].close_now()
            conn[3].close_now()
            self.connections.remove(conn)

    def heal(self, a: str, b: str) -> None:
        self.cuts.discard(frozenset((a, b)))

    def is_cut(self, a: str, b: str) -> bool:
        return frozenset((a, b)) in self.cuts


class SimHost:
    """One host's view of the network: an ha/net.py `Network`."""

    def __init__(self, network: SimNetwork, name: str) -> None:
        self.network = network
        self.name = name

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        await trio.lowlevel.checkpoint()
        listener = self.network.listeners.get((host, port))
        if listener is None or self.network.is_cut(self.name, host):
            raise ConnectionRefusedError(errno.ECONNREFUSED, f"{host}:{port}: connection refused (simulated)")
        mine, theirs = trio.testing.memory_stream_pair()
        local = f"{self.name}:{self.network.next_port()}"
        client = SimStream(mine, local, f"{host}:{port}")
        server = SimStream(theirs, f"{host}:{port}", local)
        self.network.connections.append((self.name, host, client, server))
        listener.arrive(server)
        return client

    async def listen(self, host: str, port: int) -> tuple[list[trio.abc.Listener[Any]], int]:
        await trio.lowlevel.checkpoint()
        if host not in (self.name, "0.0.0.0"):  # noqa: S104 - a bind address, not a socket
            raise OSError(errno.EADDRNOTAVAIL, f"{host} is not this host ({self.name})")
        port = port or self.network.next_port()
        if (self.name, port) in self.network.listeners:
            raise OSError(errno.EADDRINUSE, f"{self.name}:{port}: address in use (simulated)")
        listener = SimListener(self.network, (self.name, port))
        self.network.listeners[(self.name, port)] = listener
        return [listener], port
