"""Waiting on a condition with a deadline: the one poll loop of the test suite.

Tests never sleep to synchronise; when no event says "it happened" (another process, a
background service), they poll a condition until a deadline and fail naming what they
waited for.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import trio

__all__ = ["wait_until"]


async def wait_until(
    check: Callable[[], Any | Awaitable[Any]],
    *,
    timeout: float = 10.0,
    what: str = "condition",
    interval: float = 0.02,
    retry_on: tuple[type[BaseException], ...] = (),
) -> Any:
    """Call `check` (plain or async) until it returns something truthy; return that value.

    An exception in `retry_on` counts as "not yet" (e.g. a node still starting). After
    `timeout` seconds: AssertionError naming `what` and the last value (or exception) seen.
    """
    last: Any = None
    with trio.move_on_after(timeout):
        while True:
            try:
                last = check()
                if inspect.isawaitable(last):
                    last = await last
            except retry_on as e:
                last = e
            else:
                if last:
                    return last
            await trio.sleep(interval)  # poll
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {last!r})")
