"""One seed's simulation (simulation.py) under a MockClock and a seeded scheduler, checked at
the end; the same seed gives the same event log (events.py), byte for byte.

What makes a run a function of its seed: the schedule comes from the seed
(chaos/sim/schedule.py); trio's MockClock jumps to the next timer whenever every task
waits (autojump), so simulated seconds cost no wall time and timeouts fire in order; trio's
scheduler is made deterministic and seeded (it shuffles each batch of runnable tasks with
its module random generator, seeded here, as its Hypothesis plugin does); Python's `random`
is seeded; blocking file work runs inline (store/runtime.py); the wall clock is a fixed
epoch plus the simulated time. Python's string hashing must be fixed too (PYTHONHASHSEED):
the CLI sees to that for replays in another process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import tempfile
import time
import traceback
from collections.abc import Iterator
from typing import Any

import attrs
import trio
import trio.testing

from .clock import sim_clock
from .collector import relaxed_collector
from .mutations import MUTATIONS, mutated
from .schedule import Schedule, draw
from .simulation import Simulation
from .spin import SpinGuard

__all__ = ["CONTROLLERS", "GROUPS", "MODES", "SeedResult", "run_seed"]

MODES = ("SYNC_MASTER+ASYNC_FLUSH", "SYNC_MASTER+SYNC_FLUSH", "ASYNC_MASTER+ASYNC_FLUSH", "ASYNC_MASTER+SYNC_FLUSH")
CONTROLLERS = ("manual", "etcd")  # who makes a slave master: an operator (Admin.promote), or etcd's election
GROUPS = (1, 2)  # broker groups in the cluster


@attrs.define
class SeedResult:
    seed: int
    mode: str
    faults: int
    slaves: int = 1
    controller: str = "manual"
    groups: int = 1
    storage: bool = False  # storage faults drawn (power losses)
    sends: int = 0
    acked: int = 0
    failed: int = 0
    indeterminate: int = 0
    violations: list[str] = attrs.field(factory=list)
    log_hash: str = ""
    simulated_s: float = 0.0
    wall_s: float = 0.0
    log: list[str] = attrs.field(factory=list, repr=False)

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> dict[str, Any]:
        out = attrs.asdict(self)
        del out["log"]
        return out


def _seed_trio(seed: int) -> None:
    """trio's run loop shuffles each batch of runnable tasks with this generator; ordered by
    task creation first, the shuffle is a function of the seed (what trio's Hypothesis
    plugin does to make scheduling reproducible)."""
    from trio._core import _run  # no public switch for this

    _run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    _run._r.seed(seed)


def run_seed(seed: int, *, mode: str = MODES[0], schedule: Schedule | None = None, base_dir: str | None = None,
             keep: bool = False, mutation: str | None = None, slaves: int = 1,
             controller: str = "manual", groups: int = 1, orderly: bool = False,
             storage: bool = False) -> SeedResult:
    """Simulate `seed` (or `schedule`) in `mode`, in `groups` groups of a master and `slaves`
    slaves whose master an operator promotes (`controller` "manual") or etcd elects ("etcd"), with a
    deliberate bug (`mutation`, chaos/sim/mutations.py) or none; the store files go to a
    fresh directory under `base_dir` (default: /dev/shm when it exists), removed unless `keep`.
    `orderly`: orderly members consume too, judged on their promises (chaos/sim/orderly.py;
    always with the `orderly-lock` mutation); with `storage`, storage faults too (power
    losses, chaos/sim/disk.py)."""
    if slaves not in (1, 2):
        raise ValueError(f"slaves must be 1 or 2, got {slaves}")
    if groups not in GROUPS:
        raise ValueError(f"groups must be 1 or 2, got {groups}")
    if controller not in CONTROLLERS:
        raise ValueError(f"controller must be one of {', '.join(CONTROLLERS)}, got {controller!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mutation is not None and mutation not in MUTATIONS:
        raise ValueError(f"no mutation {mutation!r}; there are {', '.join(MUTATIONS)}")
    schedule = schedule or draw(seed, etcd=controller == "etcd", slaves=slaves, groups=groups, storage=storage)
    orderly = orderly or mutation == "orderly-lock"  # the mutation's promises are the orderly members'
    random.seed(seed)
    _seed_trio(seed)
    base = tempfile.mkdtemp(prefix=f"tidemq-sim-{seed}-", dir=base_dir or _default_base())
    result = SeedResult(seed, mode, len(schedule.faults), slaves, controller, groups, storage)
    began = time.perf_counter()
    sim = Simulation(schedule, mode, base, slaves=slaves, etcd=controller == "etcd", groups=groups,
                     orderly=orderly, storage=storage)
    clock = sim_clock()
    sim.spin_guard = SpinGuard(clock)
    try:
        with _quiet_logs(), mutated(mutation), relaxed_collector():
            trio.run(sim.main, clock=clock, instruments=[sim.spin_guard])
    except BaseException as e:  # a crash of the simulated cluster is a finding, not the runner's end
        if isinstance(e, KeyboardInterrupt):
            raise
        sim.log.lines.append(f"crashed: {''.join(traceback.format_exception_only(e)).strip()}")
        sim.violations.append(f"the simulation crashed: {type(e).__name__}: {e}")
        sim.crash = "".join(traceback.format_exception(e))
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
    result.violations = sim.violations
    counts = sim.history.counts()
    result.sends, result.acked = len(sim.history.ops), counts["ok"]
    result.failed, result.indeterminate = counts["fail"], counts["info"]
    result.simulated_s = round(sim.ended_at, 3)
    result.log = sim.log.lines + ([sim.crash] if sim.crash else [])
    result.log_hash = sim.log.digest()
    result.wall_s = round(time.perf_counter() - began, 3)
    return result


def _default_base() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


@contextlib.contextmanager
def _quiet_logs() -> Iterator[None]:
    """The nodes' warnings (fencing, truncation, lost connections) are the faults doing their
    work: the event log keeps what matters."""
    root = logging.getLogger("tidemq")
    before = root.level
    root.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        root.setLevel(before)

