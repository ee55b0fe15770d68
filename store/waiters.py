"""OffsetWaiters: tasks waiting, each with its own deadline, for a growing offset (the
flushed offset of a SYNC_FLUSH store, the offset a slave acked on a SYNC_MASTER) to reach
theirs.

RocketMQ's GroupCommitService and GroupTransferService keep such request lists. Here one
timer task serves every deadline, so a waiting put costs a `trio.Event` instead of a trio
cancel scope of its own (a cancel scope per put cost more than the rest of a sync put).
"""

from __future__ import annotations

import heapq
import itertools

import attrs
import trio

_STALE_REBUILD = 1024
"""Rebuild the offset heap when it holds more finished waiters than this (and than live ones)."""


@attrs.define(eq=False)
class _Waiter:
    offset: int
    event: trio.Event = attrs.field(factory=trio.Event)
    ok: bool = False


class OffsetWaiters:
    """`await wait(offset, timeout_s)` → True once `advance(reached)` passed `offset`, False
    at the deadline. Deadlines need `run_timer` running (the owner's service starts it);
    without it each wait falls back to a cancel scope of its own."""

    def __init__(self) -> None:
        self._by_offset: list[tuple[int, int, _Waiter]] = []
        self._by_deadline: list[tuple[float, int, _Waiter]] = []
        self._seq = itertools.count()
        self._rearm = trio.Event()
        self._timer_running = False
        self.max_wanted = -1
        """The largest offset any wait asked for (what a flush should reach)."""
        self.failed = False
        """`fail_all` ran: the offset will not move on, every wait fails at once."""

    def __len__(self) -> int:
        """Waiters not finished yet."""
        return sum(1 for _, _, w in self._by_offset if not w.event.is_set())

    async def wait(self, offset: int, timeout_s: float) -> bool:
        if self.failed:
            return False
        waiter = _Waiter(offset)
        seq = next(self._seq)
        heapq.heappush(self._by_offset, (offset, seq, waiter))
        self.max_wanted = max(self.max_wanted, offset)
        try:
            if not self._timer_running:
                with trio.move_on_after(timeout_s):
                    await waiter.event.wait()
                return waiter.ok
            deadline = trio.current_time() + timeout_s
            heap = self._by_deadline
            if not heap or deadline < heap[0][0]:
                self._rearm.set()
            heapq.heappush(heap, (deadline, seq, waiter))
            await waiter.event.wait()
            return waiter.ok
        finally:
            waiter.event.set()  # finished either way (cancelled too): the heaps drop it

    def advance(self, reached: int) -> None:
        """The offset reached `reached`: every waiter for an offset at or below it succeeds."""
        heap = self._by_offset
        while heap and heap[0][0] <= reached:
            waiter = heapq.heappop(heap)[2]
            if not waiter.event.is_set():
                waiter.ok = True
                waiter.event.set()

    def fail_all(self) -> None:
        """The offset will never move on (its flush failed): every waiter fails now, and so
        does every later wait."""
        self.failed = True
        for _, _, waiter in self._by_offset:
            waiter.event.set()  # ok stays False
        self._by_offset.clear()

    async def run_timer(self) -> None:
        """Fail waiters at their deadlines until cancelled: one timer for all of them."""
        self._timer_running = True
        heap = self._by_deadline
        try:
            while True:
                while heap and heap[0][2].event.is_set():
                    heapq.heappop(heap)
                if heap:
                    with trio.move_on_at(heap[0][0]):
                        await self._rearm.wait()
                else:
                    await self._rearm.wait()
                if self._rearm.is_set():
                    self._rearm = trio.Event()
                now = trio.current_time()
                while heap and (heap[0][2].event.is_set() or heap[0][0] <= now):
                    waiter = heapq.heappop(heap)[2]
                    waiter.event.set()  # ok stays False: timed out
                self._drop_finished()
        finally:
            # no timer, no deadlines: whoever still waits fails now rather than hang (the
            # service that owns the offset stopped, so it will not move on anyway)
            self._timer_running = False
            for _, _, waiter in heap:
                waiter.event.set()
            heap.clear()

    def _drop_finished(self) -> None:
        """Timed-out waiters stay in the offset heap until `advance` passes them; when the
        offset stops moving (a stuck slave) rebuild it rather than let it grow."""
        heap = self._by_offset
        if len(heap) > _STALE_REBUILD:
            live = [entry for entry in heap if not entry[2].event.is_set()]
            if len(heap) - len(live) > max(_STALE_REBUILD, len(live)):
                heapq.heapify(live)
                self._by_offset = live
