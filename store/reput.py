"""ReputMessageService: follows the CommitLog and dispatches each new record to its
ConsumeQueue and the index (seed 000 §4.6), on a master right after the put and on a slave
right after replicated bytes land.

It is woken by every append (no millisecond polling). Replicated bytes are not record
aligned, so a record still incomplete at the log's end means "wait for more"; a record that
cannot be decoded anywhere else stops dispatch with a logged error and a running flag.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from . import runtime
from .checkpoint import StoreCheckpoint
from .commit_log import CommitLog
from .consume_queue import ConsumeQueueTable
from .index_file import IndexService
from .mapped_file import MappedFile
from .record_codec import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    DispatchRequest,
    RecordKind,
    decode_dispatch,
    read_total_size,
)
from .running_flags import RunningFlags
from .schedule import SCHEDULE_TOPIC, deliver_timestamp
from .sysflag import TRANSACTION_MASK, SysFlag

TRANSACTION_COMMIT = int(SysFlag.TRANSACTION_COMMIT)
ROUND_BYTES = 64 * 1024
"""CommitLog bytes dispatched before other tasks get a turn: small enough that a catching-up
slave's reads and acks (1 MiB a turn) and client requests are not held behind dispatch."""
BACKLOG_YIELD_S = 0.005
"""While a follower receives a backlog, dispatch waits this long between rounds: on one
event loop the copy (what a SYNC_MASTER's puts wait on) would otherwise share every turn
with the dispatch of small records. The ConsumeQueues catch up once the copy has."""

log = logging.getLogger("tidemq.store")


class ReputMessageService:
    def __init__(
        self,
        commit_log: CommitLog,
        consume_queues: ConsumeQueueTable,
        index: IndexService | None,
        checkpoint: StoreCheckpoint,
        flags: RunningFlags,
        *,
        is_slave: Callable[[], bool],
        delay_levels: tuple[int, ...] = (),
        follower_backlog: Callable[[], bool] = lambda: False,
        visible_end: Callable[[], int | None] = lambda: None,
    ) -> None:
        self.commit_log = commit_log
        self.consume_queues = consume_queues
        self.index = index
        self.checkpoint = checkpoint
        self.flags = flags
        self.is_slave = is_slave
        self.follower_backlog = follower_backlog
        """True while this store, as a follower, receives a backlog: dispatch then yields for
        BACKLOG_YIELD_S between rounds, so the copy and its acks go first."""
        self.visible_end = visible_end
        """Where dispatch stops for now (ReplicaLog.visible_end: the in-sync slaves' confirmed
        offset on a SYNC_MASTER in etcd mode), None for the log's end."""
        self.delay_levels = delay_levels
        self.reput_from_offset = 0
        self.held_back = False
        """The last `do_reput` stopped at the visible end (records past it wait)."""
        self._held_until = 0
        """While `held_back`: where the held record ends (the visible end must reach it)."""
        self.stopped_at_error: str | None = None
        self._wake = trio.Event()
        self._dispatched = trio.Event()  # replaced after every round that made progress
        # long polls by queue: set (and dropped) when a unit of that queue is dispatched, so
        # a round wakes only the waiters whose queue grew, not every waiter of every queue
        self._queue_waiters: dict[tuple[str, int], trio.Event] = {}

    def wakeup(self) -> None:
        self._wake.set()

    def wake_if_visible(self) -> None:
        """The append and visibility hook: wake dispatch, unless the visible end shows that
        a round would dispatch nothing: it does not reach past where dispatch stands, or
        (held) not to the end of the record dispatch waits on. On a follower every append
        comes before the confirm offset that covers it, and on a master whose slaves confirm,
        before their acks: most rounds dispatched nothing. The end is read each time, not
        assumed: an append can move it too (a slave that falls behind by more than the gap
        leaves the in-sync set)."""
        if self.stopped_at_error is None:
            limit = self.visible_end()
            if limit is not None and limit < (self._held_until if self.held_back else self.reput_from_offset + 1):
                return
        self._wake.set()

    def dispatch_behind_bytes(self) -> int:
        return max(0, self.commit_log.max_offset() - self.reput_from_offset)

    async def wait_dispatched(self, topic: str | None = None, queue_id: int = 0) -> None:
        """Return after the next dispatch round that made progress; with `topic`, once a
        unit of `topic`/`queue_id` is dispatched."""
        if topic is None:
            await self._dispatched.wait()
            return
        key = (topic, queue_id)
        event = self._queue_waiters.get(key)
        if event is None:
            event = self._queue_waiters[key] = trio.Event()
        await event.wait()

    def do_reput(self, max_bytes: int | None = None, *, limited: bool = True) -> int:
        """Dispatch complete records readable now (up to about `max_bytes` of CommitLog, and
        with `limited` none that ends past `visible_end`); returns how many were dispatched."""
        if self.stopped_at_error is not None:
            return 0
        cl = self.commit_log
        count = 0
        stop_at = None if max_bytes is None else self.reput_from_offset + max_bytes
        limit = self.visible_end() if limited else None
        self.held_back = False
        if self.reput_from_offset < cl.min_offset():
            log.warning("reput offset %d is below the CommitLog min %d; moving up",
                        self.reput_from_offset, cl.min_offset())
            self.reput_from_offset = cl.min_offset()
        while self.reput_from_offset < cl.max_offset():
            if stop_at is not None and self.reput_from_offset >= stop_at:
                break
            mf = cl.queue.find_by_offset(self.reput_from_offset)
            if mf is None or not mf.hold():
                break
            try:  # one hold per segment, not per record
                more, n = self._reput_segment(mf, stop_at, limit)
            finally:
                mf.release()
            count += n
            if not more:
                break
        if count:
            self._dispatched.set()
            self._dispatched = trio.Event()
        return count

    def _reput_segment(self, mf: MappedFile, stop_at: int | None, limit: int | None) -> tuple[bool, int]:
        """Dispatch records of the held segment `mf` from `reput_from_offset`, none ending past
        `limit`; returns (go on with the next segment, records dispatched)."""
        cl = self.commit_log
        file_size = cl.file_size
        base = mf.file_from_offset
        pos = self.reput_from_offset - base
        readable = mf.get_read_position()
        # replicated bytes may still come; and with a transient store pool, bytes appended but
        # not yet committed (a rolled segment's tail, its BLANK filler) are not readable yet
        growing = (mf is cl.queue.last() and not mf.is_full()) or readable < mf.wrote_position
        mm = mf.mm
        dispatch = self._dispatch
        is_slave = self.is_slave()
        n = 0
        while stop_at is None or base + pos < stop_at:
            if readable - pos < 8:
                if growing:
                    return False, n  # a record header still on its way (or nothing new)
                kind, size, req, error = RecordKind.INVALID, -1, None, "segment ends without a BLANK filler"
            else:
                total, magic = read_total_size(mm, pos)
                if magic == BLANK_MAGIC_CODE and pos + total == file_size:
                    # the filler spans to the segment end (a slave may not have its zeros yet)
                    self.reput_from_offset = cl.roll_next_file(base + pos)
                    return True, n
                if (magic in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2) and total > readable - pos
                        and growing and total + pos <= file_size):
                    return False, n  # a replicated record still incomplete
                kind, size, req, error = decode_dispatch(mm, pos, readable)
            if kind is RecordKind.INVALID:
                self.stopped_at_error = f"cannot decode the CommitLog record at offset {base + pos}: {error}"
                log.error("dispatch stopped: %s", self.stopped_at_error)
                self.flags.set(RunningFlags.WRITE_LOGICS_QUEUE_ERROR)
                return False, n
            if kind is RecordKind.BLANK:
                self.reput_from_offset = cl.roll_next_file(base + pos)
                return True, n
            if limit is not None and base + pos + size > limit:
                self.held_back, self._held_until = True, base + pos + size
                return False, n  # not yet on every in-sync slave: woken when it is
            assert req is not None  # decode_dispatch gives a request with every MESSAGE
            dispatch(req, is_slave)
            pos += size
            self.reput_from_offset = base + pos
            n += 1
        return False, n

    def _dispatch(self, req: DispatchRequest, is_slave: bool) -> None:
        if req.sys_flag & TRANSACTION_MASK in (0, TRANSACTION_COMMIT):
            code = req.tags_code
            if req.topic == SCHEDULE_TOPIC:  # a scheduled message's unit holds its due time
                code = deliver_timestamp(req.queue_id, req.store_timestamp, self.delay_levels)
            cq = self.consume_queues.find_or_create(req.topic, req.queue_id)
            if not cq.put_message_position_info(req.commitlog_offset, req.size, code, req.queue_offset):
                log.error("could not write the ConsumeQueue unit of %s-%d at offset %d",
                          req.topic, req.queue_id, req.commitlog_offset)
                self.flags.set(RunningFlags.WRITE_LOGICS_QUEUE_ERROR)
            if self._queue_waiters:
                waiting = self._queue_waiters.pop((req.topic, req.queue_id), None)
                if waiting is not None:
                    waiting.set()
            self.checkpoint.logics_msg_timestamp = req.store_timestamp
            if is_slave:
                self.checkpoint.physic_msg_timestamp = req.store_timestamp
        if (req.keys or req.uniq_key) and self.index is not None and not self.index.build_index(
            req.topic, req.commitlog_offset, req.store_timestamp, req.keys, req.uniq_key, req.sys_flag
        ):
            self.flags.set(RunningFlags.WRITE_INDEX_FILE_ERROR)

    async def run(self) -> None:
        while True:
            await self._wake.wait()  # every append path (put, BLANK filler, replication) wakes it
            self._wake = trio.Event()
            # a large backlog (a slave catching up) goes in rounds, so the tasks sharing the
            # loop (HA reads and acks, client requests) are not starved while dispatch trails
            # (a round held at the visible end is over: the rest waits for the end to move)
            while self.do_reput(max_bytes=ROUND_BYTES) and not self.held_back and self.dispatch_behind_bytes():
                if self.follower_backlog():
                    await runtime.sleep(BACKLOG_YIELD_S)
                else:
                    await trio.lowlevel.checkpoint()
