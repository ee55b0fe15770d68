"""The spin guard: a run whose tasks keep running while the simulated clock stands still is
stuck, as a busy loop on a real clock burns a CPU until time moves on; this ends it and
names the tasks that spun."""

from __future__ import annotations

import trio
import trio.testing

__all__ = ["SPIN_PASSES", "SpinGuard"]

SPIN_PASSES = 100_000  # passes of trio's run loop without the clock moving: a spin (a busy instant takes a few thousand)
SPIN_SAMPLE = 1_000  # the last passes of a spin, whose task steps name what spun


class SpinGuard(trio.abc.Instrument):
    """Ends a run whose tasks keep running while the simulated clock stands still: a loop
    that never waits (a timeout that is due at once, forever) would otherwise spin without
    end, as it spins a real CPU until the real clock moves on. It counts passes of the run
    loop (a hook per pass, not per task step: a sixth of a run's steps cost); the last
    passes of a spin add a `_Sampler` that names the tasks that ran."""

    def __init__(self, clock: trio.testing.MockClock, limit: int = SPIN_PASSES) -> None:
        self.clock = clock
        self.limit = limit
        self.scope: trio.CancelScope | None = None
        self.spinning: str | None = None  # the task that spun, once caught
        self._at = -1.0
        self._passes = 0
        self._sampler: _Sampler | None = None

    def before_io_wait(self, timeout: float) -> None:
        now = self.clock.current_time()
        if now != self._at:
            self._at, self._passes = now, 0
            if self._sampler is not None:
                trio.lowlevel.remove_instrument(self._sampler)
                self._sampler = None
            return
        self._passes += 1
        if self._passes == max(0, self.limit - SPIN_SAMPLE):
            self._sampler = _Sampler()
            trio.lowlevel.add_instrument(self._sampler)
        if self._passes == self.limit and self.scope is not None:
            names = self._sampler.names if self._sampler is not None else {}
            self.spinning = ", ".join(f"{name} ({n})" for name, n in
                                      sorted(names.items(), key=lambda kv: -kv[1])[:3]) or "?"
            self.scope.cancel()


class _Sampler(trio.abc.Instrument):
    """Counts the task steps of a spin's last passes by task name."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.names[task.name] = self.names.get(task.name, 0) + 1

