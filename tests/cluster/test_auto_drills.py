"""The automatic-failover drills once each, short, with real etcd and node processes."""

from __future__ import annotations

import pytest
import trio

from cluster.drills import cli as drill_cli
from cluster.drills import framework as drill

pytestmark = pytest.mark.slow


def test_the_auto_drills_are_registered() -> None:
    from cluster.drills import basic  # noqa: F401  (registers every drill)

    assert {"auto-kill-master", "auto-partition", "auto-soak", "etcd-down"} <= set(drill.DRILLS)
    assert drill.LAYOUTS["etcd-down"].name == "2m-2s-sync-auto"


@pytest.mark.parametrize("bad, why", [("0", "must be >= 1, got 0"), ("-3", "must be >= 1, got -3"),
                                      ("x", "not an integer: 'x'")])
def test_auto_soak_refuses_a_round_count_that_is_not_positive(bad: str, why: str, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        drill_cli.main(["auto-soak", "--rounds", bad])
    assert exited.value.code == 2
    assert f"argument --rounds: {why}" in capsys.readouterr().err


# auto-kill-master runs the same election as auto-partition and test_auto_failover's kill test:
# `scripts/drill auto-kill-master` runs it; CI keeps the suite's time down
@pytest.mark.parametrize("name", ["auto-partition", "etcd-down"])
async def test_auto_drill_keeps_its_promises(tmp_path, name) -> None:
    from cluster.drills import basic  # noqa: F401

    report = await drill.run_drill(name, base_dir=str(tmp_path / "drill"), rate=30)
    assert report.error is None, report.table()
    assert report.ok, report.table()
    assert report.acknowledged > 30 and report.lost == []
    if name != "etcd-down":
        assert any("elected with epoch" in e for _, e in report.events), report.table()


@pytest.mark.sweep  # ~15 s of rounds the auto drills above already run one by one
async def test_auto_soak_runs_its_seeded_rounds(tmp_path) -> None:
    from cluster.drills import basic  # noqa: F401

    report = await drill.run_drill("auto-soak", base_dir=str(tmp_path / "drill"), rate=30, rounds=2, seed=14)
    assert report.error is None, report.table()
    assert report.ok, report.table()
    assert report.acknowledged > 30 and report.lost == []
    assert [k for k in report.promises if k.startswith("round ") and "no consumer read" not in k] == [
        f"round {i}: {what}" for i, (peer, old) in enumerate([("broker-a-s", "broker-a"), ("broker-a", "broker-a-s")])
        for what in (f"{peer} in the in-sync set", f"{peer} elected with a newer epoch", f"{old} rejoins as a slave")]
    assert sum("elected with epoch" in e for _, e in report.events) == 2, report.table()


async def test_a_cut_message_a_consumer_read_breaks_the_promise(tmp_path) -> None:
    """The promise behind the confirmOffset rule: the msgIds the old master cut when it
    rejoined must be none the members received (no cut, no promise)."""
    from cluster.drills.auto import _nothing_cut_was_read
    from wire.protocol import StatusReply, WireTruncation

    async with trio.open_nursery() as nursery:
        run = drill.DrillRun("auto-partition", tmp_path, "127.0.0.1:1", nursery, heartbeat_s=0.5,
                             rebalance_s=2.0, rate=30)
    run.consumed_msg_ids = {"A", "B"}
    _nothing_cut_was_read(run, StatusReply(last_truncation=None), "")
    _nothing_cut_was_read(run, None, "")
    assert run.report.promises == {}
    _nothing_cut_was_read(run, StatusReply(last_truncation=WireTruncation(msg_ids=["C", "D"])), "")
    _nothing_cut_was_read(run, StatusReply(last_truncation=WireTruncation(msg_ids=["D", "B"])), "round 3: ")
    assert run.report.promises == {"no consumer read a message the old master then cut (0 did: -)": True,
                                   "round 3: no consumer read a message the old master then cut (1 did: B)": False}
    assert not run.report.ok
