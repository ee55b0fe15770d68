"""The simulation's clock: trio's MockClock, autojumping, without its real-time half.

trio asks the clock for the time several times per pass of its run loop (every cancel
scope with a deadline, every sleep, every `trio.current_time`), about 40,000 times a
seed. MockClock answers each with `perf_counter()` scaled by its rate; at rate 0 (what the
simulation runs at) that product is always 0.0, so the time is its virtual base alone.
`sim_clock` gives a MockClock (trio's run loop autojumps only a MockClock, and the class
is final) whose `current_time` and `deadline_to_sleep_time` return what MockClock's would
at rate 0, read from that base directly: the same floats, so every seed runs the same
steps, without a system call and the arithmetic per question.
"""

from __future__ import annotations

import trio.testing

__all__ = ["sim_clock"]


def sim_clock() -> trio.testing.MockClock:
    """A MockClock at rate 0 that autojumps at once (threshold 0), answering from its base.

    Its time moves only by jumps; setting its rate would not be seen (nothing does)."""
    clock = trio.testing.MockClock(rate=0.0, autojump_threshold=0)

    def current_time() -> float:
        return clock._virtual_base

    def deadline_to_sleep_time(deadline: float) -> float:
        return 0 if deadline <= clock._virtual_base else 999999999  # MockClock's answers at rate 0

    clock.current_time = current_time  # type: ignore[method-assign]
    clock.deadline_to_sleep_time = deadline_to_sleep_time  # type: ignore[method-assign]
    return clock
