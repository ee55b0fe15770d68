"""Changes: a version counter others wait on, instead of a callback slot set after
construction. The topic table and the etcd controller's route view bump theirs; the name
server registration waits on both and registers again at once (routes learn a new topic or
a new lease holder without waiting for the next period)."""

from __future__ import annotations

import trio

__all__ = ["Changes"]


class Changes:
    """`bump()` after a change; `await wait_after(seen)` returns the version once it moved on
    from `seen` (at once when it already has)."""

    def __init__(self) -> None:
        self.version = 0
        self._moved = trio.Event()

    def bump(self) -> None:
        self.version += 1
        self._moved.set()
        self._moved = trio.Event()

    async def wait_after(self, seen: int) -> int:
        while self.version == seen:
            await self._moved.wait()
        return self.version
