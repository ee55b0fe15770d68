"""The CommitLog as replication sees it: the one door ha/ and failover go through.

Kafka gives its replica fetcher one object (UnifiedLog) and nothing else of the log; this is
ours. The HA master reads ranges from it and waits on its appends; the HA client appends as
a follower; a rejoining node cuts it back (through `truncate_store`, on a closed store). No
caller reaches into the CommitLog's segments, so the rules of where a follower's log may
start (a segment boundary) and of what an empty log may drop live here once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import trio

from .mapped_file import SelectResult

if TYPE_CHECKING:
    from .checkpoint import StoreCheckpoint
    from .commit_log import CommitLog

__all__ = ["BACKLOG_WINDOW_S", "FollowerAppendError", "ReplicaLog", "Replicator"]

BACKLOG_WINDOW_S = 0.02
"""A full read counts as a backlog for this long (a few reads' time at catch-up speed)."""


class Replicator(Protocol):
    """What a SYNC_MASTER put needs from the HA service (ha/master.py's HAService, which
    attaches itself with `ReplicaLog.attach_replicator`)."""

    def is_slave_ok(self, master_put_where: int) -> bool: ...

    async def wait_for_slave(self, next_offset: int, timeout_s: float) -> bool: ...


class FollowerAppendError(Exception):
    """Replicated bytes that do not continue this log (the follower must reconnect)."""


class ReplicaLog:
    """One store's CommitLog for replication: end, start, read, append as follower."""

    def __init__(self, commit_log: CommitLog) -> None:
        self._commit_log = commit_log
        self.segment_size = commit_log.file_size
        self.replicator: Replicator | None = None
        """What SYNC_MASTER puts wait on; set only through attach_replicator."""
        self.visible_limit: Callable[[], int | None] | None = None
        """Where consumers' view of the log ends (None from it: no limit); see `limit_visibility`."""
        self._on_visible: list[Callable[[], None]] = []
        self.checkpoint: StoreCheckpoint | None = None
        """Where the confirm offset known is kept across restarts (set by the store at load)."""
        self.hold: int | None = None
        """Where dispatch stops while no limit is attached: the confirm offset known, held by
        the store at a slave's start and at every shutdown (`hold_at_known_confirm`)."""
        self.cap: int | None = None
        """Where dispatch stops whatever the limit says (None: nowhere): an etcd candidate's
        confirm offset known, until an election makes it master (`cap_at_known_confirm`)."""
        self.noted = False
        """A confirm offset was noted since the store opened (a replication service ran)."""
        self.abnormal_start = False
        """The store opened after an abnormal exit (set by the store at load): a confirm
        offset known is then missing only because its checkpoint was lost."""
        self.backlog_until = -math.inf
        """trio time until which the follower counts as receiving a backlog: each read that
        comes in full (it is behind its leader) moves it BACKLOG_WINDOW_S on. The store's
        dispatch yields to the copy meanwhile (reput.BACKLOG_YIELD_S), and goes at full
        speed again as soon as reads stop coming in full."""

    @property
    def follower_backlog(self) -> bool:
        return trio.current_time() < self.backlog_until

    def note_full_read(self) -> None:
        """The follower's read filled its buffer: more is waiting at the leader's side."""
        self.backlog_until = trio.current_time() + BACKLOG_WINDOW_S

    # ---- positions ---------------------------------------------------------------------------
    def end(self) -> int:
        """The offset the next byte lands at (the max physical offset)."""
        return self._commit_log.max_offset()

    def start(self) -> int:
        """The first offset still held (-1 for an empty log)."""
        return self._commit_log.min_offset()

    def flushed(self) -> int:
        return self._commit_log.queue.flushed_where

    def segment_start(self, offset: int) -> int:
        """The start of the segment holding `offset` (where an empty follower starts)."""
        return offset - offset % self.segment_size

    # ---- the leader's side -------------------------------------------------------------------
    def read(self, offset: int) -> SelectResult | None:
        """Everything readable from `offset` to the end of its segment (zero-copy; release it)."""
        return self._commit_log.get_data(offset)

    def attach_replicator(self, replicator: Replicator) -> None:
        """Make `replicator` the one SYNC_MASTER puts wait on (until detached)."""
        if self.replicator is not None and self.replicator is not replicator:
            raise RuntimeError("another replicator is attached to this store; detach it first")
        self.replicator = replicator

    def detach_replicator(self, replicator: Replicator) -> None:
        """Undo attach_replicator; a no-op when `replicator` is not the attached one."""
        if self.replicator is replicator:
            self.replicator = None

    def limit_visibility(self, limit: Callable[[], int | None] | None) -> None:
        """Dispatch (so the ConsumeQueues, so consumers) stops at `limit()`: RocketMQ 5's
        confirmOffset. A master whose puts wait for every in-sync slave shows consumers only
        what those slaves hold, since a record they lack is cut when one of them is elected,
        and a consumer that read it would then skip the new term's message at its queue
        offset. None removes the limit."""
        self.visible_limit = limit
        self.visibility_moved()

    def visible_end(self) -> int | None:
        """The offset consumers may see up to now, or None when no limit applies: the
        attached limit's, else `hold`; never past `cap`."""
        end = self.hold if self.visible_limit is None else self.visible_limit()
        if self.cap is None:
            return end
        return self.cap if end is None else min(end, self.cap)

    # ---- the confirm offset known, across restarts ----------------------------------------------
    @property
    def known_confirm(self) -> int | None:
        """The confirm offset this node last knew (kept in the checkpoint), None if none."""
        return self.checkpoint.confirm_phy_offset if self.checkpoint is not None else None

    @property
    def known_caught_up(self) -> float | None:
        """Wall time (s, `runtime.wall_clock`) this node last caught up with its master as a
        slave, kept in the checkpoint across restarts; None if never."""
        ms = self.checkpoint.caught_up_ms if self.checkpoint is not None else None
        return None if ms is None else ms / 1000

    def note_caught_up(self, at: float) -> None:
        """The follower caught up with its master at wall time `at` (ha/slave.py)."""
        if self.checkpoint is not None:
            self.checkpoint.note_caught_up(int(at * 1000))

    def note_confirm(self, offset: int) -> None:
        """The replication service's newest confirm offset (a master's own, a slave's learned).
        Never past `cap`: a candidate's service confirms its whole log alone, which its next
        start must not take as confirmed."""
        self.noted = True
        if self.checkpoint is not None:
            self.checkpoint.note_confirm(offset if self.cap is None else min(offset, self.cap))

    def hold_at_known_confirm(self) -> None:
        """Dispatch nothing past the confirm offset known while no limit is attached: a
        restarted slave, and every node shutting down after a replication service ran (a
        fenced master's unconfirmed tail must not reach the ConsumeQueues it reopens with)."""
        self.hold = self.known_confirm

    def cap_at_known_confirm(self) -> None:
        """Dispatch nothing past the confirm offset known, whatever limit the replication
        service attaches (an etcd candidate's, which waits for no member, is none): a
        candidate is not the group's master, and its tail is cut if another is elected
        (seed 251 with --storage: a consumer read it from a candidate restarted after a
        power loss). None known (a first start): no cap."""
        self.cap = self.known_confirm
        self.visibility_moved()

    def release_cap(self) -> None:
        """Elected: what it holds is the group's log."""
        self.cap = None
        self.visibility_moved()

    def release_hold(self) -> None:
        """No limit while none is attached (a promoted slave dispatches everything it holds)."""
        self.hold = None
        self.visibility_moved()

    def forget_confirm_past(self, end: int) -> None:
        """The log was cut at `end`: a confirm offset beyond it spoke of records now gone."""
        known = self.known_confirm
        if known is not None and known > end and self.checkpoint is not None:
            self.checkpoint.note_confirm(end or None)

    def on_visibility(self, listener: Callable[[], None]) -> None:
        """Call `listener()` (the dispatch's wakeup) whenever the visible end may have moved."""
        self._on_visible.append(listener)

    def visibility_moved(self) -> None:
        for listener in self._on_visible:
            listener()

    def add_append_listener(self, listener: Callable[[], None]) -> None:
        """Call `listener()` inline after every CommitLog append (puts, BLANK fillers,
        replicated bytes); it must not block."""
        self._commit_log.on_append.append(listener)

    def remove_append_listener(self, listener: Callable[[], None]) -> None:
        if listener in self._commit_log.on_append:
            self._commit_log.on_append.remove(listener)

    # ---- the follower's side -----------------------------------------------------------------
    def append_as_follower(self, offset: int, data: bytes | memoryview) -> list[str]:
        """Append the leader's bytes at `offset`, which must be this log's end, or for an empty
        log a segment boundary (the leader ships an empty follower its newest segment). An
        empty log that still holds empty segments drops them first; returns their paths.
        Raises FollowerAppendError, changing nothing, when the bytes do not continue the log."""
        end = self.end()
        dropped: list[str] = []
        if end != 0 and end != offset:
            raise FollowerAppendError(
                f"frame at offset {offset} ({len(data)} bytes) does not continue the slave's log at {end}")
        if end == 0 and offset != 0:
            dropped = self._drop_empty_segments()
        if data and not self._commit_log.append_data(offset, data):
            raise FollowerAppendError(
                f"could not append {len(data)} bytes at offset {offset} (log end {self.end()}, "
                f"segment size {self.segment_size}; an empty log can only start at a segment boundary)")
        return dropped

    def _drop_empty_segments(self) -> list[str]:
        """An empty log that still has an empty segment 0 (e.g. a crash right after creating
        it) must lose it before it can start at the leader's newest segment."""
        queue = self._commit_log.queue
        dropped = []
        while (mf := queue.last()) is not None:
            if mf.wrote_position or not queue.delete_file(mf, 0):
                raise FollowerAppendError(f"cannot drop empty segment {mf.path} to start elsewhere")
            dropped.append(mf.path)
        return dropped
