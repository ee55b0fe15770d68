"""RunningFlags: the store's state bits (RocketMQ 4.9 RunningFlags): what refuses puts or
reads, set by cleanup (DISK_FULL) and dispatch (queue and index write errors)."""

from __future__ import annotations


class RunningFlags:
    """RocketMQ's store state bits; DISK_FULL clears itself, the error bits stay until restart."""

    NOT_READABLE = 1
    NOT_WRITEABLE = 2
    WRITE_LOGICS_QUEUE_ERROR = 4
    WRITE_INDEX_FILE_ERROR = 8
    DISK_FULL = 16

    _NAMES = {
        1: "NOT_READABLE", 2: "NOT_WRITEABLE", 4: "WRITE_LOGICS_QUEUE_ERROR",
        8: "WRITE_INDEX_FILE_ERROR", 16: "DISK_FULL",
    }
    _NOT_WRITEABLE_MASK = NOT_WRITEABLE | WRITE_LOGICS_QUEUE_ERROR | DISK_FULL | WRITE_INDEX_FILE_ERROR

    def __init__(self) -> None:
        self.bits = 0
        self.running = False
        """Started and not yet shutting down: puts are taken."""
        self.shut_down = False
        """Shut down: reads are refused too."""

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

    def why_not_writeable(self) -> str:
        if self.bits & self.DISK_FULL:
            return "the disk is full (usage above diskSpaceWarningLevelRatio); writes resume after cleanup frees space"
        return "store is not writeable: " + ", ".join(self.names())
