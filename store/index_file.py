"""IndexFile and IndexService: the key → CommitLog offset hash index (ROCKETMQ-FACTS §4).

File layout (big-endian), byte-compatible with RocketMQ 4.x `<root>/index/<yyyyMMddHHmmssSSS>`:

    header 40 bytes: beginTimestamp 8, endTimestamp 8, beginPhyOffset 8, endPhyOffset 8,
                     hashSlotCount 4, indexCount 4
    hash_slot_num slots of 4 bytes: number of the newest entry of that slot, 0 = empty
    index_num entries of 20 bytes: keyHash 4, phyOffset 8, timeDiff 4 (s), prevIndex 4

The file is created sparse (ftruncate) and mmap'd through MappedFile, so its reference count
keeps a query's reads safe from a concurrent delete. Header fields are written into the map
as they change; durability comes from `flush()` (fdatasync), which IndexService calls when a
file fills up, on `flush()` and on shutdown.

Hashes collide: a query returns *candidate* CommitLog offsets. The caller (the store facade)
must read each record and keep only those whose real key matches.

Synchronous: the store runs `build_index` and the blocking calls from worker threads.
"""

from __future__ import annotations

import datetime
import logging
import os
import struct
import threading
from collections.abc import Callable, Iterable

import attrs

from . import runtime
from .accel import COMPILED
from .checkpoint import INDEX, StoreCheckpoint
from .mapped_file import MappedFile
from .message import java_string_hash
from .properties import KEY_SEPARATOR
from .sysflag import TRANSACTION_MASK

log = logging.getLogger("tidemq.store")

INDEX_HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20
INVALID_INDEX = 0
INT_MAX = 0x7FFFFFFF
TRANSACTION_ROLLBACK = 0xC
DESTROY_INTERVAL_FORCIBLY_MS = 3000

_HEADER = struct.Struct(">qqqqii")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_ENTRY = struct.Struct(">iqii")
assert _HEADER.size == INDEX_HEADER_SIZE and _ENTRY.size == INDEX_ENTRY_SIZE

# header field positions
_BEGIN_TS, _END_TS, _BEGIN_PHY, _END_PHY, _SLOT_COUNT, _INDEX_COUNT = 0, 8, 16, 24, 32, 36


def index_key_hash(key: str) -> int:
    """abs(Java String.hashCode(key)); Integer.MIN_VALUE (whose abs overflows in Java) gives 0."""
    h = abs(java_string_hash(key))
    return 0 if h > INT_MAX else h


def slot_of(key_hash: int, hash_slot_num: int) -> int:
    return key_hash % hash_slot_num


def build_key(topic: str, key: str) -> str:
    return f"{topic}#{key}"


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_ENTRY_SIZE


class IndexFile:
    """One index file. A new file starts with begin = end = the previous file's end values."""

    def __init__(
        self,
        path: str,
        hash_slot_num: int,
        index_num: int,
        end_phy_offset: int = 0,
        end_timestamp: int = 0,
    ) -> None:
        self.path = path
        self.file_name = os.path.basename(path)
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.file_size = index_file_size(hash_slot_num, index_num)
        existed = os.path.exists(path)
        # MappedFile checks an existing file's size (SegmentSizeError) and creates a new one sparse.
        # sparse, unlike CommitLog segments: a default index file is 420 MB that fills slowly;
        # diskSpaceWarningLevelRatio stops writes (and so dispatch) before the disk is full
        self._mf = MappedFile(path, self.file_size)
        # Everything is readable; nothing is "appended" (writes go straight into the map).
        self._mf.set_positions(self.file_size)
        self._mm = self._mf.mm
        self.begin_timestamp = 0
        self.end_timestamp = 0
        self.begin_phy_offset = 0
        self.end_phy_offset = 0
        self.hash_slot_count = 0
        self.index_count = 1
        if existed:
            self.load()
        else:
            if end_phy_offset > 0:
                self.begin_phy_offset = self.end_phy_offset = end_phy_offset
            if end_timestamp > 0:
                self.begin_timestamp = self.end_timestamp = end_timestamp
            self._write_header()

    def __repr__(self) -> str:
        return (
            f"IndexFile({self.file_name}, count={self.index_count}, "
            f"ts=[{self.begin_timestamp}, {self.end_timestamp}], "
            f"phy=[{self.begin_phy_offset}, {self.end_phy_offset}])"
        )

    # ---- header ------------------------------------------------------------------------------
    def load(self) -> None:
        """Read the header from the file; an indexCount <= 0 becomes 1."""
        (
            self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
            self.end_phy_offset, self.hash_slot_count, self.index_count,
        ) = _HEADER.unpack_from(self._mm, 0)
        if self.index_count <= 0:
            self.index_count = 1

    def _write_header(self) -> None:
        _HEADER.pack_into(
            self._mm, 0, self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
            self.end_phy_offset, self.hash_slot_count, self.index_count,
        )

    def is_write_full(self) -> bool:
        return self.index_count >= self.index_num

    def is_time_matched(self, begin: int, end: int) -> bool:
        """The query range covers the file's range, or one of its ends lies inside it."""
        b, e = self.begin_timestamp, self.end_timestamp
        return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)

    # ---- writing -----------------------------------------------------------------------------
    def release_cold_pages(self, hot_bytes: int) -> int:
        """Drop resident pages nothing writes any more: a full file's all, the file being
        filled its entries below the last `hot_bytes` written (entries are appended; the hash
        slots, written anywhere, stay). A key query faults them back from the page cache.
        Blocking (madvise): a worker thread's."""
        if self.is_write_full():
            return self._mf.release_pages(self.file_size)
        entries = INDEX_HEADER_SIZE + self.hash_slot_num * HASH_SLOT_SIZE
        return self._mf.release_pages(entries + self.index_count * INDEX_ENTRY_SIZE - hot_bytes, entries)

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Add an entry for `key`; False when the file is full (indexCount >= index_num)."""
        if self.index_count >= self.index_num:
            log.warning("index file %s is full: index count %d, index num %d", self.file_name,
                        self.index_count, self.index_num)
            return False
        mm = self._mm
        key_hash = index_key_hash(key)
        abs_slot_pos = INDEX_HEADER_SIZE + slot_of(key_hash, self.hash_slot_num) * HASH_SLOT_SIZE
        if self.begin_timestamp <= 0:
            time_diff = 0
        else:
            diff = store_timestamp - self.begin_timestamp
            time_diff = 0 if diff < 0 else min(diff // 1000, INT_MAX)
        abs_index_pos = (
            INDEX_HEADER_SIZE
            + self.hash_slot_num * HASH_SLOT_SIZE
            + self.index_count * INDEX_ENTRY_SIZE
        )
        if COMPILED is not None:  # the same writes in C (every indexed key of every message)
            slot_value = COMPILED.index_put(mm, abs_slot_pos, abs_index_pos, key_hash, phy_offset, time_diff,
                                            self.index_count, store_timestamp, self.hash_slot_count)
        else:
            slot_value = _I32.unpack_from(mm, abs_slot_pos)[0]
            if slot_value <= INVALID_INDEX or slot_value > self.index_count:
                slot_value = INVALID_INDEX
            _ENTRY.pack_into(mm, abs_index_pos, key_hash, phy_offset, time_diff, slot_value)
            _I32.pack_into(mm, abs_slot_pos, self.index_count)
            if slot_value == INVALID_INDEX:
                _I32.pack_into(mm, _SLOT_COUNT, self.hash_slot_count + 1)
            _I32.pack_into(mm, _INDEX_COUNT, self.index_count + 1)
            _I64.pack_into(mm, _END_PHY, phy_offset)
            _I64.pack_into(mm, _END_TS, store_timestamp)
        if self.index_count <= 1:
            self.begin_phy_offset = phy_offset
            _I64.pack_into(mm, _BEGIN_PHY, phy_offset)
            self.begin_timestamp = store_timestamp
            _I64.pack_into(mm, _BEGIN_TS, store_timestamp)
        if slot_value == INVALID_INDEX:
            self.hash_slot_count += 1
        self.index_count += 1
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        return True

    # ---- reading -----------------------------------------------------------------------------
    def select_phy_offsets(
        self, phy_offsets: list[int], key: str, max_num: int, begin: int, end: int
    ) -> None:
        """Append to `phy_offsets` (shared across files) the candidates for `key`, newest first.

        Walks the slot's chain; keeps entries with the same hash whose time is in [begin, end];
        stops when phy_offsets holds max_num, at a negative timeDiff, at an invalid or
        self-referencing prevIndex, or at an entry older than `begin`.
        """
        if not self._mf.hold():
            return  # being destroyed
        try:
            mm = self._mm
            key_hash = index_key_hash(key)
            abs_slot_pos = INDEX_HEADER_SIZE + slot_of(key_hash, self.hash_slot_num) * HASH_SLOT_SIZE
            slot_value = _I32.unpack_from(mm, abs_slot_pos)[0]
            index_count = self.index_count
            if slot_value <= INVALID_INDEX or slot_value > index_count or index_count <= 1:
                return
            base = INDEX_HEADER_SIZE + self.hash_slot_num * HASH_SLOT_SIZE
            next_index = slot_value
            while len(phy_offsets) < max_num:
                key_hash_read, phy_read, time_diff, prev_index = _ENTRY.unpack_from(
                    mm, base + next_index * INDEX_ENTRY_SIZE
                )
                if time_diff < 0:
                    break
                time_read = self.begin_timestamp + time_diff * 1000
                if key_hash_read == key_hash and begin <= time_read <= end:
                    phy_offsets.append(phy_read)
                if (
                    prev_index <= INVALID_INDEX
                    or prev_index > index_count
                    or prev_index == next_index
                    or time_read < begin
                ):
                    break
                next_index = prev_index
        finally:
            self._mf.release()

    def query(self, key: str, max_num: int, begin_ts: int, end_ts: int) -> list[int]:
        """Candidate CommitLog offsets for `key` in this file alone, newest first."""
        out: list[int] = []
        self.select_phy_offsets(out, key, max_num, begin_ts, end_ts)
        return out

    # ---- durability and lifecycle ------------------------------------------------------------
    def flush(self) -> None:
        """Write the header and fdatasync the file (blocking: use a worker thread)."""
        if not self._mf.hold():
            return
        try:
            self._write_header()
            # MappedFile flushes [flushed, readable); rewind flushed so fdatasync always runs.
            self._mf.flushed_position = 0
            self._mf.flush(0)
        finally:
            self._mf.release()

    def destroy(self, interval_forcibly_ms: int) -> bool:
        """Unmap and delete; True once the file is gone (False while a query still holds it)."""
        return self._mf.destroy(interval_forcibly_ms)

    def close(self) -> None:
        """Unmap without deleting."""
        self._mf.close()

    def shutdown(self) -> None:
        self.flush()
        self.close()


@attrs.frozen
class QueryOffsetResult:
    """Candidate offsets plus the newest file's end values (DefaultMessageStore.queryMessage uses them)."""

    phy_offsets: list[int]
    index_last_update_timestamp: int
    index_last_update_phyoffset: int


def index_file_name(ms: int) -> str:
    """`yyyyMMddHHmmssSSS` in local time (UtilAll.timeMillisToHumanString)."""
    dt = datetime.datetime.fromtimestamp(ms // 1000)
    return f"{dt:%Y%m%d%H%M%S}{ms % 1000:03d}"


def _next_name(name: str) -> str:
    """The name one millisecond later (calendar arithmetic on the name itself)."""
    dt = datetime.datetime.strptime(name[:14], "%Y%m%d%H%M%S") + datetime.timedelta(
        milliseconds=int(name[14:17]) + 1
    )
    return f"{dt:%Y%m%d%H%M%S}{dt.microsecond // 1000:03d}"


def _default_clock() -> int:
    return int(runtime.wall_clock() * 1000)


class IndexService:
    """The store's index files, oldest first; the newest one takes new entries."""

    def __init__(
        self,
        store_path: str,
        hash_slot_num: int,
        index_num: int,
        checkpoint: StoreCheckpoint,
        *,
        max_msgs_num_batch: int = 64,
        clock: Callable[[], int] = _default_clock,
    ) -> None:
        self.store_path = store_path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.checkpoint = checkpoint
        self.max_msgs_num_batch = max_msgs_num_batch
        self.clock = clock
        self.files: list[IndexFile] = []
        self._lock = threading.RLock()
        # lowest CommitLog offset whose keys were in a destroyed file: recovery dispatches
        # from there again so no acknowledged key goes missing from the index
        self.rebuild_from: int | None = None
        self.flush_failed = False
        """An index file's flush failed: none is flushed again (fsyncgate), the checkpoint's
        index timestamp stays where the last good flush left it (`on_flush_error`)."""
        self.on_flush_error: Callable[[OSError], None] = lambda _e: None

    # ---- loading ------------------------------------------------------------------------------
    def load(self, last_exit_ok: bool) -> None:
        """Open every index file in name order.

        After a crash (not last_exit_ok) a file whose endTimestamp is newer than the
        checkpoint's index_msg_timestamp was never made durable as a whole: it is destroyed
        and recovery's re-dispatch rebuilds what its scan covers. A file of the wrong size
        raises SegmentSizeError (the configured slot or index numbers changed).
        """
        if not os.path.isdir(self.store_path):
            return
        for name in sorted(os.listdir(self.store_path)):
            path = os.path.join(self.store_path, name)
            if not (name.isdigit() and name.isascii()) or not os.path.isfile(path):
                log.warning("skip %s in the index dir: not an index file", path)
                continue
            f = IndexFile(path, self.hash_slot_num, self.index_num)
            if not last_exit_ok and f.end_timestamp > self.checkpoint.index_msg_timestamp:
                log.info("destroy index file %s: endTimestamp %d is newer than the checkpoint's %d",
                         path, f.end_timestamp, self.checkpoint.index_msg_timestamp)
                self._note_rebuild(f)
                f.destroy(0)
                continue
            log.info("load index file OK: %s", path)
            with self._lock:
                self.files.append(f)

    def _note_rebuild(self, f: IndexFile) -> None:
        start = f.begin_phy_offset if f.index_count > 1 else f.end_phy_offset
        self.rebuild_from = start if self.rebuild_from is None else min(self.rebuild_from, start)

    def truncate(self, phy_offset: int) -> None:
        """Destroy files holding entries at or past `phy_offset` (the CommitLog was cut
        there), newest first; `rebuild_from` says where dispatch must index again."""
        with self._lock:
            while self.files and self.files[-1].end_phy_offset > phy_offset:
                f = self.files.pop()
                log.warning("recovery: index file %s covers offsets up to %d past the CommitLog end %d; "
                            "destroying it to rebuild", f.path, f.end_phy_offset, phy_offset)
                self._note_rebuild(f)
                f.destroy(0)

    # ---- building ----------------------------------------------------------------------------
    def get_and_create_last_index_file(self) -> IndexFile | None:
        """The newest file, or a new one when there is none or it is full (None if creation fails).

        A full file is made durable right away and its endTimestamp becomes the checkpoint's
        index_msg_timestamp (RocketMQ does this on a separate thread; here the caller is
        already a worker thread).
        """
        with self._lock:
            prev = self.files[-1] if self.files else None
            if prev is not None and not prev.is_write_full():
                return prev
            end_phy, end_ts = (prev.end_phy_offset, prev.end_timestamp) if prev else (0, 0)
            name = index_file_name(self.clock())
            if prev is not None and name <= prev.file_name:
                name = _next_name(prev.file_name)  # keep name order = creation order
            os.makedirs(self.store_path, exist_ok=True)
            while os.path.exists(os.path.join(self.store_path, name)):
                name = _next_name(name)
            try:
                f = IndexFile(os.path.join(self.store_path, name), self.hash_slot_num,
                              self.index_num, end_phy, end_ts)
            except OSError:
                log.exception("create index file %s failed", name)
                return None
            self.files.append(f)
        if prev is not None:
            self._flush_file(prev)
        return f

    def _flush_one(self, f: IndexFile) -> bool:
        """`f.flush()`; False (and never again) once one failed."""
        if self.flush_failed:
            return False
        try:
            f.flush()
        except OSError as e:
            self.flush_failed = True
            self.checkpoint.freeze(INDEX)
            log.error("index file %s: flush failed (%s); the store refuses writes until a restart", f.path, e)
            self.on_flush_error(e)
            return False
        return True

    def _flush_file(self, f: IndexFile) -> None:
        index_ts = f.end_timestamp if f.is_write_full() else 0
        if not self._flush_one(f):
            return
        if index_ts > 0:
            self.checkpoint.index_msg_timestamp = index_ts
            self.checkpoint.flush()

    def build_index(
        self,
        topic: str,
        commitlog_offset: int,
        store_timestamp: int,
        keys: Iterable[str] | str | None,
        uniq_key: str | None,
        sys_flag: int,
    ) -> bool:
        """Index `topic#uniq_key` and `topic#key` for each non-empty key of one record.

        `keys` is a list or the raw KEYS property (space-separated). Skips ROLLBACK records
        and records below the current file's endPhyOffset (a re-dispatch). False only when
        an index file could not be created (the store then sets WRITE_INDEX_FILE_ERROR).
        """
        f = self.get_and_create_last_index_file()
        if f is None:
            log.error("build index error, stop building index")
            return False
        if commitlog_offset < f.end_phy_offset:
            return True
        if sys_flag & TRANSACTION_MASK == TRANSACTION_ROLLBACK:
            return True
        if isinstance(keys, str):
            keys = keys.split(KEY_SEPARATOR)
        idx_keys = [build_key(topic, uniq_key)] if uniq_key else []
        idx_keys.extend(build_key(topic, k) for k in (keys or ()) if k)
        for idx_key in idx_keys:
            while not f.put_key(idx_key, commitlog_offset, store_timestamp):
                log.warning("index file %s is full, trying to create another one", f.file_name)
                nf = self.get_and_create_last_index_file()
                if nf is None:
                    log.error("put key %s into the index failed", idx_key)
                    return False
                f = nf
        return True

    # ---- querying ----------------------------------------------------------------------------
    def query_offset(
        self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int
    ) -> QueryOffsetResult:
        """Candidate CommitLog offsets for `topic#key` stored in [begin_ts, end_ts], newest
        file first, at most min(max_num, max_msgs_num_batch), plus the newest file's end values.

        Candidates only: the caller must re-read the records and filter on the real key.
        """
        max_num = min(max_num, self.max_msgs_num_batch)
        idx_key = build_key(topic, key)
        out: list[int] = []
        last_ts = last_phy = 0
        with self._lock:
            files = list(self.files)
        for i in range(len(files) - 1, -1, -1):
            f = files[i]
            if i == len(files) - 1:
                last_ts, last_phy = f.end_timestamp, f.end_phy_offset
            if f.is_time_matched(begin_ts, end_ts):
                f.select_phy_offsets(out, idx_key, max_num, begin_ts, end_ts)
            if f.begin_timestamp < begin_ts or len(out) >= max_num:
                break
        return QueryOffsetResult(out, last_ts, last_phy)

    def query_offsets(
        self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int
    ) -> list[int]:
        """`query_offset(...).phy_offsets`: candidate offsets, newest first."""
        return self.query_offset(topic, key, max_num, begin_ts, end_ts).phy_offsets

    # ---- maintenance -------------------------------------------------------------------------
    def delete_expired_file(self, min_phy_offset: int) -> int:
        """Delete files wholly below the CommitLog minimum, oldest first, never the newest.

        Stops at the first file that still reaches min_phy_offset or cannot be deleted yet.
        Returns how many were deleted.
        """
        with self._lock:
            if not self.files or self.files[0].end_phy_offset >= min_phy_offset:
                return 0
            doomed = []
            for f in self.files[:-1]:
                if f.end_phy_offset >= min_phy_offset:
                    break
                doomed.append(f)
            deleted = 0
            for f in doomed:
                if not f.destroy(DESTROY_INTERVAL_FORCIBLY_MS):
                    log.error("delete expired index file %s failed", f.path)
                    break
                self.files.remove(f)
                deleted += 1
            return deleted

    def release_cold_pages(self, hot_bytes: int) -> int:
        """IndexFile.release_cold_pages for every file; returns the bytes advised."""
        with self._lock:
            files = list(self.files)
        return sum(f.release_cold_pages(hot_bytes) for f in files)

    def flush(self) -> None:
        """fdatasync every file; a full file's endTimestamp goes to the checkpoint."""
        with self._lock:
            files = list(self.files)
        newest_full_ts = 0
        for f in files:
            if not self._flush_one(f):
                return
            if f.is_write_full():
                newest_full_ts = max(newest_full_ts, f.end_timestamp)
        if newest_full_ts > self.checkpoint.index_msg_timestamp:
            self.checkpoint.index_msg_timestamp = newest_full_ts
            self.checkpoint.flush()

    def destroy(self) -> None:
        """Delete every index file."""
        with self._lock:
            for f in self.files:
                f.destroy(DESTROY_INTERVAL_FORCIBLY_MS)
            self.files.clear()

    def shutdown(self) -> None:
        """Flush every file (as RocketMQ 5 does) and unmap them."""
        self.flush()
        self.close()

    def close(self) -> None:
        """Unmap every file without flushing (what a killed process leaves)."""
        with self._lock:
            for f in self.files:
                f.close()
            self.files.clear()
