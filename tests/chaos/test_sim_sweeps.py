"""The simulation's sweeps (`scripts/test --sweeps`; the whole suite leaves them out: about
ten minutes of both cores): each deliberate bug (chaos/sim/mutations.py) is reported within
the seeds the issue allows, and the storage faults' sweeps. The whole suite sweeps seeds
1..300 (the docs' figures) and each mutation on a seed it breaks (tests/chaos/test_sim.py)."""

from __future__ import annotations

import pytest

from chaos.cli import parse_seeds
from chaos.sim.sweep import Sweep, sweep

pytestmark = [pytest.mark.slow, pytest.mark.sweep]  # worker processes, hundreds of seeds


@pytest.mark.parametrize(("mutation", "mode", "seeds", "controller"), [
    ("truncation", "ASYNC_MASTER+ASYNC_FLUSH", "1..200", "manual"),
    ("in-sync-wait", "SYNC_MASTER+ASYNC_FLUSH", "1..2000", "manual"),
    ("pause-fencing", "ASYNC_MASTER+ASYNC_FLUSH", "1..2000", "manual"),
    # manual promotions refuse a slave behind the confirm offset the mutation moves: etcd elects
    ("confirm-offset", "SYNC_MASTER+SYNC_FLUSH", "1..2000", "etcd"),
    ("commit-wait", "SYNC_MASTER+SYNC_FLUSH", "1..2000", "manual"),
    # a check's COMMIT, then the producer's own (chaos/sim/transactions.py, SLOW) or a retried END
    ("commit-twice", "ASYNC_MASTER+ASYNC_FLUSH", "1..2000", "manual"),
    ("check-ended", "SYNC_MASTER+SYNC_FLUSH", "1..2000", "manual"),
    # a lock table that grants everything: a joining orderly member takes a queue in use (within a few seeds)
    ("orderly-lock", "SYNC_MASTER+ASYNC_FLUSH", "1..10", "manual"),
])
def test_each_deliberate_bug_is_reported_within_the_seeds_allowed(mutation, mode, seeds, controller, tmp_path):
    result = sweep(parse_seeds(seeds), mode=mode, jobs=2, base_dir=str(tmp_path), mutation=mutation,
                   stop_at_first=True, controller=controller)
    assert result.failing, f"{mutation}: no seed of {seeds} broke a promise"
    assert min(r["seed"] for r in result.failing) <= int(seeds.split("..")[1])
    crashed = [r["seed"] for r in result.failing if any("simulation crashed" in v for v in r["violations"])]
    assert not crashed, f"{mutation}: the mutation crashed the run instead of breaking a promise: {crashed}"


# ---- storage faults (--storage, docs/simulation.md "Storage faults")

@pytest.mark.parametrize("mode", ["SYNC_MASTER+SYNC_FLUSH", "ASYNC_MASTER+SYNC_FLUSH"])
def test_300_seeds_with_power_losses_keep_the_sync_flush_promises(mode):
    """150 seeds a SYNC_FLUSH mode, every shape: no PUT_OK lost to a power loss, every store
    recovered clean, no checkpoint claiming more than was durable. (ASYNC_FLUSH breaks two
    promises today: the docs name the seeds, test_sim_storage.py pins three.)"""
    result = sweep(list(range(1, 151)), mode=mode, jobs=2, storage=True)
    assert result.schedules == 150
    assert not result.failing, [(r["seed"], r["slaves"], r["controller"], r["groups"], r["violations"])
                                for r in result.failing]


def test_skip_fsync_is_caught_within_300_seeds(tmp_path):
    result = sweep(parse_seeds("1..300"), mode="ASYNC_MASTER+SYNC_FLUSH", jobs=2, base_dir=str(tmp_path),
                   mutation="skip-fsync", stop_at_first=True, storage=True)
    assert result.failing and min(r["seed"] for r in result.failing) <= 300


def test_trust_checkpoint_is_caught_and_never_without_it(tmp_path):
    """ASYNC_FLUSH seeds break other promises too (the docs), so the check is for the
    checkpoint's finding itself, over the 40 seeds the docs quote."""
    seeds = parse_seeds("1..40")
    mutated = sweep(seeds, jobs=2, base_dir=str(tmp_path), mutation="trust-checkpoint", storage=True)
    plain = sweep(seeds, jobs=2, base_dir=str(tmp_path), storage=True)

    def claimed(result: Sweep) -> list[int]:
        return [r["seed"] for r in result.failing if any("checkpoint claimed" in v for v in r["violations"])]

    assert claimed(mutated) and 16 in claimed(mutated)
    assert not claimed(plain)
    assert 16 not in [r["seed"] for r in plain.failing]
