"""The client-protocol server: TCP connections, frames, requests in flight.

Per connection a reader decodes frames and starts one task per request, so a long-polling
pull or a send waiting for its slave never holds back the requests behind it; responses go
out as they are ready (paired by id) through one write lock, so frames never interleave.
A frame that cannot be decoded ends the connection after an error frame with id null;
everything else is answered by `handler` (node/ops.py) and the connection stays usable.

Shutdown (`stop_accepting`, then `drain`): stop accepting, stop reading new requests, let
the requests in flight finish within a grace period, then close every connection.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

import attrs
import cbor2
import trio

from store.address import format_host_port

from .framing import FrameDecoder, FrameError, encode_frame
from .protocol import (
    OPS,
    Field,
    InvalidRequest,
    Request,
    Status,
    error_response,
    parse_request,
)

log = logging.getLogger("tidemq.node")

__all__ = ["ClientServer", "DisconnectHandler", "RequestHandler"]

RECEIVE_SIZE = 256 * 1024
MAX_IN_FLIGHT = 1024
"""Requests one connection may have in flight; the reader waits (TCP backpressure) beyond."""
ERROR_FRAME_TIMEOUT_S = 2.0
"""How long to try to deliver the error frame before closing a broken connection."""

RequestHandler = Callable[[Request, "str | None"], Awaitable[dict[str, Any]]]
DisconnectHandler = Callable[["str | None"], None]
_IO_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


@attrs.define(eq=False)
class _Connection:
    stream: trio.SocketStream
    peer: str | None
    write_lock: trio.Lock = attrs.field(factory=trio.Lock)
    in_flight: trio.Semaphore = attrs.field(factory=lambda: trio.Semaphore(MAX_IN_FLIGHT))
    read_scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    nursery: trio.Nursery | None = None

    def close_now(self) -> None:
        """Drop the connection: in-flight requests are cancelled unanswered."""
        if self.nursery is not None:
            self.nursery.cancel_scope.cancel()


def _peer_address(stream: trio.SocketStream) -> str | None:
    """The client's "ip:port" (IPv6 as "[ip]:port"), used as the born host of its messages."""
    try:
        host, port = stream.socket.getpeername()[:2]
    except OSError:
        return None
    return format_host_port(host, port)


class ClientServer:
    """Serves the client protocol on `host:port` (port 0 picks one; `port` holds it after start).

    `ops` is the op table requests are validated against (the node's by default; the name
    server has its own). `on_disconnect(peer)` is called when a connection ends, so a
    server can forget what it learned through it (the name server marks the brokers that
    registered over it as not alive).
    """

    def __init__(
        self,
        handler: RequestHandler,
        *,
        host: str,
        port: int,
        max_frame_size: int,
        ops: Mapping[str, tuple[Field, ...]] = OPS,
        on_disconnect: DisconnectHandler | None = None,
    ) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self.max_frame_size = max_frame_size
        self.ops = ops
        self.on_disconnect = on_disconnect
        self._connections: set[_Connection] = set()
        self._accept_scope: trio.CancelScope | None = None
        self._conn_nursery: trio.Nursery | None = None
        self._stopping = False
        self._all_closed = trio.Event()  # set once stopping and no connection is left

    @property
    def in_flight(self) -> int:
        return sum(MAX_IN_FLIGHT - c.in_flight.value for c in self._connections)

    async def run(self, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen and serve until `drain` finishes (or the task is cancelled)."""
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        self.port = listeners[0].socket.getsockname()[1]
        log.info("client protocol listening on %s:%d", self.host, self.port)
        async with trio.open_nursery() as conn_nursery:
            self._conn_nursery = conn_nursery
            async with trio.open_nursery() as accept_nursery:
                self._accept_scope = accept_nursery.cancel_scope
                serve = partial(trio.serve_listeners, self._handle, listeners, handler_nursery=conn_nursery)
                await accept_nursery.start(serve)
                task_status.started(self.port)
            # accepting stopped; connections finish on their own or are cancelled by drain

    def stop_accepting(self) -> None:
        """Close the listeners and stop reading requests; requests in flight go on."""
        self._stopping = True
        if self._accept_scope is not None:
            self._accept_scope.cancel()
        for conn in self._connections:
            conn.read_scope.cancel()
        if not self._connections:
            self._all_closed.set()

    async def drain(self, grace_s: float) -> None:
        """Wait (at most `grace_s`) for requests in flight to be answered, then close all."""
        self.stop_accepting()
        with trio.move_on_after(grace_s) as scope:
            if self._connections:
                await self._all_closed.wait()  # a connection ends once its last response is out
        if scope.cancelled_caught:
            log.warning("shutdown: %d request(s) still in flight after %.1f s; closing", self.in_flight, grace_s)
        if self._conn_nursery is not None:
            self._conn_nursery.cancel_scope.cancel()

    async def _handle(self, stream: trio.SocketStream) -> None:
        conn = _Connection(stream, _peer_address(stream))
        if self._stopping:
            await trio.aclose_forcefully(stream)
            return
        with contextlib.suppress(OSError):
            stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
        self._connections.add(conn)
        log.debug("client %s connected", conn.peer)
        try:
            await self._serve_connection(conn)
        except Exception:  # a bug must cost one connection, never the node
            log.exception("client %s: unexpected error; closing the connection", conn.peer)
        finally:
            self._connections.discard(conn)
            if self._stopping and not self._connections:
                self._all_closed.set()
            await trio.aclose_forcefully(stream)
            log.debug("client %s disconnected", conn.peer)
            if self.on_disconnect is not None:
                try:
                    self.on_disconnect(conn.peer)
                except Exception:
                    log.exception("disconnect handler failed for %s", conn.peer)

    async def _serve_connection(self, conn: _Connection) -> None:
        async with trio.open_nursery() as nursery:
            conn.nursery = nursery
            error: str | None = None
            with conn.read_scope:
                error = await self._read_loop(conn)
            if error is not None:
                log.info("client %s: %s; closing the connection", conn.peer, error)
                with trio.move_on_after(ERROR_FRAME_TIMEOUT_S):
                    await self._send(conn, encode_frame(error_response(None, Status.BAD_REQUEST, error)))
                conn.close_now()
            # otherwise (EOF or shutdown) the nursery waits for the requests in flight

    async def _read_loop(self, conn: _Connection) -> str | None:
        """Read frames and start their requests; the reason when the framing broke, else None."""
        decoder = FrameDecoder(self.max_frame_size)
        while True:
            try:
                data = await conn.stream.receive_some(RECEIVE_SIZE)
            except _IO_ERRORS:
                conn.close_now()  # the peer is gone: nobody to answer
                return None
            if not data:
                return None
            try:
                frames = decoder.feed(data)
            except FrameError as e:
                return e.reason
            for frame in frames:
                await conn.in_flight.acquire()
                conn.nursery.start_soon(self._serve_request, conn, frame)

    async def _serve_request(self, conn: _Connection, frame: dict) -> None:
        try:
            request_id = frame.get("id") if type(frame.get("id")) is int else None
            try:
                request = parse_request(frame, self.ops)
                response = await self.handler(request, conn.peer)
            except InvalidRequest as e:
                response = error_response(e.request_id, Status.BAD_REQUEST, e.message)
            except Exception as e:  # the handler answers its own errors; a bug lands here
                log.exception("request %s (id %s) failed", frame.get("op"), request_id)
                response = error_response(request_id, Status.INTERNAL_ERROR, f"{type(e).__name__}: {e}")
            await self._send(conn, self._encode(response))
        finally:
            conn.in_flight.release()

    def _encode(self, response: dict[str, Any]) -> bytes:
        try:
            return encode_frame(response, max_frame_size=self.max_frame_size)
        except (FrameError, cbor2.CBOREncodeError, TypeError, ValueError) as e:
            log.error("cannot encode the response to request %s: %s", response.get("id"), e)
            return encode_frame(
                error_response(response.get("id"), Status.INTERNAL_ERROR, f"cannot encode the response: {e}")
            )

    async def _send(self, conn: _Connection, data: bytes) -> None:
        try:
            async with conn.write_lock:
                await conn.stream.send_all(data)
        except _IO_ERRORS as e:
            log.debug("client %s: cannot send (%s); closing", conn.peer, e)
            conn.close_now()
