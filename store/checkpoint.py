"""StoreCheckpoint: the 4 KiB `<root>/checkpoint` file (ROCKETMQ-FACTS §5).

Three int64 big-endian timestamps (ms) tell abnormal recovery where it can safely start:

- offset 0: physic_msg_timestamp, store time of the last CommitLog record covered by a full flush;
- offset 8: logics_msg_timestamp, store time of the last ConsumeQueue unit covered by a thorough flush;
- offset 16: index_msg_timestamp, endTimestamp of the last IndexFile flushed because it was full;
- offset 32: confirm_phy_offset, RocketMQ 5's confirmPhyOffset: the confirm offset this node
  last knew (0: none known), so a restarted slave serves nothing past it;
- offset 40: caught_up_ms, tidemq's: the wall time (ms) this node, as a slave, last caught up
  with its master (0: never), so a restarted slave's promotion check knows how long ago.

The timestamps live in attributes; only `flush()` writes them into the map and makes them
durable, so a crash leaves the last flushed values, never a half-updated in-memory state. The
confirm offset and the caught-up time go into the map at once (`note_confirm`,
`note_caught_up`): a killed process leaves the newest (one aligned 8-byte store), a power loss
an older one, which is the cautious side. The bytes at 24 (RocketMQ 5's masterFlushedOffset)
and after 48 are preserved untouched.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import threading
from collections.abc import Callable

from . import runtime
from .mapped_file import grow_file

log = logging.getLogger("tidemq.store")

CHECKPOINT_FILE_SIZE = 4096  # RocketMQ maps exactly OS_PAGE_SIZE
_THREE = struct.Struct(">qqq")
_OFFSET = struct.Struct(">q")
CONFIRM_AT = 32
CAUGHT_UP_AT = 40
LOGICS, INDEX = 1, 2
"""Which timestamp a failed ConsumeQueue or index flush freezes (`freeze`)."""


class StoreCheckpoint:
    """The store's checkpoint file, mapped read/write for the life of the store."""

    def __init__(self, path: str) -> None:
        self.path = path
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        exists = os.path.exists(path)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(self._fd).st_size < CHECKPOINT_FILE_SIZE:
                # Java's FileChannel.map extends a short file the same way; the blocks are
                # reserved so a full disk cannot SIGBUS a later write through the map.
                grow_file(self._fd, path, CHECKPOINT_FILE_SIZE, preallocate=True)
            self._mm = mmap.mmap(
                self._fd, CHECKPOINT_FILE_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE
            )
        except BaseException:
            os.close(self._fd)
            raise
        self._lock = threading.Lock()
        self._closed = False
        self._durable = [0, 0, 0]  # the three timestamps as the last good flush left them
        self._ceiling: dict[int, int] = {}  # a frozen timestamp's most (`freeze`)
        self.flush_error: str | None = None
        """Why a flush of this file failed (EIO...): it is never flushed again (fsyncgate)."""
        self.on_flush_error: Callable[[OSError], None] = lambda _e: None
        """Told of this file's failed flush, once (the store refuses writes until a restart)."""
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        if exists:
            (
                self.physic_msg_timestamp,
                self.logics_msg_timestamp,
                self.index_msg_timestamp,
            ) = _THREE.unpack_from(self._mm, 0)
            self._durable = [self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp]
        (confirm,) = _OFFSET.unpack_from(self._mm, CONFIRM_AT) if exists else (0,)
        self.confirm_phy_offset: int | None = confirm if confirm > 0 else None
        """The confirm offset last noted (None: none known; a 4.x file has 0 there)."""
        (caught_up,) = _OFFSET.unpack_from(self._mm, CAUGHT_UP_AT) if exists else (0,)
        self.caught_up_ms: int | None = caught_up if caught_up > 0 else None
        """Wall time (ms) this node last caught up with a master as its slave (None: never)."""
        log.info(
            "checkpoint %s: physic=%d logics=%d index=%d",
            path, self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp,
        )

    def note_confirm(self, offset: int | None) -> None:
        """Keep `offset` as the confirm offset known (None forgets it); into the map at once."""
        if offset == self.confirm_phy_offset:
            return
        with self._lock:
            if self._closed:
                return
            self.confirm_phy_offset = offset
            _OFFSET.pack_into(self._mm, CONFIRM_AT, offset or 0)

    def note_caught_up(self, ms: int) -> None:
        """Keep `ms` as the time this slave last caught up with its master; into the map at once."""
        with self._lock:
            if self._closed:
                return
            self.caught_up_ms = ms
            _OFFSET.pack_into(self._mm, CAUGHT_UP_AT, ms)

    def freeze(self, which: int) -> None:
        """A flush of the files behind timestamp `which` (LOGICS: the ConsumeQueues, INDEX:
        the index files) failed, so what it covered may never reach the disk: the file never
        claims more for it than the last good flush wrote, and the restart's recovery
        dispatches again from there."""
        with self._lock:
            self._ceiling[which] = self._durable[which]
        log.error("checkpoint: the %s timestamp stays at %d (a flush of those files failed)",
                  "logics" if which == LOGICS else "index", self._durable[which])

    def flush(self) -> None:
        """Write the three timestamps into the map and fdatasync (blocking: use a worker
        thread). A failed fdatasync is never retried (`flush_error`, `on_flush_error`): the
        file on disk keeps older timestamps, the cautious side for recovery."""
        with self._lock:
            if self._closed or self.flush_error is not None:
                return
            three = [self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp]
            for which, most in self._ceiling.items():
                three[which] = min(three[which], most)
            _THREE.pack_into(self._mm, 0, *three)
            try:
                runtime.fdatasync(self._fd, self.path)
            except OSError as e:
                self.flush_error = f"{e.strerror or e}"
                error = e
            else:
                self._durable = three
                return
        log.error("checkpoint %s: flush failed (%s); it is not flushed again until a restart", self.path, error)
        self.on_flush_error(error)

    @property
    def min_timestamp(self) -> int:
        """Where abnormal recovery may start: min(physic, logics) minus 3 s, floored at 0."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    @property
    def min_timestamp_index(self) -> int:
        """min_timestamp also bounded by the index time (no 3 s margin on it, as RocketMQ)."""
        return min(self.min_timestamp, self.index_msg_timestamp)

    def shutdown(self) -> None:
        """Flush, then unmap and close; later flushes are no-ops."""
        self.flush()
        self.close()

    def close(self) -> None:
        """Unmap and close without writing (what a killed process leaves)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._mm.close()
            os.close(self._fd)
