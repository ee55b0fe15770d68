"""A minimal raw client of the client protocol for tests: trio socket + FrameDecoder.

`Wire` sends whatever it is given (well-formed requests or raw bytes) and hands back
decoded frames, so tests see exactly what the node sends, ids and all.
"""

from __future__ import annotations

import itertools
from typing import Any

import trio

from store.address import split_host_port
from wire.framing import FrameDecoder, encode_frame
from wire.protocol import PROTOCOL_VERSION

MAX_FRAME = 64 * 1024 * 1024  # a test client accepts anything the node may send


class Wire:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder(MAX_FRAME)
        self.received: list[dict] = []  # frames read but not yet claimed
        self.eof = False
        self._ids = itertools.count(1)

    @classmethod
    async def connect(cls, address: str) -> Wire:
        return cls(await trio.open_tcp_stream(*split_host_port(address)))

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)

    def next_id(self) -> int:
        return next(self._ids)

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def send(self, op: str, *, id: int | None = None, **fields: Any) -> int:
        """Send one request; returns its id (a fresh one unless given)."""
        request_id = self.next_id() if id is None else id
        await self.send_raw(encode_frame({"v": PROTOCOL_VERSION, "op": op, "id": request_id, **fields}))
        return request_id

    async def _read_more(self) -> None:
        data = await self.stream.receive_some(1 << 20)
        if not data:
            self.eof = True
            return
        self.received += self.decoder.feed(data)

    async def recv(self, timeout: float = 10.0) -> dict | None:
        """The next frame in arrival order; None at EOF."""
        with trio.fail_after(timeout):
            while not self.received and not self.eof:
                await self._read_more()
        return self.received.pop(0) if self.received else None

    async def recv_id(self, request_id: int | None, timeout: float = 10.0) -> dict:
        """The response with this id (other frames stay queued)."""
        with trio.fail_after(timeout):
            while True:
                for i, frame in enumerate(self.received):
                    if frame.get("id") == request_id:
                        return self.received.pop(i)
                if self.eof:
                    raise EOFError(f"connection closed before the response to {request_id}")
                await self._read_more()

    async def call(self, op: str, *, timeout: float = 10.0, **fields: Any) -> dict:
        return await self.recv_id(await self.send(op, **fields), timeout)

    async def wait_closed(self, timeout: float = 10.0) -> None:
        """Read until the node closes the connection (frames read meanwhile are kept)."""
        with trio.fail_after(timeout):
            while not self.eof:
                try:
                    await self._read_more()
                except trio.BrokenResourceError:  # a reset counts as closed
                    self.eof = True


async def call(address: str, op: str, **fields: Any) -> dict:
    """One request on a fresh connection."""
    wire = await Wire.connect(address)
    try:
        return await wire.call(op, **fields)
    finally:
        await wire.aclose()
