"""An in-memory network for a cluster run in one trio run (issue 26's network seam).

Each simulated host gets a `SimHost`, which is an ha/net.py `Network`: the client-protocol
server, the HA master and slave and the client library take it in place of TCP and run
unchanged. A connection is two `_Pipe`s, one each way: bytes move only when both ends'
tasks run, in the order trio schedules them. (trio.testing's memory streams would do, but
they yield twice in every send and receive to shake out misuse: that doubled a run's task
steps. These yield once, as trio's socket streams do.)

Faults: `cut(a, b)` ends every connection between hosts a and b (each end sees the stream
end, as after a reset) and refuses new ones until `heal(a, b)`; `cut(a, b, one_way=True)`
holds a's bytes to b (a's sends wait, as TCP retransmits) until the heal; `delay(a, b, s)`
makes every send between them take `s` longer; `pause(h)` freezes host h's sockets (its
sends wait, what its peers send is buffered and read after `resume(h)`), its listeners'
accepts and, through store/runtime.py's `sleep`, its periodic tasks.
"""

from __future__ import annotations

import errno
import itertools
import math
from typing import Any

import trio

from store.address import format_host_port, split_host_port

__all__ = ["SimHost", "SimNetwork", "SimStream"]

FIRST_EPHEMERAL_PORT = 40000


class _Pipe:
    """One direction of a connection: the bytes written and not yet read."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.eof = False  # the writer sent EOF or closed its end
        self.reader_closed = False  # the reader closed its end: writing is a broken pipe
        self.lot = trio.lowlevel.ParkingLot()  # the reader, waiting for bytes or EOF

    def put(self, data: bytes | bytearray | memoryview) -> None:
        if self.reader_closed:
            raise trio.BrokenResourceError("the peer closed the connection (simulated)")
        self.data += data
        self.lot.unpark_all()

    def end(self) -> None:
        self.eof = True
        self.lot.unpark_all()


class SimStream(trio.abc.HalfCloseableStream):
    """One end of a simulated connection; `local` and `peer` name the ends ("host:port")."""

    def __init__(self, outgoing: _Pipe, incoming: _Pipe, local: str, peer: str, network: SimNetwork) -> None:
        self._out = outgoing
        self._in = incoming
        self._closed = False
        self._sending = False
        self.local = local
        self.peer = peer
        self._network = network
        self._host = split_host_port(local)[0]
        self._peer_host = split_host_port(peer)[0]
        self._link = frozenset((self._host, self._peer_host))  # the key of `SimNetwork.delays`
        self._direction = (self._host, self._peer_host)  # the key of `SimNetwork.one_way`

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._sending:
            raise trio.BusyResourceError("another task is sending on this stream")
        self._sending = True
        try:
            net = self._network
            await trio.lowlevel.checkpoint()
            if self._host in net.paused:
                await net.wait_running(self._host)
            while self._direction in net.one_way:
                await net.changed()
            delay = net.delays.get(self._link)
            if delay:
                await trio.sleep(delay)  # virtual: the link's simulated delay, on the MockClock
            if self._closed or self._out.eof:
                raise trio.ClosedResourceError("this end is closed")
            self._out.put(data)
        finally:
            self._sending = False

    def send_nowait(self, data: bytes | bytearray | memoryview) -> int:
        """What `os.write` is to a non-blocking socket (ha/net.py `write_now`): every byte now,
        or BlockingIOError when a send would wait (the host paused, the link held one way or
        delayed, a send in progress); a closed connection is a broken pipe."""
        net = self._network
        if (self._sending or self._host in net.paused or self._direction in net.one_way
                or self._link in net.delays):
            raise BlockingIOError(errno.EAGAIN, "the send would wait (simulated)")
        if self._closed or self._out.eof:
            raise BrokenPipeError(errno.EPIPE, "the connection is closed (simulated)")
        try:
            self._out.put(data)
        except trio.BrokenResourceError as e:
            raise BrokenPipeError(errno.EPIPE, str(e)) from None
        return len(data)

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def send_eof(self) -> None:
        await trio.lowlevel.checkpoint()
        if self._closed:
            raise trio.ClosedResourceError("this end is closed")
        self._out.end()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        pipe = self._in
        if self._closed:
            raise trio.ClosedResourceError("this end is closed")
        if pipe.data or pipe.eof:
            await trio.lowlevel.checkpoint()
        while not pipe.data and not pipe.eof and not self._closed:
            await pipe.lot.park()
        if self._closed:
            raise trio.ClosedResourceError("this end is closed")
        if max_bytes is None or max_bytes >= len(pipe.data):  # all of it: one copy
            data = bytes(pipe.data)
            pipe.data.clear()
        else:
            data = bytes(pipe.data[:max_bytes])
            del pipe.data[:max_bytes]
        if self._host in self._network.paused:
            await self._network.wait_running(self._host)
        return data

    async def aclose(self) -> None:
        self.close_now()
        await trio.lowlevel.checkpoint()

    def close_now(self) -> None:
        """Close both directions at once (the peer reads the end of its stream, and what it
        sends after is a broken pipe)."""
        self._closed = True
        self._out.end()
        self._in.reader_closed = True
        self._in.data.clear()
        self._in.lot.unpark_all()  # a receive in progress ends with ClosedResourceError


class SimListener(trio.abc.Listener[SimStream]):
    def __init__(self, network: SimNetwork, address: tuple[str, int]) -> None:
        self.network = network
        self.address = address
        self._send, self._receive = trio.open_memory_channel[SimStream](math.inf)

    def arrive(self, stream: SimStream) -> None:
        self._send.send_nowait(stream)

    async def accept(self) -> SimStream:
        try:
            stream = await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise trio.ClosedResourceError("listener closed") from None
        await self.network.wait_running(self.address[0])
        return stream

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
        self.one_way: set[tuple[str, str]] = set()  # (from, to): bytes held until the heal
        self.delays: dict[frozenset[str], float] = {}
        self.paused: set[str] = set()
        self._ports = itertools.count(FIRST_EPHEMERAL_PORT)
        self._changed = trio.Event()

    def host(self, name: str) -> SimHost:
        return SimHost(self, name)

    def next_port(self) -> int:
        return next(self._ports)

    async def changed(self) -> None:
        """Wait for the next cut, heal, pause, resume or end of a delay."""
        await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_running(self, host: str) -> None:
        while host in self.paused:
            await self.changed()

    def pause(self, host: str) -> None:
        self.paused.add(host)
        self._notify()

    def resume(self, host: str) -> None:
        self.paused.discard(host)
        self._notify()

    def delay(self, a: str, b: str, seconds: float) -> None:
        """Every send between `a` and `b` takes `seconds` longer (0: no delay)."""
        if seconds:
            self.delays[frozenset((a, b))] = seconds
        else:
            self.delays.pop(frozenset((a, b)), None)
            self._notify()

    def cut(self, a: str, b: str, *, one_way: bool = False) -> None:
        """End every connection between `a` and `b` and refuse new ones until `heal`; one way:
        hold what `a` sends to `b` (and refuse new connections) until `heal`."""
        if one_way:
            self.one_way.add((a, b))
        else:
            self.cuts.add(frozenset((a, b)))
            for conn in [c for c in self.connections if {c[0], c[1]} == {a, b}]:
                conn[2].close_now()
                conn[3].close_now()
                self.connections.remove(conn)
        self._notify()  # for what watches a link (chaos/sim/etcd_link.py)

    def heal(self, a: str, b: str) -> None:
        self.cuts.discard(frozenset((a, b)))
        self.one_way.discard((a, b))
        self.one_way.discard((b, a))
        self._notify()

    def is_cut(self, a: str, b: str) -> bool:
        return frozenset((a, b)) in self.cuts or (a, b) in self.one_way or (b, a) in self.one_way

    def cut_from(self, a: str, b: str) -> bool:
        """What `a` sends to `b` does not arrive: the link is cut, or cut one way from a to b."""
        return frozenset((a, b)) in self.cuts or (a, b) in self.one_way


class SimHost:
    """One host's view of the network: an ha/net.py `Network`."""

    def __init__(self, network: SimNetwork, name: str) -> None:
        self.network = network
        self.name = name

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        await self.network.wait_running(self.name)
        await trio.lowlevel.checkpoint()
        listener = self.network.listeners.get((host, port))
        if listener is None or self.network.is_cut(self.name, host):
            raise ConnectionRefusedError(errno.ECONNREFUSED, f"{host}:{port}: connection refused (simulated)")
        up, down = _Pipe(), _Pipe()  # client to server, server to client
        local, remote = format_host_port(self.name, self.network.next_port()), format_host_port(host, port)
        client = SimStream(up, down, local, remote, self.network)
        server = SimStream(down, up, remote, local, self.network)
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
