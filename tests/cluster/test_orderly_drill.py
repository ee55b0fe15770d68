"""The orderly drill (cluster/drills/orderly.py) with real processes: orderly members
across a kill-master and a promotion report 0 order violations and 0 double holders. About
a minute (the new master's 30 s lock fence): the sweep tier."""

from __future__ import annotations

import pytest

from cluster.client.routing import MessageQueue
from cluster.drills import framework as drill
from cluster.drills.orderly import Call, double_holders, order_violations

Q0, Q1 = MessageQueue("T", "broker-a", 0), MessageQueue("T", "broker-a", 1)


def test_the_judges_find_what_they_look_for() -> None:
    calls = [Call("a", "k", 0, Q0, 0.0, 1.0), Call("a", "k", 2, Q0, 1.0, 2.0), Call("b", "k", 1, Q0, 1.5, 2.5),
             Call("b", "k", 2, Q0, 3.0, 4.0), Call("b", "j", 0, Q1, 0.5, 0.6)]
    assert order_violations(calls) == ["k:1 first consumed after k:2"]  # k:2 again later is a duplicate
    assert double_holders(calls) == ["T@broker-a:0: a and b at 1.500 s"]
    assert order_violations(calls[:2]) == [] and double_holders(calls[:2] + calls[3:]) == []


@pytest.mark.slow
@pytest.mark.sweep
async def test_the_orderly_drill_keeps_order_and_one_holder_per_queue_across_a_kill_master(tmp_path) -> None:
    from cluster.drills import basic  # noqa: F401  (registers every drill)

    report = await drill.run_drill("orderly", base_dir=str(tmp_path / "drill"), rate=30)
    assert report.error is None, report.table()
    assert report.ok, report.table()
    assert report.order_violations == 0 and report.double_holders == 0, report.table()
    assert any("promoted: epoch" in e for _, e in report.events), report.table()
