"""`<root>/flush_error`: the CommitLog offset from which a failed flush may have lost writes.

After an fdatasync fails, Linux may mark the pages it could not write clean: the process (and
the next one, after a restart) still reads the new bytes from the page cache, but they are
not on the disk, and no later fdatasync writes them (PostgreSQL's "fsyncgate"). So the store
notes, durably, where its last good flush ended (`note`); the next start's recovery writes
the CommitLog back over itself from there and fdatasyncs it (`MappedFile.rewrite`) before it
trusts those bytes, then removes the note. A restart is what brings such a store back.
"""

from __future__ import annotations

import logging
import os
from contextlib import suppress

from . import runtime
from .durable import write_durably

log = logging.getLogger("tidemq.store")

FLUSH_ERROR_FILE = "flush_error"


class LostWrites:
    """The note in `<root>/flush_error` (absent: no flush failed since the last recovery)."""

    def __init__(self, root: str) -> None:
        self.path = os.path.join(root, FLUSH_ERROR_FILE)

    def note(self, offset: int) -> None:
        """A flush from `offset` failed (the smallest such offset is kept). Best effort: a
        disk that cannot take this either leaves the log line as the operator's clue."""
        known = self.offset()
        if known is not None and known <= offset:
            return
        try:
            write_durably(self.path, f"{offset}\n".encode())
        except OSError as e:
            log.error("cannot note the failed flush in %s: %s; after a restart, run `store verify` "
                      "and compare with a replica from offset %d on", self.path, e, offset)

    def offset(self) -> int | None:
        try:
            with open(self.path, encoding="ascii") as f:
                return int(f.read().strip())
        except FileNotFoundError:
            return None
        except ValueError:
            return 0  # unreadable: write everything back, the safe side

    def clear(self) -> None:
        """The writes are durable again: remove the note durably."""
        with suppress(FileNotFoundError):
            os.unlink(self.path)
        dir_fd = os.open(os.path.dirname(self.path), os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        runtime.synced(self.path)
