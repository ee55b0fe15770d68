"""Many seeds over worker processes, one seed replayed, a failing schedule shrunk.

Every simulation runs in a worker process started with PYTHONHASHSEED=0, so a seed's run
(and its event log hash) does not depend on the hash seed of the process that asked for
it: a replay on another day or machine runs the same steps.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import attrs

from .run import CONTROLLERS, GROUPS, MODES, SeedResult, run_seed
from .schedule import Schedule, draw

__all__ = ["SLAVES", "Sweep", "controller_of", "groups_of", "mode_of", "replay", "shrink", "slaves_of", "sweep"]

CHUNK = 10  # seeds a worker runs per task


SLAVES = (1, 2)  # the group sizes a sweep covers


def mode_of(seed: int, mode: str) -> str:
    """`mode`, or with "all" the seed's own mode (the seeds take the modes in turn)."""
    return MODES[seed % len(MODES)] if mode == "all" else mode


def slaves_of(seed: int, slaves: int | str) -> int:
    """`slaves`, or with "all" the seed's own: each run of len(MODES) seeds (every mode once)
    takes the next group size in turn."""
    return SLAVES[seed // len(MODES) % len(SLAVES)] if slaves == "all" else int(slaves)


def controller_of(seed: int, controller: str) -> str:
    """`controller`, or with "all" the seed's own: each run of len(MODES) * len(SLAVES) seeds
    (every mode with every group size) takes the next one in turn."""
    return CONTROLLERS[seed // (len(MODES) * len(SLAVES)) % len(CONTROLLERS)] if controller == "all" else controller


def groups_of(seed: int, groups: int | str) -> int:
    """`groups`, or with "all" the seed's own: each run of 16 seeds (every mode, group size
    and controller) takes the next number of groups in turn."""
    if groups != "all":
        return int(groups)
    return GROUPS[seed // (len(MODES) * len(SLAVES) * len(CONTROLLERS)) % len(GROUPS)]


@attrs.define
class Sweep:
    schedules: int = 0
    faults: int = 0
    sends: int = 0
    acked: int = 0
    failing: list[dict[str, Any]] = attrs.field(factory=list)  # each failing seed's result
    simulated_s: float = 0.0
    wall_s: float = 0.0
    by_mode: dict[str, int] = attrs.field(factory=dict)
    by_slaves: dict[int, int] = attrs.field(factory=dict)
    by_controller: dict[str, int] = attrs.field(factory=dict)
    by_groups: dict[int, int] = attrs.field(factory=dict)

    def add(self, result: dict[str, Any]) -> None:
        self.schedules += 1
        self.faults += result["faults"]
        self.sends += result["sends"]
        self.acked += result["acked"]
        self.simulated_s += result["simulated_s"]
        self.by_mode[result["mode"]] = self.by_mode.get(result["mode"], 0) + 1
        self.by_slaves[result["slaves"]] = self.by_slaves.get(result["slaves"], 0) + 1
        self.by_controller[result["controller"]] = self.by_controller.get(result["controller"], 0) + 1
        self.by_groups[result["groups"]] = self.by_groups.get(result["groups"], 0) + 1
        if result["violations"]:
            self.failing.append(result)

    def to_json(self) -> dict[str, Any]:
        return {**attrs.asdict(self), "violations": sum(len(r["violations"]) for r in self.failing),
                "schedules_per_minute": round(self.schedules / self.wall_s * 60, 1) if self.wall_s else None}


def _run_chunk(seeds: Sequence[int], mode: str, base_dir: str | None, mutation: str | None,
               stop_at_first: bool, slaves: int | str, controller: str, groups: int | str,
               storage: bool = False) -> list[dict[str, Any]]:
    out = []
    for seed in seeds:
        out.append(run_seed(seed, mode=mode_of(seed, mode), base_dir=base_dir, mutation=mutation,
                            slaves=slaves_of(seed, slaves), controller=controller_of(seed, controller),
                            groups=groups_of(seed, groups), storage=storage).to_json())
        if stop_at_first and out[-1]["violations"]:
            break
    return out


def _run_one(seed: int, mode: str, without: tuple[int, ...], base_dir: str | None, keep: bool,
             mutation: str | None, slaves: int, controller: str, groups: int, storage: bool = False) -> SeedResult:
    return run_seed(seed, mode=mode, schedule=_schedule(seed, without, controller, slaves, groups, storage),
                    base_dir=base_dir, keep=keep, mutation=mutation, slaves=slaves, controller=controller,
                    groups=groups, storage=storage)


def _schedule(seed: int, without: tuple[int, ...], controller: str, slaves: int, groups: int,
              storage: bool = False) -> Schedule:
    schedule = draw(seed, etcd=controller == "etcd", slaves=slaves, groups=groups, storage=storage)
    for index in sorted(without, reverse=True):
        if not 0 <= index < len(schedule.faults):
            raise ValueError(f"seed {seed} has {len(schedule.faults)} faults: no fault {index}")
        schedule = schedule.without(index)
    return schedule


@contextmanager
def _workers(jobs: int) -> Iterator[concurrent.futures.ProcessPoolExecutor]:
    """Processes started fresh (spawn) with PYTHONHASHSEED=0 in their environment."""
    before = os.environ.get("PYTHONHASHSEED")
    os.environ["PYTHONHASHSEED"] = "0"
    try:
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            yield pool
    finally:
        if before is None:
            del os.environ["PYTHONHASHSEED"]
        else:
            os.environ["PYTHONHASHSEED"] = before


def sweep(seeds: Sequence[int], *, mode: str = "all", jobs: int = 2, base_dir: str | None = None,
          mutation: str | None = None, stop_at_first: bool = False, slaves: int | str = "all",
          controller: str = "all", groups: int | str = "all", storage: bool = False,
          on_result: Callable[[dict[str, Any], Sweep], None] | None = None) -> Sweep:
    """Run every seed (`jobs` worker processes), with `mutation` (chaos/sim/mutations.py)
    or none, in `groups` groups of a master and `slaves` slaves whose masters `controller`
    makes ("all": each seed its own, for each); with `stop_at_first`, stop once a seed broke
    a promise (the seeds in flight finish); with `storage`, storage faults too (power
    losses). `on_result` sees each result as it comes."""
    out = Sweep()
    began = time.perf_counter()
    chunks = [seeds[i:i + CHUNK] for i in range(0, len(seeds), CHUNK)]
    with _workers(jobs) as pool:
        futures = [pool.submit(_run_chunk, chunk, mode, base_dir, mutation, stop_at_first, slaves, controller, groups,
                               storage) for chunk in chunks]
        for future in concurrent.futures.as_completed(futures):
            for result in future.result():
                out.add(result)
                out.wall_s = time.perf_counter() - began
                if on_result is not None:
                    on_result(result, out)
            if stop_at_first and out.failing:
                for pending in futures:
                    pending.cancel()
                break
    out.wall_s = round(time.perf_counter() - began, 3)
    out.simulated_s = round(out.simulated_s, 3)
    out.failing.sort(key=lambda r: r["seed"])
    return out


def replay(seed: int, mode: str, *, without: tuple[int, ...] = (), base_dir: str | None = None,
           keep: bool = False, mutation: str | None = None, slaves: int = 1,
           controller: str = "manual", groups: int = 1, storage: bool = False) -> SeedResult:
    """One seed (with the faults at `without` left out), in a fresh worker process."""
    _schedule(seed, without, controller, slaves, groups, storage)  # a bad index is the caller's error, here
    with _workers(1) as pool:
        return pool.submit(_run_one, seed, mode, without, base_dir, keep, mutation, slaves, controller, groups,
                           storage).result()


def shrink(seed: int, mode: str, *, base_dir: str | None = None, mutation: str | None = None, slaves: int = 1,
           controller: str = "manual", groups: int = 1, storage: bool = False,
           progress: Callable[[str], None] | None = None) -> tuple[tuple[int, ...], SeedResult]:
    """The fewest of the seed's faults that still fail (each left in is needed: dropping
    any one more passes): the indexes left out and the failing run of what is left."""
    faults = len(draw(seed, etcd=controller == "etcd", slaves=slaves, groups=groups, storage=storage).faults)
    without: tuple[int, ...] = ()
    with _workers(1) as pool:
        def attempt(leave_out: tuple[int, ...]) -> SeedResult:
            return pool.submit(_run_one, seed, mode, leave_out, base_dir, False, mutation, slaves, controller,
                               groups, storage).result()

        last = attempt(without)
        if last.ok:
            return without, last
        changed = True
        while changed:
            changed = False
            for index in range(faults):
                if index in without:
                    continue
                candidate = tuple(sorted((*without, index)))
                result = attempt(candidate)
                if progress is not None:
                    progress(f"without fault {index}: {'still fails' if not result.ok else 'passes'}")
                if not result.ok:
                    without, last, changed = candidate, result, True
    return without, last
