"""CommitLog flush and commit services (seed 000 §4.8), as trio tasks.

- GroupCommitService (SYNC_FLUSH): callers wait for their end offset; while one fdatasync
  runs in a worker thread, new requests pile up and share the next one (group commit).
- FlushRealTimeService (ASYNC_FLUSH): flushes every flushIntervalCommitLog once at least
  flushCommitLogLeastPages dirty pages piled up, thoroughly every thorough interval; it
  runs in one thread of its own for the store's life (like RocketMQ's), so a flush every
  few pages costs no thread hand-off and no event-loop wake-up.
- CommitRealTimeService (transient pool): copies write buffers into the files.

Each CommitLog append wakes the flush service once: the store registers the service's
`wakeup` as its one flush listener on `CommitLog.on_append` (puts and replicated bytes
alike); a put waiting for its flush only registers its offset. After a full flush the
services record the store time of the last flushed message in the checkpoint (on a master:
a slave's physic time comes from dispatch).

A CommitLog flush that fails (fdatasync raises EIO, ENOSPC, ...) is never retried: Linux may
drop the dirty pages it could not write and report the error only once, so a second fdatasync
can succeed without the data ever reaching the disk (PostgreSQL's "fsyncgate", 2018). The
store sets FLUSH_DISK_ERROR (running_flags.py) and refuses writes; the puts waiting on the
flush fail (puts.py); nothing counts as flushed past what was synced; shutdown skips the
CommitLog flush and leaves the abort file; the restart's recovery writes the CommitLog back
from where the failed flush began and syncs it before trusting it (lost_writes.py).

Blocking calls (fdatasync, pwrite) run in worker threads, which release the GIL.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

import trio

from . import runtime
from .checkpoint import LOGICS, StoreCheckpoint
from .lost_writes import LostWrites
from .mapped_file_queue import MappedFileQueue
from .running_flags import RunningFlags
from .waiters import OffsetWaiters

log = logging.getLogger("tidemq.store")


def flush_to_end(queue: MappedFileQueue) -> None:
    """Flush every segment up to the readable end. MappedFileQueue.flush does one segment
    per call, so a fixed number of calls leaves a backlog of several segments unflushed."""
    for _ in range(2 * len(queue.files) + 10):
        if queue.flushed_where >= queue.max_offset():
            return
        queue.flush(0)


def try_flush(queue: MappedFileQueue, least_pages: int) -> OSError | None:
    """`queue.flush(least_pages)` (blocking: a worker thread); the error if it failed, which
    the caller hands to `flush_failed` on the event loop's thread."""
    try:
        queue.flush(least_pages)
    except OSError as e:
        return e
    return None


def try_flush_to_end(queue: MappedFileQueue) -> OSError | None:
    """`flush_to_end`, stopping at the first failure (returned)."""
    try:
        flush_to_end(queue)
    except OSError as e:
        return e
    return None


def flush_failed(flags: RunningFlags, queue: MappedFileQueue, error: OSError) -> None:
    """A CommitLog flush failed: the store refuses writes from now on (see the module
    docstring); `queue.flushed_where` stays where the last good flush left it, and the store
    root notes it durably for the next start's recovery (lost_writes.py; a small blocking
    write, once)."""
    if not flush_dead(flags):
        LostWrites(os.path.dirname(queue.store_path)).note(queue.flushed_where)
    flags.flush_failed(queue.flushed_where, error)
    log.error("CommitLog flush from offset %d failed: %s; the store refuses writes until a restart",
              queue.flushed_where, error)


def flush_dead(flags: RunningFlags) -> bool:
    """A CommitLog flush failed since the store started: no flush may run again."""
    return flags.is_set(RunningFlags.FLUSH_DISK_ERROR)


async def final_flush(queue: MappedFileQueue, flags: RunningFlags) -> None:
    """Shutdown's flush of everything, unless a flush failed before (then never again)."""
    if flush_dead(flags):
        return
    error = await runtime.run_sync(try_flush_to_end, queue)
    if error is not None:
        flush_failed(flags, queue, error)


def commit_to_end(queue: MappedFileQueue) -> None:
    """Commit every write buffer into its file (one segment per MappedFileQueue.commit)."""
    for _ in range(2 * len(queue.files) + 10):
        if queue.committed_where >= queue.max_wrote_offset():
            return
        queue.commit(0)


class FlushedTime:
    """Writes the store time of the last fully flushed message into the checkpoint's physic
    time, on a master only (a slave's comes from dispatch)."""

    def __init__(self, checkpoint: StoreCheckpoint, is_master: Callable[[], bool]) -> None:
        self.checkpoint = checkpoint
        self.is_master = is_master

    def note(self, queue: MappedFileQueue) -> None:
        if queue.store_timestamp and self.is_master():
            self.checkpoint.physic_msg_timestamp = queue.store_timestamp


class Cadence:
    """When a periodic flush or commit runs and how much it takes: every `interval_ms`,
    at least `least_pages` dirty pages, but everything (0) once `thorough_interval_ms` has
    passed since the last thorough round. The rule every flush and commit service shares."""

    def __init__(self, interval_ms: int, least_pages: int, thorough_interval_ms: int) -> None:
        self.interval_ms = interval_ms
        self.least_pages = least_pages
        self.thorough_interval_ms = thorough_interval_ms
        self._last_thorough = runtime.monotonic()

    @property
    def interval_s(self) -> float:
        return self.interval_ms / 1000

    def next(self) -> int:
        """Least pages for the round about to run."""
        now = runtime.monotonic()
        if (now - self._last_thorough) * 1000 >= self.thorough_interval_ms:
            self._last_thorough = now
            return 0
        return self.least_pages


class GroupCommitService:
    """Sync flush: `await wait_for_flush(end)` returns once `end` is durable.

    Puts that arrive while an fdatasync runs are all covered by the next one (group commit).
    `inline`: the fdatasync runs in the event loop, not a worker thread; puts that arrive
    meanwhile wait in the sockets and the next round covers them.
    """

    def __init__(self, queue: MappedFileQueue, flushed_time: FlushedTime, flags: RunningFlags, *,
                 inline: bool = False) -> None:
        self.queue = queue
        self.inline = inline
        self._flushed_time = flushed_time
        self._flags = flags
        self._waiters = OffsetWaiters()
        self._wake = trio.Event()
        self.flush_count = 0  # fdatasync rounds done, for tests and stats

    def wakeup(self) -> None:
        self._wake.set()

    async def wait_for_flush(self, next_offset: int, timeout_s: float) -> bool:
        """True once flushed_where >= next_offset; False after the timeout, or at once when
        a flush failed. The append that wrote up to `next_offset` already woke the service."""
        if self.queue.flushed_where >= next_offset:
            return True
        return await self._waiters.wait(next_offset, timeout_s)

    async def _flush_once(self) -> bool:
        """One fdatasync round; False when it failed (the store then takes no more writes)."""
        error = await (runtime.run_inline if self.inline else runtime.run_sync)(try_flush, self.queue, 0)
        if error is not None:
            flush_failed(self._flags, self.queue, error)
            return False
        self.flush_count += 1
        return True

    async def _do_commit(self) -> None:
        if flush_dead(self._flags):
            self._waiters.fail_all()
            return
        target = max(self._waiters.max_wanted, self.queue.max_offset())
        # a record that rolled into the next segment needs a second flush
        for _ in range(2):
            if self.queue.flushed_where >= target:
                break
            if not await self._flush_once():
                self._waiters.advance(self.queue.flushed_where)  # what an earlier round did sync
                self._waiters.fail_all()
                return
        self._flushed_time.note(self.queue)
        self._waiters.advance(self.queue.flushed_where)

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._waiters.run_timer)
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                before = self.queue.flushed_where
                await self._do_commit()
                if self._waiters.max_wanted > self.queue.flushed_where > before:
                    self._wake.set()  # progress, but short of what is wanted: go on

    async def shutdown(self) -> None:
        await self._do_commit()
        await final_flush(self.queue, self._flags)  # WAIT=false puts too
        if flush_dead(self._flags):
            self._waiters.fail_all()
            return
        self._flushed_time.note(self.queue)
        self._waiters.advance(self.queue.flushed_where)


class FlushRealTimeService:
    """Async flush: periodic, by least pages, thorough every `thorough_interval_ms`.

    The flushing loop is one worker thread (`run` hosts it); an append wakes it through a
    threading.Event once `least_pages` pages are dirty. Under load that is every few
    pages, so a trio task hopping to a worker thread per flush would cost the event loop
    a thread hand-off and a wake-up each time.

    A failed flush ends the loop for good (the module docstring): no PUT_OK waited on it,
    but the store stops taking writes and says why."""

    def __init__(self, queue: MappedFileQueue, cadence: Cadence, *, timed: bool, flushed_time: FlushedTime,
                 flags: RunningFlags) -> None:
        self.queue = queue
        self._flags = flags
        self._error: OSError | None = None  # the loop thread's failed flush, for the trio side
        self.cadence = cadence
        self.timed = timed
        self._flushed_time = flushed_time
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()  # no loop runs yet
        self._simulated_wake = trio.Event()

    def wakeup(self) -> None:
        """An append happened: wake the loop only once a flush has enough pages to take
        (the interval's round, thorough ones included, runs anyway)."""
        if not self._wake.is_set() and self.queue.is_able_to_flush(self.cadence.least_pages):
            self._wake.set()
            if runtime.simulation() is not None:
                self._simulated_wake.set()

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                if self.timed:
                    self._stop.wait(self.cadence.interval_s)
                else:
                    self._wake.wait(self.cadence.interval_s)
                    self._wake.clear()
                if self._stop.is_set():
                    return
                error = try_flush(self.queue, self.cadence.next())
                if error is not None:
                    self._error = error
                    return
                self._flushed_time.note(self.queue)
        finally:
            self._stopped.set()

    async def run(self) -> None:
        """Host the flushing loop's thread until cancelled (it stops at its next wake-up,
        which this makes happen at once); a flush that fails ends the loop and sets
        FLUSH_DISK_ERROR (here, on the event loop's thread)."""
        if runtime.simulation() is not None:
            await self._run_simulated()
            return
        self._stop.clear()
        self._stopped.clear()
        try:
            await runtime.run_sync(self._loop, abandon_on_cancel=True)
        finally:
            self._stop.set()
            self._wake.set()
        if self._error is not None:
            flush_failed(self._flags, self.queue, self._error)

    async def _run_simulated(self) -> None:
        """The same rounds as a task: a simulation has no threads (store/runtime.py)."""
        while True:
            if self.timed:
                await runtime.sleep(self.cadence.interval_s)
            else:
                with trio.move_on_after(self.cadence.interval_s):
                    await self._simulated_wake.wait()
                await runtime.sleep(0)  # not while the host is paused
                self._simulated_wake = trio.Event()
                self._wake.clear()
            error = await runtime.run_sync(try_flush, self.queue, self.cadence.next())
            if error is not None:
                flush_failed(self._flags, self.queue, error)
                return
            self._flushed_time.note(self.queue)

    async def shutdown(self) -> None:
        """Stop the loop (waiting for a flush it is in), then flush everything (unless a
        flush failed: then never again)."""
        self._stop.set()
        self._wake.set()
        await runtime.run_sync(self._stopped.wait)
        if self._error is not None and not flush_dead(self._flags):
            flush_failed(self._flags, self.queue, self._error)
        await final_flush(self.queue, self._flags)
        if not flush_dead(self._flags):
            self._flushed_time.note(self.queue)


class CommitRealTimeService:
    """Transient pool: copy [committed, wrote) of each write buffer into its file."""

    def __init__(self, queue: MappedFileQueue, cadence: Cadence, *, on_committed: Callable[[], None]) -> None:
        self.queue = queue
        self.cadence = cadence
        self._on_committed = on_committed

    async def run(self) -> None:
        while True:
            await runtime.sleep(self.cadence.interval_s)
            nothing = await runtime.run_sync(self.queue.commit, self.cadence.next())
            if not nothing:
                self._on_committed()

    async def shutdown(self) -> None:
        await runtime.run_sync(commit_to_end, self.queue)
        self._on_committed()


class FlushConsumeQueueService:
    """Flushes every ConsumeQueue (least pages) each interval; thoroughly, followed by the
    checkpoint, every thorough interval. The logics timestamp is captured before the flush
    so the checkpoint never claims more than is on disk. A failed flush is never retried:
    the checkpoint's logics timestamp stays where the last good one left it and the store
    refuses writes (`on_error`) until a restart's recovery dispatches again from there."""

    def __init__(self, flush_queues: Callable[[int], None], checkpoint: StoreCheckpoint, cadence: Cadence,
                 on_error: Callable[[OSError], None] = lambda _e: None) -> None:
        self._flush_queues = flush_queues
        self.checkpoint = checkpoint
        self.cadence = cadence
        self.on_error = on_error
        self.failed = False

    async def flush(self, least_pages: int) -> None:
        if self.failed:
            return
        logics_ts = self.checkpoint.logics_msg_timestamp
        try:
            await runtime.run_sync(self._flush_queues, least_pages)
        except OSError as e:
            self.failed = True
            self.checkpoint.freeze(LOGICS)
            log.error("ConsumeQueue flush failed: %s; the store refuses writes until a restart", e)
            self.on_error(e)
            return
        if least_pages == 0:
            self.checkpoint.logics_msg_timestamp = logics_ts
            await runtime.run_sync(self.checkpoint.flush)

    async def run(self) -> None:
        while True:
            await runtime.sleep(self.cadence.interval_s)
            await self.flush(self.cadence.next())
