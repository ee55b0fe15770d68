"""store.waiters.OffsetWaiters: success on advance, failure at each waiter's own deadline.

Time is a MockClock that moves only when a test jumps it; `_settle` then lets every task
react before the test looks.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from store import waiters as waiters_module
from store.waiters import OffsetWaiters


@pytest.fixture
def clock():
    return trio.testing.MockClock()


async def _settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


async def _jump(clock: trio.testing.MockClock, seconds: float) -> None:
    clock.jump(seconds)
    await _settle()


async def _start_timer(nursery: trio.Nursery, waiters: OffsetWaiters) -> None:
    nursery.start_soon(waiters.run_timer)
    await _settle()  # running before any wait registers


async def _collect(waiters: OffsetWaiters, offset: int, timeout_s: float, out: dict, key) -> None:
    out[key] = (await waiters.wait(offset, timeout_s), trio.current_time())


@pytest.mark.parametrize("timer", [True, False], ids=["timer", "own-cancel-scope"])
async def test_advance_wakes_only_waiters_at_or_below(clock, timer):
    w = OffsetWaiters()
    out: dict = {}
    async with trio.open_nursery() as nursery:
        if timer:
            await _start_timer(nursery, w)
        for offset in (10, 20, 30):
            nursery.start_soon(_collect, w, offset, 5.0, out, offset)
        await _settle()
        assert w.max_wanted == 30 and len(w) == 3
        w.advance(20)
        await _settle()
        assert {k: v[0] for k, v in out.items()} == {10: True, 20: True}
        w.advance(30)
        await _settle()
        assert out[30][0] is True and len(w) == 0
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("timer", [True, False], ids=["timer", "own-cancel-scope"])
async def test_each_waiter_fails_at_its_own_deadline(clock, timer):
    w = OffsetWaiters()
    out: dict = {}
    async with trio.open_nursery() as nursery:
        if timer:
            await _start_timer(nursery, w)
        nursery.start_soon(_collect, w, 100, 3.0, out, "late")
        await _settle()
        nursery.start_soon(_collect, w, 100, 1.0, out, "early")  # an earlier deadline re-arms the timer
        await _settle()
        await _jump(clock, 0.9)
        assert out == {}
        await _jump(clock, 0.2)
        assert out == {"early": (False, pytest.approx(1.1))}
        await _jump(clock, 2.0)
        assert out["late"] == (False, pytest.approx(3.1))
        w.advance(100)  # too late: a timed-out waiter stays failed
        await _settle()
        assert out["early"][0] is False and out["late"][0] is False
        nursery.cancel_scope.cancel()


async def test_success_before_the_deadline_is_not_undone(clock):
    w = OffsetWaiters()
    out: dict = {}
    async with trio.open_nursery() as nursery:
        await _start_timer(nursery, w)
        nursery.start_soon(_collect, w, 5, 1.0, out, "a")
        await _jump(clock, 0.5)
        w.advance(5)
        await _settle()
        await _jump(clock, 2.0)  # past the deadline: the timer must leave it succeeded
        assert out["a"] == (True, pytest.approx(0.5))
        nursery.cancel_scope.cancel()


async def test_a_cancelled_waiter_is_dropped(clock):
    w = OffsetWaiters()
    async with trio.open_nursery() as nursery:
        await _start_timer(nursery, w)
        scope = trio.CancelScope()

        async def cancel_when_parked() -> None:
            await _settle()
            scope.cancel()

        nursery.start_soon(cancel_when_parked)
        with scope:
            await w.wait(7, 10.0)
        assert scope.cancelled_caught
        assert len(w) == 0
        w.advance(7)  # nothing left to wake; no error
        nursery.cancel_scope.cancel()


async def test_timed_out_waiters_do_not_pile_up_when_the_offset_is_stuck(clock, monkeypatch):
    monkeypatch.setattr(waiters_module, "_STALE_REBUILD", 8)
    w = OffsetWaiters()
    out: dict = {}
    async with trio.open_nursery() as nursery:
        await _start_timer(nursery, w)
        for i in range(40):
            nursery.start_soon(_collect, w, 1000 + i, 1.0, out, i)
        await _settle()
        await _jump(clock, 2.0)
        assert all(ok is False for ok, _ in out.values()) and len(out) == 40
        assert len(w._by_offset) <= 8
        nursery.cancel_scope.cancel()


async def test_waiters_fail_at_once_when_the_timer_stops(clock):
    """The owning service stopped: nothing would time them out or advance them."""
    w = OffsetWaiters()
    out: dict = {}
    timer_scope = trio.CancelScope()

    async def timer() -> None:
        with timer_scope:
            await w.run_timer()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(timer)
        await _settle()
        nursery.start_soon(_collect, w, 9, 60.0, out, "x")
        await _jump(clock, 1.0)
        assert out == {}
        timer_scope.cancel()
        await _settle()
        assert out["x"] == (False, pytest.approx(1.0))
