"""Where connections come from: the one seam the client-protocol server, the HA master and
slave and the client library open, accept and name connections through.

`TCP` is production: trio's TCP streams and listeners, TCP_NODELAY on. A deterministic
simulation (chaos/sim/network.py) passes another `Network` whose streams live in memory,
so the simulated cluster runs the same server, replication and client code. Streams that
are not sockets name their ends with `peer` and `local` attributes ("host:port"), and may
offer `send_nowait` (what `os.write` is to a socket: `write_now`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
from collections.abc import Callable
from typing import Any, Protocol

import trio

from store.address import format_host_port

__all__ = ["TCP", "Network", "TcpNetwork", "close_listener_now", "local_address", "no_delay", "peer_address",
           "write_now"]


class Network(Protocol):
    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        """A stream to host:port (OSError when refused or unreachable)."""
        ...

    async def listen(self, host: str, port: int) -> tuple[list[trio.abc.Listener[Any]], int]:
        """Listeners on host:port (port 0: one is picked) and the port bound."""
        ...


class TcpNetwork:
    """trio's TCP."""

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        stream = await trio.open_tcp_stream(host, port)
        no_delay(stream)
        return stream

    async def listen(self, host: str, port: int) -> tuple[list[trio.abc.Listener[Any]], int]:
        listeners = await trio.open_tcp_listeners(port, host=host)
        return list(listeners), listeners[0].socket.getsockname()[1]


TCP = TcpNetwork()


def _socket_name(stream: trio.abc.Stream, peer: bool) -> str | None:
    sock = getattr(stream, "socket", None)
    if sock is None:
        return getattr(stream, "peer" if peer else "local", None)
    try:
        host, port = (sock.getpeername() if peer else sock.getsockname())[:2]
    except OSError:
        return None
    return format_host_port(host, port)


def peer_address(stream: trio.abc.Stream) -> str | None:
    """The other end's "host:port" (IPv6 as "[ip]:port"); None when it is gone."""
    return _socket_name(stream, peer=True)


def local_address(stream: trio.abc.Stream) -> str | None:
    """This end's "host:port": the address the peer sees."""
    return _socket_name(stream, peer=False)


def no_delay(stream: trio.abc.Stream) -> None:
    """TCP_NODELAY on a socket stream (small frames leave at once); other streams have none."""
    sock = getattr(stream, "socket", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)


def write_now(stream: trio.abc.Stream) -> Callable[[bytes | memoryview], int] | None:
    """A write that does not wait, for a server that answers without a task switch: on a
    plain TCP stream `os.write` to its descriptor (the bytes the socket took; BlockingIOError
    when none), on a stream with `send_nowait` (the simulation's) that; None for any other."""
    if type(stream) is trio.SocketStream:
        return functools.partial(os.write, stream.socket.fileno())
    return getattr(stream, "send_nowait", None)


def close_listener_now(listener: trio.abc.Listener[Any]) -> None:
    """Close a listener without awaiting (from a `finally` that runs while cancelled)."""
    sock = getattr(listener, "socket", None)
    if sock is not None:
        sock.close()
    else:
        listener.close_now()  # type: ignore[attr-defined]  # the simulation's listeners
