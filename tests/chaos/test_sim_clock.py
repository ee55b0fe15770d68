"""The simulation's cheaper clock and relaxed collector (chaos/sim/clock.py,
chaos/sim/collector.py) change how fast a seed runs, never what it does."""

from __future__ import annotations

import gc
import math

import pytest
import trio
import trio.testing

from chaos.sim.clock import sim_clock
from chaos.sim.collector import relaxed_collector


async def _timeline() -> list[float]:
    """Sleeps, timeouts that fire and ones that do not, each moment as trio sees it."""
    seen = [trio.current_time()]
    async with trio.open_nursery() as nursery:
        for delay in (0.25, 1.5, 0.001, 3.0):
            nursery.start_soon(trio.sleep, delay)
        await trio.sleep(0.1)  # virtual
        seen.append(trio.current_time())
    seen.append(trio.current_time())
    with trio.move_on_after(0.7) as scope:
        await trio.sleep_forever()
    assert scope.cancelled_caught
    seen.append(trio.current_time())
    with trio.move_on_after(10):
        await trio.sleep(1 / 3)  # virtual
    seen.append(trio.current_time())
    return seen


def test_the_sim_clock_tells_the_times_a_mock_clock_at_rate_zero_does():
    mock = trio.run(_timeline, clock=trio.testing.MockClock(autojump_threshold=0))
    ours = trio.run(_timeline, clock=sim_clock())
    assert ours == mock  # the same floats, bit for bit
    assert ours[-1] == pytest.approx(3.0 + 0.7 + 1 / 3)


def test_the_sim_clock_answers_sleep_times_as_a_mock_clock_does():
    mock, ours = trio.testing.MockClock(), sim_clock()
    for clock in (mock, ours):
        clock.jump(2.5)
    for deadline in (0.0, 2.5, 2.5000001, 7.0, math.inf):
        assert ours.deadline_to_sleep_time(deadline) == mock.deadline_to_sleep_time(deadline)
    assert ours.current_time() == mock.current_time() == 2.5


def test_the_collector_is_relaxed_inside_and_as_before_after_even_on_an_error():
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), relaxed_collector(12_345):
        assert gc.get_threshold() == (12_345, *before[1:])
        raise RuntimeError("a crashed seed")
    assert gc.get_threshold() == before
