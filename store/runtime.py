"""Where blocking work runs, what time it is, and how a periodic task sleeps: the seam the
deterministic simulation (chaos/sim, docs/simulation.md) replaces.

In production blocking file work (fsync, creating and deleting files, JSON writes) goes to
trio's worker threads and the clocks are time.time() and time.monotonic(). Inside
`simulated(...)` (a context variable, so only the tasks started under it see it):

- `run_sync` runs the work inline in the calling task (after the host's `disk_delay`, a
  slow disk): a worker thread's timing is not seeded, and while one ran trio's MockClock
  would jump past every timeout waiting on it;
- `wall_clock()` is a fixed epoch plus trio's clock and `monotonic()` is trio's clock, so
  timestamps and intervals follow the simulated time;
- `sleep` also waits while the calling task's host is paused (`Gate`), so a paused node's
  periodic tasks (its event-loop beat, heartbeats, flushes) stop as a SIGSTOPped process's do;
- `fdatasync` and `synced` tell the host's disk model (chaos/sim/disk.py) what each file has
  made durable, so a simulated power loss can drop what was only in the page cache; the
  model may fail an fdatasync (EIO) as a failing disk would;
- `disk_used_ratio` answers the store's disk-space probe (cleanup.py) from the host's disk
  model, which a simulated full disk fills.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar

import attrs
import trio

__all__ = ["Disk", "Gate", "Simulation", "disk_used_ratio", "fdatasync", "hosted", "killed", "monotonic", "rewrote",
           "run_inline", "run_sync", "simulated", "simulation", "sleep", "synced", "wall_clock"]

T = TypeVar("T")


class Disk(Protocol):
    """A simulated host's disk (chaos/sim/disk.py): what each of its files made durable."""

    def synced(self, path: str) -> None:
        """`path`'s current content is durable now (an fsync, or a rename the directory's fsync made durable)."""

    def before_sync(self, path: str) -> None:
        """An fdatasync of `path` is about to run: a failing disk raises its OSError (EIO) here."""

    def rewrote(self, path: str, start: int, end: int) -> None:
        """[start, end) of `path` was written again with the bytes it held (dirty once more)."""

    def used_ratio(self, path: str) -> float:
        """The used fraction (0..1) of the partition holding `path`, as the host's disk reports it."""


class Gate(Protocol):
    """A simulated host's run state: `wait_running` returns at once unless it is paused;
    `killed` is set before its tasks are cancelled as a SIGKILL would end them."""

    killed: bool
    disk_delay: float  # seconds each blocking file operation of the host waits first (a slow disk)

    @property
    def disk(self) -> Disk | None:
        """The host's durability model, or None (nothing modelled)."""

    async def wait_running(self) -> None: ...


@attrs.frozen
class Simulation:
    epoch_s: float  # the wall-clock time at trio time 0
    gate: Gate | None = None  # the host whose tasks these are


_SIMULATION: ContextVar[Simulation | None] = ContextVar("tidemq_simulation", default=None)


def simulation() -> Simulation | None:
    return _SIMULATION.get()


@contextmanager
def simulated(epoch_s: float) -> Iterator[Simulation]:
    """Run what is started inside the block (in this task and the tasks it starts) simulated."""
    sim = Simulation(epoch_s)
    token = _SIMULATION.set(sim)
    try:
        yield sim
    finally:
        _SIMULATION.reset(token)


def hosted(gate: Gate) -> None:
    """From here on, the calling task and those it starts belong to the host of `gate`
    (call it first thing in a host's root task, inside `simulated`)."""
    sim = _SIMULATION.get()
    if sim is None:
        raise RuntimeError("hosted() outside simulated()")
    _SIMULATION.set(attrs.evolve(sim, gate=gate))


def killed() -> bool:
    """Whether this task's host is being killed: code that runs on the way out (flushing the
    store, persisting offsets) leaves everything as a SIGKILL would."""
    sim = _SIMULATION.get()
    return sim is not None and sim.gate is not None and sim.gate.killed


async def run_inline(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in the event loop, blocking it (no worker thread's hop there and back);
    under simulation as `run_sync`, whose disk delays model the device either way."""
    if _SIMULATION.get() is None:
        # one pass of the tasks already woken first: the HA writers the same append woke push
        # the group to the slaves, who then work while this blocks in fdatasync (SYNC_MASTER +
        # SYNC_FLUSH: else the push waited for the sync, half the time, by trio's order)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return fn(*args)
    return await run_sync(fn, *args)


async def run_sync(fn: Callable[..., T], *args: Any, abandon_on_cancel: bool = False) -> T:
    """`trio.to_thread.run_sync`, or inline under simulation."""
    sim = _SIMULATION.get()
    if sim is None:
        return await trio.to_thread.run_sync(fn, *args, abandon_on_cancel=abandon_on_cancel)
    if sim.gate is not None and sim.gate.disk_delay:
        await trio.sleep(sim.gate.disk_delay)
    await trio.lowlevel.checkpoint()
    return fn(*args)


def wall_clock() -> float:
    """Seconds since the Unix epoch."""
    sim = _SIMULATION.get()
    return time.time() if sim is None else sim.epoch_s + trio.current_time()


def monotonic() -> float:
    sim = _SIMULATION.get()
    return time.monotonic() if sim is None else trio.current_time()


async def sleep(seconds: float) -> None:
    """trio.sleep, then, under simulation, wait while this host is paused."""
    await trio.sleep(seconds)
    sim = _SIMULATION.get()
    if sim is not None and sim.gate is not None:
        await sim.gate.wait_running()


def _disk() -> Disk | None:
    sim = _SIMULATION.get()
    return None if sim is None or sim.gate is None else getattr(sim.gate, "disk", None)


def synced(path: str) -> None:
    """`path` was just made durable (fsync, or written and renamed with the directory fsynced):
    under simulation the host's disk model keeps its content as what survives a power loss."""
    disk = _disk()
    if disk is not None:
        disk.synced(path)


def disk_used_ratio(path: str) -> float | None:
    """Under simulation with a disk model: the used fraction of `path`'s partition the host's
    disk reports; else None (ask the real partition)."""
    disk = _disk()
    return None if disk is None else disk.used_ratio(path)


def rewrote(path: str, start: int, end: int) -> None:
    """[start, end) of `path` was written over with its own bytes: under simulation the host's
    disk model counts those pages written again (a write a model of the page cache cannot see
    by content)."""
    disk = _disk()
    if disk is not None:
        disk.rewrote(path, start, end)


def fdatasync(fd: int, path: str) -> None:
    """os.fdatasync of `path`'s descriptor, then `synced(path)`; under simulation the host's
    disk model may make it fail first (OSError, as a failing disk's EIO)."""
    disk = _disk()
    if disk is not None:
        disk.before_sync(path)
    os.fdatasync(fd)
    synced(path)
