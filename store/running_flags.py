"""RunningFlags: the store's state bits (RocketMQ 4.9 RunningFlags): what refuses puts or
reads, set by cleanup (DISK_FULL), dispatch (queue and index write errors) and the CommitLog
flush (FLUSH_DISK_ERROR: an fdatasync failed, so what it covered may never reach the disk;
PostgreSQL's "fsyncgate" lesson is that a retried fsync can succeed without writing it)."""

from __future__ import annotations


class RunningFlags:
    """RocketMQ's store state bits; DISK_FULL clears itself, the error bits stay until restart."""

    NOT_READABLE = 1
    NOT_WRITEABLE = 2
    WRITE_LOGICS_QUEUE_ERROR = 4
    WRITE_INDEX_FILE_ERROR = 8
    DISK_FULL = 16
    FLUSH_DISK_ERROR = 32
    CHECKPOINT_FLUSH_ERROR = 64  # tidemq's: the checkpoint's fdatasync failed

    _NAMES = {
        1: "NOT_READABLE", 2: "NOT_WRITEABLE", 4: "WRITE_LOGICS_QUEUE_ERROR",
        8: "WRITE_INDEX_FILE_ERROR", 16: "DISK_FULL", 32: "FLUSH_DISK_ERROR", 64: "CHECKPOINT_FLUSH_ERROR",
    }
    _NOT_WRITEABLE_MASK = (NOT_WRITEABLE | WRITE_LOGICS_QUEUE_ERROR | DISK_FULL | WRITE_INDEX_FILE_ERROR
                           | FLUSH_DISK_ERROR | CHECKPOINT_FLUSH_ERROR)
    _FILE_FLUSH_BITS = {"ConsumeQueue": WRITE_LOGICS_QUEUE_ERROR, "index file": WRITE_INDEX_FILE_ERROR,
                        "checkpoint": CHECKPOINT_FLUSH_ERROR}

    def __init__(self) -> None:
        self.bits = 0
        self.running = False
        """Started and not yet shutting down: puts are taken."""
        self.shut_down = False
        """Shut down: reads are refused too."""
        self.flush_error = ""
        """Why FLUSH_DISK_ERROR is set (the first failure; it stays until a restart)."""

    def set(self, bit: int) -> None:
        self.bits |= bit

    def clear(self, bit: int) -> None:
        self.bits &= ~bit

    def is_set(self, bit: int) -> bool:
        return bool(self.bits & bit)

    def is_writeable(self) -> bool:
        return not self.bits & self._NOT_WRITEABLE_MASK

    def is_readable(self) -> bool:
        return not self.bits & self.NOT_READABLE

    def names(self) -> list[str]:
        return [name for bit, name in self._NAMES.items() if self.bits & bit]

    def flush_failed(self, offset: int, error: OSError) -> None:
        """A CommitLog flush from `offset` failed: refuse writes until a restart's recovery
        finds what the disk really holds (the first failure's reason is the one kept)."""
        if not self.flush_error:
            self.flush_error = (f"a CommitLog flush failed ({error.strerror or error}): what was written "
                                f"from offset {offset} on may not be on disk; the store takes no writes "
                                f"until a restart recovers it")
        self.set(self.FLUSH_DISK_ERROR)

    def file_flush_failed(self, what: str, error: OSError) -> None:
        """A flush of a ConsumeQueue, an index file or the checkpoint (`what`) failed: the
        checkpoint claims nothing past the last good flush (StoreCheckpoint.freeze), and the
        store refuses writes until a restart, whose recovery dispatches again from there
        (any failed fsync stops writes, as PostgreSQL's does since "fsyncgate")."""
        if not self.flush_error:
            self.flush_error = (f"a {what} flush failed ({error.strerror or error}): the store takes no writes "
                                f"until a restart recovers it (the CommitLog holds every acknowledged message)")
        self.set(self._FILE_FLUSH_BITS[what])

    def why_not_writeable(self) -> str:
        if self.flush_error and self.bits & (self.FLUSH_DISK_ERROR | self.CHECKPOINT_FLUSH_ERROR
                                             | self.WRITE_LOGICS_QUEUE_ERROR | self.WRITE_INDEX_FILE_ERROR):
            return self.flush_error
        if self.bits & self.DISK_FULL:
            return "the disk is full (usage above diskSpaceWarningLevelRatio); writes resume after cleanup frees space"
        return "store is not writeable: " + ", ".join(self.names())
