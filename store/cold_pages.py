"""Cold store pages out of the process's memory (issue 23: RSS that does not grow).

Every segment the store has read or written through its map stays resident in the process
(`RssFile`) until it is unmapped: with 1 GiB segments a master's RSS grew from 361 MB to
1.6 GB in three minutes of load. `ColdPageService` drops, every `interval_s`, the map's
pages of everything below `hot_bytes` under the flushed and dispatched offsets
(MappedFile.release_pages: MADV_DONTNEED), and sooner once `step_bytes` more became cold
(at 50 MB/s five seconds would leave 250 MB resident). The page cache keeps them, so a consumer reading
old messages or a slave catching up faults them back from memory; the next round drops them
again. Nothing unflushed is ever dropped (for a shared file map the kernel keeps dirty pages
anyway, but flushed-only keeps the rule simple).

The same round drops the pages of every full ConsumeQueue file (each queue's files but the
one being written: 6 MB each, a new one every 300,000 messages of the queue, so a soak's
queues would otherwise grow the RSS by hundreds of MB) and of the index files' entries but
the newest `hot_bytes` (their hash slots, written anywhere, stay).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import trio

from . import runtime
from .consume_queue import ConsumeQueue
from .index_file import IndexService
from .mapped_file_queue import MappedFileQueue

log = logging.getLogger("tidemq.store")

__all__ = ["COLD_PAGE_INTERVAL_S", "HOT_BYTES", "ColdPageService", "release_cold_pages", "release_full_queue_files"]

COLD_PAGE_INTERVAL_S = 5.0
COLD_PAGE_POLL_S = 0.5
STEP_BYTES = 32 * 1024 * 1024
HOT_BYTES = 16 * 1024 * 1024
"""Kept resident under the flushed and dispatched offsets: the tail that tailing consumers,
the dispatcher and in-sync slaves read next."""


def release_cold_pages(queue: MappedFileQueue, below: int) -> int:
    """Drop the pages of every segment's part below the CommitLog offset `below`; returns
    the bytes advised. Blocking (a madvise per segment): call from a worker thread."""
    advised = 0
    for mf in list(queue.files):  # one snapshot: cleanup may replace the list meanwhile
        end = below - mf.file_from_offset
        if end > 0:
            advised += mf.release_pages(end)
    return advised


def release_full_queue_files(queues: Iterable[ConsumeQueue]) -> int:
    """Drop the pages of every ConsumeQueue file nothing writes any more (all of a queue's
    files but its last); returns the bytes advised. Blocking: a worker thread's."""
    advised = 0
    for cq in queues:
        files = list(cq.mapped_file_queue.files)
        for mf in files[:-1]:
            if mf.is_full():
                advised += mf.release_pages(mf.file_size)
    return advised


class ColdPageService:
    """Drops cold CommitLog pages every `interval_s`; see the module docstring."""

    def __init__(self, queue: MappedFileQueue, dispatched_to: Callable[[], int], *,
                 consume_queues: Iterable[ConsumeQueue] = (), index: IndexService | None = None,
                 interval_s: float = COLD_PAGE_INTERVAL_S, hot_bytes: int = HOT_BYTES,
                 step_bytes: int = STEP_BYTES) -> None:
        self.queue = queue
        self.consume_queues = consume_queues
        self.index = index
        self.dispatched_to = dispatched_to
        self.interval_s = interval_s
        self.hot_bytes = hot_bytes
        self.step_bytes = step_bytes
        self._released_below = 0
        self.rounds = 0
        self.advised_bytes = 0

    def below(self) -> int:
        return min(self.queue.flushed_where, self.dispatched_to()) - self.hot_bytes

    async def release_once(self) -> int:
        below = self.below()
        advised = await runtime.run_sync(self._release, below)
        self._released_below = max(below, 0)
        self.rounds += 1
        self.advised_bytes += advised
        return advised

    def _release(self, below: int) -> int:
        advised = release_cold_pages(self.queue, below) if below > 0 else 0
        advised += release_full_queue_files(self.consume_queues)
        if self.index is not None:
            advised += self.index.release_cold_pages(self.hot_bytes)
        return advised

    async def run(self) -> None:
        last = trio.current_time()
        while True:
            await runtime.sleep(COLD_PAGE_POLL_S)
            now = trio.current_time()
            if now - last < self.interval_s and self.below() - self._released_below < self.step_bytes:
                continue
            last = now
            try:
                await self.release_once()
            except (OSError, ValueError) as e:  # a segment unmapped under us: next round
                log.warning("cannot release cold store pages: %s", e)
