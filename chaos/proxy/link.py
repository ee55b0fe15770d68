"""A TCP proxy with toxics, under trio: Toxiproxy's proxy and link semantics.

A `Proxy` listens on `listen` and, for each accepted client, opens a connection to
`upstream` and pumps bytes both ways. Each direction runs a reader (stamps every chunk
with its arrival time and queues it) and a writer that passes the chunk through the
proxy's current toxics of that stream, in the order they were added, before writing it.
Toxics are looked up per chunk, so adding or removing one affects live connections, as
in Toxiproxy. Whether a toxic applies to a connection is rolled once per connection
against its toxicity.

Semantics (Toxiproxy 2.x): latency delays each chunk to arrival + latency ± jitter (so a
stream of chunks keeps its throughput); bandwidth sleeps len/rate per chunk (big chunks
in 100 ms pieces); slicer writes
a chunk as pieces of average_size ± size_variation with `delay` µs between them;
limit_data closes the connection once `bytes` went through that stream; timeout drops data
and closes the connection `timeout` ms after it began to apply, or with 0 holds the data
until the toxic is removed; reset_peer closes both sides with a TCP RST (SO_LINGER 0)
after `timeout` ms; slow_close delays the close that follows an EOF by `delay` ms.
Disabling a proxy closes its listener and every connection.
"""

from __future__ import annotations

import contextlib
import logging
import random
import socket
import struct
from collections.abc import Iterator
from typing import Any

import trio

from store.address import split_host_port as address_split

from .toxics import Toxic

log = logging.getLogger("tidemq.chaos.proxy")

CHUNK = 32 * 1024
QUEUED_CHUNKS = 64


def split_host_port(address: str) -> tuple[str, int]:
    """store.address's parser, with port 0 allowed (a listener asks the kernel for a port);
    an AddressError is a ValueError, answered 400 by the API."""
    return address_split(address, ports=range(0, 65536))


class Proxy:
    """One named proxy: its listener, its toxics, its live links."""

    def __init__(self, name: str, listen: str, upstream: str, nursery: trio.Nursery) -> None:
        split_host_port(listen)
        split_host_port(upstream)
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.enabled = False
        self.toxics: dict[str, Toxic] = {}
        self._nursery = nursery
        self._listener: trio.SocketListener | None = None
        self._accepting: trio.CancelScope | None = None
        self._links: set[Link] = set()
        self._changed = trio.Event()
        self._rng = random.Random()

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "listen": self.listen, "upstream": self.upstream,
                "enabled": self.enabled, "toxics": [t.to_json() for t in self.toxics.values()]}

    # ---- state changes, each waking the links so they see the new toxics at once

    def changed(self) -> trio.Event:
        return self._changed

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def set_toxic(self, toxic: Toxic) -> None:
        self.toxics[toxic.name] = toxic
        self._notify()

    def remove_toxic(self, name: str) -> None:
        del self.toxics[name]
        self._notify()

    def remove_all_toxics(self) -> None:
        self.toxics.clear()
        self._notify()

    async def enable(self) -> None:
        """Bind `listen` (port 0 picks one; `listen` then names it) and accept clients."""
        if self.enabled:
            return
        host, port = split_host_port(self.listen)
        listeners = await trio.open_tcp_listeners(port, host=host)
        for extra in listeners[1:]:
            await extra.aclose()
        self._listener = listeners[0]
        bound = self._listener.socket.getsockname()
        self.listen = f"{host}:{bound[1]}"
        self.enabled = True
        self._accepting = trio.CancelScope()
        self._nursery.start_soon(self._accept_loop, self._listener, self._accepting)

    async def disable(self) -> None:
        """Stop listening and close every connection (Toxiproxy's `enabled: false`)."""
        if not self.enabled:
            return
        self.enabled = False
        if self._accepting is not None:
            self._accepting.cancel()
        if self._listener is not None:
            await self._listener.aclose()
        self._listener = None
        for link in list(self._links):
            link.close()
        self._notify()

    async def _accept_loop(self, listener: trio.SocketListener, scope: trio.CancelScope) -> None:
        with scope:
            while True:
                try:
                    client = await listener.accept()
                except (trio.ClosedResourceError, OSError):
                    return
                self._nursery.start_soon(self._serve, client)

    async def _serve(self, client: trio.SocketStream) -> None:
        host, port = split_host_port(self.upstream)
        try:
            server = await trio.open_tcp_stream(host, port)
        except OSError as e:
            log.info("proxy %s: upstream %s refused: %s", self.name, self.upstream, e)
            await client.aclose()
            return
        link = Link(self, client, server, self._rng)
        self._links.add(link)
        try:
            await link.run()
        finally:
            self._links.discard(link)


class Link:
    """One proxied connection: client ↔ proxy ↔ upstream."""

    def __init__(self, proxy: Proxy, client: trio.SocketStream, server: trio.SocketStream,
                 rng: random.Random) -> None:
        self.proxy = proxy
        self.client = client
        self.server = server
        self._rng = rng
        self._applies: dict[tuple[str, float], bool] = {}
        self._scope = trio.CancelScope()
        self._passed = {"upstream": 0, "downstream": 0}

    def close(self, *, reset: bool = False) -> None:
        """Close both sides now (with RST when `reset`); the pumps end with the scope."""
        for stream in (self.client, self.server):
            sock = stream.socket
            with contextlib.suppress(OSError):
                if reset:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.close()
        self._scope.cancel()

    def active(self, stream: str) -> Iterator[Toxic]:
        """The proxy's toxics of `stream` that apply to this connection, in order."""
        for toxic in list(self.proxy.toxics.values()):
            if toxic.stream != stream:
                continue
            key = (toxic.name, toxic.toxicity)
            if key not in self._applies:
                self._applies[key] = self._rng.random() < toxic.toxicity
            if self._applies[key]:
                yield toxic

    async def run(self) -> None:
        with self._scope:
            async with trio.open_nursery() as nursery:
                for stream, src, dst in (("upstream", self.client, self.server),
                                         ("downstream", self.server, self.client)):
                    send, receive = trio.open_memory_channel[tuple[float, bytes] | None](QUEUED_CHUNKS)
                    nursery.start_soon(self._read, src, send)
                    nursery.start_soon(self._write, stream, receive, dst)
                nursery.start_soon(self._watch_timers)
        self.close()

    async def _read(self, src: trio.SocketStream, out: trio.MemorySendChannel) -> None:
        async with out:
            while True:
                try:
                    data = await src.receive_some(CHUNK)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    data = b""
                if not data:
                    await out.send(None)
                    return
                await out.send((trio.current_time(), data))

    async def _write(self, stream: str, chunks: trio.MemoryReceiveChannel, dst: trio.SocketStream) -> None:
        async with chunks:
            async for item in chunks:
                if item is None:
                    delay = max((t.attr("delay") for t in self.active(stream) if t.type == "slow_close"), default=0)
                    await trio.sleep(delay / 1000)  # poll-exempt: slow_close's delay is the toxic
                    self.close()
                    return
                arrival, data = item
                await self._through(stream, list(self.active(stream)), arrival, data, dst)

    async def _through(self, stream: str, toxics: list[Toxic], arrival: float, data: bytes,
                       dst: trio.SocketStream) -> None:
        """Pass one chunk through `toxics` (in order) and write what comes out to `dst`."""
        for i, toxic in enumerate(toxics):
            kind = toxic.type
            if kind == "timeout":
                if toxic.attr("timeout") > 0:
                    return  # dropped; _watch_timers closes the connection at the deadline
                while toxic.name in self.proxy.toxics and toxic in self.active(stream):
                    await self.proxy.changed().wait()  # timeout 0: hold until removed
                return await self._through(stream, list(self.active(stream)), arrival, data, dst)
            if kind == "latency":
                jitter = toxic.attr("jitter")
                delay = toxic.attr("latency") + (self._rng.uniform(-jitter, jitter) if jitter else 0)
                await trio.sleep_until(arrival + max(0.0, delay) / 1000)  # poll-exempt: latency's delay is the toxic
            elif kind == "bandwidth" and toxic.attr("rate") > 0:
                rate = toxic.attr("rate") * 1000  # bytes per second, Toxiproxy's KB
                piece = max(1, rate // 10)  # as Toxiproxy: a big chunk goes as 100 ms pieces
                rest = toxics[i + 1:]
                for start in range(0, len(data), piece):
                    part = data[start:start + piece]
                    await trio.sleep(len(part) / rate)  # poll-exempt: bandwidth's pacing is the toxic
                    await self._through(stream, rest, arrival, part, dst)
                return
            elif kind == "limit_data":
                room = toxic.attr("bytes") - self._passed[stream]
                if len(data) >= room:
                    if room > 0:
                        await self._send(dst, data[:room], stream)
                    self.close()
                    return
            elif kind == "slicer" and toxic.attr("average_size") > 0:
                rest = toxics[i + 1:]
                for n, part in enumerate(self._slices(toxic, data)):
                    if n:
                        await trio.sleep(toxic.attr("delay") / 1_000_000)  # poll-exempt: slicer's delay
                    await self._through(stream, rest, arrival, part, dst)
                return
        await self._send(dst, data, stream)

    def _slices(self, toxic: Toxic, data: bytes) -> Iterator[bytes]:
        average, variation = toxic.attr("average_size"), toxic.attr("size_variation")
        pos = 0
        while pos < len(data):
            size = average + (self._rng.randint(-variation, variation) if variation else 0)
            size = max(1, size)
            yield data[pos:pos + size]
            pos += size

    async def _send(self, dst: trio.SocketStream, data: bytes, stream: str) -> None:
        try:
            await dst.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.close()
            return
        self._passed[stream] += len(data)

    async def _watch_timers(self) -> None:
        """timeout (> 0) and reset_peer close the connection a while after they began to
        apply to it; the clock starts when this connection first sees the toxic."""
        since: dict[str, float] = {}
        while True:
            changed = self.proxy.changed()
            now = trio.current_time()
            timed = [t for s in ("upstream", "downstream") for t in self.active(s)
                     if t.type == "reset_peer" or (t.type == "timeout" and t.attr("timeout") > 0)]
            since = {t.name: since.get(t.name, now) for t in timed}
            deadline = float("inf")
            for t in timed:
                due = since[t.name] + t.attr("timeout") / 1000
                if due <= now:
                    self.close(reset=t.type == "reset_peer")
                    return
                deadline = min(deadline, due)
            with trio.move_on_at(deadline):
                await changed.wait()
