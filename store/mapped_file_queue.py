"""MappedFileQueue: a directory of equal-size segments named by their 20-digit start offset
(seed 000 §4.4.1). Finds a segment by offset (from the first segment's start, so it stays
right after old segments are deleted) or by time, tracks flushed_where / committed_where,
truncates dirty tails and deletes expired segments. Never deletes the newest segment.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable

from . import runtime
from .layout import segment_name, segment_names
from .mapped_file import CREATING_SUFFIX, MappedFile, SegmentSizeError
from .transient_store_pool import TransientStorePool

log = logging.getLogger("tidemq.store")

Allocator = Callable[[str, int], MappedFile]


class MappedFileQueue:
    def __init__(
        self,
        store_path: str,
        file_size: int,
        *,
        pool: TransientStorePool | None = None,
        allocator: Allocator | None = None,
    ) -> None:
        self.store_path = store_path
        self.file_size = file_size
        self.pool = pool
        self.files: list[MappedFile] = []
        self.flushed_where = 0
        self.committed_where = 0
        self.store_timestamp = 0  # store time of the last message covered by a full flush
        # The CommitLog installs a pre-allocating allocator; others create inline.
        self.allocator: Allocator = allocator or self.create_file
        # Why the last get_last_mapped_file() could not create a segment ("" = it could).
        self.create_error = ""

    def create_file(self, path: str, file_size: int) -> MappedFile:
        return MappedFile(path, file_size, pool=self.pool, preallocate=True)

    # ---- loading -------------------------------------------------------------------------
    def load(self) -> None:
        """Map every segment in name order; a wrong-size segment raises SegmentSizeError."""
        if not os.path.isdir(self.store_path):
            return
        listing = os.listdir(self.store_path)
        for name in listing:
            if name.endswith(CREATING_SUFFIX):  # a creation cut short by a crash
                log.info("removing unfinished segment %s", os.path.join(self.store_path, name))
                os.unlink(os.path.join(self.store_path, name))
        for name in segment_names(listing):
            mf = MappedFile(os.path.join(self.store_path, name), self.file_size, expect_existing=True)
            mf.set_positions(self.file_size)  # recovery sets the real end
            self.files.append(mf)

    # ---- lookup ----------------------------------------------------------------------------
    def first(self) -> MappedFile | None:
        return self.files[0] if self.files else None

    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def get_last_mapped_file(self, start_offset: int = 0, need_create: bool = True) -> MappedFile | None:
        """The newest segment, creating one when there is none or the newest is full.

        None when the segment cannot be created (e.g. ENOSPC); `create_error` says why."""
        last = self.last()
        if last is not None and not last.is_full():
            return last
        if not need_create:
            return last
        if last is None:
            create_offset = start_offset - start_offset % self.file_size
        else:
            create_offset = last.file_from_offset + self.file_size
        path = os.path.join(self.store_path, segment_name(create_offset))
        try:
            os.makedirs(self.store_path, exist_ok=True)
            mf = self.allocator(path, self.file_size)
        except (OSError, SegmentSizeError) as e:
            if isinstance(e, OSError) and e.strerror:
                reason = f"{e.strerror} ({errno.errorcode.get(e.errno, e.errno) if e.errno is not None else '?'})"
            else:
                reason = str(e)
            self.create_error = f"cannot create segment {path}: {reason}"
            log.error("%s", self.create_error)
            return None
        self.create_error = ""
        if not self.files:
            self.flushed_where = self.committed_where = create_offset
        self.files.append(mf)
        return mf

    def find_by_offset(self, offset: int, return_first_on_not_found: bool = False) -> MappedFile | None:
        files = self.files  # one snapshot: flush threads look up while deletion replaces the list
        if not files:
            return None
        first, last = files[0], files[-1]
        if offset < first.file_from_offset or offset >= last.file_from_offset + self.file_size:
            return first if return_first_on_not_found else None
        index = offset // self.file_size - first.file_from_offset // self.file_size
        if 0 <= index < len(files):
            mf = files[index]
            if mf.file_from_offset <= offset < mf.file_from_offset + self.file_size:
                return mf
        for mf in files:  # a hole in the names: fall back to a scan
            if mf.file_from_offset <= offset < mf.file_from_offset + self.file_size:
                return mf
        return first if return_first_on_not_found else None

    def find_by_time(self, timestamp_ms: int) -> MappedFile | None:
        """The first segment modified at or after the time, else the newest."""
        for mf in self.files:
            if mf.last_modified * 1000 >= timestamp_ms:
                return mf
        return self.last()

    # ---- offsets ---------------------------------------------------------------------------
    def min_offset(self) -> int:
        first = self.first()
        return first.file_from_offset if first is not None else -1

    def max_offset(self) -> int:
        """End of readable (committed) data."""
        last = self.last()
        if last is None:
            return 0
        if self.pool is not None:
            # With a write-buffer pool, a segment that got no buffer is written (and readable)
            # at once while an older one may still hold uncommitted bytes: the readable log
            # ends at the first segment that is not readable to its end.
            start = self.find_by_offset(self.committed_where)
            if start is not None:
                for mf in self.files[self.files.index(start):]:
                    if mf is last or mf.get_read_position() < self.file_size:
                        return mf.file_from_offset + mf.get_read_position()
        return last.file_from_offset + last.get_read_position()

    def max_wrote_offset(self) -> int:
        last = self.last()
        return last.file_from_offset + last.wrote_position if last is not None else 0

    def remain_how_many_data_to_commit(self) -> int:
        return self.max_wrote_offset() - self.committed_where

    def remain_how_many_data_to_flush(self) -> int:
        return self.max_offset() - self.flushed_where

    # ---- commit / flush (blocking: call from a worker thread) ------------------------------
    def is_able_to_flush(self, least_pages: int) -> bool:
        """Whether `flush(least_pages)` would write anything. Cheap, for the event loop: an
        async-flush wakeup per put must not cost a thread hop when there is nothing to do."""
        mf = self.find_by_offset(self.flushed_where, return_first_on_not_found=self.flushed_where == 0)
        return mf is not None and mf.is_able_to_flush(least_pages)

    def flush(self, least_pages: int) -> bool:
        """Flush the segment holding flushed_where; True when nothing new was flushed."""
        mf = self.find_by_offset(self.flushed_where, return_first_on_not_found=self.flushed_where == 0)
        if mf is None:
            return True
        ts = mf.store_timestamp
        where = mf.file_from_offset + mf.flush(least_pages)
        result = where == self.flushed_where
        self.flushed_where = where
        if least_pages == 0:
            self.store_timestamp = ts
        return result

    def commit(self, least_pages: int) -> bool:
        """Commit the segment holding committed_where; True when nothing new was committed."""
        mf = self.find_by_offset(self.committed_where, return_first_on_not_found=self.committed_where == 0)
        if mf is None:
            return True
        where = mf.file_from_offset + mf.commit(least_pages)
        result = where == self.committed_where
        self.committed_where = where
        return result

    # ---- truncation and deletion -----------------------------------------------------------
    def truncate_dirty_files(self, offset: int) -> None:
        """Set the segment holding `offset` to end there; delete every segment after it."""
        keep: list[MappedFile] = []
        for mf in self.files:
            tail = mf.file_from_offset + self.file_size
            if tail <= offset:
                keep.append(mf)
            elif offset >= mf.file_from_offset:
                mf.set_positions(offset % self.file_size)
                keep.append(mf)
            else:
                mf.destroy(1000)
                log.info("truncated: deleted segment %s beyond offset %d", mf.path, offset)
        self.files = keep

    def delete_last_file(self) -> None:
        last = self.files.pop()
        last.destroy(1000)

    def delete_file(self, mf: MappedFile, interval_forcibly_ms: int = 0) -> bool:
        """Destroy one segment (the oldest, normally) and drop it from the queue."""
        if mf.destroy(interval_forcibly_ms):
            self.forget(mf)
            return True
        return False

    def forget(self, mf: MappedFile) -> None:
        """Drop a destroyed segment from the queue. The list is replaced, not changed in place
        (copy-on-write, as RocketMQ's CopyOnWriteArrayList), so a flush thread that took a
        snapshot keeps a consistent one. Call it from the thread that appends segments."""
        self.files = [f for f in self.files if f is not mf]

    def delete_expired_by_time(
        self,
        expired_ms: int,
        interval_forcibly_ms: int,
        clean_immediately: bool,
        *,
        now_ms: Callable[[], float] = lambda: runtime.wall_clock() * 1000,
        max_files: int = 10,
    ) -> int:
        """Delete segments older than `expired_ms` (or all when immediately), oldest first,
        never the newest, stopping at the first one kept. Returns how many were deleted."""
        deleted = 0
        for mf in list(self.files[:-1]):
            if deleted >= max_files:
                break
            expired = now_ms() >= mf.last_modified * 1000 + expired_ms
            if not (expired or clean_immediately):
                break
            if not self.delete_file(mf, interval_forcibly_ms):
                break
            deleted += 1
        return deleted

    def shutdown(self) -> None:
        for mf in self.files:
            mf.close()

    def destroy(self) -> None:
        for mf in self.files:
            mf.destroy(0)
        self.files.clear()
        self.flushed_where = self.committed_where = 0
