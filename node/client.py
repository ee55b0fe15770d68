"""A minimal client of the client protocol, for node-to-node calls (a slave's sync).

One request at a time on one connection: enough for periodic admin calls. The full client
library (pipelining, routing, retries) lives in `cluster/`.
"""

from __future__ import annotations

import itertools
from typing import Any

import trio

from .protocol import PROTOCOL_VERSION, FrameDecoder, FrameError, Status, encode_frame

__all__ = ["NodeClient", "NodeClientError"]

RECEIVE_SIZE = 256 * 1024


class NodeClientError(Exception):
    """The peer could not be reached, broke the protocol, or answered with an error status."""


class NodeClient:
    """`async with await NodeClient.connect("host:port", ...) as c: await c.request("status")`."""

    def __init__(self, stream: trio.SocketStream, address: str, max_frame_size: int) -> None:
        self.stream = stream
        self.address = address
        self.max_frame_size = max_frame_size
        self._decoder = FrameDecoder(max_frame_size)
        self._pending: list[dict] = []
        self._ids = itertools.count(1)

    @classmethod
    async def connect(cls, address: str, *, max_frame_size: int, timeout_s: float = 5.0) -> NodeClient:
        host, _, port = address.rpartition(":")
        try:
            with trio.fail_after(timeout_s):
                stream = await trio.open_tcp_stream(host.strip("[]"), int(port))
        except (OSError, trio.TooSlowError) as e:
            raise NodeClientError(f"cannot connect to {address}: {e or 'timed out'}") from None
        return cls(stream, address, max_frame_size)

    async def __aenter__(self) -> NodeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)

    async def request(self, op: str, *, timeout_s: float = 10.0, **fields: Any) -> dict[str, Any]:
        """Send one request and return its response; NodeClientError unless the status is OK."""
        request_id = next(self._ids)
        frame = encode_frame({"v": PROTOCOL_VERSION, "op": op, "id": request_id, **fields},
                             max_frame_size=self.max_frame_size)
        try:
            with trio.fail_after(timeout_s):
                await self.stream.send_all(frame)
                while True:
                    for response in self._pending:
                        if response.get("id") in (request_id, None):
                            self._pending.remove(response)
                            return self._check(op, response)
                    data = await self.stream.receive_some(RECEIVE_SIZE)
                    if not data:
                        raise NodeClientError(f"{self.address} closed the connection during {op}")
                    self._pending += self._decoder.feed(data)
        except trio.TooSlowError:
            raise NodeClientError(f"{self.address}: no answer to {op} within {timeout_s} s") from None
        except FrameError as e:
            raise NodeClientError(f"{self.address}: bad frame: {e.reason}") from None
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as e:
            raise NodeClientError(f"{self.address}: {op} failed: {e}") from None

    def _check(self, op: str, response: dict[str, Any]) -> dict[str, Any]:
        if response.get("status") != Status.OK.value:
            raise NodeClientError(
                f"{self.address}: {op} answered {response.get('status')}: {response.get('error', '')}"
            )
        return response
