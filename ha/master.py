"""Master side of replication: HAService on the HA port, one HAConnection per slave.

Behaviour follows RocketMQ 4.9's HAService / HAConnection (ROCKETMQ-FACTS.md §9), on trio
instead of two threads per slave:

- `HAConnection`'s read side, `HAService._read_loop` (RocketMQ's ReadSocketService),
  decodes the slave's 8-byte reports: the first one picks where shipping starts, every one
  is an ack that raises `push2slave_max_offset` and wakes SYNC_MASTER puts waiting in
  `wait_for_slave`;
- RocketMQ's GroupTransferService is `HAService._ack_waiters`: an OffsetWaiters with one
  timer for every waiting put's slaveTimeout, advanced by each ack;
- the write side, `HAService._write_loop` (RocketMQ's WriteSocketService), ships
  CommitLog bytes from the slave's next offset in frames of at most `haTransferBatchSize`
  that never cross a segment end (a backlog goes out as up to SEND_BYTES per socket
  write), sends a heartbeat when idle for `haSendHeartbeatInterval`, and sleeps on
  a wakeup set by its store append listener when caught up (with a 100 ms fallback, as
  RocketMQ's `allWaitForRunning(100)`).

On the tidemq extension (ha/protocol.py) the writer also sends the confirm offset and the
node's consumer-offset commits (`offsets_committed`, whole table first); the reader takes
the slave's offsets acks, which `wait_for_offsets` (a SYNC_MASTER commit) waits on.

Both sides run under `ha.connection.guarded`: either one ending closes that connection only.

Stricter than RocketMQ: a first report beyond the master's max offset, or below its min
offset (other than 0), is refused and the connection closed, and so is a later report
beyond the max offset (4.9.3+). The writer never assumes the first report comes at once:
a RocketMQ 4.9 slave sends it about 5 s after connecting.
"""

from __future__ import annotations

import collections
import functools
import logging
import math
from collections.abc import Awaitable, Callable

import attrs
import trio

from store import runtime
from store.address import AddressError, split_host_port
from store.config import StoreConfig
from store.replica_log import ReplicaLog
from store.waiters import OffsetWaiters

from .connection import ReadEnd, guarded, read_until_closed
from .net import TCP, Network, close_listener_now, no_delay, peer_address
from .protocol import (
    OffsetCommit,
    ReportDecoder,
    encode_confirm,
    encode_heartbeat,
    encode_offsets,
    encode_transfer_header,
    is_offer,
)

log = logging.getLogger("tidemq.ha")

RECEIVE_SIZE = 64 * 1024
"""Reports are 8 bytes each, so one read of this size covers any backlog."""

SEND_BYTES = 4 * 1024 * 1024
"""A backlog goes out in socket writes of up to this many body bytes (frames of at most
haTransferBatchSize each, so the wire stays RocketMQ's): a slave catching up gets its bytes
in few large writes, not one per 32 KiB."""

DEFAULT_MAX_GAP = 256 * 1024
DEFAULT_MAX_SILENCE_S = 15.0
"""The node's defaults of haMaxGapNotInSync and haMaxTimeSlaveNotCatchup (node/config.py)."""

_PROMOTED = "(promoted)"
"""The `_departed` key of a promoted master's start hold (`hold_start`)."""
_RESTARTED = "(restarted)"
"""The `_departed` key of a restarted master's hold at its checkpoint's confirm offset."""
PUSH_MARKS = 256
"""Pushes remembered per connection for the caught-up rule (the oldest fall off: later)."""

WAKEUP_FALLBACK_S = 0.1
"""A caught-up writer re-checks at least this often even without an append wakeup."""

CONFIRM_LINGER_S = 0.002
"""A new confirm offset with no frame to ride waits this long for one (the next append's):
under load it then costs no write of its own, and no wake-up of the slave, per round trip
(SYNC_MASTER 1 × 1 sent one after every ack). A slave's readers see it this much later at
most; a later confirm is the safe side (it serves less)."""



@functools.lru_cache(maxsize=1024)
def _host(address: str) -> str:
    """The host of a slave's peer address; the address itself when it is none ("?": the
    peer was gone when the connection was accepted). Cached: the in-sync checks ask it for
    every slave on every put."""
    try:
        return split_host_port(address)[0]
    except AddressError:
        return address


@attrs.frozen
class SlaveStatus:
    """One connected slave as the master sees it."""

    address: str
    ack_offset: int
    """The slave's newest reported max offset; -1 before its first report."""
    lag_bytes: int
    """Master max offset minus the ack (the whole log before the first report)."""
    connected_since: int
    """Epoch milliseconds of the accept."""
    in_sync: bool = False
    """In the master's in-sync set (`HAService.members`): a promotion of it loses nothing
    a consumer may have seen (docs/failover.md)."""


@attrs.define(eq=False)
class HAConnection:
    """State of one slave connection, shared by its reader and writer tasks."""

    stream: trio.abc.Stream  # a SocketStream, or TLS around one (`secure_accept`)
    address: str
    connected_since: int
    ack_offset: int = -1
    request_offset: int | None = None
    """The slave's first report; None until it arrives (the writer waits for it)."""
    start_offset: int = -1
    """Where shipping starts, derived once from `request_offset`."""
    started: trio.Event = attrs.field(factory=trio.Event)
    """Set when the first report was accepted and `start_offset` is known."""
    last_ack_at: float | None = None
    """trio.current_time() of the newest report (the in-sync rule's haMaxTimeSlaveNotCatchup)."""
    caught_up_at: float | None = None
    """trio.current_time() of the newest push whose log end the slave has since acked
    (RocketMQ 5's lastCaughtUpTimeMs): manual mode's in-sync set keeps a slave for
    haMaxTimeSlaveNotCatchup after it, and no longer (`HAService.members`)."""
    push_marks: collections.deque[tuple[int, float]] = attrs.field(
        factory=lambda: collections.deque(maxlen=PUSH_MARKS))
    """(the log's end, trio time) at each push not acked yet: an ack at or past that end
    means the slave caught up as of that push (`_caught_up`)."""
    extension: bool = False
    """The slave offered the confirm-offset extension (a tidemq slave; ha/protocol.py)."""
    confirm_sent: int = -1
    """The confirm offset last sent to it."""
    confirms_alone: int = 0
    """Writes that carried a confirm offset and nothing else (most ride on the next frame)."""
    reports: ReportDecoder = attrs.field(factory=ReportDecoder)
    frame_sent: bool = False
    """A transfer or heartbeat was written to it (a tidemq slave offers on its first one)."""
    reports_after_frame: int = 0
    """Reports read since then. A tidemq slave offers in its first report after a frame
    arrived; before that it sends at most one heartbeat report (one per
    haSendHeartbeatInterval), so a second report without an offer is a RocketMQ 4.x slave."""
    offsets_streamed: bool = False
    """Consumer-offset commits go to this slave (it took the extension; the table was queued)."""
    offsets_pending: dict[tuple[str, str, int], OffsetCommit] = attrs.field(factory=dict)
    """Commits to send, by (group, topic, queue id): the newest wins."""
    offsets_replace: bool = False
    """The pending batch is the whole table (the first one on a connection)."""
    offsets_raise: bool = False
    """The whole table pending may be behind the slave's (`offset_stale_keys`): it goes to
    raise the slave's, then its keys committed since the master started go as commits."""
    offsets_pending_seq: int = 0
    """The commit sequence number the pending batch brings the slave to."""
    offsets_acked: int = 0
    """The newest offsets batch the slave acked (it holds every commit up to that number)."""
    connected_at: float = attrs.field(factory=trio.current_time)
    """trio.current_time() of the accept (the start of a new slave's lag)."""


class HAService:
    """Serves slaves on the HA port; implements the store's `Replicator` protocol.

    Start with ``await nursery.start(ha.run)``; ``ha.port`` is the bound port afterwards
    (useful with port 0). While running it is attached as the store's replicator
    (``ReplicaLog.attach_replicator``) and append listener; SYNC_MASTER puts wait on it.
    """

    def __init__(self, log: ReplicaLog, config: StoreConfig, *, host: str = "127.0.0.1", port: int | None = None,
                 on_ack_timeout: Callable[[int], Awaitable[bool]] | None = None,
                 on_connections: Callable[[], None] | None = None,
                 secure_accept: Callable[[trio.SocketStream], Awaitable[trio.abc.Stream | None]] | None = None,
                 net: Network = TCP, max_gap: int = DEFAULT_MAX_GAP,
                 max_silence_s: float = DEFAULT_MAX_SILENCE_S,
                 offset_table: Callable[[], list[OffsetCommit] | None] | None = None,
                 offset_stale_keys: Callable[[], frozenset[tuple[str, str, int]] | None] = lambda: None,
                 hold_start: bool = False, hold_restart: bool = True) -> None:
        self.net = net  # where connections come from (ha/net.py): TCP, or a simulated network
        self.secure_accept = secure_accept
        """The node's TLS check of a new slave connection (mutual TLS, wire/tls.py):
        the stream to serve, or None to drop it before a byte of the CommitLog is sent."""
        self.log = log
        """The store's CommitLog as replication sees it: read ranges, wait on appends."""
        self.config = config
        """The store's config: the ha* keys and brokerRole (read live: a promotion changes the role)."""
        self.host = host
        self.port = self.config.ha_listen_port if port is None else port
        self.push2slave_max_offset = 0
        self.slaves_accepted = 0
        """Slave connections accepted so far (one that came and went is noticed by a count)."""
        self.peak_slaves = 0
        """The most slave hosts connected at once this term (see `acks_needed`)."""
        self.expected_slaves = 0
        """The group's slaves the node last found registered with the name servers (`expect`)."""
        self.ack_members: frozenset[str] | None = None
        """controllerMode etcd: the peer addresses of the in-sync set's slaves. While it is
        not empty a SYNC_MASTER put waits until every one of them acked (RocketMQ 5's
        allAckInSyncStateSet), so any member may be elected; else one ack is enough."""
        self.confirmed_offset = 0
        """The largest offset SYNC_MASTER puts were released at: no PUT_OK lies beyond it."""
        self.max_gap = max_gap
        self.max_silence_s = max_silence_s
        """Manual mode's in-sync rule (`members`): the node's haMaxGapNotInSync and
        haMaxTimeSlaveNotCatchup, the keys etcd mode's controller judges by."""
        self._confirm = 0  # what confirm_offset last told the slaves
        self._departed: dict[str, tuple[int, float]] = {}
        """Manual mode: host → (ack offset, trio time of its last ack) of in-sync slaves whose
        connection ended, kept for `max_silence_s` after that ack as a connected slave that
        went silent is (`_departed_acks`)."""
        self._departed_changed = trio.Event()
        self.hold_start = hold_start
        self.hold_restart = hold_restart
        """Manual mode, a promoted slave's first term: until a slave catches up or
        `max_silence_s` passed, its log's end at the start holds the confirm offset as a
        departed member's ack would. Its old master, and the other slaves, were cut off from
        it or are on their way to follow it; one of them may be promoted next, judged by a
        confirm offset this node could not tell it (seed 33: two promotions 0.6 s apart).
        A master that restarts (not promoted) holds the confirm offset its checkpoint kept
        the same way (seed 1447): its slaves, away meanwhile, lack what it writes alone, and
        one of them may be promoted while this master cannot be asked. A master the name
        servers list no slave for drops the hold (`expect`); one without name servers
        (`hold_restart` False) takes none: nothing would tell it it has no slaves."""
        self._limit_seen: int | None = None  # what dispatch last asked visible_end for
        self.on_ack_timeout = on_ack_timeout
        """Called when a put's wait for the members ran out; True when the controller shrank
        the set to slaves that hold `next_offset` (the put is then acknowledged)."""
        self.on_connections = on_connections
        """Called when a slave connects or disconnects (fencing counts the slaves of a term)."""
        self.offset_table = offset_table
        """The node's committed consumer offsets, sent whole to each tidemq slave that takes
        the extension, then commit by commit (`offsets_committed`); None: none are sent.
        It answers None while the node's table is not the group's (an etcd-mode candidate:
        a slave would replace its fresher table with a restarted node's file); `offsets_ready`
        streams it once it is."""
        self.offset_stale_keys = offset_stale_keys
        """None when the node's table is the group's whole table; else the keys not committed
        since the node started, whose offsets may be behind a slave's, which keeps its higher
        ones (seed 6025: a master killed and elected again streamed its file's table, which
        replaced its slave's, and that slave, elected next, lacked commits answered OK;
        seed 5292: a slave restarted with no file yet, elected, did the same)."""
        self.offsets_seq = 1
        """The master's commit sequence number: batch `offsets_seq` holds every commit so far."""
        self._offsets_acked = trio.Event()  # set (and replaced) on each offsets ack
        self._connections: set[HAConnection] = set()
        self._ack_waiters = OffsetWaiters()  # RocketMQ's GroupTransferService: SYNC_MASTER puts
        self._data_event = trio.Event()  # replaced (after set) on an append while writers wait
        self._writers_waiting = 0
        self.missed_wakeups = 0
        """Writer waits that ran to WAKEUP_FALLBACK_S while records to send were there: an
        append that happened while the writer was busy and did not wake it (each costs a
        SYNC_MASTER put, or a record's delivery, up to 100 ms)."""

    # ---- Replicator protocol ------------------------------------------------------------
    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def slave_hosts(self) -> frozenset[str]:
        """The hosts the connected slaves connect from."""
        return frozenset(_host(c.address) for c in self._connections)

    def is_slave_ok(self, master_put_where: int) -> bool:
        """A SYNC_MASTER put waits only if the slaves it needs (`acks_needed`) are connected
        and not too far behind; else it is answered SLAVE_NOT_AVAILABLE at once."""
        needed = self.acks_needed()
        if self.connection_count < max(needed, 1):
            return False
        acked = self.push2slave_max_offset if needed <= 1 else self.acked_offset()
        return master_put_where - acked < self.config.ha_slave_fallbehind_max

    def acks_needed(self) -> int:
        """How many slaves a manual-mode SYNC_MASTER put waits for: as many as the term had
        connected at once (counted by host), and as many as the name servers list, so a
        PUT_OK is on each slave and whichever one the operator promotes holds it (with one
        ack, a promoted slave that left a moment before misses what the other slave acked).
        RocketMQ 4.x waits for one ack and never promotes. 1 in etcd mode: its in-sync set
        decides (`ack_members`)."""
        if self.on_ack_timeout is not None:
            return 1
        return max(1, self.peak_slaves, self.expected_slaves)

    def _restart_hold(self) -> int | None:
        """Where a restarted master holds the confirm offset (`hold_restart`): the one its
        checkpoint kept, else, after an abnormal exit that lost the checkpoint (a power loss),
        its log's end at the start: what it held may have been shown before, what it writes
        now its slaves lack (storage seed 7104: a master that lost its whole log showed
        consumers its new epoch's records, cut when the slave promoted meanwhile led)."""
        kept = self.log.known_confirm
        if kept is None and self.log.abnormal_start:
            return self.log.end()
        return kept

    def expect(self, slaves: int) -> None:
        """The group has `slaves` slaves registered with the name servers (an epoch check
        found them): one that has not connected to this term yet is waited for too."""
        if slaves != self.expected_slaves:
            self.expected_slaves = slaves
            self.log.visibility_moved()  # visible_end may change
        if slaves == 0 and self._departed.pop(_RESTARTED, None) is not None:
            self.log.visibility_moved()  # a master without slaves: nobody lacks its tail
        elif slaves and self._departed:
            self._end_start_holds()
            self.log.visibility_moved()

    async def wait_for_slave(self, next_offset: int, timeout_s: float) -> bool:
        """True once the slaves a put needs acked `next_offset`: any one (4.x semantics), or
        every member of `ack_members`; after a timeout `on_ack_timeout` may still say yes."""
        if self.acked_offset() >= next_offset:
            return True
        if await self._ack_waiters.wait(next_offset, timeout_s):
            return True
        return self.on_ack_timeout is not None and await self.on_ack_timeout(next_offset)

    def offsets_committed(self, entries: list[OffsetCommit]) -> int:
        """Queue commits (already in the node's table) for every slave that streams offsets;
        returns their sequence number, for `wait_for_offsets`."""
        self.offsets_seq += 1
        for conn in self._connections:
            if conn.offsets_streamed:
                for e in entries:
                    conn.offsets_pending[(e.group, e.topic, e.queue_id)] = e
                conn.offsets_pending_seq = self.offsets_seq
        self._wake_writers()
        return self.offsets_seq

    def offsets_missing(self, seq: int) -> list[str]:
        """Peer addresses of the in-sync set's slaves that stream offsets and have not acked
        commit `seq` yet, or may still take the extension (`_may_offer`: a slave that just
        connected). A RocketMQ 4.x slave (no extension) is not waited for once known: it
        pulls the table every 10 s (node/slave_sync.py)."""
        return sorted(c.address for c in self.members()
                      if (c.offsets_acked < seq if c.offsets_streamed else self._may_offer(c)))

    def members_away(self) -> list[str]:
        """The slaves a SYNC_MASTER's commit must reach that are not connected, counted as a
        put counts them (`is_slave_ok`): etcd mode, members of the published set; manual
        mode, connections short of `acks_needed` (the one that left a moment ago may be the
        slave being promoted, which then lacks the commit). A set of the master alone counts
        as one away: no slave holds the commit, and the master's table reaches its file only
        every 5 s (seed 6025: commits answered OK by a master alone in its set, killed 0.15 s
        later and elected again with its file's table, which its slave then took)."""
        if self.on_ack_timeout is not None:
            if not self.ack_members:
                return ["(no slave in the in-sync set)"]
            connected = {c.address for c in self._connections}
            return sorted(a for a in self.ack_members if a not in connected)
        short = max(self.acks_needed(), 1) - self.connection_count
        return [f"({short} slave(s) not connected)"] if short > 0 else []

    def _may_offer(self, conn: HAConnection) -> bool:
        """`conn` may yet be a tidemq slave that takes offsets (an empty one offers with its
        first record): until a second report after a frame says it is RocketMQ 4.x."""
        return self.offset_table is not None and not conn.extension and conn.reports_after_frame < 2

    async def wait_for_offsets(self, seq: int, timeout_s: float) -> list[str]:
        """Wait up to `timeout_s` until every in-sync slave that streams offsets holds commit
        `seq` (SYNC_MASTER: a commit answered OK is on whichever member is promoted); the
        members still missing it ([] once none is)."""
        with trio.move_on_after(timeout_s):
            while self.offsets_missing(seq):
                # an ack or a disconnect wakes it; the in-sync set also moves with time and acks
                with trio.move_on_after(WAKEUP_FALLBACK_S):
                    await self._offsets_acked.wait()
            return []
        return self.offsets_missing(seq)

    def acked_offset(self) -> int:
        """What the slaves a put needs have all acked (`ack_members`, else `acks_needed`)."""
        members = self.ack_members
        if not members:
            needed = self.acks_needed()
            if needed <= 1:
                return self.push2slave_max_offset
            acks = sorted((c.ack_offset for c in self._connections), reverse=True)
            return acks[needed - 1] if len(acks) >= needed else -1
        by_address = {c.address: c.ack_offset for c in self._connections}
        return min(by_address.get(m, -1) for m in members)

    def acked_by(self, offset: int) -> list[str]:
        """Peer addresses of the connected slaves that acked `offset` (hold everything below it)."""
        return sorted(c.address for c in self._connections if c.ack_offset >= offset)

    def missing_members(self) -> list[str]:
        """Members of `ack_members` with no connection (a put cannot get their acks)."""
        connected = {c.address for c in self._connections}
        return sorted(m for m in self.ack_members or () if m not in connected)

    def set_ack_members(self, members: frozenset[str] | None) -> None:
        """Change whose acks SYNC_MASTER puts need; puts the new set already covers finish."""
        self.ack_members = members
        self._advance()
        self.log.visibility_moved()  # the limit may have come or gone

    def members(self) -> list[HAConnection]:
        """The slaves of the in-sync set (the master is always in it, so none: the master
        alone). etcd mode: the connections of the set its controller published
        (`ack_members`). Manual mode: the master's own judgement by the same rule the
        controller applies (`in_sync`: within `max_gap` bytes, reported within
        `max_silence_s`); a slave catching up from far behind is not waited for."""
        if self.on_ack_timeout is not None:
            named = self.ack_members or frozenset()
            return [c for c in self._connections if c.address in named]
        now = trio.current_time()
        return [c for c in self._connections
                if c.caught_up_at is not None and now - c.caught_up_at <= self.max_silence_s]

    def confirm_limit(self) -> int | None:
        """RocketMQ 5's confirmOffset, in every replication mode: what every member of the
        in-sync set holds, so no record beyond it reaches a consumer and then disappears
        when a member is promoted (the consumer would commit past it and skip the record the
        new master stores at its queue offset). None for the master alone: nothing to wait for.

        etcd mode with members: the offset all of them acked (monotonic; a member that is
        not connected holds it where it was). Manual mode: the least ack of the slaves in
        sync. It may lie below what was already dispatched (a slave that has just come
        within the gap): dispatch then waits until that slave holds what consumers saw."""
        if self.on_ack_timeout is not None:
            return self.confirmed_offset if self.ack_members else None
        acks = [c.ack_offset for c in self.members()] + self._departed_acks()
        return min(acks) if acks else None

    def _departed_acks(self) -> list[int]:
        """The last acks of in-sync slaves that disconnected less than `max_silence_s` after
        their last ack. Such a slave leaves the set as a silent one does, not at once: it may
        be disconnecting to be promoted (it checked it held the confirm offset, then stopped
        replicating), and a master alone would show consumers what it then never gets, as
        Kafka's leader keeps a dead follower in the ISR for replica.lag.time.max.ms."""
        if not self._departed:
            return []
        now = trio.current_time()
        for host, (_ack, at) in list(self._departed.items()):
            if now - at > self.max_silence_s:
                del self._departed[host]
        return [ack for ack, _at in self._departed.values()]

    async def _expire_departed(self) -> None:
        """Move the visibility limit on when a departed slave's hold ends (`_departed_acks`),
        or a connected member leaves the set (it has not caught up for `max_silence_s`)."""
        while True:
            now = trio.current_time()
            times = [at for _ack, at in self._departed.values()]
            times += [c.caught_up_at for c in self._connections
                      if c.caught_up_at is not None and c.caught_up_at + self.max_silence_s >= now]
            due = min(times, default=math.inf) + self.max_silence_s
            with trio.move_on_at(due + 0.001):  # just past it: `_departed_acks` drops it then
                await self._departed_changed.wait()
                self._departed_changed = trio.Event()
                continue
            self._departed_acks()
            self.log.visibility_moved()

    def visible_end(self) -> int | None:
        """What consumers may read up to (ReplicaLog.limit_visibility): `confirm_limit`, on
        an ASYNC_MASTER as on a SYNC_MASTER; None (no limit) with readUnCommitted."""
        limit = self._limit_seen = self.confirm_limit()
        self._note(limit)
        return None if self.config.read_un_committed else limit

    def confirm_offset(self) -> int:
        """The confirm offset slaves learn (never decreasing in a term): `confirm_limit`, or
        the log's end for the master alone. A slave serves nothing past it."""
        return self._note(self.confirm_limit())

    def confirm_seen(self) -> int:
        """`confirm_offset` as it stands now, without advancing it (a status read)."""
        limit, end = self.confirm_limit(), self.log.end()
        return max(self._confirm, end if limit is None else min(limit, end))

    def _note(self, limit: int | None) -> int:
        """Advance the confirm offset by `limit` and keep it in the store (a fenced master
        restarts as a slave serving nothing past it)."""
        end = self.log.end()
        confirm = max(self._confirm, end if limit is None else min(limit, end))
        if confirm != self._confirm:
            self._confirm = confirm
            self.log.note_confirm(confirm)
        return confirm

    def in_sync(self, max_gap: int, max_silence_s: float) -> list[str]:
        """Peer addresses of the slaves within `max_gap` bytes that reported within
        `max_silence_s` (RocketMQ 5's haMaxGapNotInSync / haMaxTimeSlaveNotCatchup): etcd
        mode's controller publishes this set (it, not the master, then decides who may be
        elected). Manual mode's own set (`members`) goes by time alone: a slave the master
        dropped by a gap could not know it was dropped, and would pass its promotion check."""
        return sorted(c.address for c in self._in_sync(max_gap, max_silence_s))

    def _in_sync(self, max_gap: int, max_silence_s: float) -> list[HAConnection]:
        if not self._connections:
            return []
        max_offset = self.log.end()
        now = trio.current_time()
        return [c for c in self._connections
                if c.ack_offset >= 0 and max_offset - c.ack_offset <= max_gap
                and c.last_ack_at is not None and now - c.last_ack_at <= max_silence_s]

    def slave_fall_behind_much(self) -> int:
        return self.log.end() - self.push2slave_max_offset

    def status(self) -> list[SlaveStatus]:
        max_offset = self.log.end()
        members = {id(c) for c in self.members()}
        return [
            SlaveStatus(
                address=c.address,
                ack_offset=c.ack_offset,
                lag_bytes=max(0, max_offset - max(c.ack_offset, 0)),
                connected_since=c.connected_since,
                in_sync=id(c) in members,
            )
            for c in sorted(self._connections, key=lambda c: c.connected_since)
        ]

    def lag_seconds(self) -> dict[str, float]:
        """Peer address → seconds each connected slave is behind: 0 while it holds the whole
        log, else the time since the newest push whose end it reached (`caught_up_at`), or
        since it connected."""
        end, now = self.log.end(), trio.current_time()
        out: dict[str, float] = {}
        for c in self._connections:
            if c.ack_offset >= end:
                out[c.address] = 0.0
            else:
                since = c.caught_up_at if c.caught_up_at is not None else c.connected_at
                out[c.address] = max(0.0, now - since)
        return out

    # ---- serving --------------------------------------------------------------------------
    async def run(self, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen and serve slaves until cancelled; reports the bound port to `nursery.start`."""
        listeners, self.port = await self.net.listen(self.host, self.port)
        self.log.attach_replicator(self)
        self.log.add_append_listener(self._on_append)
        if self.hold_start and self.on_ack_timeout is None:
            self._departed[_PROMOTED] = (self.log.end(), trio.current_time())
        elif self.hold_restart and self.on_ack_timeout is None and (kept := self._restart_hold()) is not None:
            self._departed[_RESTARTED] = (kept, trio.current_time())
        self.log.limit_visibility(self.visible_end)
        log.info("HA service listening on %s:%d", self.host, self.port)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._ack_waiters.run_timer)
                nursery.start_soon(self._expire_departed)
                await nursery.start(trio.serve_listeners, self._handle, listeners)
                task_status.started(self.port)
        finally:  # synchronous only: this runs while cancelled
            self.log.remove_append_listener(self._on_append)
            if not self.config.read_un_committed:  # the term ends: its confirm offset stays the limit
                self.log.hold_at_known_confirm()
            self.log.limit_visibility(None)
            self.log.detach_replicator(self)
            for listener in listeners:  # serve_listeners closes them too, if it got to run
                close_listener_now(listener)
            log.info("HA service on port %d stopped", self.port)

    def _on_append(self) -> None:
        """CommitLog append hook: wake caught-up writers (runs inline in the put path)."""
        self._wake_writers()

    def _wake_writers(self) -> None:
        if self._writers_waiting:
            event, self._data_event = self._data_event, trio.Event()
            event.set()

    def _notify_transfer_some(self, ack: int) -> None:
        if ack > self.push2slave_max_offset:
            self.push2slave_max_offset = ack
        if ack > self.confirmed_offset:
            self._advance()
        if self.on_ack_timeout is None and self.confirm_limit() != self._limit_seen:
            self.log.visibility_moved()  # manual mode: the least member's ack moved the limit

    def _advance(self) -> None:
        acked = self.acked_offset()
        if acked > self.confirmed_offset:
            self.confirmed_offset = acked
            self._ack_waiters.advance(acked)
            if self.ack_members:
                self.log.visibility_moved()  # etcd mode: confirm_limit moved

    async def _handle(self, raw: trio.abc.Stream) -> None:
        """One slave: reader and writer tasks; either ending closes the connection."""
        no_delay(raw)
        address = peer_address(raw) or "?"
        stream: trio.abc.Stream = raw
        if self.secure_accept is not None:
            if not isinstance(raw, trio.SocketStream):
                raise TypeError(f"TLS on the HA port needs TCP sockets, not {type(raw).__name__}")
            secured = await self.secure_accept(raw)
            if secured is None:
                await trio.aclose_forcefully(raw)
                return
            stream = secured
        conn = HAConnection(stream, address, int(runtime.wall_clock() * 1000))
        self._connections.add(conn)
        self.slaves_accepted += 1
        # by host: a slave that reconnects before its old connection is found dead (up to
        # haHousekeepingInterval) is not a second slave
        self.peak_slaves = max(self.peak_slaves, len(self.slave_hosts()))
        self.log.visibility_moved()  # the in-sync set may grow (confirm_limit)
        log.info("slave %s connected", address)
        if self.on_connections is not None:
            self.on_connections()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._guarded, self._read_loop, conn, nursery.cancel_scope)
                nursery.start_soon(self._guarded, self._write_loop, conn, nursery.cancel_scope)
        finally:
            if self.on_ack_timeout is None and conn in self.members() and conn.caught_up_at is not None:
                self._departed[_host(address)] = (conn.ack_offset, conn.caught_up_at)
                self._departed_changed.set()
            self._connections.discard(conn)
            self._offsets_moved()  # commit waits re-check the members
            self.log.visibility_moved()  # a member gone: the limit moves on (`_departed_acks` holds it a while)
            if self.on_connections is not None:
                self.on_connections()
            await trio.aclose_forcefully(stream)
            log.info("slave %s disconnected (ack offset %d)", address, conn.ack_offset)

    async def _guarded(
        self, side: Callable[[HAConnection], Awaitable[None]], conn: HAConnection, scope: trio.CancelScope
    ) -> None:
        """Run one side; a connection error (or a bug) closes this connection, not the service."""
        await guarded(side, conn, scope, peer=f"slave {conn.address}", log=log)

    async def _read_loop(self, conn: HAConnection) -> None:
        """RocketMQ's ReadSocketService: acks from the slave; returns (closing the
        connection) on EOF, silence or a bad offset."""
        decoder = conn.reports

        async def on_data(data: bytes | bytearray) -> bool:
            reports = decoder.feed(data)
            return not reports or self._on_reports(conn, reports)

        end = await read_until_closed(
            conn.stream, RECEIVE_SIZE, self.config.ha_housekeeping_interval / 1000, on_data
        )
        if end is ReadEnd.EOF:
            log.info("slave %s closed the connection", conn.address)
        elif end is ReadEnd.SILENT:
            log.warning(
                "slave %s: nothing read for %d ms (haHousekeepingInterval); closing",
                conn.address, self.config.ha_housekeeping_interval,
            )

    def _on_reports(self, conn: HAConnection, reports: list[int]) -> bool:
        """Take one read's reports as acks; False (close) for an offset the master cannot serve."""
        max_offset = self.log.end()
        if conn.request_offset is None and not self._accept_first(conn, reports[0]):
            return False
        if conn.frame_sent:
            conn.reports_after_frame += len(reports)
        previous = conn.ack_offset  # an offer never comes in the first report's read
        acks = []
        for offset in reports:
            if offset < 0:  # an offsets ack (the decoder lets one through only once offsets were sent)
                if -offset > self.offsets_seq:
                    log.warning("slave %s acked offsets batch %d, beyond the newest sent (%d); closing",
                                conn.address, -offset, self.offsets_seq)
                    return False
                if -offset > conn.offsets_acked:
                    conn.offsets_acked = -offset
                    self._offsets_moved()
                continue
            if offset > max_offset:
                log.warning(
                    "slave %s reported offset %d beyond the master's max offset %d; closing",
                    conn.address, offset, max_offset,
                )
                return False
            if is_offer(previous, offset):
                if not conn.extension:
                    log.info("slave %s takes the confirm offset (tidemq extension)", conn.address)
                conn.extension = True
                self._stream_offsets(conn)
                continue
            acks.append(offset)
            previous = offset
        conn.last_ack_at = trio.current_time()
        if acks:
            conn.ack_offset = acks[-1]
            self._caught_up(conn, max_offset)
            self._notify_transfer_some(conn.ack_offset)
        if conn.extension and acks and self.confirm_offset() > conn.confirm_sent:
            self._on_append()  # a caught-up writer sends the confirm offset the ack moved
        return True

    def _caught_up(self, conn: HAConnection, max_offset: int) -> None:
        """Move `conn.caught_up_at` by its new ack: to the newest push whose log end it
        reached, or to now when it holds the whole log. A slave that catches up ends the
        start holds (a restarted or promoted master's): it is a member now."""
        ack, now = conn.ack_offset, trio.current_time()
        caught = None
        while conn.push_marks and conn.push_marks[0][0] <= ack:
            caught = conn.push_marks.popleft()[1]
        if ack >= max_offset:
            caught = now
        if caught is not None and (conn.caught_up_at is None or caught > conn.caught_up_at):
            joined = conn.caught_up_at is None or now - conn.caught_up_at > self.max_silence_s
            conn.caught_up_at = caught
            if joined:
                self._departed_changed.set()  # its leaving is due now (`_expire_departed`)
                self._departed.pop(_host(conn.address), None)  # the slave is back: its connection counts now
                self._end_start_holds()
                self.log.visibility_moved()  # a member again: the limit moves with its acks

    def _end_start_holds(self) -> None:
        """A restarted or promoted master's start hold ends once as many slaves as the group
        has registered (at least one) caught up: one that caught up alone may be following
        it while another, promoted meanwhile, lacks its tail (seed 1447)."""
        if len(self.members()) >= max(1, self.expected_slaves):
            for key in (_PROMOTED, _RESTARTED):
                self._departed.pop(key, None)

    def _stream_offsets(self, conn: HAConnection) -> None:
        """A tidemq slave took the extension: queue the whole offset table for it (every
        later commit follows it: `offsets_committed`)."""
        if self.offset_table is None or conn.offsets_streamed:
            return
        table = self.offset_table()
        if table is None:
            return  # not the group's table yet: `offsets_ready`
        conn.offsets_streamed = True
        conn.reports.offsets_acks = True  # before the table goes out, so its ack is understood
        conn.offsets_pending = {(e.group, e.topic, e.queue_id): e for e in table}
        conn.offsets_replace = True
        conn.offsets_raise = self.offset_stale_keys() is not None
        conn.offsets_pending_seq = self.offsets_seq
        self._wake_writers()

    def offsets_ready(self) -> None:
        """The node's table became the group's (an election): stream it to the slaves that
        took the extension meanwhile."""
        for conn in self._connections:
            if conn.extension:
                self._stream_offsets(conn)

    def _offsets_moved(self) -> None:
        event, self._offsets_acked = self._offsets_acked, trio.Event()
        event.set()

    def _take_offsets(self, conn: HAConnection) -> bytes:
        """The offsets frames of the commits pending for `conn` (b"" for none)."""
        if not conn.offsets_pending_seq:
            return b""
        seq, pending = conn.offsets_pending_seq, tuple(conn.offsets_pending.values())
        if conn.offsets_raise:  # the table raises the slave's; what is not the file's then sets
            stale = self.offset_stale_keys() or frozenset()
            fresh = [e for e in pending if (e.group, e.topic, e.queue_id) not in stale]
            frames = encode_offsets(seq, pending, replace=True, raise_only=True)
            frames += encode_offsets(seq, fresh, replace=False) if fresh else b""
        else:
            frames = encode_offsets(seq, pending, replace=conn.offsets_replace)
        conn.offsets_pending, conn.offsets_replace, conn.offsets_raise, conn.offsets_pending_seq = {}, False, False, 0
        return frames

    def _accept_first(self, conn: HAConnection, offset: int) -> bool:
        """Apply the first-transfer-offset rule; refuse offsets the master cannot serve."""
        max_offset = self.log.end()
        min_offset = self.log.start()
        if offset > max_offset:
            log.warning(
                "refusing slave %s: its first report %d is beyond the master's max offset %d "
                "(the slave holds data this master never wrote)",
                conn.address, offset, max_offset,
            )
            return False
        if offset != 0 and offset < min_offset:
            log.warning(
                "refusing slave %s: its first report %d is below the master's min offset %d "
                "(those segments were deleted; clear the slave's store to resync from the newest one)",
                conn.address, offset, min_offset,
            )
            return False
        conn.request_offset = offset
        # A report of 0 (an empty slave) starts at the newest segment, never at older ones.
        conn.start_offset = offset or self.log.segment_start(max_offset)
        conn.started.set()
        log.info(
            "slave %s reported %d; shipping from offset %d", conn.address, offset, conn.start_offset
        )
        return True

    async def _write_loop(self, conn: HAConnection) -> None:
        """RocketMQ's WriteSocketService: ship CommitLog bytes from the slave's next offset,
        heartbeat when idle."""
        await conn.started.wait()  # no first report yet: send nothing, not even heartbeats
        batch_size = self.config.ha_transfer_batch_size
        heartbeat_s = self.config.ha_send_heartbeat_interval / 1000
        stream = conn.stream
        next_offset = conn.start_offset
        # a caught-up slave gets a heartbeat at once, not after haSendHeartbeatInterval: a
        # tidemq slave offers the extension on its first frame, and commits wait until it did
        last_write = trio.current_time() - heartbeat_s
        timed_out = False
        linger_until: float | None = None  # a confirm offset alone waits for a frame to ride
        while True:
            # a new confirm offset, and commits of consumer offsets, ride in the same write as
            # the next frames
            offset = self.confirm_offset() if conn.extension else conn.confirm_sent
            confirm = encode_confirm(offset) if offset > conn.confirm_sent else b""
            commits = self._take_offsets(conn) if conn.offsets_pending_seq else b""
            size, frame = self._read_batch(next_offset, batch_size, confirm + commits)
            if size and timed_out:
                self.missed_wakeups += 1  # appended while this writer was not waiting yet
            timed_out = False
            if confirm and (size or commits or linger_until is not None and trio.current_time() >= linger_until):
                conn.confirm_sent = offset
            elif confirm:  # alone: wait a little for a frame to ride (a commit never waits)
                if linger_until is None:
                    linger_until = trio.current_time() + CONFIRM_LINGER_S
                await self._wait_for_data(linger_until)
                continue
            linger_until = None
            if size:
                conn.push_marks.append((self.log.end(), trio.current_time()))
                await stream.send_all(frame)
                next_offset += size
                last_write = trio.current_time()
                conn.frame_sent = True
                continue
            if confirm or commits:
                if not commits:
                    conn.confirms_alone += 1
                await stream.send_all(confirm + commits)
                continue  # an append during the send did not wake this writer: look again
            if next_offset < self.log.start():
                log.warning(
                    "slave %s needs offset %d but the master's log now starts at %d; closing",
                    conn.address, next_offset, self.log.start(),
                )
                return
            now, due = trio.current_time(), last_write + heartbeat_s
            if now >= due:
                conn.push_marks.append((self.log.end(), now))
                await stream.send_all(encode_heartbeat(next_offset))
                last_write = trio.current_time()
                conn.frame_sent = True
                continue
            # an absolute deadline: `heartbeat_s - idle` can be a few ulps, a timeout that ends
            # before the clock moves (a MockClock then never reaches the heartbeat: a spin)
            timed_out = not await self._wait_for_data(min(now + WAKEUP_FALLBACK_S, due))

    def _read_batch(self, offset: int, batch_size: int, prefix: bytes = b"") -> tuple[int, bytes]:
        """(bytes of CommitLog, wire bytes) for up to SEND_BYTES in frames of at most
        `batch_size` bytes each from `offset`, within its segment, after `prefix` (a confirm
        frame); (0, b"") when nothing is readable there yet. A backlog goes out in few large
        writes; every frame on the wire still respects haTransferBatchSize.

        The bytes are copied out so the segment is not held while the socket is slow: a
        stalled slave must not keep a segment from being deleted or unmapped.
        """
        selected = self.log.read(offset)
        if selected is None:
            return 0, b""
        with selected:
            if selected.size <= 0 or selected.start_offset != offset or batch_size <= 0:
                return 0, b""
            total = min(selected.size, max(batch_size, SEND_BYTES - SEND_BYTES % batch_size))
            parts: list[bytes | memoryview] = [prefix]
            views = []
            for start in range(0, total, batch_size):
                size = min(batch_size, total - start)
                views.append(selected.view[start : start + size])
                parts += (encode_transfer_header(offset + start, size), views[-1])
            data = b"".join(parts)
            for view in views:
                view.release()
            return total, data

    async def _wait_for_data(self, deadline: float) -> bool:
        """Until an append (True) or `deadline` (trio time; False)."""
        self._writers_waiting += 1
        try:
            with trio.move_on_at(deadline):
                await self._data_event.wait()
                return True
            return False
        finally:
            self._writers_waiting -= 1
