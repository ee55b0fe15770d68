"""The simulation's sweeps (`scripts/test --sweeps`; the whole suite leaves them out: about
ten minutes of both cores): the 300 seeds the docs' figures quote keep their promises, and
each deliberate bug (chaos/sim/mutations.py) is reported within the seeds the issue allows.
The whole suite keeps a shorter sweep and each mutation on a seed it breaks
(tests/chaos/test_sim.py)."""

from __future__ import annotations

import pytest

from chaos.cli import parse_seeds
from chaos.sim.sweep import sweep

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


def test_the_300_seeds_the_figures_quote_keep_their_promises():
    result = sweep(list(range(1, 301)), mode="all", jobs=2)  # on /dev/shm, as the CLI runs them
    assert result.schedules == 300 and result.sends >= 300 * 500 and result.faults >= 300 * 3
    assert not result.failing, [(r["seed"], r["mode"], r["slaves"], r["violations"]) for r in result.failing]
    assert result.by_slaves == {1: 151, 2: 149} and result.by_controller == {"manual": 151, "etcd": 149}
    assert result.by_groups == {1: 156, 2: 144}


