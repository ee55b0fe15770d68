"""Crash matrix (issue 4): real writer processes SIGKILLed at seeded random points, in
SYNC_FLUSH, ASYNC_FLUSH and ASYNC_FLUSH with the transient pool, small segments so rolls
happen. `scripts/crash-soak` runs the same rounds hundreds of times."""

from __future__ import annotations

import pytest

from chaos.store_crash import MODES, run_iteration

SEEDS = range(30)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_crash_and_recover(tmp_path, seed):
    report = run_iteration(str(tmp_path / "store"), seed)
    assert report.mode == MODES[seed % len(MODES)]
    assert report.acked > 0
    assert report.problems == [], f"seed {seed} ({report.mode}): {report.problems[:5]}"
    if report.mode != "async-pool":
        assert report.recovered_messages >= report.acked
