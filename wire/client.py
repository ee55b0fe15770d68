"""The client of the client protocol: `Connection`, and `ConnectionPool` for many peers.

A `Connection` is one TCP connection with many requests in flight, responses paired by id
by a reader task, a timeout per request and typed errors (`TidemqError` and its
subclasses). Everything that talks to a node or a name server uses it: the cluster client
library (through `ConnectionPool`), the node's name-server registration, a slave's
topic/offset sync and the launcher's status probe (`async with connect(address) as conn`).

It speaks wire/protocol.py's framing and never parses more than it needs: a response
carrying `error` is a failure, anything else is returned as the map it is.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Unpack

import attrs
import trio

from store.address import AddressError, split_host_port

from .credentials import Credentials, CredentialsError, default_credentials
from .framing import FrameDecoder, FrameError, encode_frame
from .options import DEFAULT_MAX_FRAME_SIZE, ConnectKeywords, ConnectOptions
from .protocol import PROTOCOL_VERSION, ReplyError, Status, WireReply, WireRequest
from .protocol.auth import AuthFinish, AuthStart
from .tls import TlsError, TlsHandshakeFailed, default_client_tls, wrap_client

__all__ = [
    "AuthenticationFailed",
    "BadReply",
    "BadRequest",
    "ConnectOptions",
    "Connection",
    "ConnectionLost",
    "ConnectionLostInFlight",
    "Indeterminate",
    "ConnectionPool",
    "InternalError",
    "NoPermission",
    "NotFound",
    "OutcomeUnknown",
    "PutFailed",
    "RequestTimeout",
    "ServiceUnavailable",
    "TidemqError",
    "TransactionEnded",
    "block_nursery",
    "connect",
    "error_for",
    "read_reply",
]

log = logging.getLogger("tidemq.client")

RECEIVE_SIZE = 256 * 1024
"""The largest read, while data streams in (a large pull's answer fills each read)."""
SMALL_RECEIVE_SIZE = 64 * 1024
"""The usual read. Below glibc's 128 KiB mmap threshold: a larger read's buffer is mapped and
unmapped on every call (~20 µs, also for the read that finds nothing and waits), which at
one request in flight was a tenth of the client's CPU per send (docs/bench-compare.md)."""
MAX_RECEIVE_FRAME_SIZE = 64 * 1024 * 1024
"""Largest frame a client accepts: above any node's sensible maxFrameSize."""
CONNECTION_LOST = "CONNECTION_LOST"
TIMEOUT = "TIMEOUT"

_IO_ERRORS = (OSError, trio.BrokenResourceError, trio.ClosedResourceError)


# ---------------------------------------------------------------- errors


class TidemqError(Exception):
    """A request failed. `status` is the node's status name (`SERVICE_NOT_AVAILABLE`, ...)
    or, for failures seen only by the client, `CONNECTION_LOST` / `TIMEOUT`; `message` is
    the node's `error` text (or the client's description); `address` the peer, if known."""

    def __init__(self, status: str, message: str, *, address: str | None = None) -> None:
        super().__init__(f"{address}: {message}" if address else message)
        self.status = status
        self.message = message
        self.address = address


class BadRequest(TidemqError):
    """BAD_REQUEST: the request was invalid (a bug in the caller, not a transient fault)."""


class NotFound(TidemqError):
    """NOT_FOUND: no such msgId, committed offset, topic or route."""


class ServiceUnavailable(TidemqError):
    """SERVICE_NOT_AVAILABLE: a slave refused a write, the node is stopping or not writeable."""


class NoPermission(TidemqError):
    """NO_PERMISSION: the node's settings forbid it (a consumer group whose consumption an
    operator disabled)."""


class TransactionEnded(TidemqError):
    """TRANSACTION_ENDED: an end_transaction asked COMMIT of a transaction already rolled
    back, or ROLLBACK of one already committed: nothing was written."""


class AuthenticationFailed(NoPermission):
    """The login was refused (unknown account, wrong secret, an address the account may
    not use, too many failures), or the server could not prove it knows the account: the
    connection is closed."""


class InternalError(TidemqError):
    """INTERNAL_ERROR: a bug or unexpected failure inside the node."""


class PutFailed(TidemqError):
    """A send the store refused: MESSAGE_ILLEGAL, PROPERTIES_SIZE_EXCEEDED, OS_PAGECACHE_BUSY,
    CREATE_MAPEDFILE_FAILED, UNKNOWN_ERROR. The message was not stored."""


class OutcomeUnknown(TidemqError):
    """Whether the node acted on the request is unknown: no answer in time
    (RequestTimeout), the connection broke after the request was written
    (ConnectionLostInFlight), the node answered INDETERMINATE (Indeterminate), or its
    answer could not be read (BadReply). A send that ends this way may be stored: report
    it as indeterminate, never as failed."""


class BadReply(OutcomeUnknown):
    """An OK answer without the shape of its op's reply (a peer speaking another protocol
    version): status BAD_REPLY. The node may have done what was asked (a send may be
    stored), so it is an unknown outcome."""


class ConnectionLost(TidemqError):
    """The node could not be reached, or the connection broke before the request was
    written: the node never saw it. (Broken after it was written: ConnectionLostInFlight,
    which is one of these too.)"""

    def __init__(self, message: str, *, address: str | None = None) -> None:
        super().__init__(CONNECTION_LOST, message, address=address)


class ConnectionLostInFlight(ConnectionLost, OutcomeUnknown):
    """The connection broke with the request written and unanswered."""


class Indeterminate(OutcomeUnknown):
    """INDETERMINATE: the node stored the write but may no longer acknowledge it (fenced,
    or its lease ran out, while it waited); it may or may not survive the failover."""


class RequestTimeout(OutcomeUnknown):
    """No response within the request's timeout (whether the node acted on it is unknown)."""

    def __init__(self, message: str, *, address: str | None = None) -> None:
        super().__init__(TIMEOUT, message, address=address)


_BY_STATUS: dict[str, type[TidemqError]] = {
    Status.BAD_REQUEST.value: BadRequest,
    Status.NOT_FOUND.value: NotFound,
    Status.SERVICE_NOT_AVAILABLE.value: ServiceUnavailable,
    Status.INTERNAL_ERROR.value: InternalError,
    Status.INDETERMINATE.value: Indeterminate,
    Status.NO_PERMISSION.value: NoPermission,
    Status.TRANSACTION_ENDED.value: TransactionEnded,
}


def error_for(status: str, message: str, *, address: str | None = None) -> TidemqError:
    """The typed exception for an error response's status."""
    cls = _BY_STATUS.get(status, PutFailed if status in _PUT_FAILURES else TidemqError)
    return cls(status, message, address=address)


_PUT_FAILURES = {
    Status.CREATE_MAPEDFILE_FAILED.value,
    Status.MESSAGE_ILLEGAL.value,
    Status.PROPERTIES_SIZE_EXCEEDED.value,
    Status.OS_PAGECACHE_BUSY.value,
    Status.UNKNOWN_ERROR.value,
}


def read_reply(request: WireRequest | type[WireRequest], answer: dict[str, Any], address: str | None = None) -> Any:
    """`answer` (a map `request`, or a request of that class, was answered with) as its
    REPLY class; BadReply when it does not have that shape."""
    reply = request.REPLY
    if not issubclass(reply, WireReply):
        raise TypeError(f"{request.OP}: REPLY is {reply!r}, not a wire reply class")
    try:
        return reply.from_wire(answer)
    except (ReplyError, ValueError, TypeError) as e:
        raise BadReply("BAD_REPLY", f"{request.OP}: {e}", address=address) from None


# ---------------------------------------------------------------- Connection


@attrs.define(eq=False)
class _Slot:
    """One request in flight: set by the reader with its response or the connection's error."""

    done: trio.Event = attrs.field(factory=trio.Event)
    response: dict[str, Any] | None = None
    error: TidemqError | None = None
    written: bool = False
    """Its frame went (or started to go) to the socket: a lost connection leaves the outcome unknown."""


class Connection:
    """One TCP connection to a node (or name server), many requests in flight.

    Open with `await Connection.open(address, nursery)` (the reader task runs in `nursery`)
    or `async with connect(address) as conn:`. `request()` sends a frame and waits for the
    response with the same id, so a long-polling pull does not hold back a send on the same
    connection. A broken connection fails every request in flight with ConnectionLost and
    stays closed: open a new one (`ConnectionPool` does).
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        address: str,
        *,
        request_timeout: float = 10.0,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        self.address = address
        self.request_timeout = request_timeout
        self.max_frame_size = max_frame_size
        self.last_received = trio.current_time()
        """When the peer last sent anything (trio time): a pool drops a connection silent for a
        whole request's timeout (ConnectionPool)."""
        self._stream = stream
        raw = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
        sock = getattr(raw, "socket", None)
        # closes at once (wakes the reader) from _abort; a simulated stream has close_now
        close_now: Callable[[], None] | None = sock.close if sock is not None else getattr(raw, "close_now", None)
        if close_now is None:
            raise TypeError(f"{type(raw).__name__}: a stream with neither a socket nor close_now")
        self._close_now = close_now
        # a plain TCP socket's descriptor: an uncontended request's frames are written to it
        # at once (`_write`), not through trio's send_all and lock, each of which yields to the
        # scheduler (a pass of the event loop per request); None: TLS, a simulated network
        self._fd: int | None = sock.fileno() if sock is not None and isinstance(stream, trio.SocketStream) else None
        self._decoder = FrameDecoder(max(max_frame_size, MAX_RECEIVE_FRAME_SIZE))
        self._ids = itertools.count(1)
        self._pending: dict[int, _Slot] = {}
        self._send_lock = trio.Lock()
        self._closed = trio.Event()
        self._close_reason = ""

    @classmethod
    async def open(
        cls,
        address: str,
        nursery: trio.Nursery,
        options: ConnectOptions | None = None,
        **keywords: Unpack[ConnectKeywords],
    ) -> Connection:
        """Connect (ConnectionLost when refused or slower than `connect_timeout`), with TLS
        when there is a context (`tls`, else the process's or the environment's:
        wire/tls.py), start the reader in `nursery` and log in with `credentials`
        (default: the process's or the environment's, wire/credentials.py; none: no
        login), within `connect_timeout` too: `options`, or the defaults, with `keywords`
        (wire/options.py). AuthenticationFailed when the login is refused; ConnectionLost
        naming the cause when the TLS handshake fails."""
        o = ConnectOptions.of(options, keywords)
        connect_timeout, credentials = o.connect_timeout, o.credentials
        try:
            host, port = split_host_port(address)
        except AddressError as e:
            raise ConnectionLost(f"address {e}", address=address) from None
        try:
            context = o.tls if o.tls is not None else default_client_tls()
        except TlsError as e:
            raise ConnectionLost(f"TLS settings: {e}", address=address) from None
        stream: trio.abc.Stream
        try:
            with trio.fail_after(connect_timeout):
                raw = await o.net.connect(host, port)
                stream = raw
                if context is not None:
                    try:
                        stream = await wrap_client(raw, context, host)
                    except BaseException:
                        await trio.aclose_forcefully(raw)
                        raise
        except trio.TooSlowError:
            raise ConnectionLost(f"cannot connect within {connect_timeout:g} s", address=address) from None
        except TlsHandshakeFailed as e:
            raise ConnectionLost(str(e), address=address) from None
        except OSError as e:
            raise ConnectionLost(f"cannot connect: {e.strerror or e}", address=address) from None
        conn = cls(stream, address, request_timeout=o.request_timeout, max_frame_size=o.max_frame_size)
        nursery.start_soon(conn._read_loop)
        try:
            if credentials is None:
                credentials = default_credentials()
            if credentials is not None:
                await conn._login(credentials, connect_timeout)
        except CredentialsError as e:
            conn._abort("no usable credentials")
            raise AuthenticationFailed(Status.NO_PERMISSION.value, str(e), address=address) from None
        except BaseException:
            conn._abort("login failed")
            raise
        return conn

    async def _login(self, credentials: Credentials, timeout: float) -> None:
        """SCRAM-SHA-256 (wire/protocol/auth.py): prove the account's secret without
        sending it, and check the server's proof that it holds the account's verifier."""
        from scramp import ScramException  # here: scramp is for secured clusters only

        client = credentials.scram_client()
        try:
            first = await self.call(AuthStart(message=client.get_client_first()), timeout=timeout)
            if not first.enabled:
                return  # this server does not check logins
            client.set_server_first(first.message)
            final = await self.call(AuthFinish(message=client.get_client_final()), timeout=timeout)
            client.set_server_final(final.message)
        except NoPermission as e:
            raise AuthenticationFailed(e.status, e.message, address=self.address) from None
        except ScramException as e:
            raise AuthenticationFailed(
                Status.NO_PERMISSION.value, f"login as {credentials.user!r}: the server's SCRAM answer "
                f"does not check out ({e}); it may not be the server it claims to be", address=self.address,
            ) from None

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def wait_closed(self) -> None:
        """Return once the connection is closed (by either side or by an error)."""
        await self._closed.wait()

    async def aclose(self) -> None:
        """Close; requests in flight fail with ConnectionLost."""
        self._abort("closed by the client")
        await trio.lowlevel.checkpoint()

    async def request(self, op: WireRequest | str, *, timeout: float | None = None, **fields: Any) -> dict[str, Any]:
        """Send a request (a wire/protocol request class, or an op name with its fields as
        keywords: the raw form, for tools and tests that speak the wire by hand) and return
        the response map.

        Raises the TidemqError subclass of an error response's status (BadRequest,
        NotFound, ServiceUnavailable, PutFailed, ...), ConnectionLost when the connection
        breaks, RequestTimeout after `timeout` seconds (default `request_timeout`). Store
        statuses that are not failures (PUT_OK, FLUSH_*_TIMEOUT, SLAVE_NOT_AVAILABLE, FOUND,
        NO_MESSAGE_IN_QUEUE, ...) are returned: the caller reads `status`.
        """
        if isinstance(op, WireRequest):
            if fields:
                raise TypeError(f"{op.OP}: the request object holds its fields; got {sorted(fields)} too")
            name, fields = op.OP, op.wire_fields()
        else:
            name = op
        (answer,) = await self.request_many(name, [fields], timeout=timeout)
        if isinstance(answer, TidemqError):
            raise answer
        return answer

    async def call(self, request: WireRequest, *, timeout: float | None = None) -> Any:
        """Send `request` and read its answer as its reply class (`request.REPLY`); the
        errors of `request`, and BadReply for an answer of another shape."""
        return read_reply(request, await self.request(request, timeout=timeout), self.address)

    async def request_many(
        self, op: str, requests: Sequence[Mapping[str, Any]], *, timeout: float | None = None
    ) -> list[dict[str, Any] | TidemqError]:
        """Send one `op` request per fields map, pipelined in one write, and return each
        one's response map or its error (as `request` would raise it), in order, once all
        are answered or `timeout` (default `request_timeout`) is up."""
        if self.closed:
            lost = ConnectionLost(f"connection is closed ({self._close_reason})", address=self.address)
            return [lost] * len(requests)
        answers: list[dict[str, Any] | TidemqError | None] = [None] * len(requests)
        slots: list[tuple[int, int, _Slot]] = []  # (index, request id, slot)
        frames: list[bytes] = []
        for index, fields in enumerate(requests):
            request_id = next(self._ids)
            try:
                frames.append(encode_frame(
                    {"v": PROTOCOL_VERSION, "op": op, "id": request_id, **fields},
                    max_frame_size=self.max_frame_size,
                ))
            except FrameError as e:
                answers[index] = BadRequest(Status.BAD_REQUEST.value, f"{op}: {e.reason}", address=self.address)
                continue
            slot = _Slot()
            self._pending[request_id] = slot
            slots.append((index, request_id, slot))
        limit = self.request_timeout if timeout is None else timeout
        deadline = trio.current_time() + (limit if limit is not None else math.inf)
        try:
            with trio.move_on_at(deadline):
                if frames:
                    data = b"".join(frames)
                    if self._fd is not None:
                        await self._write([slot for _, _, slot in slots], data, op, limit, deadline)
                    else:
                        async with self._send_lock:
                            for _, _, slot in slots:
                                slot.written = True
                            await self._send_shielded(data, op, limit, deadline)
                for _, _, slot in slots:
                    await slot.done.wait()
        finally:
            for _, request_id, _ in slots:
                self._pending.pop(request_id, None)
        for index, _, slot in slots:
            answers[index] = self._answer(op, slot, limit)
        return answers  # type: ignore[return-value]  # every index was filled above

    async def _send_shielded(self, data: bytes, op: str, limit: float | None, deadline: float) -> None:
        """`data` through the stream, the send lock held. Shielded: cancelling a caller (e.g.
        one of several long polls) must not leave half a frame on a connection other requests
        share. Only the request's own deadline interrupts a send, and that ends the connection."""
        sent = False
        with trio.CancelScope(shield=True, deadline=deadline):
            try:
                await self._stream.send_all(data)
                sent = True
            except _IO_ERRORS as e:
                self._abort(f"send failed: {e}")
        if not sent:  # a partial frame may be on the wire: the stream is unusable
            self._abort(f"{op} could not be sent within {limit:g} s")

    async def _write(self, slots: Sequence[_Slot], data: bytes, op: str, limit: float | None,
                     deadline: float) -> None:
        """`data` (whole frames of `slots`) on a plain socket: when the send lock is free it is
        taken without a scheduler pass and what the socket's buffer takes is written at once
        (no await: nothing can cancel it halfway); the rest, or all of it when another task
        holds the lock, goes as `_send_shielded` sends it."""
        lock = self._send_lock
        await trio.lowlevel.checkpoint_if_cancelled()  # a cancelled caller sends nothing, as with lock.acquire
        try:
            lock.acquire_nowait()
        except trio.WouldBlock:
            await lock.acquire()
        try:
            for slot in slots:
                slot.written = True
            rest = data
            if self._fd is not None and not self.closed:  # closed: the descriptor may be another's by now
                try:
                    rest = data[os.write(self._fd, data):]
                except BlockingIOError:
                    pass
                except OSError as e:
                    self._abort(f"send failed: {e}")
                    return
            if rest:
                await self._send_shielded(rest, op, limit, deadline)
        finally:
            lock.release()

    def _answer(self, op: str, slot: _Slot, limit: float | None) -> dict[str, Any] | TidemqError:
        if slot.error is not None:
            return slot.error
        if slot.response is None:
            return RequestTimeout(f"no answer to {op} within {limit:g} s", address=self.address)
        response = slot.response
        if "error" in response:
            status = str(response.get("status"))
            return error_for(status, f"{op}: {status}: {response['error']}", address=self.address)
        return response

    def _abort(self, reason: str) -> None:
        """Mark closed, fail every request in flight, close the socket (wakes the reader)."""
        if self.closed:
            return
        self._close_reason = reason
        self._closed.set()
        for slot in self._pending.values():
            if not slot.done.is_set():
                lost = ConnectionLostInFlight if slot.written else ConnectionLost
                slot.error = lost(f"connection lost: {reason}", address=self.address)
                slot.done.set()
        with contextlib.suppress(OSError):
            self._close_now()

    async def _read_loop(self) -> None:
        reason = "closed by the peer"
        try:
            size = SMALL_RECEIVE_SIZE
            while not self.closed:
                data = await self._stream.receive_some(size)
                if not data:
                    break
                self.last_received = trio.current_time()
                size = RECEIVE_SIZE if len(data) >= size else SMALL_RECEIVE_SIZE
                for frame in self._decoder.feed(data):
                    request_id = frame.get("id")
                    slot = self._pending.get(request_id) if type(request_id) is int else None
                    if slot is not None:
                        slot.response = frame
                        slot.done.set()
                    elif request_id is None and "error" in frame:  # the peer gave up on the stream
                        reason = f"the peer closed the stream: {frame['error']}"
                    else:  # the answer to a request that timed out
                        log.debug("%s: response to id %r arrived after its request gave up", self.address, request_id)
        except FrameError as e:
            reason = f"bad frame from the peer: {e.reason}"
        except _IO_ERRORS as e:
            detail = str(e) or (str(e.__cause__) if e.__cause__ else "") or type(e).__name__
            reason = self._close_reason or f"receive failed: {detail}"
        finally:
            self._abort(reason)


@contextlib.asynccontextmanager
async def connect(
    address: str, options: ConnectOptions | None = None, **keywords: Unpack[ConnectKeywords]
) -> AsyncIterator[Connection]:
    """`async with connect("host:port") as conn:` — a Connection with its own reader nursery,
    closed when the block ends; `options` and `keywords` as for `Connection.open`.

    An exception raised in the block comes out as itself, not wrapped in the nursery's
    ExceptionGroup, so `except NotFound:` around the block works (`block_nursery`)."""
    async with block_nursery() as nursery:
        conn = await Connection.open(address, nursery, options, **keywords)
        try:
            yield conn
        finally:
            with trio.CancelScope(shield=True):
                await conn.aclose()


@contextlib.asynccontextmanager
async def block_nursery() -> AsyncIterator[trio.Nursery]:
    """A nursery for a context manager's background tasks (readers, heartbeats) around its
    user's block, which trio would otherwise report in an ExceptionGroup. The block's own
    exception comes out as itself, so `except ConnectionLost:` around the block works. When
    an outer cancellation also ended tasks of the nursery (a connection lost while the node
    shuts down for a role change), that Cancelled comes out instead, the block's exception
    as its context: the cancellation always reaches the scope that was cancelled. Any other
    error of a task keeps its group."""
    raised: BaseException | None = None
    unwrapped: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            try:
                yield nursery
            except BaseException as e:
                raised = e
                raise
    except BaseExceptionGroup as group:
        unwrapped = _block_exception(group, raised)
        if unwrapped is None:
            raise
    if unwrapped is not None:
        raise unwrapped  # outside the except clause: the block's exception keeps its context


def _block_exception(group: BaseExceptionGroup, raised: BaseException | None) -> BaseException | None:
    """What `block_nursery` raises for `group` when the block raised `raised`: `raised`,
    or a Cancelled beside it; None when a task failed otherwise (the group is raised)."""
    if raised is None:
        return None
    leaves = _leaves(group)
    if not all(e is raised or isinstance(e, trio.Cancelled) for e in leaves):
        return None
    if isinstance(raised, trio.Cancelled):
        return raised
    return next((e for e in leaves if e is not raised), raised)


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for e in group.exceptions:
        out.extend(_leaves(e) if isinstance(e, BaseExceptionGroup) else [e])
    return out


# ---------------------------------------------------------------- ConnectionPool


PROBE_TIMEOUT_S = 1.0
"""How long a pool waits for any answer on a connection a request timed out on (silently)."""


class ConnectionPool:
    """One Connection per address, opened on first use and reopened after it broke; reader
    tasks run in the owner's nursery (the cluster client library's Producer, PullConsumer
    and Admin each own one). A request that times out on a connection the peer stayed silent
    on raises RequestTimeout up to PROBE_TIMEOUT_S later: the pool probes the peer first,
    and closes the connection when the probe goes unanswered too (`_drop_if_silent`)."""

    def __init__(self, nursery: trio.Nursery, options: ConnectOptions | None = None,
                 **keywords: Unpack[ConnectKeywords]) -> None:
        self._nursery = nursery
        self.options = ConnectOptions.of(options, keywords)
        self._conns: dict[str, Connection] = {}
        self._locks: dict[str, trio.Lock] = {}

    async def get(self, address: str) -> Connection:
        conn = self._conns.get(address)
        if conn is not None and not conn.closed:
            return conn
        async with self._locks.setdefault(address, trio.Lock()):
            conn = self._conns.get(address)
            if conn is None or conn.closed:
                conn = await Connection.open(address, self._nursery, self.options)
                self._conns[address] = conn
            return conn

    async def request(self, address: str, op: WireRequest | str, *, timeout: float | None = None,
                      **fields: Any) -> dict[str, Any]:
        """`op` on `address`'s connection (opened if needed); the typed errors of Connection."""
        conn = await self.get(address)
        sent = trio.current_time()
        try:
            return await conn.request(op, timeout=timeout, **fields)
        except RequestTimeout:
            await self._drop_if_silent(address, conn, sent)
            raise

    async def call(self, address: str, request: WireRequest, *, timeout: float | None = None) -> Any:
        """`request` on `address`'s connection, its answer read as its reply class."""
        conn = await self.get(address)
        sent = trio.current_time()
        try:
            return await conn.call(request, timeout=timeout)
        except RequestTimeout:
            await self._drop_if_silent(address, conn, sent)
            raise

    async def _drop_if_silent(self, address: str, conn: Connection, since: float) -> None:
        """A request timed out on a connection the peer sent nothing on since it was sent, and
        a probe (`epoch`, any answer will do, an error too) gets no answer within
        PROBE_TIMEOUT_S either: the peer may be gone without a reset (a host that lost its
        power and came back, a NAT that forgot the flow), and every later request would time
        out the same way (storage seed 5792: a producer's sends timed out for 120 s after its
        master's power loss). Close it; the next request opens a new one. A peer that answers
        the probe is only slow (a SYNC_MASTER waiting for its slave, a long poll): kept."""
        if conn.last_received >= since or conn.closed:
            return
        try:
            await conn.request("epoch", timeout=PROBE_TIMEOUT_S)
        except RequestTimeout:
            pass
        except TidemqError:
            return  # answered (or already lost)
        else:
            return
        log.warning("%s: no answer and nothing received for %.1f s: closing the connection", address,
                    trio.current_time() - since)
        if self._conns.get(address) is conn:
            del self._conns[address]
        await conn.aclose()

    async def aclose(self) -> None:
        for conn in list(self._conns.values()):
            await conn.aclose()
        self._conns.clear()
