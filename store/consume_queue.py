"""ConsumeQueue: per topic-queue index of 20-byte units into the CommitLog (ROCKETMQ-FACTS §3, §6).

Unit i sits at logical byte offset i*20: CommitLog offset int64, record size int32, tagsCode
int64, big-endian. Files are `<consumequeue root>/<topic>/<queueId>/<20-digit logical byte
offset>` on a MappedFileQueue, so a queue whose oldest segments were deleted stays valid.

Everything here is synchronous; the blocking calls (`flush`, `recover`, deletion) are run by
the store's trio services through `trio.to_thread`. One dispatcher writes a queue; readers may
run concurrently and hold the segment they read (`get_index_buffer` returns a SelectResult
that must be released).

Deliberate deviations from RocketMQ 4.9.8, each guarding against a RocketMQ bug:

- Pre-blank units (offset 0, size Integer.MAX_VALUE) are valid units, but they never set
  `max_physic_offset` (RocketMQ would set it to 2^31-1 if a crash left only blanks, and then
  skip every later record below 2 GiB) and never become `min_logic_offset` in
  `correct_min_offset` (they are not messages).
- The duplicate check (`expect < write offset`) also applies to cqOffset 0.
- `get_offset_in_queue_by_time` returns the binary search's insertion point when no unit has
  a readable time (RocketMQ computes (fileStart - 1) / 20 there).
- `truncate_dirty_logic_files` checks the first unit of a file for validity too (RocketMQ
  keeps an all-zero first unit as if it were a record).
"""

from __future__ import annotations

import array
import logging
import struct
import sys
import threading
from collections.abc import Callable, Iterator

from .config import CQ_STORE_UNIT_SIZE
from .layout import list_queue_dirs, list_segments, queue_dir
from .mapped_file import MappedFile, SelectResult
from .mapped_file_queue import MappedFileQueue

log = logging.getLogger("tidemq.store")

UNIT = struct.Struct(">qiq")
assert UNIT.size == CQ_STORE_UNIT_SIZE
INT_MAX = 0x7FFFFFFF
BLANK_UNIT = UNIT.pack(0, INT_MAX, 0)
DELETE_FILES_INTERVAL_FORCIBLY_MS = 60_000  # RocketMQ deleteExpiredFileByOffset uses 1 min

StoreTimeAt = Callable[[int, int], int | None]


def is_blank_unit(offset: int, size: int) -> bool:
    """The pre-fill unit written before the first real unit of a queue created mid-way."""
    return offset == 0 and size == INT_MAX


def iter_units(view: memoryview | bytes) -> Iterator[tuple[int, int, int]]:
    """Decode consecutive units (offset, size, tags_code) from a buffer such as a SelectResult view."""
    for i in range(0, len(view) - len(view) % CQ_STORE_UNIT_SIZE, CQ_STORE_UNIT_SIZE):
        yield UNIT.unpack_from(view, i)


# ---------------------------------------------------------------------------------------
# offline: a queue's units in bulk


def unit_columns(data: bytes | memoryview) -> tuple[array.array[int], array.array[int]]:
    """(CommitLog offsets, sizes) of the whole units in `data`, as native int64 and int32
    arrays: `UNIT` decoded in bulk, a million units in tens of milliseconds (one
    `UNIT.unpack_from` per unit takes five times as long).

    Every unit is five big-endian 4-byte words, so the sizes are every fifth word from the
    third; an offset (8 bytes at 20*i) is 8-aligned in even units and 8-aligned from byte 4
    in odd ones, so two int64 views, every fifth element of each, give them all.
    """
    n = len(data) // CQ_STORE_UNIT_SIZE
    view = memoryview(data)[: n * CQ_STORE_UNIT_SIZE]
    words, even, odd = array.array("i"), array.array("q"), array.array("q")
    words.frombytes(view)
    even.frombytes(view[: len(view) // 8 * 8])
    if n:
        odd.frombytes(view[4 : 4 + (len(view) - 4) // 8 * 8])
    if sys.byteorder == "little":
        for a in (words, even, odd):
            a.byteswap()
    offsets = array.array("q", bytes(8 * n))
    offsets[0::2] = even[0::5]
    offsets[1::2] = odd[2::5]
    return offsets, words[2::5]


def written_units(qdir: str) -> tuple[array.array[int], array.array[int]]:
    """(CommitLog offsets, sizes) of the written units of one queue directory, in queue
    order, read from its segment files without mapping them or touching the CommitLog (the
    pipeline's topic pruning). Units of size <= 0 (unwritten) or INT_MAX (pre-blank: no
    record is that large) are dropped."""
    offsets: array.array[int] = array.array("q")
    sizes: array.array[int] = array.array("i")
    for _start, path in list_segments(qdir):
        with open(path, "rb") as f:
            data = f.read()
        # the unwritten tail is zeros: stop after the last unit holding a non-zero byte
        written = -(-len(data.rstrip(b"\0")) // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE
        file_offsets, file_sizes = unit_columns(memoryview(data)[:written])
        if file_sizes and (min(file_sizes) <= 0 or INT_MAX in file_sizes):
            kept = [(o, s) for o, s in zip(file_offsets, file_sizes, strict=True) if 0 < s != INT_MAX]
            file_offsets = array.array("q", [o for o, _ in kept])
            file_sizes = array.array("i", [s for _, s in kept])
        offsets.extend(file_offsets)
        sizes.extend(file_sizes)
    return offsets, sizes


class ConsumeQueue:
    """One topic-queue's ConsumeQueue."""

    def __init__(self, topic: str, queue_id: int, store_path: str, file_size: int) -> None:
        if file_size <= 0 or file_size % CQ_STORE_UNIT_SIZE:
            raise ValueError(f"ConsumeQueue file size {file_size} is not a positive multiple of 20")
        self.topic = topic
        self.queue_id = queue_id
        self.store_path = store_path
        self.file_size = file_size
        self.queue_dir = queue_dir(store_path, topic, queue_id)
        self.mapped_file_queue = MappedFileQueue(self.queue_dir, file_size)
        # CommitLog end (offset + size) of the newest unit built; -1 = nothing built yet.
        self.max_physic_offset = -1
        # Logical byte offset of the first consumable unit.
        self.min_logic_offset = 0

    def __repr__(self) -> str:
        return (
            f"ConsumeQueue({self.topic}-{self.queue_id}, min={self.min_offset_in_queue}, "
            f"max={self.max_offset_in_queue}, maxPhy={self.max_physic_offset})"
        )

    # ---- loading and recovery --------------------------------------------------------------
    def load(self) -> None:
        """Map the queue's segments; a segment of the wrong size raises SegmentSizeError."""
        self.mapped_file_queue.load()
        log.info("load consume queue %s-%d: %d files", self.topic, self.queue_id,
                 len(self.mapped_file_queue.files))

    def recover(self) -> None:
        """Find the end of valid units, scanning from the 3rd-last segment, and cut the rest.

        A unit is valid when offset >= 0 and size > 0 (pre-blank units pass); the first invalid
        unit ends the queue. Sets max_physic_offset from the last valid (non-blank) unit.
        """
        files = self.mapped_file_queue.files
        if not files:
            return
        index = max(0, len(files) - 3)
        mf = files[index]
        process_offset = mf.file_from_offset
        mapped_offset = 0
        while True:
            mapped_offset = 0
            mm = mf.mm
            for pos in range(0, self.file_size, CQ_STORE_UNIT_SIZE):
                offset, size, _tags = UNIT.unpack_from(mm, pos)
                if offset < 0 or size <= 0:
                    break
                mapped_offset = pos + CQ_STORE_UNIT_SIZE
                if not is_blank_unit(offset, size):
                    self.max_physic_offset = offset + size
            if mapped_offset == self.file_size:
                index += 1
                if index >= len(files):
                    log.info("recover last consume queue file over: %s", mf.path)
                    break
                mf = files[index]
                process_offset = mf.file_from_offset
            else:
                log.info("recover consume queue %s-%d over at %d", self.topic, self.queue_id,
                         process_offset + mapped_offset)
                break
        process_offset += mapped_offset
        self.mapped_file_queue.flushed_where = process_offset
        self.mapped_file_queue.committed_where = process_offset
        self.mapped_file_queue.truncate_dirty_files(process_offset)
        first = self.mapped_file_queue.first()
        if first is not None and self.min_logic_offset < first.file_from_offset:
            # correct_min_offset refines this once the CommitLog minimum is known.
            self.min_logic_offset = first.file_from_offset

    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        """Drop units pointing at or beyond CommitLog offset `phy_offset` (its tail was cut).

        Walks the last segment from its start: a segment whose first unit is at or beyond
        phy_offset is deleted and the walk moves to the new last segment; otherwise units are
        kept while valid and below phy_offset. `max_physic_offset` becomes the end of the last
        unit kept (-1 when none is): RocketMQ sets it to phy_offset first, so a queue that lost
        its files (a power loss, chaos/sim seed 12 --storage) skipped every record the
        recovery's dispatch brought again and its queue offsets started over at 0.
        """
        self.max_physic_offset = -1
        mfq = self.mapped_file_queue
        while True:
            mf = mfq.last()
            if mf is None:
                return
            mf.set_positions(0)
            mm = mf.mm
            offset, size, _tags = UNIT.unpack_from(mm, 0)
            if offset >= phy_offset:
                log.info("truncate consume queue %s-%d: delete segment %s", self.topic,
                         self.queue_id, mf.path)
                mfq.delete_last_file()
                continue
            for pos in range(0, self.file_size, CQ_STORE_UNIT_SIZE):
                offset, size, _tags = UNIT.unpack_from(mm, pos)
                if offset < 0 or size <= 0 or offset >= phy_offset:
                    break
                mf.set_positions(pos + CQ_STORE_UNIT_SIZE)
                if not is_blank_unit(offset, size):
                    self.max_physic_offset = offset + size
            mf.zero_tail(mf.wrote_position)  # stale units must not come back at the next recovery
            mf.sync()  # nor at a power loss (seed 38 with `--storage`)
            return

    def correct_min_offset(self, min_phy_offset: int) -> None:
        """Move min_logic_offset to the first unit of the first segment still in the CommitLog."""
        mf = self.mapped_file_queue.first()
        if mf is None:
            return
        result = mf.select(0)
        if result is None:
            return
        with result:
            for i, (offset, size, _tags) in enumerate(iter_units(result.view)):
                if offset >= min_phy_offset and not is_blank_unit(offset, size):
                    self.min_logic_offset = mf.file_from_offset + i * CQ_STORE_UNIT_SIZE
                    log.info("correct min offset of %s-%d: min logic offset %d", self.topic,
                             self.queue_id, self.min_logic_offset)
                    break

    # ---- building ----------------------------------------------------------------------------
    def put_message_position_info(self, offset: int, size: int, tags_code: int, cq_offset: int) -> bool:
        """Append the unit for CommitLog record (offset, size) at logical index cq_offset.

        True when the unit is in the queue (appended now, or already built: offset+size at or
        below max_physic_offset, or cq_offset below the write position). False only when the
        append failed. A gap (cq_offset beyond the write position) is logged as a bug but the
        unit is still appended at the write position, as RocketMQ does.
        """
        if offset + size <= self.max_physic_offset:
            log.debug("maybe try to build consume queue repeatedly: maxPhysicOffset=%d phyOffset=%d",
                        self.max_physic_offset, offset)
            return True
        expect = cq_offset * CQ_STORE_UNIT_SIZE
        mfq = self.mapped_file_queue
        first_create = not mfq.files
        mf = mfq.get_last_mapped_file(expect)
        if mf is None:
            return False
        if first_create and cq_offset != 0 and mf.wrote_position == 0:
            self.min_logic_offset = expect
            mfq.flushed_where = expect
            mfq.committed_where = expect
            self._fill_pre_blank(mf, expect)
            log.info("fill pre blank space %s-%d up to %d", self.topic, self.queue_id, expect)
        current = mf.file_from_offset + mf.wrote_position
        if expect < current:
            log.debug("build consume queue repeatedly: expectLogicOffset=%d currentLogicOffset=%d "
                        "topic=%s qid=%d diff=%d", expect, current, self.topic, self.queue_id,
                        expect - current)
            return True
        if expect != current:
            log.warning("[BUG]logic queue order maybe wrong: expectLogicOffset=%d currentLogicOffset=%d "
                        "topic=%s qid=%d diff=%d", expect, current, self.topic, self.queue_id,
                        expect - current)
        self.max_physic_offset = offset + size
        return mf.append(UNIT.pack(offset, size, tags_code))

    def _fill_pre_blank(self, mf: MappedFile, until_where: int) -> None:
        end = until_where % self.file_size
        if end:
            mf.append(BLANK_UNIT * (end // CQ_STORE_UNIT_SIZE))

    # ---- reading -----------------------------------------------------------------------------
    def get_index_buffer(self, start_index: int) -> SelectResult | None:
        """Zero-copy view of the units from `start_index` to the end of its segment's data.

        None when the index is below the minimum, its segment is gone, or nothing is written
        there yet. The caller must release() the result (or use it as a context manager).
        """
        offset = start_index * CQ_STORE_UNIT_SIZE
        if offset < self.min_logic_offset:
            return None
        mf = self.mapped_file_queue.find_by_offset(offset)
        if mf is None:
            return None
        pos = offset % self.file_size
        if pos >= mf.get_read_position():
            return None
        return mf.select(pos)

    def get_unit(self, index: int) -> tuple[int, int, int] | None:
        """(commitlog_offset, size, tags_code) of unit `index`, or None when not readable."""
        offset = index * CQ_STORE_UNIT_SIZE
        if offset < self.min_logic_offset:
            return None
        mf = self.mapped_file_queue.find_by_offset(offset)
        if mf is None:
            return None
        result = mf.select(offset % self.file_size, CQ_STORE_UNIT_SIZE)
        if result is None:
            return None
        with result:
            return UNIT.unpack_from(result.view, 0)

    def roll_next_file(self, index: int) -> int:
        """First logical index of the segment after the one holding `index`."""
        units = self.file_size // CQ_STORE_UNIT_SIZE
        return index + units - index % units

    @property
    def min_offset_in_queue(self) -> int:
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    @property
    def max_offset_in_queue(self) -> int:
        """Next logical index to be written (blank pre-fill units count)."""
        return self.mapped_file_queue.max_offset() // CQ_STORE_UNIT_SIZE

    @property
    def last_unit_store_info(self) -> tuple[int, int, int] | None:
        """(commitlog_offset, size, tags_code) of the newest unit, None when the queue is empty."""
        mf = self.mapped_file_queue.last()
        if mf is None:
            return None
        pos = mf.get_read_position() - CQ_STORE_UNIT_SIZE
        if pos < 0:
            return None
        result = mf.select(pos, CQ_STORE_UNIT_SIZE)
        if result is None:
            return None
        with result:
            return UNIT.unpack_from(result.view, 0)

    def first_offset_at_or_after(self, commitlog_offset: int) -> int:
        """The first logical index whose record starts at or past `commitlog_offset` (the
        queue's end when none does): where a consumer whose last record lay past a node's
        log for its epoch goes back to (KIP-320). Units ascend in CommitLog offset, so a
        binary search; an unreadable unit counts as before it."""
        low, high = self.min_offset_in_queue, self.max_offset_in_queue
        while low < high:
            mid = (low + high) // 2
            unit = self.get_unit(mid)
            if unit is None or unit[0] < commitlog_offset:
                low = mid + 1
            else:
                high = mid
        return low

    def get_offset_in_queue_by_time(
        self, ts_ms: int, store_time_at: StoreTimeAt, min_phy_offset: int
    ) -> int:
        """Logical index of the unit stored at `ts_ms`, else of the nearer neighbour in time.

        The segment searched is the first whose mtime is at least ts_ms, else the newest.
        `store_time_at(commitlog_offset, size)` returns the record's store timestamp or None
        when it cannot be read (then the result is 0, as RocketMQ). Units whose CommitLog
        offset is below `min_phy_offset` count as too early. 0 when there is no segment.
        """
        mf = self.mapped_file_queue.find_by_time(ts_ms)
        if mf is None:
            return 0
        result = mf.select(0)
        if result is None or result.size == 0:
            if result is not None:
                result.release()
            return 0
        unit = CQ_STORE_UNIT_SIZE
        with result:
            view = result.view
            low = max(0, self.min_logic_offset - mf.file_from_offset)
            high = len(view) - unit
            target = left = right = -1
            left_time = right_time = -1
            while high >= low:
                mid = (low + high) // (2 * unit) * unit
                phy, size, _tags = UNIT.unpack_from(view, mid)
                if phy < min_phy_offset:
                    low = mid + unit
                    left = mid
                    continue
                store_time = store_time_at(phy, size)
                if store_time is None or store_time < 0:
                    return 0
                if store_time == ts_ms:
                    target = mid
                    break
                if store_time > ts_ms:
                    high = mid - unit
                    right, right_time = mid, store_time
                else:
                    low = mid + unit
                    left, left_time = mid, store_time
            if target != -1:
                pos = target
            elif left_time == -1 and right == -1:
                pos = low  # no unit with a readable time: where the too-early units end
            elif left_time == -1:
                pos = right
            elif right_time == -1:
                pos = left
            else:
                pos = right if abs(ts_ms - left_time) > abs(ts_ms - right_time) else left
            return (mf.file_from_offset + pos) // unit

    # ---- flush, deletion, lifecycle ----------------------------------------------------------
    def flush(self, least_pages: int) -> bool:
        """Flush one segment (blocking). True when nothing new was flushed (RocketMQ semantics)."""
        return self.mapped_file_queue.flush(least_pages)

    def delete_expired_file(self, min_phy_offset: int) -> int:
        """Delete old segments whose last unit points below the CommitLog minimum; returns how many.

        Never the newest segment; oldest first, stopping at the first one kept (or still held
        by a reader). Then min_logic_offset is corrected.
        """
        mfq = self.mapped_file_queue
        deleted = 0
        for mf in list(mfq.files[:-1]):
            if not mf.available:
                destroy = True  # a hanged segment from an earlier attempt
            else:
                last = mf.read(self.file_size - CQ_STORE_UNIT_SIZE, CQ_STORE_UNIT_SIZE)
                if last is None:
                    log.warning("consume queue segment %s is not full; stop deleting", mf.path)
                    break
                destroy = UNIT.unpack_from(last, 0)[0] < min_phy_offset
            if not destroy or not mfq.delete_file(mf, DELETE_FILES_INTERVAL_FORCIBLY_MS):
                break
            deleted += 1
        self.correct_min_offset(min_phy_offset)
        return deleted

    def destroy(self) -> None:
        """Delete every segment and reset the offsets (CommitLog is gone or reset)."""
        self.max_physic_offset = -1
        self.min_logic_offset = 0
        self.mapped_file_queue.destroy()

    def shutdown(self) -> None:
        """Unmap the segments without deleting them (flush first if durability is wanted)."""
        self.mapped_file_queue.shutdown()




class ConsumeQueueTable:
    """All ConsumeQueues of a store, keyed by (topic, queue_id)."""

    def __init__(self, store_path: str, file_size: int) -> None:
        self.store_path = store_path
        self.file_size = file_size
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._lock = threading.Lock()

    def load(self) -> None:
        """Load every `<topic>/<int queueId>` directory; other names are skipped."""
        for topic, queue_id, _path in list_queue_dirs(self.store_path):
            cq = ConsumeQueue(topic, queue_id, self.store_path, self.file_size)
            cq.load()
            self._queues[(topic, queue_id)] = cq

    def recover(self) -> int:
        """Recover every queue; returns max_physic_offset_of_all()."""
        for cq in self:
            cq.recover()
        return self.max_physic_offset_of_all()

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self._queues.get((topic, queue_id))

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue, created empty (no file until the first unit) when unknown."""
        cq = self._queues.get((topic, queue_id))
        if cq is not None:
            return cq
        with self._lock:
            cq = self._queues.get((topic, queue_id))
            if cq is None:
                cq = ConsumeQueue(topic, queue_id, self.store_path, self.file_size)
                self._queues[(topic, queue_id)] = cq
            return cq

    def __iter__(self) -> Iterator[ConsumeQueue]:
        return iter(list(self._queues.values()))

    def __len__(self) -> int:
        return len(self._queues)

    def topics(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, queue_id in list(self._queues):
            out.setdefault(topic, []).append(queue_id)
        return out

    def max_physic_offset_of_all(self) -> int:
        """Largest max_physic_offset over all queues; -1 when none has a unit."""
        return max((cq.max_physic_offset for cq in self), default=-1)

    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        for cq in self:
            cq.truncate_dirty_logic_files(phy_offset)

    def correct_min_offset(self, min_phy_offset: int) -> None:
        for cq in self:
            cq.correct_min_offset(min_phy_offset)

    def delete_expired_files(self, min_phy_offset: int) -> int:
        return sum(cq.delete_expired_file(min_phy_offset) for cq in self)

    def flush(self, least_pages: int) -> None:
        for cq in self:
            cq.flush(least_pages)

    def remove(self, topic: str, queue_id: int) -> None:
        """Destroy one queue and forget it."""
        with self._lock:
            cq = self._queues.pop((topic, queue_id), None)
        if cq is not None:
            cq.destroy()

    def destroy(self) -> None:
        with self._lock:
            queues, self._queues = list(self._queues.values()), {}
        for cq in queues:
            cq.destroy()

    def shutdown(self) -> None:
        for cq in self:
            cq.shutdown()
