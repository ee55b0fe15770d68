"""Expired-file cleanup (ROCKETMQ-FACTS §8, seed 002): DefaultMessageStore's
CleanCommitLogService and CleanConsumeQueueService as trio services.

CommitLog. A pass deletes segments when any of these holds:

- the local hour (from the injected clock) is in `deleteWhen` ("04;05" = hour 4 or 5);
- the partition of the CommitLog or of the ConsumeQueues is over `diskMaxUsedSpaceRatio`, or
  its usage cannot be read;
- a manual delete is pending (`execute_delete_files_manually()`: the next 20 passes).

Segments go oldest first, never the newest, at most 10 a pass, `deleteCommitLogFilesInterval`
apart, stopping at the first segment kept: one whose mtime is younger than `fileReservedTime`
hours (unless cleaning "immediately") or that a reader still holds. A held segment is marked
unavailable and deleted on a later pass: once the reader lets go, or by force after
`destroyMapedFileIntervalForcibly`. A first segment left in that state is retried every
`redeleteHangedFileInterval` even when nothing else triggers a pass.

Disk usage is used / (used + available to non-root), rounded up to 0.01 (RocketMQ's
getDiskPartitionSpaceUsedPercent):

- over `diskSpaceCleanForciblyRatio` (0.85): clean immediately, i.e. regardless of age,
  when `cleanFileForciblyEnable`;
- over `diskSpaceWarningLevelRatio` (0.90): also set RunningFlags.DISK_FULL, so puts get
  SERVICE_NOT_AVAILABLE ("the disk is full"); the first pass that sees usage at or below
  that ratio clears it. RocketMQ's separate 10 s disk-full check is part of the pass here.

ConsumeQueues and index. Only when the CommitLog minimum offset grew since the last pass:
each queue deletes the old segments whose last unit points below that minimum (keeping its
newest) and corrects its min offset, then the index drops files wholly below it. A consumer
at an older offset then gets OFFSET_TOO_SMALL with next_begin_offset = the new minimum.

Deliberate differences from RocketMQ 4.9.8:

- The forcibly and warning ratios also start a pass by themselves (RocketMQ only sets
  "clean immediately" and still needs usage over diskMaxUsedSpaceRatio, the hour or a manual
  delete, so with diskMaxUsedSpaceRatio=95 a DISK_FULL store would refuse puts until 4 am).
- The CommitLog and ConsumeQueue partitions are judged together by the higher usage (in
  RocketMQ an OK ConsumeQueue partition clears the DISK_FULL the CommitLog set a moment
  before). Unreadable usage leaves DISK_FULL as it is (RocketMQ clears it).
- A segment is deleted only once it is flushed and dispatched to the ConsumeQueues (its end
  is at or below both flushed_where and the reput offset): "clean immediately" must not
  delete acknowledged messages no consumer could ever see, nor bytes not yet on disk.
- The hanged-file retry first runs one interval after the service starts (RocketMQ: at the
  first pass), so a held segment is not forced in the very pass that first tried it.
- ConsumeQueue segments are deleted on the trio thread: they are small, and the dispatcher
  appends to a queue's segment list on that thread without a lock, so the list must not be
  replaced from another one. CommitLog segments and index files, which can be large, are
  unmapped and unlinked in a worker thread (the CommitLog list still changes on the trio
  thread; the index list is under IndexService's lock).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

import attrs
import psutil
import trio

from . import runtime
from .config import StoreConfig
from .consume_queue import ConsumeQueueTable
from .index_file import IndexService
from .mapped_file import MappedFile
from .mapped_file_queue import MappedFileQueue
from .running_flags import RunningFlags

log = logging.getLogger("tidemq.store")

MAX_MANUAL_DELETE_FILE_TIMES = 20  # DefaultMessageStore.CleanCommitLogService
DELETE_FILES_BATCH_MAX = 10  # MappedFileQueue.DELETE_FILES_BATCH_MAX
HOUR_MS = 3_600_000

DiskUsage = Callable[[str], float]


def used_ratio(used: int, free: int) -> float:
    """used / (used + free) rounded *up* to 0.01; -1.0 for an empty partition."""
    entire = used + free
    if entire <= 0:
        return -1.0
    percent = used * 100 // entire + (1 if used * 100 % entire else 0)
    return percent / 100


def disk_partition_used_ratio(path: str) -> float:
    """Used fraction (0..1) of the partition holding `path`, -1.0 when it cannot be read.

    psutil's `used` is total - free blocks and its `free` is what non-root users may still
    use, so this is RocketMQ's used / (used + usable). Like RocketMQ, a missing directory is
    created first (it is the store's own CommitLog or ConsumeQueue directory).
    """
    simulated = runtime.disk_used_ratio(path)  # a simulated host's disk (chaos/sim/disk.py)
    if simulated is not None:
        return simulated
    try:
        os.makedirs(path, exist_ok=True)
        usage = psutil.disk_usage(path)
    except OSError as e:
        log.warning("cannot read the disk usage of %s: %s", path, e)
        return -1.0
    return used_ratio(usage.used, usage.free)


def is_hour_in(delete_when: str, hour: int) -> bool:
    """UtilAll.isItTimeToDo: `delete_when` is hours of day separated by ';'."""
    return any(part.strip() and int(part) == hour for part in delete_when.split(";"))


class _Service:
    """Shared loop and shutdown handling: one pass at a time, `stop()` waits for it."""

    name = "cleanup"

    def __init__(self, config: StoreConfig, initial_delay_ms: int | None) -> None:
        self.config = config
        interval = self.config.clean_resource_interval
        self.initial_delay_ms = interval if initial_delay_ms is None else initial_delay_ms
        self._pass_lock = trio.Lock()
        self._stopped = False

    async def run_once(self) -> object:
        raise NotImplementedError

    async def run(self) -> None:
        """A pass every cleanResourceInterval, the first after `initial_delay_ms`
        (RocketMQ: 60 s). A failing pass is logged and the loop goes on."""
        await runtime.sleep(self.initial_delay_ms / 1000)
        while not self._stopped:
            try:
                await self.run_once()
            except Exception:
                log.exception("%s pass failed", self.name)
            await runtime.sleep(self.config.clean_resource_interval / 1000)

    async def stop(self) -> None:
        """No more passes; returns once a pass in progress has finished (store shutdown
        calls it before unmapping the segments)."""
        self._stopped = True
        async with self._pass_lock:
            pass


class CleanCommitLogService(_Service):
    """Deletes expired CommitLog segments and watches the disk (see the module docstring).

    It is handed what it works on: the CommitLog's segment queue, the ConsumeQueue directory
    (whose partition is watched too), the running flags (DISK_FULL) and `dispatched_to`, the
    CommitLog offset dispatch has reached (segments past it are not deleted).
    """

    name = "CleanCommitLogService"

    def __init__(
        self,
        config: StoreConfig,
        queue: MappedFileQueue,
        *,
        consume_queue_path: str,
        flags: RunningFlags,
        dispatched_to: Callable[[], int],
        clock: Callable[[], float] = runtime.wall_clock,
        disk_usage: DiskUsage | None = None,
        initial_delay_ms: int | None = None,
    ) -> None:
        super().__init__(config, initial_delay_ms)
        self.queue = queue
        self.consume_queue_path = consume_queue_path
        self.flags = flags
        self.dispatched_to = dispatched_to
        self.clock = clock
        self.disk_usage: DiskUsage = disk_usage or disk_partition_used_ratio
        self.manual_delete_remaining = 0
        self.clean_immediately = False
        self.last_ratio = -1.0  # the usage the last pass acted on; -1.0 = unreadable / none yet
        self.last_redelete_ms = clock() * 1000
        self.deleted_total = 0

    # ---- triggers ------------------------------------------------------------------------------
    def execute_delete_files_manually(self) -> None:
        """Let the next 20 passes delete expired segments whatever the hour and disk usage."""
        self.manual_delete_remaining = MAX_MANUAL_DELETE_FILE_TIMES
        log.info("executeDeleteFilesManually: the next %d cleanup passes delete expired CommitLog files",
                 MAX_MANUAL_DELETE_FILE_TIMES)

    def is_time_to_delete(self) -> bool:
        hour = time.localtime(self.clock()).tm_hour
        if is_hour_in(self.config.delete_when, hour):
            log.info("it's time to reclaim disk space (hour %d in deleteWhen %r)", hour, self.config.delete_when)
            return True
        return False

    def check_disk_space(self) -> bool:
        """Probe the CommitLog and ConsumeQueue partitions: set clean_immediately, set or
        clear DISK_FULL, and return whether space is to be reclaimed."""
        cfg = self.config
        paths = dict.fromkeys((self.queue.store_path, self.consume_queue_path))
        readable: list[float] = []
        unreadable: list[str] = []
        for path in paths:
            ratio = self.disk_usage(path)
            if ratio < 0:
                unreadable.append(path)
            else:
                readable.append(ratio)
        ratio = max(readable) if readable else -1.0
        self.last_ratio = ratio
        self.clean_immediately = False
        flags = self.flags
        if readable:
            if ratio > cfg.disk_space_warning_level_ratio:
                self.clean_immediately = True
                if not flags.is_set(RunningFlags.DISK_FULL):
                    flags.set(RunningFlags.DISK_FULL)
                    log.error("disk usage %.2f is over diskSpaceWarningLevelRatio %.2f: DISK_FULL set, "
                              "puts are refused until cleanup frees space", ratio, cfg.disk_space_warning_level_ratio)
            else:
                if ratio > cfg.disk_space_clean_forcibly_ratio:
                    self.clean_immediately = True
                if flags.is_set(RunningFlags.DISK_FULL):
                    flags.clear(RunningFlags.DISK_FULL)
                    log.info("disk usage %.2f is back at or under diskSpaceWarningLevelRatio %.2f: DISK_FULL "
                             "cleared, puts are accepted again", ratio, cfg.disk_space_warning_level_ratio)
        if unreadable:
            log.warning("disk usage of %s cannot be read: reclaiming space as if it were full", ", ".join(unreadable))
            return True
        if ratio > cfg.disk_max_used_space_ratio / 100:
            log.info("disk maybe full soon (usage %.2f over diskMaxUsedSpaceRatio %d%%): reclaim space",
                     ratio, cfg.disk_max_used_space_ratio)
            return True
        return self.clean_immediately

    # ---- the pass ------------------------------------------------------------------------------
    async def run_once(self) -> int:
        """One pass; returns how many CommitLog segments it deleted."""
        async with self._pass_lock:
            if self._stopped:
                return 0
            deleted = await self._delete_expired_files()
            deleted += await self._redelete_hanged_file()
            self.deleted_total += deleted
            return deleted

    async def _delete_expired_files(self) -> int:
        cfg = self.config
        timeup = self.is_time_to_delete()
        spacefull = self.check_disk_space()
        manual = self.manual_delete_remaining > 0
        if not (timeup or spacefull or manual):
            return 0
        if manual:
            self.manual_delete_remaining -= 1
        clean_at_once = cfg.clean_file_forcibly_enable and self.clean_immediately
        log.info("begin to delete expired CommitLog files: timeup=%s spacefull=%s manual=%s (%d left) "
                 "cleanAtOnce=%s", timeup, spacefull, manual, self.manual_delete_remaining, clean_at_once)
        deleted = await self._delete_by_time(cfg.file_reserved_time * HOUR_MS, clean_at_once)
        if deleted == 0 and spacefull:
            log.warning("disk space will be full soon, but no CommitLog file could be deleted")
        return deleted

    def _safe_end(self) -> int:
        """Segments ending at or below this offset are flushed and dispatched."""
        return min(self.queue.flushed_where, self.dispatched_to())

    async def _delete_by_time(self, expired_ms: int, clean_at_once: bool) -> int:
        """MappedFileQueue.deleteExpiredFileByTime, with the injected clock."""
        queue = self.queue
        candidates = queue.files[:-1]  # never the newest
        pause = self.config.delete_commit_log_files_interval / 1000
        deleted = 0
        for i, mf in enumerate(candidates):
            if self._stopped:
                break
            if not clean_at_once and self.clock() * 1000 < mf.last_modified * 1000 + expired_ms:
                break  # not expired: keep it and everything newer (no holes)
            if mf.file_from_offset + queue.file_size > self._safe_end():
                log.warning("CommitLog segment %s is not flushed and dispatched yet: not deleted", mf.path)
                break
            if not await self._destroy(queue, mf):
                break
            deleted += 1
            if deleted >= DELETE_FILES_BATCH_MAX:
                break
            if pause > 0 and i + 1 < len(candidates):
                await runtime.sleep(pause)
        return deleted

    async def _redelete_hanged_file(self) -> int:
        """Retry a first segment that was shut down but not cleaned up (a reader held it)."""
        now_ms = self.clock() * 1000
        if now_ms - self.last_redelete_ms <= self.config.redelete_hanged_file_interval:
            return 0
        self.last_redelete_ms = now_ms
        queue = self.queue
        first = queue.first()
        if first is None or first is queue.last() or first.available:
            return 0
        log.warning("CommitLog segment %s was destroyed once but is still alive: retrying", first.path)
        return 1 if await self._destroy(queue, first) else 0

    async def _destroy(self, queue: MappedFileQueue, mf: MappedFile) -> bool:
        """Unmap and unlink in a worker thread; the segment list changes on the trio thread."""
        forcibly = self.config.destroy_mapped_file_interval_forcibly
        try:
            gone = await runtime.run_sync(mf.destroy, forcibly)
        except OSError as e:
            log.error("cannot delete CommitLog segment %s: %s", mf.path, e)
            return False
        if not gone:
            log.warning("CommitLog segment %s is still held by a reader (%d refs): deletion deferred, "
                        "forced %d ms after the first attempt", mf.path, mf.ref_count, forcibly)
            return False
        queue.forget(mf)
        log.info("deleted expired CommitLog segment %s", mf.path)
        return True


@attrs.frozen
class CleanQueuesResult:
    """What one CleanConsumeQueueService pass did."""

    min_phy_offset: int
    cq_files: int
    index_files: int


class CleanConsumeQueueService(_Service):
    """Deletes ConsumeQueue segments and index files the CommitLog no longer backs
    (`commit_log_min_offset` says where it now starts)."""

    name = "CleanConsumeQueueService"

    def __init__(
        self,
        config: StoreConfig,
        *,
        commit_log_min_offset: Callable[[], int],
        consume_queues: ConsumeQueueTable,
        index: IndexService | None,
        initial_delay_ms: int | None = None,
    ) -> None:
        super().__init__(config, initial_delay_ms)
        self.commit_log_min_offset = commit_log_min_offset
        self.consume_queues = consume_queues
        self.index = index
        self.last_physical_min_offset = 0

    async def run_once(self) -> CleanQueuesResult | None:
        """One pass; None when the CommitLog minimum offset has not grown since the last one."""
        async with self._pass_lock:
            if self._stopped:
                return None
            min_phy = self.commit_log_min_offset()
            if min_phy <= self.last_physical_min_offset:
                return None
            self.last_physical_min_offset = min_phy
            pause = self.config.delete_consume_queue_files_interval / 1000
            cq_files = 0
            for cq in self.consume_queues:
                if self._stopped:
                    break
                # also corrects the queue's min offset (ConsumeQueue.deleteExpiredFile)
                deleted = cq.delete_expired_file(min_phy)
                cq_files += deleted
                if deleted and pause > 0:
                    await runtime.sleep(pause)
                else:
                    await trio.lowlevel.checkpoint()
            index_files = 0
            if self.index is not None and not self._stopped:
                index_files = await runtime.run_sync(self.index.delete_expired_file, min_phy)
            if cq_files or index_files:
                log.info("CommitLog min offset %d: deleted %d ConsumeQueue and %d index files",
                         min_phy, cq_files, index_files)
            return CleanQueuesResult(min_phy, cq_files, index_files)
