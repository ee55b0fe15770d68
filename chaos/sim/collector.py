"""Python's cyclic garbage collector, relaxed while a seed runs.

A seed allocates millions of short-lived objects (trio's tasks, cancel scopes and
outcomes, frames, records), nearly all freed by reference counting. The collector's
default first threshold (700 allocations) still starts a young collection every few
hundred of them, and the survivors' older collections walk the whole heap: a fifth of a
seed's CPU. Collecting every 50,000 allocations costs a few MB more and runs the same
steps: nothing in a run depends on when cyclic garbage goes (refcounting frees what the
run sees go; the event log hash of a seed is the same with either threshold).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["YOUNG_THRESHOLD", "relaxed_collector"]

YOUNG_THRESHOLD = 50_000  # allocations between young collections while a seed runs (Python's default: 700)


@contextlib.contextmanager
def relaxed_collector(young: int = YOUNG_THRESHOLD) -> Iterator[None]:
    """Collect young garbage every `young` allocations inside, as before after."""
    before = gc.get_threshold()
    gc.set_threshold(young, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
