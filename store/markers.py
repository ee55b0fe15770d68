"""The store root's marker files, beside the checkpoint (checkpoint.py): `<root>/lock` and
`<root>/abort` (ROCKETMQ-FACTS §5).

- lock: a broker holds an exclusive lock on byte 0 for as long as the store is open, so a
  second process (or a second store in this process) cannot open the same root.
- abort: created once the store is started, removed as the very last step of a clean
  shutdown; finding it at load means the last exit was not clean (abnormal recovery).
"""

from __future__ import annotations

import errno
import fcntl
import os
from contextlib import suppress

from . import runtime
from .layout import LOCK_FILE

_LOCKED_ROOTS: set[str] = set()  # fcntl locks do not exclude the same process


class StoreLockedError(RuntimeError):
    """Another process (or another store in this process) has the store root open."""


class StoreLock:
    """`<root>/lock`: fcntl.lockf on byte 0, as a RocketMQ broker takes it."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.path = os.path.join(self.root, LOCK_FILE)
        self._fd: int | None = None

    def acquire(self) -> None:
        os.makedirs(self.root, exist_ok=True)
        if self.root in _LOCKED_ROOTS:
            raise StoreLockedError(f"store root {self.root} is already open in this process")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            # fcntl locks vanish when this process closes *any* fd of the file (e.g. a tool
            # reading <root>/lock); an flock on our own fd survives that.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EACCES, errno.EAGAIN):
                raise StoreLockedError(
                    f"store root {self.root} is locked by another process ({self.path})"
                ) from None
            raise
        os.pwrite(fd, b"lock", 0)
        os.fsync(fd)
        self._fd = fd
        _LOCKED_ROOTS.add(self.root)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the fcntl lock
            self._fd = None
            _LOCKED_ROOTS.discard(self.root)


class AbortFile:
    """`<root>/abort`: present while the store runs; left behind by a crash."""

    def __init__(self, path: str) -> None:
        self.path = path

    def exists(self) -> bool:
        """True when the last exit was not clean."""
        return os.path.exists(self.path)

    def create(self) -> None:
        """Create the file durably (the file and its directory fsynced): a power loss must not
        take it, or the next start would trust files that were never flushed (normal
        recovery) and skip rebuilding the ConsumeQueues (found by the simulation's power
        losses, docs/simulation.md)."""
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        dir_fd = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        runtime.synced(self.path)

    def remove(self) -> None:
        """The last step of a clean shutdown."""
        with suppress(FileNotFoundError):
            os.unlink(self.path)
