"""The simulation's orderly consumer (chaos/sim/orderly.py): its judge, a regression seed on
which the members keep their promises, and the `orderly-lock` mutation (a lock table that
grants every lock) caught on that seed (it breaks seeds 2, 3 and 4 of 1..5)."""

from __future__ import annotations

import pytest

from chaos.sim.orderly import Handled, judge_orderly
from chaos.sim.run import run_seed

SEED = 2


def test_the_judge_finds_order_violations_and_double_holders_and_skips_reused_offsets() -> None:
    q = ("broker-a", 0)
    calls = [Handled("m1", q, 0, "A", 0.0, 1.0), Handled("m1", q, 2, "C", 1.0, 2.0),
             Handled("m2", q, 1, "B", 1.5, 2.5), Handled("m2", q, 2, "C", 3.0, 4.0)]
    found = judge_orderly(calls)
    assert len(found) == 2
    assert "1 message(s) consumed out of queue order" in found[0] and "offset 1 first consumed after 2" in found[0]
    assert "1 handler call(s) while another member ran the queue" in found[1]
    assert judge_orderly([calls[0], calls[1], calls[3]]) == []  # offset 2 again, later: a duplicate
    reused = [Handled("m1", q, 5, "X", 0.0, 1.0), Handled("m1", q, 4, "Y", 1.0, 2.0), Handled("m1", q, 5, "Z", 2.0, 3.0)]
    assert judge_orderly(reused) == []  # offset 5 held two messages: an unclean promotion's reuse


@pytest.mark.slow
def test_orderly_members_keep_their_promises_and_a_lock_that_grants_everything_is_caught(tmp_path) -> None:
    kept = run_seed(SEED, base_dir=str(tmp_path), orderly=True)
    assert kept.violations == []
    [calls] = [int(line.split()[1]) for line in kept.log if line.startswith("orderly: ")]
    assert calls > 100  # they consumed, through the seed's faults
    broken = run_seed(SEED, base_dir=str(tmp_path), mutation="orderly-lock")
    assert any("while another member ran the queue" in v for v in broken.violations), broken.violations
