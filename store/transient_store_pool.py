"""TransientStorePool: write buffers (anonymous mmaps) a CommitLog appends into before a
commit service copies them to the file (seed 000 §4.4.3, the off-heap pool).

Each buffer is `mlock`ed when the process may lock that much memory; otherwise a warning
says so once and the pool works unlocked.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import mmap
import threading

log = logging.getLogger("tidemq.store")


def _mlock(buf: mmap.mmap, size: int) -> bool:
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    return bool(libc.mlock(ctypes.c_void_p(addr), ctypes.c_size_t(size)) == 0)


class TransientStorePool:
    def __init__(self, pool_size: int, buffer_size: int) -> None:
        self.pool_size = pool_size
        self.buffer_size = buffer_size
        self._free: list[mmap.mmap] = []
        self._lock = threading.Lock()
        self.locked_in_memory = True

    def allocate(self) -> None:
        """Map (and mlock) the buffers: done once the store holds its lock, so a second
        process failing on the lock never grabs pool_size × segment size of memory."""
        with self._lock:
            while len(self._free) < self.pool_size:
                buf = mmap.mmap(-1, self.buffer_size)
                if self.locked_in_memory and not _mlock(buf, self.buffer_size):
                    self.locked_in_memory = False
                    log.warning(
                        "transient store pool: mlock of %d bytes refused (RLIMIT_MEMLOCK); "
                        "buffers stay unlocked and may be swapped out", self.buffer_size,
                    )
                self._free.append(buf)

    def borrow(self) -> mmap.mmap | None:
        with self._lock:
            if not self._free:
                log.warning("transient store pool is empty; writing straight into the mapped file")
                return None
            return self._free.pop()

    def give_back(self, buf: mmap.mmap) -> None:
        with self._lock:
            self._free.append(buf)

    @property
    def available(self) -> int:
        return len(self._free)

    def destroy(self) -> None:
        with self._lock:
            for buf in self._free:
                buf.close()
            self._free.clear()
