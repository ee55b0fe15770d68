"""The client-protocol server: TCP connections, frames, requests in flight.

Per connection a reader takes what one receive holds as one batch: it decodes every
complete frame and runs the batched ops (sends) inline in arrival order, so per-queue order
holds and no task is made per request. Their deferred results join the node's **turn**: the
puts every connection read since the committer last ran. The committer appends a turn as
one group (`commit`: one CommitLog group for all connections), finishes the puts that need
not wait as one group and writes each connection's answers; the puts that wait for a flush
or a slave go to the finisher, which finishes everything waiting so far as one group (one
wait for all connections) and writes the answers. An answer is written straight to the
socket when it takes it whole (no task switch); the rest goes out through the connection's
outbox task, so a client that does not read holds back only itself. Other ops (a
long-polling pull, status) run as a task each, so they never hold back the requests behind
them. Responses pair with requests by id; one writer at a time (a direct write only while
no outbox task runs) keeps frames whole. A frame that cannot be decoded ends the
connection after the frames before it are answered and an error frame with id null;
everything else is answered by `handler` (node/ops/dispatch.py) and the connection stays
usable.

Shutdown (`stop_accepting`, then `drain`): stop accepting, stop reading new requests, let
the requests in flight finish within a grace period, then close every connection.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, cast

import attrs
import cbor2
import trio

from ha.net import TCP, Network, no_delay, peer_address, write_now
from wire.framing import FrameDecoder, FrameError, encode_frame
from wire.protocol import (
    NODE_REQUESTS,
    InvalidRequest,
    Request,
    Status,
    WireRequest,
    error_response,
    parse_with,
)
from wire.protocol.auth import AUTH_OPS, AuthReply
from wire.remoting.codes import ResponseCode
from wire.remoting.command import (
    BadCommand,
    CommandDecoder,
    RemotingCommand,
    RemotingFrameError,
    encode_command,
    looks_like_remoting,
)
from wire.remoting.plain_send import RemotingSend, plain_splitter
from wire.send_codec import PlainBatch, PlainSend, request_of
from wire.tls import accept_tls

from .ops.puts import PendingPut
from .remoting.channel import GroupedSend, RemotingChannel, RemotingService
from .security.guard import Guard, Session, peer_host

log = logging.getLogger("tidemq.node")

__all__ = ["ClientServer", "DisconnectHandler", "RequestHandler"]

RECEIVE_SIZE = 256 * 1024
MAX_IN_FLIGHT = 1024
"""Requests one connection may have in flight; the reader waits (TCP backpressure) beyond."""
ERROR_FRAME_TIMEOUT_S = 2.0
"""How long to try to deliver the error frame before closing a broken connection."""
FINISH_ON_ERROR_S = 10.0
"""How long a broken connection waits for its deferred answers (above the sync timeouts)."""

RequestHandler = Callable[[Request, "str | None"], Awaitable[Any]]
"""Answers a request with its response map; a batched op may answer with a deferred
result instead (any object with a `waits` flag), for `GroupFinisher`."""
GroupAppender = Callable[[list[Any]], None]
"""Commits a turn's deferred results, in arrival order, before any of them is finished
(the node appends the turn's sends to the CommitLog as one group)."""
GroupFinisher = Callable[[list[Any]], Awaitable[list[dict[str, Any] | bytes]]]
"""Turns deferred results into their responses (maps, or frames already encoded), in order
(one wait for the group)."""
PlainSendHandler = Callable[[list[PlainSend | PlainBatch], "str | None"], Awaitable[list[Any]]]
"""Answers a run of plain sends and batches the compiled codec decoded
(wire/send_codec.py), as `handler` would their requests: a response map or a deferred
result each."""
_Placed = tuple["_Connection", Any]  # a deferred result and the connection it answers
DisconnectHandler = Callable[["str | None"], None]
_IO_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


@attrs.define(eq=False)
class _Connection:
    stream: trio.abc.Stream  # a SocketStream, or an SSLStream around one
    peer: str | None
    write_now: Callable[[bytes | memoryview], int] | None = None  # answers are written with it directly (ha/net.py)
    in_flight: int = 0
    room: trio.Event | None = None  # set when in_flight drops below MAX_IN_FLIGHT
    stop_reading: bool = False
    receive_scope: trio.CancelScope | None = None
    nursery: trio.Nursery | None = None
    puts_pending: int = 0  # batched results handed to the turn, not yet answered
    changed: trio.Event | None = None  # set when puts_pending drops to 0 or the outbox empties
    outbox: list[tuple[bytes | memoryview, int]] = attrs.field(factory=list)  # (bytes, answers) to write
    writing: bool = False  # an outbox task runs
    gone: bool = False  # the connection ended: its answers are dropped
    gone_told: bool = False  # on_disconnect was called for it
    session: Session | None = None  # its login, when the server checks logins
    first: bytes = b""  # what the protocol sniff read, not yet decoded
    remoting_answers: dict[Any, Callable[[Any], bytes]] | None = None
    """A remoting connection's sends in the turn: each one's answer frame from its CBOR
    response (b"" for a oneway request); None on a CBOR connection."""

    def close_now(self) -> None:
        """Drop the connection: in-flight requests are cancelled unanswered."""
        if self.nursery is not None:
            self.nursery.cancel_scope.cancel()

    def answered(self, n: int) -> None:
        self.in_flight -= n
        if self.room is not None and self.in_flight < MAX_IN_FLIGHT:
            self.room.set()
            self.room = None

    def puts_answered(self, n: int) -> None:
        self.puts_pending -= n
        if not self.puts_pending:
            self.wake()

    def wake(self) -> None:
        if self.changed is not None:
            self.changed.set()
            self.changed = None

    async def _until(self, done: Callable[[], bool]) -> None:
        while not done():
            if self.changed is None:
                self.changed = trio.Event()
            await self.changed.wait()

    async def wait_settled(self) -> None:
        """Until every batched result handed to the turn is answered and written."""
        await self._until(lambda: not self.puts_pending and not self.writing)

    async def wait_written(self) -> None:
        """Until the outbox is written."""
        await self._until(lambda: not self.writing)


class ClientServer:
    """Serves the client protocol on `host:port` (port 0 picks one; `port` holds it after start).

    `requests` is the op table (op → request class) frames are validated against (the node's by default; the name
    server has its own). `on_disconnect(peer)` is called when a connection ends, so a
    server can forget what it learned through it (the name server marks the brokers that
    registered over it as not alive). With a `guard` (node/security) every connection logs
    in first and each request is checked against its account before it runs; without one
    the login ops answer `enabled: false`. `batched_ops` run inline in the reader and may answer
    with deferred results, which `commit` takes once per turn (every connection's) and
    `finish` answers a group at a time (node/ops/dispatch.py's BATCHED_OPS, append_requests and
    finish_requests). With `plain_sends`, the compiled codec decodes plain sends and
    batches without a map and they are answered by it (wire/send_codec.py,
    handlers.handle_plain_sends); with a guard, each is screened first
    (`Guard.may_send`).
    """

    def __init__(
        self,
        handler: RequestHandler,
        *,
        host: str,
        port: int,
        max_frame_size: int,
        requests: Mapping[str, type[WireRequest]] = NODE_REQUESTS,
        on_disconnect: DisconnectHandler | None = None,
        batched_ops: frozenset[str] = frozenset(),
        commit: GroupAppender | None = None,
        finish: GroupFinisher | None = None,
        guard: Guard | None = None,
        tls: tuple[ssl.SSLContext, str] | None = None,
        net: Network = TCP,
        plain_sends: PlainSendHandler | None = None,
        remoting: RemotingService | None = None,
    ) -> None:
        if batched_ops and (finish is None or commit is None):
            raise ValueError("batched ops need a commit and a finish for their deferred results")
        if plain_sends is not None and "send" not in batched_ops:
            raise ValueError("plain sends are batched: 'send' must be among the batched ops")
        self.handler = handler
        self.plain_sends = plain_sends
        self.batched_ops = batched_ops
        self.commit = commit
        self.finish = finish
        self.host = host
        self.port = port
        self.max_frame_size = max_frame_size
        self.requests = requests
        self.on_disconnect = on_disconnect
        self.guard = guard
        self.tls = tls  # (server context, tlsMode), wire/tls.py
        self.net = net  # where connections come from (ha/net.py): TCP, or a simulated network
        self.remoting = remoting
        """Answers RocketMQ remoting connections on the same port (node/remoting/): the
        first frame tells the protocols apart (wire/remoting/command.py looks_like_remoting)."""
        self.checked_topics: set[str] = set()
        """Topics this server's parser found valid: not checked again, and the compiled
        codec decodes plain sends to these only. Per server, not per process: the
        simulation runs several nodes in one process."""
        self._connections: set[_Connection] = set()
        self._accept_scope: trio.CancelScope | None = None
        self._conn_nursery: trio.Nursery | None = None
        self._stopping = False
        self._all_closed = trio.Event()  # set once stopping and no connection is left
        self._turn: list[tuple[_Connection, list[Any]]] = []  # read since the committer last ran
        self._turn_added = trio.Event()
        self._waiting: list[_Placed] = []  # committed results that wait for a flush or a slave
        self._waiting_added = trio.Event()

    @property
    def in_flight(self) -> int:
        return sum(c.in_flight for c in self._connections)

    async def run(self, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen and serve until `drain` finishes (or the task is cancelled)."""
        listeners, self.port = await self.net.listen(self.host, self.port)
        log.info("client protocol listening on %s:%d", self.host, self.port)
        async with trio.open_nursery() as conn_nursery:
            self._conn_nursery = conn_nursery
            if self.commit is not None:  # both live until drain cancels the nursery
                conn_nursery.start_soon(self._committer)
                conn_nursery.start_soon(self._finisher)
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
            conn.stop_reading = True
            if conn.receive_scope is not None:
                conn.receive_scope.cancel()
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

    async def _handle(self, raw: trio.abc.Stream) -> None:
        peer = peer_address(raw)  # the born host of the messages it sends
        no_delay(raw)
        stream = raw
        if self.tls is not None:  # TLS is served on TCP only: the stream is a SocketStream
            secured, why = await accept_tls(cast(trio.SocketStream, raw), *self.tls)
            if secured is None:
                await self._refuse_plaintext(raw, peer, why)
                return
            stream = secured
        conn = _Connection(stream, peer, write_now=write_now(raw) if stream is raw else None)
        if self.guard is not None:
            conn.session = Session(peer_host(conn.peer))
        if self._stopping:
            await trio.aclose_forcefully(stream)
            return
        self._connections.add(conn)
        log.debug("client %s connected", conn.peer)
        try:
            first = await self._sniff(conn)
            if first is None:
                return
            if self.remoting is not None and looks_like_remoting(first):
                await self._serve_remoting(conn, self.remoting, first)
            else:
                conn.first = first
                await self._serve_connection(conn)
        except Exception:  # a bug must cost one connection, never the node
            log.exception("client %s: unexpected error; closing the connection", conn.peer)
        finally:
            conn.gone = True
            self._connections.discard(conn)
            if self._stopping and not self._connections:
                self._all_closed.set()
            await trio.aclose_forcefully(stream)
            log.debug("client %s disconnected", conn.peer)
            self._tell_gone(conn)

    async def _sniff(self, conn: _Connection) -> bytes | None:
        """The connection's first bytes, at least 5 (enough to tell remoting from CBOR), or
        fewer at EOF or after a length prefix either protocol refuses (the CBOR reader says
        why); None when it ended before sending anything. Without remoting: none read."""
        first = b""
        if self.remoting is None:
            return first
        while len(first) < 5:
            if len(first) >= 4 and int.from_bytes(first[:4], "big") > self.max_frame_size:
                break
            data = await self._receive(conn)
            if not data:
                return first or None
            first += data
        return first

    async def _serve_remoting(self, conn: _Connection, service: RemotingService, first: bytes) -> None:
        """A RocketMQ remoting connection: each request goes to `service`, the codes it
        orders in arrival order inline, the rest as a task each; answers go out through the
        connection's writer. A frame that breaks the framing is answered SYSTEM_ERROR, then
        the connection closes; a frame with an unreadable header is answered and the
        connection goes on."""
        channel = RemotingChannel(conn.peer, partial(self._deliver, conn))
        grouped = self.commit is not None  # sends join the turn, as CBOR sends do
        topics = service.plain_topics if grouped else None
        decoder = CommandDecoder(self.max_frame_size, None if topics is None else plain_splitter(topics))
        error: str | None = None
        if grouped:
            conn.remoting_answers = {}
        try:
            async with trio.open_nursery() as nursery:
                conn.nursery = nursery
                data: bytes | bytearray | None = first
                while data:
                    try:
                        commands = decoder.feed(data)
                    except RemotingFrameError as e:
                        error = e.reason
                        break
                    out: list[bytes] = []  # answers ready now: one write for the receive
                    placed: list[Any] = []
                    run: list[RemotingSend] = []  # sends the decoder read compiled, in a row
                    for cmd in commands:
                        if isinstance(cmd, RemotingSend):
                            conn.in_flight += 1
                            run.append(cmd)
                            continue
                        if run:
                            await self._serve_remoting_sends(conn, service, channel, run, out, placed)
                            run = []
                        if isinstance(cmd, RemotingCommand) and cmd.is_response:
                            continue  # a client's answer to a push: nothing waits for it
                        conn.in_flight += 1
                        if isinstance(cmd, BadCommand):
                            out.append(self._remoting_frame(RemotingCommand(
                                code=ResponseCode.SYSTEM_ERROR, opaque=cmd.opaque, flag=1, remark=cmd.reason,
                                serialize_type=cmd.serialize_type)))
                        elif isinstance(cmd, RemotingCommand) and cmd.code in service.ordered:
                            started = await self._start_remoting(service, cmd, channel)
                            self._place_remoting(conn, cmd, started, out, placed)
                        else:
                            assert isinstance(cmd, RemotingCommand)
                            nursery.start_soon(self._run_remoting, conn, service, cmd, channel)
                    if run:
                        await self._serve_remoting_sends(conn, service, channel, run, out, placed)
                    if placed:
                        conn.puts_pending += len(placed)
                        self._turn.append((conn, placed))
                        self._turn_added.set()
                    if out:
                        self._deliver(conn, b"".join(out), len(out))
                    if conn.in_flight >= MAX_IN_FLIGHT:
                        conn.room = trio.Event()
                        await conn.room.wait()
                    data = await self._receive(conn)
                self._remoting_gone(service, channel)
                if not self._stopping:
                    self._tell_gone(conn)
                if error is None:  # EOF or shutdown: the sends in the turn are answered
                    await conn.wait_settled()
                if error is not None:
                    log.info("remoting client %s: %s; closing the connection", conn.peer, error)
                    with trio.move_on_after(ERROR_FRAME_TIMEOUT_S):
                        self._deliver(conn, encode_command(RemotingCommand(
                            code=ResponseCode.SYSTEM_ERROR, flag=1, remark=error)))
                        await conn.wait_written()
                    conn.close_now()
                elif not self._stopping:
                    # the client closed: nobody is left to answer (a RocketMQ client never
                    # half-closes), so its parked pulls end now rather than at their timeout
                    conn.close_now()
        finally:
            self._remoting_gone(service, channel)

    def _place_remoting(self, conn: _Connection, cmd: RemotingCommand, started: Any,
                        out: list[bytes], placed: list[Any]) -> None:
        """An ordered request begun in the reader: a send for the turn joins `placed`, the
        rest of one runs as a task, an answer ready now joins `out`."""
        if conn.remoting_answers is not None and isinstance(started, GroupedSend):
            conn.remoting_answers[started.pending] = partial(self._grouped_answer, started, cmd)
            placed.append(started.pending)
        elif callable(started):
            assert conn.nursery is not None
            conn.nursery.start_soon(self._finish_remoting, conn, cmd, started)
        else:
            out.append(self._remoting_frame(started, cmd))

    async def _serve_remoting_sends(self, conn: _Connection, service: RemotingService, channel: RemotingChannel,
                                    run: list[RemotingSend], out: list[bytes], placed: list[Any]) -> None:
        """A run of sends the decoder read compiled: begun together (one write check) for
        the turn, and each the service cannot take that way decoded and begun on its own,
        in order."""
        assert conn.remoting_answers is not None  # (the decoder reads sends only for a turn)
        try:
            started: list[PendingPut | None] = await service.plain_sends(run, channel)
        except Exception:  # the service answers its own errors; a bug lands here
            log.exception("%d remoting send(s) failed on the fast path; taking the reference path", len(run))
            started = [None] * len(run)
        for send, pending in zip(run, started, strict=True):
            if pending is None:
                cmd = send.command()
                self._place_remoting(conn, cmd, await self._start_remoting(service, cmd, channel), out, placed)
            else:
                conn.remoting_answers[pending] = partial(self._plain_answer, service, send)
                placed.append(pending)

    def _plain_answer(self, service: RemotingService, send: RemotingSend, response: Any) -> bytes:
        """A compiled-read send's answer frame: its templated frame when stored, else the
        service's answer to its CBOR response."""
        if type(response) is bytes:
            return b"" if send.oneway else response
        try:
            answer = service.plain_answer(send, response)
        except Exception as e:  # the processor answers its own errors; a bug lands here
            log.exception("remoting request code %d (opaque %d) failed", send.code, send.opaque)
            answer = send.command().response(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")
        return self._remoting_frame(answer, send)

    @staticmethod
    def _remoting_gone(service: RemotingService, channel: RemotingChannel) -> None:
        """Once, as soon as the connection stops reading: the service forgets the channel."""
        if not channel.closed:
            channel.closed = True
            service.closed(channel)

    async def _start_remoting(self, service: RemotingService, cmd: RemotingCommand, channel: RemotingChannel,
                              ) -> Any:
        try:
            return await service.start(cmd, channel)
        except Exception as e:  # the service answers its own errors; a bug lands here
            log.exception("remoting request code %d (opaque %d) failed", cmd.code, cmd.opaque)
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")

    async def _finish_remoting(self, conn: _Connection, cmd: RemotingCommand, finish: Any) -> None:
        try:
            response = await finish()
        except Exception as e:
            log.exception("remoting request code %d (opaque %d) failed", cmd.code, cmd.opaque)
            response = cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")
        self._answer_remoting(conn, response, cmd)

    async def _run_remoting(self, conn: _Connection, service: RemotingService, cmd: RemotingCommand,
                            channel: RemotingChannel) -> None:
        started = await self._start_remoting(service, cmd, channel)
        if callable(started):
            await self._finish_remoting(conn, cmd, started)
        else:
            self._answer_remoting(conn, started, cmd)

    def _answer_remoting(self, conn: _Connection, response: RemotingCommand | bytes | None,
                         request: RemotingCommand | None = None) -> None:
        """Write one answer (see `_remoting_frame`)."""
        self._deliver(conn, self._remoting_frame(response, request), 1)

    @staticmethod
    def _remoting_frame(response: RemotingCommand | bytes | None,
                        request: RemotingCommand | RemotingSend | None = None) -> bytes:
        """An answer's frame: b"" for none and to a oneway request, except
        REQUEST_CODE_NOT_SUPPORTED, as RocketMQ does. An answer already encoded (a fast
        send's, node/remoting/fastsend.py) is its own frame."""
        if isinstance(response, bytes):
            return b"" if request is not None and request.is_oneway else response
        if response is None or (request is not None and request.is_oneway
                                and response.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED):
            return b""
        return encode_command(response)

    def _grouped_answer(self, send: GroupedSend, request: RemotingCommand, response: Any) -> bytes:
        """A grouped send's answer frame from its CBOR response (the turn's `_answer`)."""
        try:
            answer = send.answer(response)
        except Exception as e:  # the processor answers its own errors; a bug lands here
            log.exception("remoting request code %d (opaque %d) failed", request.code, request.opaque)
            answer = request.response(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")
        return self._remoting_frame(answer, request)

    async def _refuse_plaintext(self, raw: trio.abc.Stream, peer: str | None, why: str | None) -> None:
        """A connection the TLS check refused: a plaintext client is told so in its own
        protocol (one error frame: a remoting client gets SYSTEM_ERROR as the answer to its
        first request), then the connection is closed."""
        log.info("client %s refused: %s", peer, why)
        if why is not None and why.startswith("plaintext"):
            text = "this port accepts TLS only (tlsMode enforcing)"
            with trio.move_on_after(ERROR_FRAME_TIMEOUT_S):
                with contextlib.suppress(*_IO_ERRORS):
                    first = await self._first_request(raw) if self.remoting is not None else None
                    if first is not None:  # a RocketMQ client: no client option makes it speak TLS here
                        await raw.send_all(encode_command(RemotingCommand(
                            code=ResponseCode.SYSTEM_ERROR, opaque=first.opaque, flag=1, remark=text)))
                    else:
                        await raw.send_all(encode_frame(error_response(
                            None, Status.BAD_REQUEST, f"{text}: connect with TLS (--tls-ca FILE or TIDEMQ_TLS_CA)")))
                    await cast(trio.abc.HalfCloseableStream, raw).send_eof()
                    # read what the client sent until it closes: closing with unread bytes
                    # would reset the connection and lose the error frame on its way
                    while await raw.receive_some(RECEIVE_SIZE):
                        pass
        await trio.aclose_forcefully(raw)

    async def _first_request(self, raw: trio.abc.Stream) -> RemotingCommand | BadCommand | None:
        """A refused plaintext connection's first remoting request (its opaque pairs the
        answer with it), or None when it is not remoting (only its first bytes are read)."""
        first = b""
        while len(first) < 5:
            data = await raw.receive_some(RECEIVE_SIZE)
            if not data:
                return None
            first += data
        if not looks_like_remoting(first):
            return None
        decoder = CommandDecoder(self.max_frame_size)
        data = first
        while data:
            try:
                commands = decoder.feed(data)
            except RemotingFrameError:
                return None
            if commands:
                command = commands[0]  # (no tuples: this decoder reads no plain sends)
                return command if isinstance(command, RemotingCommand | BadCommand) else None
            data = await raw.receive_some(RECEIVE_SIZE)
        return None

    def _tell_gone(self, conn: _Connection) -> None:
        """`on_disconnect` once per connection: as soon as its reading ended (EOF, a reset,
        a broken frame), not after its requests in flight, since a long poll of a peer that
        is gone (a consumer_watch, a pull) could hold the connection for its whole timeout."""
        if conn.gone_told or self.on_disconnect is None:
            return
        conn.gone_told = True
        try:
            self.on_disconnect(conn.peer)
        except Exception:
            log.exception("disconnect handler failed for %s", conn.peer)

    async def _serve_connection(self, conn: _Connection) -> None:
        async with trio.open_nursery() as nursery:
            conn.nursery = nursery
            error = await self._read_loop(conn)
            if not self._stopping:  # (at shutdown the node leaves as a whole)
                self._tell_gone(conn)
            if error is not None:
                log.info("client %s: %s; closing the connection", conn.peer, error)
                with trio.move_on_after(FINISH_ON_ERROR_S):
                    await conn.wait_settled()  # the frames before the bad one are answered
                with trio.move_on_after(ERROR_FRAME_TIMEOUT_S):
                    await self._send(conn, encode_frame(error_response(None, Status.BAD_REQUEST, error)))
                conn.close_now()
            else:  # EOF or shutdown: the sends in the turn are answered, the nursery waits for the rest
                await conn.wait_settled()

    async def _receive(self, conn: _Connection) -> bytes | bytearray | None:
        """The next chunk; None at EOF, on shutdown, or when the peer is gone."""
        if conn.stop_reading:
            return None
        with trio.CancelScope() as conn.receive_scope:
            try:
                return await conn.stream.receive_some(RECEIVE_SIZE)
            except _IO_ERRORS:
                conn.close_now()  # the peer is gone: nobody to answer
                return None
            finally:
                conn.receive_scope = None
        return None  # cancelled by stop_accepting

    async def _read_loop(self, conn: _Connection) -> str | None:
        """Read and serve batches of frames; the reason when the framing broke, else None.
        Only the receive is cancelled at shutdown: a batch that was read is served whole."""
        plain = self.plain_sends is not None
        decoder = FrameDecoder(self.max_frame_size, plain_sends=self.checked_topics if plain else None)
        while True:
            data: bytes | bytearray | None
            data, conn.first = (conn.first, b"") if conn.first else (await self._receive(conn), b"")
            if not data:
                return None
            frames, error = decoder.feed_all(data)
            await self._serve_batch(conn, frames)
            if error is not None:
                return error.reason
            if conn.in_flight >= MAX_IN_FLIGHT:
                conn.room = trio.Event()
                await conn.room.wait()

    async def _serve_batch(self, conn: _Connection,
                           frames: Sequence[dict[str, Any] | PlainSend | PlainBatch]) -> None:
        """Run the batched ops inline in order, start a task for each other op, hand the
        deferred results to the turn and send the answers ready now (refusals) in one write."""
        out: list[bytes] = []
        placed: list[Any] = []
        run: list[PlainSend | PlainBatch] = []  # plain sends in a row, handled together
        nursery = conn.nursery
        assert nursery is not None  # set before the connection reads
        for frame in frames:
            conn.in_flight += 1
            if not isinstance(frame, dict):  # a PlainSend or PlainBatch
                run.append(frame)
                continue
            if run:
                await self._serve_plain(conn, run, out, placed)
                run = []
            op = frame.get("op")
            if type(op) is str and op in self.batched_ops:  # (an op of another type is refused by _run)
                result = await self._run(conn, frame)
                if type(result) is dict:
                    out.append(self._encode(result))
                    conn.answered(1)
                else:
                    placed.append(result)
            else:
                nursery.start_soon(self._serve_request, conn, frame)
        if run:
            await self._serve_plain(conn, run, out, placed)
        if placed:
            conn.puts_pending += len(placed)
            self._turn.append((conn, placed))
            self._turn_added.set()
        if out:
            await self._send(conn, b"".join(out))

    async def _serve_plain(self, conn: _Connection, run: list[PlainSend | PlainBatch], out: list[bytes],
                           placed: list[Any]) -> None:
        """A run of plain sends: deferred results join `placed`, answers ready now `out`.
        With logins, the guard screens each first: one it refuses is answered as the
        reference path answers it."""
        assert self.plain_sends is not None
        if conn.session is not None:
            assert self.guard is not None
            allowed = []
            for p in run:
                refusal = None if self.guard.may_send(conn.session, p.topic) else \
                    self.guard.screen(conn.session, request_of(p))
                if refusal is None:
                    allowed.append(p)
                else:
                    out.append(self._encode(refusal))
                    conn.answered(1)
            if not allowed:
                return
            run = allowed
        try:
            results = await self.plain_sends(run, conn.peer)
        except Exception as e:  # the handler answers its own errors; a bug lands here
            log.exception("%d plain send(s) failed", len(run))
            results = [error_response(p.id, Status.INTERNAL_ERROR, f"{type(e).__name__}: {e}") for p in run]
        for result in results:
            if type(result) is dict:
                out.append(self._encode(result))
                conn.answered(1)
            else:
                placed.append(result)

    async def _run(self, conn: _Connection, frame: dict) -> Any:
        """Parse and handle one request: its response map, or a deferred result."""
        try:
            op = frame.get("op")
            if type(op) is str and op in AUTH_OPS:
                return self._login_step(conn, parse_with(frame, AUTH_OPS))
            request = parse_with(frame, self.requests, self.checked_topics)
            if conn.session is None:
                return await self.handler(request, conn.peer)
            return await self._guarded(conn, conn.session, request)
        except InvalidRequest as e:
            return error_response(e.request_id, Status.BAD_REQUEST, e.message)
        except Exception as e:  # the handler answers its own errors; a bug lands here
            request_id = frame.get("id") if type(frame.get("id")) is int else None
            log.exception("request %s (id %s) failed", frame.get("op"), request_id)
            return error_response(request_id, Status.INTERNAL_ERROR, f"{type(e).__name__}: {e}")

    def _login_step(self, conn: _Connection, request: Request) -> dict[str, Any]:
        if self.guard is None or conn.session is None:
            return AuthReply(enabled=False).to_wire(request.id)
        answer = self.guard.screen(conn.session, request)
        assert answer is not None  # the guard answers every login op
        return answer

    async def _guarded(self, conn: _Connection, session: Session, request: Request) -> Any:
        assert self.guard is not None
        refusal = self.guard.screen(session, request)
        if refusal is not None:
            return refusal
        request = attrs.evolve(request, reader=partial(self.guard.refusal_to_read, session),
                               publisher=partial(self.guard.refusal_to_publish, session))
        response = await self.handler(request, conn.peer)
        if type(response) is dict:
            return self.guard.check_answer(session, request, response) or response
        return response

    async def _finish(self, results: list[Any]) -> list[dict[str, Any] | bytes]:
        assert self.finish is not None
        return await self.finish(results)

    async def _committer(self) -> None:
        """Commit each turn as one group: every connection's sends read since the last
        round (readers woken by the same poll all run before this task does). The puts
        that need not wait are answered now; the others go to the finisher."""
        while True:
            await self._turn_added.wait()
            self._turn_added = trio.Event()
            turn, self._turn = self._turn, []
            ready: list[_Placed] = []
            try:
                assert self.commit is not None
                self.commit([r for _, results in turn for r in results])
                for conn, results in turn:
                    for r in results:
                        (self._waiting if r.waits else ready).append((conn, r))
                if self._waiting:
                    self._waiting_added.set()
                if ready:
                    await self._answer(ready)
            except Exception:  # a bug must cost these connections, never the node
                log.exception("committing %d connection(s)' sends failed; closing them", len(turn))
                for conn, _ in turn:
                    conn.close_now()

    async def _finisher(self) -> None:
        """Answer the committed puts that wait: everything that came while the last group
        waited is the next group (one wait for all connections, one write per connection)."""
        while True:
            await self._waiting_added.wait()
            self._waiting_added = trio.Event()
            while self._waiting:
                group, self._waiting = self._waiting, []
                try:
                    await self._answer(group)
                except Exception:
                    log.exception("finishing %d send(s) failed; closing their connections", len(group))
                    for conn, _ in group:
                        conn.close_now()

    async def _answer(self, group: list[_Placed]) -> None:
        """Finish a group (one wait) and write each connection's answers with one write."""
        responses = await self._finish([r for _, r in group])
        frames: dict[_Connection, list[bytes]] = {}
        for (conn, r), response in zip(group, responses, strict=True):
            answers = conn.remoting_answers
            frames.setdefault(conn, []).append(self._encode(response) if answers is None else answers.pop(r)(response))
        for conn, out in frames.items():
            self._deliver(conn, b"".join(out), len(out))
            conn.puts_answered(len(out))

    async def _serve_request(self, conn: _Connection, frame: dict) -> None:
        try:
            response = await self._run(conn, frame)
            if type(response) is not dict:  # a deferred result from an op run as a task
                (response,) = await self._finish([response])
            await self._send(conn, self._encode(response))
        finally:
            conn.answered(1)

    def _encode(self, response: dict[str, Any] | bytes) -> bytes:
        if isinstance(response, bytes):  # a frame the compiled send path encoded
            return response
        try:
            return encode_frame(response, max_frame_size=self.max_frame_size)
        except (FrameError, cbor2.CBOREncodeError, TypeError, ValueError) as e:
            log.error("cannot encode the response to request %s: %s", response.get("id"), e)
            return encode_frame(
                error_response(response.get("id"), Status.INTERNAL_ERROR, f"cannot encode the response: {e}")
            )

    def _deliver(self, conn: _Connection, data: bytes | memoryview, answers: int = 0) -> None:
        """Write `data` now if the socket takes it whole (no task switch), else queue it
        for the connection's outbox task; one writer at a time keeps frames whole.
        `answers` responses leave the connection's in-flight count once written."""
        if conn.gone:
            return
        if not data:  # nothing to write (a oneway request's answer)
            if answers:
                conn.answered(answers)
            return
        if not conn.writing and conn.write_now is not None:
            try:
                sent = conn.write_now(data)
            except BlockingIOError:
                sent = 0
            except OSError as e:
                log.debug("client %s: cannot send (%s); closing", conn.peer, e)
                conn.close_now()
                return
            if sent == len(data):
                if answers:
                    conn.answered(answers)
                return
            data = memoryview(data)[sent:]
        conn.outbox.append((data, answers))
        if not conn.writing:
            assert conn.nursery is not None  # set before the connection reads
            conn.writing = True
            conn.nursery.start_soon(self._write_outbox, conn)

    async def _write_outbox(self, conn: _Connection) -> None:
        """Write what the socket did not take at once, in order, until the outbox is empty."""
        try:
            while conn.outbox:
                items, conn.outbox = conn.outbox, []
                await conn.stream.send_all(b"".join(data for data, _ in items))
                conn.answered(sum(n for _, n in items))
        except _IO_ERRORS as e:
            log.debug("client %s: cannot send (%s); closing", conn.peer, e)
            conn.close_now()
        finally:
            conn.writing = False
            conn.wake()

    async def _send(self, conn: _Connection, data: bytes) -> None:
        """Write `data`; returns once the socket took it (the reader's backpressure)."""
        self._deliver(conn, data)
        await conn.wait_written()
