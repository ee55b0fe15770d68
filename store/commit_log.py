"""CommitLog: every message of every topic appended to one log of fixed-size segments
(seed 000 §4.3, §4.5.1; seed 003).

The append is a memory copy into the mapped segment; on the single trio thread it runs
with no await inside, so it is the put lock's critical section. The store timestamp,
queue offset and physical offset are patched into the pre-encoded record there. A record
that does not fit (needs `size + 8` bytes) leaves a BLANK filler and goes to a new segment.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence

import attrs

from . import runtime
from .allocate import AllocateMappedFileService
from .config import StoreConfig
from .damage import DamagedRanges
from .layout import COMMITLOG_DIR
from .mapped_file import MappedFile, SelectResult
from .mapped_file_queue import MappedFileQueue
from .msg_id import msg_id_prefix
from .record_codec import (
    END_FILE_MIN_BLANK_LENGTH,
    Decoded,
    PreparedRecord,
    RecordKind,
    decode_record,
    encode_blank,
    place_records,
)
from .recovery import RecoveredLog, RecoveryProgress, recover, truncate
from .status import AppendMessageResult, AppendMessageStatus
from .transient_store_pool import TransientStorePool

log = logging.getLogger("tidemq.store")


class _AppendRefused(Exception):
    """No segment can take the record(s): the append returns this status, nothing written."""

    def __init__(self, status: AppendMessageStatus, error: str = "") -> None:
        super().__init__(error or status.value)
        self.status = status
        self.error = error


@attrs.define(slots=True, eq=False)
class _Run:
    """Puts of a group placed in one segment, not yet written."""

    mf: MappedFile | None
    parts: list[bytes] = attrs.Factory(list)
    size: int = 0
    placed: int = 0
    queue_offsets: dict[str, int] = attrs.Factory(dict)


class CommitLog:
    def __init__(
        self,
        config: StoreConfig,
        *,
        pool: TransientStorePool | None = None,
        allocator: AllocateMappedFileService | None = None,
        clock: Callable[[], float] = runtime.wall_clock,
    ) -> None:
        self.config = config
        self.file_size = config.mapped_file_size_commit_log
        self.allocator = allocator
        self.queue = MappedFileQueue(
            config.path(COMMITLOG_DIR),
            self.file_size,
            pool=pool,
            allocator=allocator.allocate if allocator else None,
        )
        self.store_host = config.store_host
        # "topic-queueId" -> next logical offset in that queue
        self.topic_queue_table: dict[str, int] = {}
        self.begin_time_in_lock = 0.0
        self._clock = clock
        self._id_prefix = ("", "")  # (store host, its msgId prefix)
        self.on_append: list[Callable[[], None]] = []
        self.damage = DamagedRanges()
        """Records that failed their body CRC on a read or at recovery (damage.py)."""

    def load(self) -> None:
        self.queue.load()

    # ---- recovery and truncation (store/recovery.py) ----------------------------------------
    def recover(self, *, safe_timestamp: int | None, progress: RecoveryProgress | None = None) -> RecoveredLog:
        """Find the end of valid data and cut the log there; `safe_timestamp` is None after a
        clean exit, else the checkpoint's safe store time (abnormal recovery)."""
        # a master keeps a durable record that fails its CRC (noted damaged); a slave cuts
        # there and refetches the rest from its master (damage.py)
        keep = self.damage if self.config.broker_role.is_master else None
        return recover(self.queue, safe_timestamp=safe_timestamp, check_crc=self.config.check_crc_on_recover,
                       progress=progress, damage=keep)

    def is_record_boundary(self, offset: int) -> bool:
        """Whether a record (or the log's end, or a segment) starts at `offset`."""
        if offset == self.max_offset() or (offset % self.file_size == 0 and self.queue.find_by_offset(offset) is not None):
            return True
        for at, _decoded in self.iter_records(offset - offset % self.file_size, read_body=False):
            if at >= offset:
                return at == offset
        return False

    def record_start_at_or_before(self, offset: int) -> int:
        """The last record boundary (`is_record_boundary`) at or before `offset`."""
        if self.is_record_boundary(offset):
            return offset
        start = offset - offset % self.file_size
        found = start
        for at, _decoded in self.iter_records(start, read_body=False):
            if at >= offset:
                break
            found = at
        return found

    def truncate(self, offset: int) -> tuple[str, ...]:
        """Cut the log at `offset` (a record boundary); returns the deleted segments' names.
        The topic-queue table is the caller's to rebuild."""
        self.damage.forget_from(offset)
        return truncate(self.queue, offset, sync=True)

    # ---- append ------------------------------------------------------------------------------
    def is_os_page_cache_busy(self) -> bool:
        begin = self.begin_time_in_lock
        if begin <= 0:
            return False
        held_ms = (runtime.monotonic() - begin) * 1000
        return self.config.os_page_cache_busy_timeout_mills < held_ms < 10_000_000

    def _segment_for(self, size: int) -> MappedFile:
        """The segment that will take `size` bytes, writing the BLANK filler when needed;
        raises _AppendRefused when no segment can take them."""
        mf = self.queue.get_last_mapped_file(0)
        if mf is None:  # no segment could be created (disk full, ...): nothing is written
            raise _AppendRefused(AppendMessageStatus.UNKNOWN_ERROR, self.queue.create_error or "no CommitLog segment")
        if size + END_FILE_MIN_BLANK_LENGTH > mf.remaining:
            if size + END_FILE_MIN_BLANK_LENGTH > self.file_size:
                raise _AppendRefused(AppendMessageStatus.MESSAGE_SIZE_EXCEEDED)
            self._fill_blank(mf)
            mf = self.queue.get_last_mapped_file(0)
            if mf is None:
                raise _AppendRefused(
                    AppendMessageStatus.UNKNOWN_ERROR, self.queue.create_error or "no CommitLog segment"
                )
        return mf

    def _fill_blank(self, mf: MappedFile) -> None:
        remaining = mf.remaining
        filler = encode_blank(remaining)
        if mf.write_buffer is not None:  # a reused buffer may hold stale bytes: zero the tail
            filler += bytes(remaining - len(filler))
        if not mf.append(filler):  # (a full disk): the segment stays as it was
            raise _AppendRefused(AppendMessageStatus.UNKNOWN_ERROR,
                                 mf.write_error or f"cannot write the BLANK filler of {mf.path}")
        mf.wrote_position = mf.file_size  # the sparse file's tail is already zeros

    def append_messages(self, records: Sequence[PreparedRecord], topic: str, queue_id: int) -> AppendMessageResult:
        """Append records of one topic-queue contiguously in one segment (a batch never spans
        two), filling in their queue offsets, physical offsets and the store timestamp."""
        return self.append_group(((records, topic, queue_id),))[0]

    def append_group(self, puts: Sequence[tuple[Sequence[PreparedRecord], str, int]]) -> list[AppendMessageResult]:
        """Append several puts, each `(records, topic, queue_id)` as `append_messages`
        would, in order, under one lock: one store timestamp, one write per segment they
        land in, one append notification. A put that fails does not stop the ones after."""
        results: list[AppendMessageResult] = []
        self.begin_time_in_lock = runtime.monotonic()
        now = int(self._clock() * 1000)
        run = _Run(self.queue.last())
        wrote = False
        try:
            for records, topic, queue_id in puts:
                total = records[0].total if len(records) == 1 else sum(r.total for r in records)
                if run.mf is None or total + END_FILE_MIN_BLANK_LENGTH > run.mf.remaining - run.size:
                    wrote |= self._write(run, results, now)
                    last = self.queue.last()
                    try:
                        run = _Run(self._segment_for(total))
                    except _AppendRefused as refused:
                        if self.queue.last() is not last or (last is not None and last.is_full()):
                            wrote = True  # a BLANK filler was written: dispatch must see it
                        results.append(AppendMessageResult(refused.status, error=refused.error))
                        run = _Run(None)
                        continue
                results.append(self._place(run, records, topic, queue_id, total, now))
            wrote |= self._write(run, results, now)
        finally:
            self.begin_time_in_lock = 0.0
        if wrote:
            self._notify_append()  # once per group, fillers included
        return results

    def _place(self, run: _Run, records: Sequence[PreparedRecord], topic: str, queue_id: int, total: int,
               now: int) -> AppendMessageResult:
        """Encode one put at the end of `run` (written by `_write`)."""
        mf = run.mf
        assert mf is not None, "a put is placed only in a run with a segment"
        key = f"{topic}-{queue_id}"
        queue_offset = run.queue_offsets.get(key)
        if queue_offset is None:
            queue_offset = self.topic_queue_table.get(key, 0)
        wrote_offset = phys = mf.file_from_offset + mf.wrote_position + run.size
        if self._id_prefix[0] != self.store_host:
            self._id_prefix = (self.store_host, msg_id_prefix(self.store_host))
        msg_ids, next_queue_offset = place_records(records, run.parts, queue_offset, phys, now, self._id_prefix[1])
        run.size += total
        run.queue_offsets[key] = next_queue_offset
        run.placed += 1
        return AppendMessageResult(
            AppendMessageStatus.PUT_OK,
            wrote_offset=wrote_offset,
            wrote_bytes=total,
            msg_id=msg_ids,
            store_timestamp=now,
            queue_offset=queue_offset,
            msg_num=len(records),
        )

    def _write(self, run: _Run, results: list[AppendMessageResult], now: int) -> bool:
        """Write a run's bytes with one append and commit its queue offsets; when the write
        fails, the run's puts (the last `run.placed` results) fail with nothing counted."""
        mf = run.mf
        if not run.placed or mf is None:  # puts are placed only in a run with a segment
            return False
        if not mf.append(b"".join(run.parts)):
            failed = AppendMessageResult(AppendMessageStatus.UNKNOWN_ERROR, error=mf.write_error)
            results[-run.placed:] = [failed] * run.placed
            return False
        mf.store_timestamp = now
        self.topic_queue_table.update(run.queue_offsets)
        return True

    def append_data(self, start_offset: int, data: bytes | memoryview) -> bool:
        """Slave side: append replicated bytes at exactly the log's end (segments line up
        with the master's, BLANK fillers included). An empty log starts wherever the master
        starts shipping (its newest segment), but only at a segment boundary."""
        if self.queue.last() is None:
            if start_offset % self.file_size:
                return False
        elif start_offset != self.max_offset():
            return False
        mf = self.queue.get_last_mapped_file(start_offset)
        if mf is None:
            return False
        if mf.file_from_offset + mf.wrote_position != start_offset:
            return False
        if not mf.append(data):
            return False
        self._notify_append()
        return True

    def _notify_append(self) -> None:
        for listener in self.on_append:
            listener()

    # ---- reads -------------------------------------------------------------------------------
    def min_offset(self) -> int:
        first = self.queue.first()
        if first is None:
            return -1
        if first.available:
            return first.file_from_offset
        return self.roll_next_file(first.file_from_offset)

    def max_offset(self) -> int:
        return self.queue.max_offset()

    def roll_next_file(self, offset: int) -> int:
        return offset + self.file_size - offset % self.file_size

    def get_data(self, offset: int) -> SelectResult | None:
        """Everything readable from `offset` to the end of its segment (zero-copy)."""
        mf = self.queue.find_by_offset(offset, return_first_on_not_found=offset == 0)
        if mf is None:
            return None
        return mf.select(offset % self.file_size)

    def get_message(self, offset: int, size: int) -> SelectResult | None:
        mf = self.queue.find_by_offset(offset, return_first_on_not_found=offset == 0)
        if mf is None:
            return None
        return mf.select(offset % self.file_size, size)

    def copy_spans(self, spans: Sequence[tuple[int, int]]) -> list[bytes | None]:
        """Copies of the byte ranges (offset, size), in order; None for one not readable
        whole in one segment. A segment is looked up and held once per run of spans in it
        (a pull's records), not once per span."""
        out: list[bytes | None] = []
        held: MappedFile | None = None
        try:
            for offset, size in spans:
                if held is None or not held.file_from_offset <= offset < held.file_from_offset + self.file_size:
                    if held is not None:
                        held.release()
                        held = None
                    mf = self.queue.find_by_offset(offset)
                    if mf is None or not mf.hold():
                        out.append(None)
                        continue
                    held = mf
                out.append(held.read(offset % self.file_size, size))
        finally:
            if held is not None:
                held.release()
        return out

    def read_record(self, offset: int, *, check_crc: bool = False, read_body: bool = True) -> Decoded | None:
        """Decode the record at a physical offset, its size read from the record itself."""
        mf = self.queue.find_by_offset(offset)
        if mf is None:
            return None
        pos = offset % self.file_size
        limit = mf.get_read_position()
        if pos + 8 > limit or not mf.hold():
            return None
        try:
            return decode_record(mf.mm, pos, check_crc=check_crc, read_body=read_body, limit=limit)
        finally:
            mf.release()

    def iter_records(self, from_offset: int, *, check_crc: bool = False,
                     read_body: bool = True) -> Iterator[tuple[int, Decoded]]:
        """Yield (offset, Decoded) from `from_offset` up to the readable end; BLANKs are yielded
        too and move to the next segment. Stops at the first INVALID record (yielded)."""
        offset = from_offset
        while offset < self.max_offset():
            decoded = self.read_record(offset, check_crc=check_crc, read_body=read_body)
            if decoded is None:
                return
            yield offset, decoded
            if decoded.kind is RecordKind.BLANK:
                offset = self.roll_next_file(offset)
            elif decoded.kind is RecordKind.MESSAGE:
                offset += decoded.size
            else:
                return

    def complete_end(self, from_offset: int) -> int:
        """Just past the last whole record from `from_offset` (where a record starts) on: where
        a recovery ends this log. A slave's replicated tail may stop inside a record."""
        end = from_offset
        for offset, decoded in self.iter_records(from_offset, read_body=False):
            if decoded.kind is RecordKind.MESSAGE:
                end = offset + decoded.size
            elif decoded.kind is RecordKind.BLANK:
                end = min(self.roll_next_file(offset), self.max_offset())
        return end

    def shutdown(self) -> None:
        if self.allocator is not None:
            self.allocator.shutdown()
        self.queue.shutdown()
