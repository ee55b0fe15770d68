"""wire.client.block_nursery: the nursery a client context manager runs its tasks in around
its caller's block. The block's exception comes out as itself, a cancellation is never
swallowed, and a task's own failure keeps trio's group."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from wire.client import ConnectionLost, block_nursery


async def test_the_blocks_exception_comes_out_as_itself() -> None:
    lost = ConnectionLost("gone", address="127.0.0.1:1")
    with pytest.raises(ConnectionLost) as info:
        async with block_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            await trio.testing.wait_all_tasks_blocked()
            raise lost
    assert info.value is lost


async def test_a_cancellation_beside_the_blocks_exception_reaches_the_cancelled_scope() -> None:
    """An outer scope is cancelled and the block raises before its next checkpoint (a
    connection lost while the node shuts down): the task's Cancelled must reach the scope,
    not be dropped for the block's exception."""
    seen: list[BaseException] = []
    with trio.CancelScope() as outer:
        try:
            async with block_nursery() as nursery:
                nursery.start_soon(trio.sleep_forever)
                await trio.testing.wait_all_tasks_blocked()
                outer.cancel()
                raise ConnectionLost("gone")
        except BaseException as e:
            seen.append(e)
            raise
        pytest.fail("the cancellation did not propagate")  # pragma: no cover
    assert outer.cancelled_caught
    assert isinstance(seen[0], trio.Cancelled)
    assert isinstance(seen[0].__context__, ConnectionLost)


async def test_the_blocks_own_cancellation_passes_through() -> None:
    with trio.move_on_after(0.01) as scope:
        async with block_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            await trio.sleep_forever()
    assert scope.cancelled_caught


async def test_a_tasks_own_failure_keeps_its_group() -> None:
    async def fail() -> None:
        raise KeyError("task")

    with pytest.raises(BaseExceptionGroup) as info:
        async with block_nursery() as nursery:
            nursery.start_soon(fail)
            await trio.sleep_forever()
    assert [type(e) for e in info.value.exceptions] == [KeyError]


async def test_a_tasks_failure_beside_the_blocks_exception_keeps_the_group() -> None:
    async def fail_when_cancelled() -> None:
        try:
            await trio.sleep_forever()
        finally:
            raise KeyError("task")  # noqa: B012 - a task that fails as it is cancelled

    with pytest.raises(BaseExceptionGroup) as info:
        async with block_nursery() as nursery:
            nursery.start_soon(fail_when_cancelled)
            await trio.testing.wait_all_tasks_blocked()
            raise ConnectionLost("gone")
    assert sorted(type(e).__name__ for e in info.value.exceptions) == ["ConnectionLost", "KeyError"]
