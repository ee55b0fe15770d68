"""The promote and partition drills once each, short, with real processes (they run in
the drill framework of cluster/drills/framework.py)."""

from __future__ import annotations

import pytest

from cluster.drills import framework as drill

pytestmark = pytest.mark.slow


def test_the_failover_drills_are_registered() -> None:
    from cluster.drills import basic  # noqa: F401  (registers every drill)

    assert {"promote", "partition"} <= set(drill.DRILLS)


@pytest.mark.parametrize("name", ["promote", "partition"])
async def test_failover_drill_keeps_its_promises(tmp_path, name) -> None:
    from cluster.drills import basic  # noqa: F401

    report = await drill.run_drill(name, base_dir=str(tmp_path / "drill"), rate=30)
    assert report.error is None, report.table()
    assert report.ok, report.table()
    assert report.acknowledged > 30 and report.lost == []
    promoted = [e for _, e in report.events if "promoted: epoch" in e]
    assert promoted, report.table()
    assert any("rejoined as a slave" in e for _, e in report.events), report.table()
    if name == "promote":  # SYNC_MASTER: the promoted slave had every commit; only uncommitted ones come again
        assert report.committed_offsets_lost == 0, report.table()
        assert report.redelivered_after_fault is not None and report.consumed_not_committed is not None
        assert report.redelivered_after_fault <= report.consumed_not_committed, report.table()
