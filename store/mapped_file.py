"""MappedFile: one fixed-size segment mapped with mmap (seed 000 §4.4.2).

Positions: `wrote_position` (bytes appended), `committed_position` (bytes copied from the
optional write buffer into the file), `flushed_position` (bytes made durable). Without a
write buffer, committed == wrote.

Durability uses `os.fdatasync` on the file descriptor: on Linux it writes back every dirty
page of the file, those dirtied through the shared mapping included (msync(MS_SYNC) is the
same kernel call on a range), and unlike `mmap.flush` it releases the GIL, so a flush in a
worker thread does not stall the event loop.

A reader `hold()`s the file while it uses a slice; `destroy()` unmaps only when no reader
holds it, or after `interval_forcibly` ms have passed since the first attempt.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import logging
import mmap
import os
import threading

from . import runtime
from .transient_store_pool import TransientStorePool

OS_PAGE_SIZE = 4096

PWRITE_MIN_BYTES = 16 * 1024
"""Appends this large go through pwrite, smaller ones are copied into the map. Writing
through the map takes a page fault per fresh 4 KiB page, which dominated a catching-up
slave's 32 KiB frames; Linux's page cache is shared, so the map sees pwrite's bytes."""


def _pwrite_all(fd: int, data: bytes | bytearray | memoryview, pos: int) -> None:
    """pwrite until all of `data` is written (a regular file rarely writes short; an error
    raises OSError, as a failing copy into the map would fault)."""
    with memoryview(data) as view:
        done = 0
        while done < len(view):
            written = os.pwrite(fd, view[done:], pos + done)
            if written <= 0:
                raise OSError(errno.EIO, f"pwrite wrote nothing at {pos + done}")
            done += written


log = logging.getLogger("tidemq.store")


_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_FALLOC_FL_ZERO_RANGE = 0x10
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def _zero_range(fd: int, offset: int, length: int) -> bool:
    """Zero a range in the file system without writing a page: punch a hole (its blocks are
    freed; appends reserve them again as they reach them), else zero it in place. False
    when neither is supported."""
    fallocate = getattr(_libc, "fallocate", None)
    if fallocate is None:
        return False
    for mode in (_FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, _FALLOC_FL_ZERO_RANGE | _FALLOC_FL_KEEP_SIZE):
        if fallocate(fd, mode, ctypes.c_long(offset), ctypes.c_long(length)) == 0:
            return True
    return False


_NO_FALLOCATE = {errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS}

RESERVE_STEP_MIN = 64 * 1024
RESERVE_STEP_MAX = 1024 * 1024


def reserve_step(file_size: int) -> int:
    """How far ahead of the write position a segment's blocks are reserved: 1/64 of the
    segment, between 64 KiB and 1 MiB (1 MiB for a 1 GiB CommitLog segment, 92 KiB for a
    6,000,000-byte ConsumeQueue file), in whole pages, never more than the segment."""
    step = max(RESERVE_STEP_MIN, min(RESERVE_STEP_MAX, file_size // 64))
    return min(file_size, -(-step // OS_PAGE_SIZE) * OS_PAGE_SIZE)


def reserve_blocks(fd: int, offset: int, length: int) -> int:
    """Allocate the file's blocks of [offset, offset + length) (posix_fallocate: unwritten
    extents, nothing written, reads still give zeros); 0, or the errno it failed with."""
    if length <= 0:
        return 0
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as e:
        return e.errno or errno.EIO
    return 0


def grow_file(fd: int, path: str, file_size: int, preallocate: bool, reserve: int | None = None) -> None:
    """Size a new file: sparse (ftruncate, RocketMQ's setLength), then with `preallocate`
    its first `reserve` bytes (all of it when None) get their blocks now (posix_fallocate),
    so a full disk fails here with ENOSPC instead of killing the process with SIGBUS when a
    write through the map first touches an unbacked page. Where the file system cannot
    reserve blocks, the file stays sparse."""
    os.ftruncate(fd, file_size)
    if not preallocate:
        return
    err = reserve_blocks(fd, 0, file_size if reserve is None else min(reserve, file_size))
    if err in _NO_FALLOCATE:
        log.warning("%s: the file system cannot preallocate (%s); the file is sparse", path, os.strerror(err))
    elif err:
        raise OSError(err, os.strerror(err), path)


CREATING_SUFFIX = ".creating"


def _create(path: str, file_size: int, preallocate: bool) -> None:
    """Create a segment file of its full size atomically: sized under a temporary name, then
    renamed, so a crash (even SIGKILL) leaves a full-size segment or none, never a short one
    that the next load would reject. A leftover temporary file is ignored by loading.

    The file is sparse: a fresh 1 GiB segment costs the disk nothing but, with
    `preallocate`, its first reserve step (see `MappedFile.append`)."""
    tmp = path + CREATING_SUFFIX
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        grow_file(fd, path, file_size, preallocate, reserve_step(file_size))
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.close(fd)
    os.rename(tmp, path)


class SegmentSizeError(ValueError):
    """A segment on disk does not have the configured size."""


class SelectResult:
    """A zero-copy slice of a mapped file; release it (or use `with`) when done."""

    __slots__ = ("mapped_file", "start_offset", "view", "_released")

    def __init__(self, mapped_file: MappedFile, start_offset: int, view: memoryview) -> None:
        self.mapped_file = mapped_file
        self.start_offset = start_offset  # absolute offset (segment start + position)
        self.view = view
        self._released = False

    @property
    def size(self) -> int:
        return len(self.view)

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.view.release()
            self.mapped_file.release()

    def __enter__(self) -> SelectResult:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class MappedFile:
    """A fixed-size file named by its start offset, mapped read/write.

    The file is sparse; its blocks are reserved (posix_fallocate) a step ahead of the write
    position as appends reach them, so a write through the map never lands on an unbacked
    page (SIGBUS on a full disk): a full disk refuses the append instead (`write_error`
    says why). `preallocate` reserves the first step when the file is created."""

    def __init__(
        self,
        path: str,
        file_size: int,
        *,
        pool: TransientStorePool | None = None,
        expect_existing: bool = False,
        preallocate: bool = False,
    ) -> None:
        self.path = path
        self.file_name = os.path.basename(path)
        self.file_size = file_size
        self.file_from_offset = int(self.file_name)
        self.reserve_step = reserve_step(file_size)
        exists = os.path.exists(path)
        if expect_existing and not exists:
            raise FileNotFoundError(path)
        if not exists:
            _create(path, file_size, preallocate)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            actual = os.fstat(self._fd).st_size
            if actual != file_size:
                raise SegmentSizeError(
                    f"{path}: segment is {actual} bytes, but the configured size is {file_size}"
                )
            self.mm = mmap.mmap(self._fd, file_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(self._fd)
            if not exists:  # never leave a short file under a segment's name
                with contextlib.suppress(OSError):
                    os.unlink(path)
            raise
        self._pool = pool
        self.write_buffer: mmap.mmap | None = pool.borrow() if pool is not None else None
        self.wrote_position = 0
        self.committed_position = 0
        self.flushed_position = 0
        self.store_timestamp = 0  # store time of the last message appended
        # blocks are allocated below this position (those of an existing file: not known)
        self.reserved = self.reserve_step if preallocate and not exists else 0
        self.write_error = ""  # why the last refused append failed ("" when none did)
        self._lock = threading.Lock()
        self._refs = 1
        self.available = True
        self.cleanup_over = False
        self._first_shutdown_ts = 0.0

    @property
    def fd(self) -> int:
        """The file's descriptor, for reads that skip holes (segment_walker's zero check)."""
        return self._fd

    def __repr__(self) -> str:
        return (
            f"MappedFile({self.file_name}, wrote={self.wrote_position}, "
            f"committed={self.committed_position}, flushed={self.flushed_position})"
        )

    # ---- writing -------------------------------------------------------------------------
    @property
    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def append(self, data: bytes | bytearray | memoryview) -> bool:
        """Append at the write position; False if it does not fit."""
        pos = self.wrote_position
        n = len(data)
        if pos + n > self.file_size:
            return False
        if pos + n > self.reserved and not self._reserve(pos + n):
            return False
        if self.write_buffer is not None:
            self.write_buffer[pos : pos + n] = data
        elif n >= PWRITE_MIN_BYTES:
            try:
                _pwrite_all(self._fd, data, pos)
            except OSError as e:  # the bytes past wrote_position do not count: nothing is lost
                self.write_error = f"cannot write {n} bytes at position {pos} of {self.path}: {e.strerror or e}"
                log.error("%s", self.write_error)
                return False
        else:
            self.mm[pos : pos + n] = data
        self.wrote_position = pos + n
        if self.write_buffer is None:
            self.committed_position = self.wrote_position
        return True

    def _reserve(self, end: int) -> bool:
        """Reserve blocks up to `end` and on to the next reserve step boundary (only what
        `end` needs when the disk has no more room). False when even that fails; a file
        system that cannot reserve blocks is written sparse, as before (warned once)."""
        start = max(self.reserved, self.wrote_position // OS_PAGE_SIZE * OS_PAGE_SIZE)
        target = min(self.file_size, (end // self.reserve_step + 1) * self.reserve_step)
        err = reserve_blocks(self._fd, start, target - start)
        if err in (errno.ENOSPC, errno.EDQUOT) and target > end:
            target = end
            err = reserve_blocks(self._fd, start, target - start)
        if err == 0:
            self.reserved = target
            return True
        if err in _NO_FALLOCATE:
            log.warning("%s: the file system cannot reserve blocks (%s); writing it sparse",
                        self.path, os.strerror(err))
            self.reserved = self.file_size
            return True
        self.write_error = (f"cannot reserve disk space for [{start}, {target}) of {self.path}: "
                            f"{os.strerror(err)}")
        log.error("%s", self.write_error)
        return False

    def set_positions(self, position: int) -> None:
        """Recovery and truncation: wrote = committed = flushed = position."""
        self.wrote_position = self.committed_position = self.flushed_position = position

    def zero_tail(self, position: int) -> None:
        """Zero [position, file_size) so truncated bytes cannot come back: a hole punched in
        the file where it can (no page written through the map, the tail's blocks freed),
        else write zeros. Not synced here: a cut that must outlive a power loss syncs after
        (`sync`; seed 38 with `--storage`: a slave's cut came back, its ConsumeQueues too)."""
        length = self.file_size - position
        if length <= 0:
            return
        chunk = 1 << 20
        if not _zero_range(self._fd, position, length):
            for start in range(position, self.file_size, chunk):
                end = min(self.file_size, start + chunk)
                self.mm[start:end] = bytes(end - start)
        self.reserved = min(self.reserved, position)
        if self.write_buffer is not None:
            for start in range(position, self.file_size, chunk):
                end = min(self.file_size, start + chunk)
                self.write_buffer[start:end] = bytes(end - start)

    def get_read_position(self) -> int:
        """Readers see committed bytes only, so the write buffer's unsaved tail is invisible."""
        return self.committed_position if self.write_buffer is not None else self.wrote_position

    # ---- commit / flush (blocking: call from a worker thread) -----------------------------
    def is_able_to_commit(self, least_pages: int) -> bool:
        if self.is_full():
            return self.wrote_position > self.committed_position
        if least_pages > 0:
            return (self.wrote_position // OS_PAGE_SIZE) - (self.committed_position // OS_PAGE_SIZE) >= least_pages
        return self.wrote_position > self.committed_position

    def commit(self, least_pages: int) -> int:
        """Copy [committed, wrote) of the write buffer into the file; returns committed."""
        if self.write_buffer is None:
            self.committed_position = self.wrote_position
            return self.committed_position
        if self.is_able_to_commit(least_pages) and self.hold():
            try:
                start, end = self.committed_position, self.wrote_position
                view = memoryview(self.write_buffer)[start:end]
                try:
                    written = 0
                    while written < len(view):
                        written += os.pwrite(self._fd, view[written:], start + written)
                finally:
                    view.release()
                self.committed_position = end
            finally:
                self.release()
        if self.committed_position >= self.file_size and self.write_buffer is not None:
            self._return_buffer()
        return self.committed_position

    def is_able_to_flush(self, least_pages: int) -> bool:
        write = self.get_read_position()
        if self.is_full():
            return write > self.flushed_position
        if least_pages > 0:
            return (write // OS_PAGE_SIZE) - (self.flushed_position // OS_PAGE_SIZE) >= least_pages
        return write > self.flushed_position

    def flush(self, least_pages: int) -> int:
        """Make [flushed, readable) durable with fdatasync; returns the flushed position."""
        if self.is_able_to_flush(least_pages) and self.hold():
            try:
                target = self.get_read_position()
                runtime.fdatasync(self._fd, self.path)
                self.flushed_position = max(self.flushed_position, target)
            finally:
                self.release()
        return self.flushed_position

    def sync(self) -> None:
        """fdatasync now, whatever the positions say (blocking)."""
        runtime.fdatasync(self._fd, self.path)

    def rewrite(self, start: int, end: int) -> None:
        """Write [start, end) back over itself and fdatasync it (blocking): pages a failed
        write-back left clean in the page cache become dirty, so this sync writes them
        (lost_writes.py). Raises OSError when the disk still fails."""
        if end > start:
            self.mm[start:end] = bytes(self.mm[start:end])
            runtime.rewrote(self.path, start, end)
        runtime.fdatasync(self._fd, self.path)

    def release_pages(self, end: int, start: int = 0) -> int:
        """Drop the map's pages of [start, end) (rounded inwards to pages) from this process
        (MADV_DONTNEED): they stay in the page cache (dirty ones too, on this shared file
        map), so a reader faults them back without disk I/O, and the file's bytes are
        untouched. Blocking: call from a worker thread. Returns the bytes advised."""
        start = -(-max(start, 0) // OS_PAGE_SIZE) * OS_PAGE_SIZE
        end = min(end, self.file_size) // OS_PAGE_SIZE * OS_PAGE_SIZE
        if end <= start or not self.hold():
            return 0
        try:
            self.mm.madvise(mmap.MADV_DONTNEED, start, end - start)
        finally:
            self.release()
        return end - start

    # ---- reading -------------------------------------------------------------------------
    def select(self, pos: int, size: int | None = None) -> SelectResult | None:
        """Zero-copy slice [pos, pos+size) (to the read position when size is None)."""
        read_pos = self.get_read_position()
        if size is None:
            size = read_pos - pos
        if pos < 0 or size < 0 or pos + size > read_pos:
            return None
        if not self.hold():
            return None
        view = memoryview(self.mm)[pos : pos + size]
        return SelectResult(self, self.file_from_offset + pos, view)

    def read(self, pos: int, size: int) -> bytes | None:
        """Copy [pos, pos+size) out of the map (bounded by the read position)."""
        if pos < 0 or size < 0 or pos + size > self.get_read_position():
            return None
        return self.mm[pos : pos + size]

    @property
    def last_modified(self) -> float:
        """mtime in seconds, 0 when the file is gone."""
        try:
            return os.path.getmtime(self.path)
        except OSError:
            return 0.0

    # ---- reference counting and destruction ------------------------------------------------
    def hold(self) -> bool:
        with self._lock:
            if not self.available or self._refs <= 0:
                return False
            self._refs += 1
            return True

    def release(self) -> None:
        with self._lock:
            self._refs -= 1
            if self._refs > 0:
                return
        self._cleanup()

    @property
    def ref_count(self) -> int:
        return self._refs

    def shutdown(self, interval_forcibly_ms: int) -> None:
        """Mark unavailable and drop the owner's reference; force after the interval."""
        now = runtime.monotonic()
        if self.available:
            self.available = False
            self._first_shutdown_ts = now
            self.release()
        elif self._refs > 0 and (now - self._first_shutdown_ts) * 1000 >= interval_forcibly_ms:
            with self._lock:
                self._refs = -1000 - self._refs
            self._cleanup(force=True)

    def destroy(self, interval_forcibly_ms: int) -> bool:
        """Shut down and delete the file; True once it is gone from disk."""
        self.shutdown(interval_forcibly_ms)
        if not self.cleanup_over:
            return False
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        # the simulation's disk model takes a deletion as durable at once: a file created
        # later under this name must not come back with this one's content at a power loss
        runtime.synced(self.path)
        log.info("deleted segment %s", self.path)
        return True

    def _cleanup(self, force: bool = False) -> None:
        with self._lock:  # a forced destroy and a reader's last release may race (threads)
            if self.cleanup_over or (self.available and not force):
                return
            self.cleanup_over = True
        self._return_buffer()
        try:
            self.mm.close()
        except BufferError:
            # A forced destroy while a reader still holds a slice: the map stays alive
            # until that view is released; the file itself can still be unlinked.
            log.warning("segment %s destroyed while a reader still held a slice", self.path)
        os.close(self._fd)

    def _return_buffer(self) -> None:
        if self.write_buffer is not None and self._pool is not None:
            self._pool.give_back(self.write_buffer)
        self.write_buffer = None

    def close(self) -> None:
        """Unmap without deleting (store shutdown)."""
        self.available = False
        with self._lock:
            self._refs = 0
        self._cleanup(force=True)
