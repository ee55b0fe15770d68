"""MessageStore: the facade over the engine (the seeds' DefaultMessageStore).

`async with open_store(config) as store:` takes the lock file, loads and recovers, starts
the background services in a nursery, creates the abort file; leaving the block flushes
everything, writes the checkpoint and removes the abort file last.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import attrs
import trio

from . import runtime
from .allocate import AllocateMappedFileService
from .checkpoint import StoreCheckpoint
from .cleanup import CleanCommitLogService, CleanConsumeQueueService, DiskUsage
from .cold_pages import ColdPageService
from .commit_log import CommitLog
from .config import FlushDiskType, StoreConfig
from .consume_queue import ConsumeQueueTable
from .flush import (
    Cadence,
    CommitRealTimeService,
    FlushConsumeQueueService,
    FlushedTime,
    FlushRealTimeService,
    GroupCommitService,
    final_flush,
    flush_to_end,
)
from .index_file import IndexService
from .layout import ABORT_FILE, CHECKPOINT_FILE, COMMITLOG_DIR, CONSUMEQUEUE_DIR, INDEX_DIR
from .lost_writes import LostWrites
from .markers import AbortFile, StoreLock
from .markers import StoreLockedError as StoreLockedError  # importable from here, as before
from .message import Message, StoredMessage
from .puts import Appended, MessagePuts, Prepared
from .reads import GetMessageResult as GetMessageResult  # importable from here, as before
from .reads import MessageReads
from .reads import QueryMessageResult as QueryMessageResult
from .reads import StoreUnavailableError as StoreUnavailableError
from .recovery import RecoveredLog, RecoveryProgress, TruncateReport
from .replica_log import ReplicaLog
from .replica_log import Replicator as Replicator  # importable from here, as before
from .reput import TRANSACTION_COMMIT, ReputMessageService
from .running_flags import RunningFlags
from .schedule import parse_delay_levels
from .segment_walker import Record, walk
from .status import PutMessageResult
from .sysflag import TRANSACTION_MASK
from .tag_filter import MessageFilter
from .transient_store_pool import TransientStorePool

log = logging.getLogger("tidemq.store")


class MessageStore:
    """The facade: lifecycle, recovery and truncation, replication hooks; puts and reads are
    MessagePuts' (puts.py) and MessageReads' (reads.py), handed over to below.

    `MessageStore(config)` opens nothing; `load()` takes the lock, recovers and builds every
    service (returning the store), `start()` only starts their tasks."""

    checkpoint: StoreCheckpoint
    index: IndexService | None
    """None when messageIndexEnable is off."""
    reput: ReputMessageService
    group_commit: GroupCommitService | None
    """SYNC_FLUSH's group commit (else None)."""
    flush_service: FlushRealTimeService | None
    """ASYNC_FLUSH's flush (else None)."""
    commit_service: CommitRealTimeService | None
    """ASYNC_FLUSH with the transient pool: the copy into the file (else None)."""
    flush_cq_service: FlushConsumeQueueService
    clean_commit_log: CleanCommitLogService
    clean_consume_queue: CleanConsumeQueueService
    cold_pages: ColdPageService
    puts: MessagePuts
    reads: MessageReads

    def __init__(
        self,
        config: StoreConfig,
        *,
        clock: Callable[[], float] = runtime.wall_clock,
        disk_usage: DiskUsage | None = None,
        replicated: bool = False,
    ) -> None:
        self.config = config
        self.clock = clock
        self.replicated = replicated
        """The store of a replicated node: its consumers see only what the group confirmed
        (`_hold_lost_confirm`); a lone store (tools, tests) dispatches all it recovers."""
        self.disk_usage = disk_usage  # cleanup's disk probe (None: psutil on the real partition)
        self.flags = RunningFlags()
        self.lock = StoreLock(config.store_path_root_dir)
        self.abort_file = AbortFile(config.path(ABORT_FILE))
        self.pool = (
            TransientStorePool(config.transient_store_pool_size, config.mapped_file_size_commit_log)
            if config.transient_pool_active
            else None
        )
        if config.transient_store_pool_enable and not config.transient_pool_active:
            log.warning(
                "transientStorePoolEnable is ignored: the pool needs ASYNC_FLUSH on a master "
                "(flushDiskType=%s, brokerRole=%s)",
                config.flush_disk_type.value, config.broker_role.value,
            )
        self.allocator = AllocateMappedFileService(self.pool)
        self.commit_log = CommitLog(config, pool=self.pool, allocator=self.allocator, clock=clock)
        self.delay_levels = parse_delay_levels(config.message_delay_level)
        self.consume_queues = ConsumeQueueTable(config.path(CONSUMEQUEUE_DIR), config.cq_file_size)
        self.loaded = False
        self.last_exit_ok = True
        self.recovery_cut: RecoveredLog | None = None
        """What this load's recovery found, and the readable records it cut."""
        self._dispatch_from: int | None = None
        self._nursery: trio.Nursery | None = None
        self.replica_log = ReplicaLog(self.commit_log)
        """The CommitLog as ha/ and failover see it (their one door to the log)."""

    # ---- replication hooks (the HA service attaches itself through replica_log) -------------
    @property
    def replicator(self) -> Replicator | None:
        """What SYNC_MASTER puts wait on (ReplicaLog.attach_replicator)."""
        return self.replica_log.replicator

    def attach_replicator(self, replicator: Replicator) -> None:
        self.replica_log.attach_replicator(replicator)

    def detach_replicator(self, replicator: Replicator) -> None:
        self.replica_log.detach_replicator(replicator)

    def add_append_listener(self, listener: Callable[[], None]) -> None:
        self.replica_log.add_append_listener(listener)

    def remove_append_listener(self, listener: Callable[[], None]) -> None:
        self.replica_log.remove_append_listener(listener)

    # ---- lifecycle ---------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.flags.running

    @property
    def shutdown_done(self) -> bool:
        return self.flags.shut_down

    def load(self, recovery_progress: RecoveryProgress | None = None) -> MessageStore:
        """Lock the root, map the segments and recover (blocking; done once at start).
        `recovery_progress(validated_bytes, total_bytes)` follows CommitLog validation."""
        self.lock.acquire()
        try:
            for directory in (COMMITLOG_DIR, CONSUMEQUEUE_DIR):
                # as RocketMQ's DefaultMessageStore does: a store has its directories before
                # its first record, and again after a power loss took their unsynced entries
                # (storage seed 90: tools found a node that stored nothing no store at all)
                os.makedirs(self.config.path(directory), exist_ok=True)
            if self.pool is not None:
                self.pool.allocate()
            self.last_exit_ok = not self.abort_file.exists()
            self.replica_log.abnormal_start = not self.last_exit_ok
            self.commit_log.load()
            self.consume_queues.load()
            self.checkpoint = StoreCheckpoint(self.config.path(CHECKPOINT_FILE))
            self.checkpoint.on_flush_error = partial(self.flags.file_flush_failed, "checkpoint")
            self.replica_log.checkpoint = self.checkpoint
            if not self.config.read_un_committed:
                # a slave serves nothing past what it knew; a master nothing past what it
                # confirmed until its replication service takes over the limit (a restarted
                # master's recovery dispatched its unconfirmed tail at once: seed 1647)
                self.replica_log.hold_at_known_confirm()
            self._create_flush_services(self.checkpoint)
            self.index = IndexService(
                self.config.path(INDEX_DIR), self.config.max_hash_slot_num, self.config.max_index_num,
                self.checkpoint, max_msgs_num_batch=self.config.max_msgs_num_batch,
                clock=lambda: int(self.clock() * 1000),
            ) if self.config.message_index_enable else None
            if self.index is not None:
                self.index.on_flush_error = partial(self.flags.file_flush_failed, "index file")
                self.index.load(self.last_exit_ok)
            self.consume_queues.recover()
            self._cut_queues_and_index(self._recover_commit_log(recovery_progress))
            if self.recovery_dropped:
                self._restart_checkpoint_times()
            if not self.last_exit_ok:
                self._sync_after_crash()
            self._hold_lost_confirm()
            # the topic-queue table is rebuilt in start(), after dispatch has caught up
            self.reput = ReputMessageService(
                self.commit_log, self.consume_queues, self.index, self.checkpoint, self.flags,
                is_slave=lambda: not self.config.broker_role.is_master, delay_levels=self.delay_levels,
                follower_backlog=lambda: self.replica_log.follower_backlog,
                visible_end=self.replica_log.visible_end,
            )
            self.replica_log.on_visibility(self.reput.wake_if_visible)
            self._build_services()
        except BaseException:
            self.lock.release()
            raise
        self.loaded = True
        return self

    def _hold_lost_confirm(self) -> None:
        """The confirm offset known is never below what the recovered ConsumeQueues index:
        those units were dispatched under an earlier confirm offset (so were visible), and a
        hold below them would leave the queues that lost those units to a power loss unbuilt
        while the next start dispatches from the furthest queue's end (seed 264 with
        --storage: contiguity breaks). A replicated store whose abnormal exit left no confirm
        offset at all (a power loss took the checkpoint, or it was never synced) takes that
        too, not its whole log: its tail may be what no slave holds, cut when a slave is
        elected after a consumer read it (seed 251). A lone store (tools, tests) keeps no
        confirm offset and dispatches everything it recovers."""
        if self.config.read_un_committed:
            return
        known = self.replica_log.known_confirm
        indexed = max(self.consume_queues.max_physic_offset_of_all(), self.commit_log.min_offset(), 0)
        if known is None:
            lost = (self.replicated and not self.last_exit_ok
                    and self.commit_log.max_offset() > max(self.commit_log.min_offset(), 0))
            if not lost:
                return
            log.warning("the checkpoint keeps no confirm offset after an abnormal exit: consumers see up to "
                        "offset %d (what the ConsumeQueues index) until the group confirms more", indexed)
        elif known >= indexed:
            return
        self.checkpoint.note_confirm(indexed)
        self.replica_log.hold_at_known_confirm()

    def _build_services(self) -> None:
        """Everything `start()` runs and the puts and reads, each handed what it uses."""
        config = self.config
        self.puts = MessagePuts(config, self.commit_log, self.flags, self.delay_levels, self.group_commit,
                                self.replica_log)
        self.reads = MessageReads(config, self.commit_log, self.consume_queues, self.index, self.reput, self.flags)
        self.flush_cq_service = FlushConsumeQueueService(
            self.consume_queues.flush, self.checkpoint,
            Cadence(config.flush_interval_consume_queue, config.flush_consume_queue_least_pages,
                    config.flush_consume_queue_thorough_interval),
            on_error=partial(self.flags.file_flush_failed, "ConsumeQueue"),
        )
        self.clean_commit_log = CleanCommitLogService(
            config, self.commit_log.queue, consume_queue_path=self.consume_queues.store_path,
            flags=self.flags, dispatched_to=lambda: self.reput.reput_from_offset,
            clock=self.clock, disk_usage=self.disk_usage,
        )
        self.clean_consume_queue = CleanConsumeQueueService(
            config, commit_log_min_offset=self.commit_log.min_offset,
            consume_queues=self.consume_queues, index=self.index,
        )
        self.cold_pages = ColdPageService(self.commit_log.queue, lambda: self.reput.reput_from_offset,
                                          consume_queues=self.consume_queues, index=self.index)

    def _create_flush_services(self, checkpoint: StoreCheckpoint) -> None:
        """Group commit (SYNC_FLUSH) or async flush (+ commit, with the pool); they record
        the flushed store time in the checkpoint, so they are made once it is open."""
        config = self.config
        flushed_time = FlushedTime(checkpoint, lambda: config.broker_role.is_master)
        self.group_commit = self.flush_service = self.commit_service = None
        if config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self.group_commit = GroupCommitService(self.commit_log.queue, flushed_time, self.flags,
                                                   inline=config.sync_flush_inline)
            return
        self.flush_service = FlushRealTimeService(
            self.commit_log.queue,
            Cadence(config.flush_interval_commit_log, config.flush_commit_log_least_pages,
                    config.flush_commit_log_thorough_interval),
            timed=config.flush_commit_log_timed,
            flushed_time=flushed_time,
            flags=self.flags,
        )
        if self.pool is not None:
            self.commit_service = CommitRealTimeService(
                self.commit_log.queue,
                Cadence(config.commit_interval_commit_log, config.commit_commit_log_least_pages,
                        config.commit_commit_log_thorough_interval),
                on_committed=self.flush_service.wakeup,
            )

    def _recover_topic_queue_table(self) -> None:
        """Next queue offsets come from the ConsumeQueues (the CommitLog has no table), and
        from the records dispatch still holds back past the confirm offset known (they took
        their queue offsets when they were written: a put must not take one again)."""
        table = {}
        min_phy = self.commit_log.min_offset()
        for cq in self.consume_queues:
            table[f"{cq.topic}-{cq.queue_id}"] = cq.max_offset_in_queue
            cq.correct_min_offset(min_phy)
        self._count_held_records(table)
        self.commit_log.topic_queue_table = table

    def _count_held_records(self, table: dict[str, int]) -> None:
        """Raise `table` by the records from the dispatch position to the CommitLog's end."""
        offset, end = self.reput.reput_from_offset, self.commit_log.max_offset()
        while offset < end:
            mf = self.commit_log.queue.find_by_offset(offset)
            if mf is None or not mf.hold():
                return
            try:
                data = memoryview(mf.mm)[:mf.get_read_position()]
                try:
                    for item in walk(data, offset - mf.file_from_offset, segment_start=mf.file_from_offset,
                                     read_body=False):
                        if type(item) is not Record:
                            break
                        m = item.message
                        if m.sys_flag & TRANSACTION_MASK in (0, TRANSACTION_COMMIT):  # as dispatch counts
                            key = f"{m.topic}-{m.queue_id}"
                            table[key] = max(table.get(key, 0), m.queue_offset + 1)
                finally:
                    data.release()
            finally:
                mf.release()
            offset = mf.file_from_offset + self.commit_log.file_size  # the next segment

    def _recover_commit_log(self, progress: RecoveryProgress | None) -> int:
        """CommitLog recovery (store/recovery.py); returns where valid data ends. After a
        crash everything from the first validated segment is dispatched again at start."""
        if not self.commit_log.queue.files:
            if len(self.consume_queues):
                log.info("recovery: no CommitLog segments; destroying every ConsumeQueue")
            self.consume_queues.destroy()
            return 0
        safe = None
        if not self.last_exit_ok:
            cp = self.checkpoint
            safe = (cp.min_timestamp_index if self.config.message_index_enable and self.config.message_index_safe
                    else cp.min_timestamp)
        recovered = self.commit_log.recover(safe_timestamp=safe, progress=progress)
        self.recovery_cut = recovered
        self._dispatch_again_from(recovered.dispatch_from)
        self._write_back_lost(recovered.end)
        return recovered.end

    def _sync_after_crash(self) -> None:
        """After a crash the ConsumeQueues hold what the dead process wrote, some of it maybe
        only in the page cache; recovery trusts it (flushed positions start at the recovered
        ends), so it is made durable now, or a later power loss takes what the checkpoint
        then claims (seeds 45, 103, 127 with `--storage`). The CommitLog's recovered bytes
        are not synced here (a failed sync of them is the flush's to handle); its checkpoint
        timestamp only grows with a flush."""
        for mf in (mf for cq in self.consume_queues for mf in cq.mapped_file_queue.files):
            mf.sync()

    def _write_back_lost(self, end: int) -> None:
        """A flush failed before the last exit (lost_writes.py): write the CommitLog back over
        itself from where that flush began, up to `end`, and sync it before trusting those
        bytes (an OSError here fails the start: the disk still fails); then drop the note."""
        note = LostWrites(self.config.store_path_root_dir)
        offset = note.offset()
        if offset is None:
            return
        for mf in self.commit_log.queue.files:
            start = max(offset, mf.file_from_offset) - mf.file_from_offset
            stop = min(end, mf.file_from_offset + mf.file_size) - mf.file_from_offset
            if stop > start:
                mf.rewrite(start, stop)
        log.warning("recovery: a CommitLog flush had failed; wrote [%d, %d) back and synced it", offset, end)
        note.clear()

    def _dispatch_again_from(self, offset: int | None) -> None:
        if offset is not None:
            self._dispatch_from = offset if self._dispatch_from is None else min(self._dispatch_from, offset)

    def _cut_queues_and_index(self, end: int) -> None:
        """After the CommitLog was cut at `end`: drop ConsumeQueue units and index files past it."""
        if self.consume_queues.max_physic_offset_of_all() > end:
            log.warning("ConsumeQueues point past the CommitLog end %d: truncating them", end)
            self.consume_queues.truncate_dirty_logic_files(end)
        if self.index is not None:
            self.index.truncate(end)
            if self.index.rebuild_from is not None:
                rebuild = max(self.index.rebuild_from, self.commit_log.min_offset(), 0)
                log.info("rebuilding the index from CommitLog offset %d", rebuild)
                self._dispatch_again_from(rebuild)

    def _restart_checkpoint_times(self) -> None:
        """After a cut of records the log held: the records that come next (a master's,
        replicated) may be stored earlier than those cut, so a checkpoint timestamp past them
        would claim their ConsumeQueue units and index entries durable before any flush
        (seeds 38 and 1641 with `--storage`: a truncation, a recovery's cut at a damaged
        record). The timestamps start again from 0, durable at once; the next abnormal
        recovery starts from the first segment."""
        cp = self.checkpoint
        cp.physic_msg_timestamp = cp.logics_msg_timestamp = cp.index_msg_timestamp = 0
        cp.flush()

    def truncate_to(self, phy_offset: int) -> TruncateReport:
        """Cut the CommitLog, the ConsumeQueues and the index at `phy_offset` and report what
        was dropped: a rejoining old master drops its divergent tail this way.

        The store must be loaded and not running (`load()`, or `truncate_store()`): nothing
        may append, flush or dispatch meanwhile. `phy_offset` must be a record boundary in
        [min offset, max offset]; anything else raises ValueError and changes nothing.
        """
        if self.running or not self.loaded or self.shutdown_done:
            raise RuntimeError("truncate_to needs a loaded store that is not running (load() it, don't start it)")
        end = self.commit_log.max_offset()
        low = max(self.commit_log.min_offset(), 0)
        if not low <= phy_offset <= end:
            raise ValueError(f"cannot truncate to offset {phy_offset}: the CommitLog holds [{low}, {end})")
        if not self.commit_log.is_record_boundary(phy_offset):
            raise ValueError(f"cannot truncate to offset {phy_offset}: no record starts there")
        msg_ids = tuple(
            decoded.message.msg_id
            for _at, decoded in self.commit_log.iter_records(phy_offset, read_body=False)
            if decoded.message is not None  # a message is decoded only for MESSAGE
        )
        segments = self.commit_log.truncate(phy_offset)
        self._cut_queues_and_index(phy_offset)
        self.replica_log.forget_confirm_past(phy_offset)
        if phy_offset < end:
            self._restart_checkpoint_times()
        report = TruncateReport(phy_offset, end, len(msg_ids), msg_ids, segments)
        if phy_offset < end:
            log.warning("truncated the store to offset %d: dropped [%d, %d), %d message(s), %d segment(s)",
                        phy_offset, phy_offset, end, len(msg_ids), len(segments))
        return report

    def close(self) -> None:
        """Release a store that was loaded but never started (offline tools, `truncate_store`):
        make everything durable and unlock. The abort file is left as it was."""
        if self.running:
            raise RuntimeError("close() is for a store that was not started; a running one shuts down")
        if self.shutdown_done:
            return
        if not self.loaded:
            raise RuntimeError("close() is for a loaded store; this one was never loaded")
        self._catch_up_dispatch()  # an index cut by truncate_to is rebuilt before closing
        flush_to_end(self.commit_log.queue)
        self.consume_queues.flush(0)
        if self.index is not None:
            self.index.shutdown()
        self.checkpoint.shutdown()
        self.consume_queues.shutdown()
        self.commit_log.shutdown()
        if self.pool is not None:
            self.pool.destroy()
        self.lock.release()
        self.flags.shut_down = True

    def _catch_up_dispatch(self) -> None:
        """Dispatch whatever the ConsumeQueues and index do not cover yet (a store holding
        only CommitLog segments rebuilds its queues and index here), from where recovery or
        a truncation said dispatch is owed."""
        self.reput.reput_from_offset = max(
            self.consume_queues.max_physic_offset_of_all(), self.commit_log.min_offset(), 0
        )
        if self._dispatch_from is not None:
            self.reput.reput_from_offset = min(self.reput.reput_from_offset, self._dispatch_from)
            self._dispatch_from = None
        behind = self.reput.dispatch_behind_bytes()
        if behind:
            log.info("dispatching %d CommitLog bytes from offset %d", behind, self.reput.reput_from_offset)
        self.reput.do_reput()

    async def start(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self._catch_up_dispatch()
        self._recover_topic_queue_table()
        self.add_append_listener(self.reput.wake_if_visible)
        nursery.start_soon(self.reput.run)
        nursery.start_soon(self.flush_cq_service.run)
        nursery.start_soon(self.clean_commit_log.run)
        nursery.start_soon(self.clean_consume_queue.run)
        nursery.start_soon(self.cold_pages.run)
        nursery.start_soon(self.allocator.run)
        self.add_append_listener(self._wake_flush)  # the one flush wake-up per append
        if self.group_commit is not None:
            nursery.start_soon(self.group_commit.run)
        if self.flush_service is not None:
            nursery.start_soon(self.flush_service.run)
        if self.commit_service is not None:
            nursery.start_soon(self.commit_service.run)
        self.abort_file.create()
        self.flags.running = True

    async def shutdown(self) -> None:
        """Flush everything, then remove the abort file as the very last step."""
        if self.shutdown_done:
            return
        self.flags.running = False
        with trio.CancelScope(shield=True):
            for cleaner in (self.clean_commit_log, self.clean_consume_queue):
                await cleaner.stop()  # no deletion may run while the segments are unmapped
            if self.commit_service is not None:
                await self.commit_service.shutdown()
            if self.group_commit is not None:
                await self.group_commit.shutdown()
            if self.flush_service is not None:
                await self.flush_service.shutdown()
            else:
                await final_flush(self.commit_log.queue, self.flags)
            if self.replica_log.noted and not self.config.read_un_committed:
                self.replica_log.hold_at_known_confirm()  # the confirm offset known stays the limit
            self.reput.do_reput()  # everything up to it: what lies past waits for the next term
            await self.flush_cq_service.flush(0)
            if self.index is not None:
                await runtime.run_sync(self.index.shutdown)
            await runtime.run_sync(self.checkpoint.shutdown)
        self.consume_queues.shutdown()
        self.commit_log.shutdown()
        if self.pool is not None:
            self.pool.destroy()
        if self.flags.is_writeable() and (self.reput.dispatch_behind_bytes() == 0 or self.reput.held_back):
            self.abort_file.remove()
        self.lock.release()
        self.flags.shut_down = True

    def abandon(self) -> None:
        """What SIGKILL leaves (a simulated kill, store/runtime.py): every map released as it
        is, so the files keep what was written (the page cache does) but nothing is flushed,
        the checkpoint is not written and the abort file stays for recovery to find."""
        if self.shutdown_done:
            return
        self.flags.running = False
        self.consume_queues.shutdown()
        self.commit_log.shutdown()
        if self.index is not None:
            self.index.close()
        self.checkpoint.close()
        if self.pool is not None:
            self.pool.destroy()
        self.lock.release()
        self.flags.shut_down = True

    def _wake_flush(self) -> None:
        """CommitLog append listener: wake the CommitLog flush (puts and replicated bytes)."""
        if self.group_commit is not None:
            self.group_commit.wakeup()
        elif self.flush_service is not None:
            self.flush_service.wakeup()

    # ---- puts and reads: MessagePuts' and MessageReads' (async ones hand back their coroutine) --
    def prepare_message(self, msg: Message) -> Prepared | PutMessageResult:
        return self.puts.prepare_message(msg)

    def prepare_batch(self, msgs: Sequence[Message]) -> Prepared | PutMessageResult:
        return self.puts.prepare_batch(msgs)

    def append_prepared(self, puts: Sequence[Prepared | PutMessageResult]) -> list[Appended]:
        return self.puts.append_prepared(puts)

    def append_message(self, msg: Message) -> Appended:
        return self.puts.append_message(msg)

    def append_batch(self, msgs: Sequence[Message]) -> Appended:
        return self.puts.append_batch(msgs)

    def finish_puts(self, appended: Sequence[tuple[Appended, bool]], *, since: float | None = None) -> Coroutine[Any, Any, list[PutMessageResult]]:
        return self.puts.finish_puts(appended, since=since)

    def put_message(self, msg: Message) -> Coroutine[Any, Any, PutMessageResult]:
        return self.puts.put_message(msg)

    def put_messages(self, msgs: Sequence[Message]) -> Coroutine[Any, Any, PutMessageResult]:
        return self.puts.put_messages(msgs)

    def put_waits(self, wait: bool) -> bool:
        return self.puts.put_waits(wait)

    def get_min_phy_offset(self) -> int:
        return self.reads.get_min_phy_offset()

    def get_max_phy_offset(self) -> int:
        return self.reads.get_max_phy_offset()

    def complete_end(self) -> int:
        """Where the last whole record ends (a promoted slave's log is recovered to it): the
        records from the dispatch position on are walked, headers only."""
        return self.commit_log.complete_end(self.reput.reput_from_offset)

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.reads.get_min_offset_in_queue(topic, queue_id)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.reads.get_max_offset_in_queue(topic, queue_id)

    @property
    def recovery_dropped(self) -> bool:
        """Recovery cut bytes the log held (a torn or damaged record): RecoveredLog.dropped."""
        return self.recovery_cut is not None and self.recovery_cut.dropped

    def queue_ends_held(self) -> dict[tuple[str, int], int]:
        """(topic, queueId) → where each queue ends once the CommitLog's records not yet
        dispatched are (their stored queue offsets): a restarted master holds dispatch at its
        confirm offset, so its ConsumeQueues may end short of what its log holds. Only the
        queues those records name; read from the dispatch position to the log's end."""
        out: dict[tuple[str, int], int] = {}
        for _at, decoded in self.commit_log.iter_records(self.reput.reput_from_offset, read_body=False):
            message = decoded.message
            if message is not None:
                key = (message.topic, message.queue_id)
                out[key] = max(out.get(key, 0), message.queue_offset + 1)
        return out

    def get_queue_offset_at_or_after(self, topic: str, queue_id: int, commitlog_offset: int) -> int:
        return self.reads.get_queue_offset_at_or_after(topic, queue_id, commitlog_offset)

    def look_message_by_offset(self, commitlog_offset: int, size: int | None = None) -> StoredMessage | None:
        return self.reads.look_message_by_offset(commitlog_offset, size)

    def iter_messages(self, from_offset: int) -> Iterator[StoredMessage]:
        return self.reads.iter_messages(from_offset)

    def dispatched_offset(self) -> int:
        """Where dispatch to the ConsumeQueues has reached in the CommitLog (what lies past it
        is in no queue yet: not on every in-sync slave, or not dispatched yet)."""
        return self.reput.reput_from_offset

    def look_message_by_msg_id(self, msg_id: str) -> StoredMessage | None:
        return self.reads.look_message_by_msg_id(msg_id)

    def message_bytes(self, commitlog_offset: int) -> bytes | None:
        return self.reads.message_bytes(commitlog_offset)

    def records_bytes(self, messages: Sequence[StoredMessage]) -> list[bytes | None]:
        return self.reads.records_bytes(messages)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return self.reads.get_offset_in_queue_by_time(topic, queue_id, timestamp_ms)

    def get_earliest_message_time(self, topic: str | None = None, queue_id: int = 0) -> int | None:
        return self.reads.get_earliest_message_time(topic, queue_id)

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msgs: int, tag_filter: str | None = None,
                    message_filter: MessageFilter | None = None) -> GetMessageResult:
        return self.reads.get_message(group, topic, queue_id, offset, max_msgs, tag_filter, message_filter)

    def query_message(self, topic: str, key: str, max_num: int = 32, begin_ts: int = 0, end_ts: int = 2**63 - 1) -> list[StoredMessage]:
        return self.reads.query_message(topic, key, max_num, begin_ts, end_ts)

    def query_message_result(self, topic: str, key: str, max_num: int = 32, begin_ts: int = 0,
                             end_ts: int = 2**63 - 1) -> QueryMessageResult:
        return self.reads.query_message_result(topic, key, max_num, begin_ts, end_ts)

    def wait_for_message(self, topic: str, queue_id: int, offset: int, timeout: float) -> Coroutine[Any, Any, bool]:
        return self.reads.wait_for_message(topic, queue_id, offset, timeout)

    def dispatch_behind_bytes(self) -> int:
        return self.reads.dispatch_behind_bytes()

    def damaged(self) -> list[dict[str, int | str]]:
        """The CommitLog records known to fail their body CRC (store/damage.py), for `status`."""
        return self.commit_log.damage.view()

    # ---- admin -------------------------------------------------------------------------------
    async def delete_expired_files_manually(self) -> int:
        """The admin op (RocketMQ executeDeleteFilesManually): the next 20 cleanup passes
        delete expired CommitLog files whatever the hour, the first of them right now (then
        the ConsumeQueues and index follow). Returns how many CommitLog files that first
        pass deleted; fileReservedTime still applies."""
        if not self.running:
            raise RuntimeError("the store is not started: no cleanup runs")
        self.clean_commit_log.execute_delete_files_manually()
        deleted = await self.clean_commit_log.run_once()
        await self.clean_consume_queue.run_once()
        return deleted


def truncate_store(config: StoreConfig, phy_offset: int, *, clamp: bool = False) -> TruncateReport:
    """Load a stopped store, cut it at `phy_offset` (`MessageStore.truncate_to`), close it
    (blocking). The next `open_store` recovers to the cut state. With `clamp` an offset
    outside the log is brought inside: one below its start (no common history with a new
    leader) cuts everything the store still holds, and one inside a record cuts from that
    record's start (the logs differ there already: a node never stops on such a point)."""
    store = MessageStore(config)
    store.load()
    try:
        if clamp:
            end = store.commit_log.max_offset()
            phy_offset = min(max(phy_offset, store.commit_log.min_offset(), 0), end)
            start = store.commit_log.record_start_at_or_before(phy_offset)
            if start != phy_offset:
                log.warning("no record starts at offset %d: cutting from the record that holds it, at %d",
                            phy_offset, start)
                phy_offset = start
        report = store.truncate_to(phy_offset)
    finally:
        store.close()
    recovered = store.recovery_cut
    if recovered is None or recovered.dropped_to <= report.to_offset:
        return report
    # the load's recovery cut at a damaged record already: what it dropped past there was
    # this node's too, and the report names it (storage seed 352)
    ids = report.msg_ids + recovered.dropped_msg_ids
    return attrs.evolve(report, to_offset=recovered.dropped_to, message_count=len(ids), msg_ids=ids)


@asynccontextmanager
async def open_store(
    config: StoreConfig,
    *,
    clock: Callable[[], float] = runtime.wall_clock,
    disk_usage: DiskUsage | None = None,
    recovery_progress: RecoveryProgress | None = None,
    replicated: bool = False,
) -> AsyncIterator[MessageStore]:
    """Open, recover and start a store; shut it down cleanly when the block exits.

    `recovery_progress(validated_bytes, total_bytes)` is called while the CommitLog is
    validated (from the loading worker thread), ending with (total, total). `replicated`:
    a node's store (`MessageStore.replicated`).
    """
    store = MessageStore(config, clock=clock, disk_usage=disk_usage, replicated=replicated)
    await runtime.run_sync(store.load, recovery_progress)
    try:
        async with trio.open_nursery() as nursery:
            await store.start(nursery)
            try:
                yield store
            finally:
                if runtime.killed():
                    store.abandon()
                else:
                    await store.shutdown()
                nursery.cancel_scope.cancel()
    finally:
        if not store.shutdown_done:
            store.lock.release()
