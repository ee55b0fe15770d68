"""AllocateMappedFileService: pre-creates the CommitLog segment after the one in use, in a
worker thread, so a put that rolls to a new segment does not pay for file creation.

A pre-created segment stays out of the MappedFileQueue until a put asks for it; an unused
one is deleted at shutdown, and after a crash recovery truncates it like any empty tail.
"""

from __future__ import annotations

import logging
import os
import threading

import trio

from . import runtime
from .layout import segment_name
from .mapped_file import MappedFile
from .transient_store_pool import TransientStorePool

log = logging.getLogger("tidemq.store")


class AllocateMappedFileService:
    def __init__(self, pool: TransientStorePool | None = None) -> None:
        self._pool = pool
        self._lock = threading.Lock()  # one creation at a time: inline or background
        self._ready: dict[str, MappedFile] = {}
        self._wanted: tuple[str, int] | None = None
        self._wake = trio.Event()
        self.preallocated_hits = 0

    def _create(self, path: str, file_size: int) -> MappedFile:
        return MappedFile(path, file_size, pool=self._pool, preallocate=True)

    def allocate(self, path: str, file_size: int) -> MappedFile:
        """Hand out the segment at `path` (pre-created if ready) and ask for the next one."""
        with self._lock:
            mf = self._ready.pop(path, None)
            if mf is None:
                mf = self._create(path, file_size)
            else:
                self.preallocated_hits += 1
        directory, name = os.path.split(path)
        self._wanted = (os.path.join(directory, segment_name(int(name) + file_size)), file_size)
        self._wake.set()
        return mf

    def _preallocate(self, path: str, file_size: int) -> None:
        with self._lock:
            if path in self._ready or os.path.exists(path):
                return
            self._ready[path] = self._create(path, file_size)

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            wanted, self._wanted = self._wanted, None
            if wanted is not None:
                try:
                    await runtime.run_sync(self._preallocate, *wanted)
                except OSError as e:
                    log.warning("could not pre-create segment %s: %s", wanted[0], e)

    def shutdown(self) -> None:
        """Delete pre-created segments that were never used."""
        with self._lock:
            for mf in self._ready.values():
                mf.destroy(0)
            self._ready.clear()
