"""Slave side of replication: HAClient pulls the master's CommitLog over the HA wire.

Behaviour follows RocketMQ's HAClient (ROCKETMQ-FACTS.md §9) with two deliberate changes:
the first report goes out at once on connect (4.9 waits ~5 s, leaving the master idle), and
a connection from which nothing was read for `haHousekeepingInterval` is closed (5.x's
lastReadTimestamp; 4.9 timed its own writes and so never noticed a silent master).

Each received frame must start at exactly the slave's max offset (checked, as in RocketMQ,
only once the slave holds data, heartbeats included); anything else drops the connection
and the slave reconnects and reports again, so the master resends from the right place.

The read loop (`_read_loop`, RocketMQ's HAClient.processReadEvent) acks, i.e. reports its
new max offset, right after appending what one read brought, before dispatch gets a turn;
a separate task (`_report_loop`) only sends the idle heartbeat. Both run under
`ha.connection.guarded`: either one ending closes the connection and the client reconnects.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable

import attrs
import trio

from store import runtime
from store.address import AddressError, split_host_port
from store.config import StoreConfig
from store.replica_log import FollowerAppendError, ReplicaLog

from .connection import ReadEnd, guarded, read_until_closed
from .net import TCP, Network, local_address
from .protocol import (
    OffsetsBatch,
    Transfer,
    TransferDecoder,
    encode_offer,
    encode_offsets_ack,
    encode_report,
)

log = logging.getLogger("tidemq.ha")

RECEIVE_SIZE = 1024 * 1024
CAUGHT_UP_NOTE_S = 0.1
"""How often the caught-up time goes into the checkpoint, at most (a store into its map)."""
"""One read takes up to this much of a backlog: while the slave catches up, each turn of the
read loop appends far more than a dispatch round (64 KiB) consumes, so acks run ahead of
dispatch and the ConsumeQueues catch up afterwards, as with RocketMQ's separate threads."""
BACKOFF_START_S = 0.1
BACKOFF_MAX_S = 5.0



@attrs.frozen
class SlaveHAStatus:
    """What the slave knows about its replication."""

    master_address: str | None
    connected: bool
    max_offset: int
    master_max_offset_seen: int
    """End of the newest frame (or a heartbeat's offset) received; -1 before any."""
    lag_bytes: int
    local_address: str | None = None
    """This end of the HA connection: the address the master's status lists this slave by."""


def split_address(address: str) -> tuple[str, int]:
    """'host:port' → (host, port); a clear error instead of a crash in the connect loop."""
    try:
        return split_host_port(address)
    except AddressError as e:
        raise AddressError(f"master HA address {e}") from None


def contiguous_runs(frames: list[Transfer], segment_size: int) -> list[list[Transfer]]:
    """`frames` in runs that each continue the one before within one segment: each run is
    appended with one write (a backlog arrives as many 32 KiB frames per read)."""
    runs: list[list[Transfer]] = []
    for frame in frames:
        last = runs[-1][-1] if runs else None
        if (last is not None and frame.offset == last.end and not frame.is_heartbeat
                and frame.offset // segment_size == last.offset // segment_size):
            runs[-1].append(frame)
        else:
            runs.append([frame])
    return runs


@attrs.define(eq=False)
class _Session:
    """One connection to the master."""

    stream: trio.abc.Stream  # a SocketStream, or TLS around one (`secure_connect`)
    address: str
    local_address: str | None
    send_lock: trio.Lock = attrs.field(factory=trio.Lock)
    """The reader (acks) and the heartbeat task both write reports."""
    number: int = 0
    """Which connection of this client it is (1, 2, ...)."""
    reported: int = -1
    last_write: float = 0.0
    frames: int = 0
    decoder: TransferDecoder | None = None
    offered: bool = False
    """The confirm-offset extension was offered on this connection (ha/protocol.py)."""
    confirm: int | None = None
    """The newest confirm offset this master sent on this connection."""
    offsets_seq: int = 0
    """The newest offsets batch taken on this connection (0: none; the first is the table)."""


class HAClient:
    """Replicates the master's CommitLog into `store`; run with ``nursery.start(client.run)``."""

    def __init__(
        self,
        log: ReplicaLog,
        config: StoreConfig,
        master_address: str | None = None,
        *,
        admit: Callable[[str], Awaitable[bool]] | None = None,
        on_connect: Callable[[], None] | None = None,
        secure_connect: Callable[[trio.SocketStream, str], Awaitable[trio.abc.Stream]] | None = None,
        net: Network = TCP,
        on_offsets: Callable[[OffsetsBatch], None] | None = None,
    ) -> None:
        self.net = net  # where connections come from (ha/net.py): TCP, or a simulated network
        self.secure_connect = secure_connect
        """The node's TLS around a new connection to `host` (mutual TLS, wire/tls.py);
        it raises when the handshake fails, and the client tries again later."""
        self.log = log
        """The store's CommitLog as a follower appends to it."""
        self.admit = admit
        """Asked before each connection whether this master may be replicated from (the
        node's epoch check, over the client protocol: the HA bytes stay RocketMQ 4.x's)."""
        self.on_connect = on_connect
        """Called once a connection is up (the etcd controller publishes its address then)."""
        self.on_offsets = on_offsets
        """Takes a batch of consumer-offset commits a tidemq master streamed (the node's
        offset table); the batch is acked once it returns. None: batches are neither taken
        nor acked (the master's SYNC_MASTER commits then time out waiting for this slave)."""
        self.offsets_batches = 0
        """Offsets batches taken so far (a table pulled before one arrived is older)."""
        self._run_scope = trio.CancelScope()
        self.config = config
        self.master_address = master_address if master_address is not None else self.config.ha_master_address
        if self.master_address is not None:
            split_address(self.master_address)
        self.master_max_offset_seen = -1
        self.confirm_offset: int | None = log.known_confirm
        """The newest confirm offset a tidemq master sent, kept across connections and
        restarts (in the store's checkpoint): a slave cut off from its master serves nothing
        past what it last knew. None while none is known (a RocketMQ 4.x master sends none)."""
        self.caught_up_at: float | None = log.known_caught_up
        """Wall time (`runtime.wall_clock`) this slave last read a frame that left it holding
        the master's whole log as the master saw it when it pushed (a heartbeat, or data
        shorter than a batch): its master keeps it in its in-sync set for
        haMaxTimeSlaveNotCatchup after that (ha/master.py `members`), and may confirm alone
        what it lacks from then on. Kept in the checkpoint across restarts (None: never).
        The promotion check judges a master it cannot ask by it."""
        self._caught_up_noted = -math.inf  # when `caught_up_at` last went into the checkpoint
        self.stopped = trio.Event()
        """Set once `run` has ended (cancelled): no connection is left open."""
        self._session: _Session | None = None
        self._sessions = 0
        self._session_scope: trio.CancelScope | None = None
        self._address_changed = trio.Event()

    # ---- control and status -------------------------------------------------------------
    def update_master_address(self, address: str | None) -> None:
        """Switch masters at run time: drop the current connection, connect to `address`."""
        if address is not None:
            split_address(address)
        if address == self.master_address:
            return
        log.info("master HA address changes from %s to %s", self.master_address, address)
        self.master_address = address
        if self._session_scope is not None:
            self._session_scope.cancel()
        event, self._address_changed = self._address_changed, trio.Event()
        event.set()

    @property
    def connected(self) -> bool:
        """A connection is open. It stays True after `update_master_address` until the
        cancelled connection has unwound: use `replicating_from` to know whose bytes land."""
        return self._session is not None

    def replicating_from(self) -> tuple[str, int] | None:
        """(master HA address, connection number) of the connection whose bytes the log takes
        now; None while there is none, or while it is being replaced: right after
        `update_master_address` the old connection is still open (cancelled, not yet unwound).
        The number tells whether it is still the same connection after an await (a reconnect
        passes `admit` again)."""
        session, scope = self._session, self._session_scope
        if session is None or scope is None or scope.cancel_called or session.address != self.master_address:
            return None
        return session.address, session.number

    @property
    def local_address(self) -> str | None:
        """host:port of this end of the current connection: the address the master sees
        (the controller matches it to this node in the in-sync set)."""
        return self._session.local_address if self._session is not None else None

    def status(self) -> SlaveHAStatus:
        max_offset = self.log.end()
        return SlaveHAStatus(
            master_address=self.master_address,
            connected=self.connected,
            max_offset=max_offset,
            master_max_offset_seen=self.master_max_offset_seen,
            lag_bytes=max(0, self.master_max_offset_seen - max_offset),
            local_address=self.local_address,
        )

    def offsets_streamed(self) -> bool:
        """The current master streams consumer offsets to this slave and its table arrived:
        a pull of the table (node/slave_sync.py) would only be older."""
        session = self._session
        return session is not None and session.offsets_seq > 0

    def visible_end(self) -> int | None:
        """What this slave's consumers may read up to (ReplicaLog.limit_visibility): the
        confirm offset, so a record a failover may cut is not served here either; None (its
        whole log) before one is known, and with readUnCommitted."""
        if self.config.read_un_committed:
            return None
        return self.confirm_offset

    # ---- the connect loop -----------------------------------------------------------------
    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect, replicate, reconnect with backoff (100 ms doubling to 5 s) until cancelled."""
        # the first admission is decided before the caller goes on, so the first connect
        # follows at once (as without an admission check)
        self.log.limit_visibility(self.visible_end)
        try:
            with self._run_scope:
                await self._run(task_status)
        finally:
            # replication is over (a promotion, a shutdown): the confirm offset known stays
            # the limit (`stop`, a promotion, releases it)
            if not self.config.read_un_committed:
                self.log.hold_at_known_confirm()
            self.log.limit_visibility(None)
            self.stopped.set()

    async def stop(self, timeout_s: float) -> bool:
        """Stop replicating (a promotion: nothing more may land from the old master) and
        wait up to `timeout_s` until it has; False when it did not stop in time."""
        self._run_scope.cancel()
        with trio.move_on_after(timeout_s):
            await self.stopped.wait()
        if self.stopped.is_set():
            self.log.release_hold()  # it leaves its master: what it holds is its own now
        return self.stopped.is_set()

    async def _run(self, task_status: trio.TaskStatus[None]) -> None:
        admitted = None
        if self.admit is not None and self.master_address is not None:
            admitted = (self.master_address, await self.admit(self.master_address))
        task_status.started()
        backoff = BACKOFF_START_S
        while True:
            address = self.master_address
            if address is None:
                await self._address_changed.wait()
                continue
            frames = 0
            with trio.CancelScope() as scope:
                self._session_scope = scope
                if admitted is not None and admitted[0] == address:
                    ok = admitted[1]
                else:
                    ok = self.admit is None or await self.admit(address)
                admitted = None
                if ok:
                    frames = await self._connect_and_replicate(address)
            self._session_scope = None
            if scope.cancelled_caught:  # the address changed: connect to the new one at once
                backoff = BACKOFF_START_S
                continue
            if frames:
                backoff = BACKOFF_START_S
            with trio.move_on_after(backoff):
                await self._address_changed.wait()
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def _connect_and_replicate(self, address: str) -> int:
        """One connection's life; returns how many frames it received (0: back off longer)."""
        host, port = split_address(address)
        try:
            with trio.fail_after(self.config.ha_send_heartbeat_interval / 1000):
                stream = await self.net.connect(host, port)
        except (OSError, trio.TooSlowError) as e:
            log.info("cannot connect to master %s: %s", address, e or "timed out")
            return 0
        local = local_address(stream)
        if self.secure_connect is not None:
            raw = stream
            if not isinstance(raw, trio.SocketStream):
                raise TypeError(f"TLS to the master needs TCP sockets, not {type(raw).__name__}")
            try:
                with trio.fail_after(self.config.ha_send_heartbeat_interval / 1000):
                    stream = await self.secure_connect(raw, host)
            except Exception as e:  # noqa: BLE001 - the node's TLS says why; retried with backoff
                log.warning("cannot connect to master %s: %s", address, e or "TLS handshake timed out")
                await trio.aclose_forcefully(raw)
                return 0
        self._sessions += 1
        session = _Session(stream, address, local, number=self._sessions)
        self._session = session
        log.info("connected to master %s; reporting offset %d", address, self.log.end())
        if self.on_connect is not None:
            self.on_connect()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._guarded, self._read_loop, session, nursery.cancel_scope)
                nursery.start_soon(self._guarded, self._report_loop, session, nursery.cancel_scope)
        finally:
            self._session = None
            await trio.aclose_forcefully(stream)
            log.info("disconnected from master %s at offset %d", address, self.log.end())
        return session.frames

    async def _guarded(
        self, side: Callable[[_Session], Awaitable[None]], session: _Session, scope: trio.CancelScope
    ) -> None:
        """Run one side; any failure closes this connection and the run loop reconnects."""
        await guarded(side, session, scope, peer=f"master {session.address}", log=log,
                      expected=(FollowerAppendError,), expected_note="closing the connection to report again")

    async def _report(self, session: _Session, *, heartbeat: bool = False) -> None:
        """Send the max offset if it grew (an ack), or anyway when `heartbeat`. The first
        report after a frame arrived (with data held) carries the extension's offer, and
        goes out at once even when the frame was a heartbeat (the master's commits wait
        until it knows whether this slave takes offsets): a 4.x master then gets at most
        one report more than it would have, an ack of the offset it already has."""
        async with session.send_lock:
            offset = self.log.end()
            offer = not session.offered and session.frames > 0 and offset > 0 and session.decoder is not None
            if offset > session.reported or heartbeat or offer:
                if offer and session.decoder is not None:
                    session.decoder.extension = True  # before the master can answer it
                    session.offered = True
                await session.stream.send_all(encode_offer(offset) if offer else encode_report(offset))
                session.reported = offset
                session.last_write = trio.current_time()

    async def _report_loop(self, session: _Session) -> None:
        """Report the max offset at once, then whenever nothing was written for the
        heartbeat interval (the reader acks each append itself, without a task switch)."""
        heartbeat_s = self.config.ha_send_heartbeat_interval / 1000
        await self._report(session, heartbeat=True)
        while True:
            await trio.sleep_until(session.last_write + heartbeat_s)
            if trio.current_time() >= session.last_write + heartbeat_s:
                await self._report(session, heartbeat=True)

    async def _read_loop(self, session: _Session) -> None:
        """Decode frames and append them; returns on EOF or `haHousekeepingInterval` of silence."""
        decoder = session.decoder = TransferDecoder(max_body=self.config.ha_transfer_batch_size)

        async def on_data(data: bytes | bytearray) -> bool:
            if len(data) >= RECEIVE_SIZE // 2:  # more is waiting: the copy goes before dispatch
                self.log.note_full_read()
            frames = decoder.feed(data)
            if decoder.confirm is not None and decoder.confirm != session.confirm:
                # this master's word replaces what an earlier one said (a new master's
                # confirm offset may lie below the old one's: dispatch then just waits)
                session.confirm = self.confirm_offset = decoder.confirm
                self.log.note_confirm(decoder.confirm)
                self.log.visibility_moved()
            for run in contiguous_runs(frames, self.log.segment_size):
                self._apply(run)
            if frames and len(frames[-1].body) < self.config.ha_transfer_batch_size:
                self._caught_up()  # the master had no more when it pushed this
            session.frames += len(frames)
            if frames:
                await self._report(session)  # ack before dispatch or anything else runs
            if decoder.offsets:
                await self._take_offsets(session, decoder.take_offsets())
            return True

        end = await read_until_closed(
            session.stream, RECEIVE_SIZE, self.config.ha_housekeeping_interval / 1000, on_data
        )
        if end is ReadEnd.EOF:
            log.info("master %s closed the connection", session.address)
        else:
            log.warning(
                "nothing read from master %s for %d ms (haHousekeepingInterval); closing",
                session.address, self.config.ha_housekeeping_interval,
            )

    def _caught_up(self) -> None:
        now = self.caught_up_at = runtime.wall_clock()
        if not 0 <= now - self._caught_up_noted < CAUGHT_UP_NOTE_S:
            self._caught_up_noted = now  # the checkpoint's copy lags by at most that: the cautious side
            self.log.note_caught_up(now)

    async def _take_offsets(self, session: _Session, batches: list[OffsetsBatch]) -> None:
        """Hand streamed commits to the node's table, then ack the newest batch."""
        if self.on_offsets is None:
            return
        for batch in batches:
            self.on_offsets(batch)
            self.offsets_batches += 1
            session.offsets_seq = max(session.offsets_seq, batch.seq)
        async with session.send_lock:
            await session.stream.send_all(encode_offsets_ack(session.offsets_seq))
            session.last_write = trio.current_time()

    def _apply(self, run: list[Transfer]) -> None:
        """Append a run of frames that continue each other within one segment with one
        write (a heartbeat appends nothing: it only moves what was seen)."""
        first = run[0]
        body = first.body if len(run) == 1 else b"".join([f.body for f in run])
        for path in self.log.append_as_follower(first.offset, body):
            log.info("dropped empty segment %s: the master ships from a later segment", path)
        self.master_max_offset_seen = run[-1].end
