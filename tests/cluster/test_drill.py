"""Each drill once, short, with real processes: the report's promises hold and its
numbers add up; the CLI prints JSON and refuses an unknown drill with exit 2."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys

import psutil
import pytest
import trio

from cluster.client.routing import MessageQueue
from cluster.drills.cli import add_commands
from cluster.drills.framework import DRILLS, TOPIC, Consumption, DrillRun, run_drill
from cluster.judge.history import FAIL, INFO, OK
from tests.node.nodeproc import REPO
from tests.waiting import wait_until


async def test_the_brokers_view_flags_a_member_consuming_a_queue_locked_to_another(tmp_path) -> None:
    """broker_overlaps: a consumption between two lock-table samples that both name another
    holder is an overlap; one at a handover (the samples disagree) or by the holder is not."""
    run = DrillRun("rebalance", tmp_path, "127.0.0.1:1", None, heartbeat_s=1.0, rebalance_s=2.0, rate=1.0)
    q = MessageQueue(TOPIC, "broker-a", 0)
    a, b = run.client_id("a"), run.client_id("b")
    run.lock_samples = [(0.9, 1.0, {q: a}, {"broker-a": 1}), (1.9, 2.0, {q: b}, {"broker-a": 2}),
                        (2.9, 3.0, {q: b}, {"broker-a": 2}), (3.9, 4.0, {q: b}, {"broker-a": 4})]
    run.consumed = {"k1": [Consumption(0.5, "a", q, False)],  # before any sample: unknown
                    "k2": [Consumption(1.5, "a", q, False)],  # a handover between the samples
                    "k3": [Consumption(2.5, "b", q, False)],  # the holder itself
                    "k4": [Consumption(2.5, "a", q, False)],  # a, while the brokers gave q to b
                    "k5": [Consumption(3.5, "a", q, False)]}  # b both sides, but the group changed between
    [overlap] = run.broker_overlaps()
    assert overlap.startswith("2.50 s: a consumed k4") and b in overlap


async def test_the_report_is_judged_from_the_history_and_what_the_group_consumed(tmp_path) -> None:
    """The checker's check_consumption: a PUT_OK never consumed is lost, a failed send consumed
    was stored after all, a second delivery is a duplicate; other acknowledgements and
    indeterminate sends promise nothing, and a send still in flight counts as indeterminate."""
    run = DrillRun("kill-master", tmp_path, "127.0.0.1:1", None, heartbeat_s=1.0, rebalance_s=2.0, rate=1.0)
    q = MessageQueue(TOPIC, "broker-a", 0)
    outcomes = {"p0-0": (OK, "PUT_OK"), "p0-1": (OK, "PUT_OK"), "p0-2": (OK, "FLUSH_SLAVE_TIMEOUT"),
                "p0-3": (FAIL, "SERVICE_NOT_AVAILABLE"), "p0-4": (FAIL, "SERVICE_NOT_AVAILABLE"),
                "p0-5": (INFO, "TIMEOUT"), "p0-6": (None, None)}
    for seq, (key, (outcome, status)) in enumerate(outcomes.items()):
        op = run.history.invoke(0, seq, key)
        if outcome is not None:
            run.history.complete(op, outcome, status=status)
    run.consumed = {k: [Consumption(1.0, "m1", q, False)] * n
                    for k, n in {"p0-0": 2, "p0-3": 1, "p0-4": 0, "p0-5": 1}.items()}
    assert run.judged().lost == ["p0-1"]
    report = run.finish()
    assert (report.sent, report.acknowledged, report.stored_unconfirmed, report.failed, report.indeterminate) == (
        7, 2, 1, 2, 2)
    assert report.lost == ["p0-1"] and report.failed_stored == ["p0-3"]
    assert report.consumed == 4 and report.duplicates == 1
    assert report.to_json()["acknowledged_but_lost"] == 1


async def test_the_report_counts_deliveries_again_against_the_commits_at_the_fault(tmp_path) -> None:
    """A message of broker-a consumed before the fault and again after it is delivered
    again; it was committed when its queue offset lies below the master's committed offset
    at the fault (promised never to be delivered again), else consumed but not committed."""
    run = DrillRun("promote", tmp_path, "127.0.0.1:1", None, heartbeat_s=1.0, rebalance_s=2.0, rate=1.0)
    a0, b0 = MessageQueue(TOPIC, "broker-a", 0), MessageQueue(TOPIC, "broker-b", 0)
    run.fault_at, run.committed_at_fault = 5.0, {a0: 3}
    run.consumed = {
        "committed-once": [Consumption(1.0, "m1", a0, False, 1)],
        "committed-again": [Consumption(1.0, "m1", a0, False, 2), Consumption(6.0, "m1", a0, False, 2)],
        "uncommitted-again": [Consumption(2.0, "m1", a0, False, 3), Consumption(7.0, "m1", a0, False, 3)],
        "uncommitted-once": [Consumption(2.0, "m1", a0, False, 4)],
        "broker-b-again": [Consumption(2.0, "m1", b0, False, 0), Consumption(7.0, "m1", b0, False, 0)],
    }
    report = run.finish()
    assert (report.redelivered_after_fault, report.consumed_not_committed) == (2, 2)
    assert run.redelivered_committed() == {"committed-again"}
    report.committed_offsets_lost = 0
    out = report.to_json()
    assert (out["redelivered_after_fault"], out["consumed_not_committed"], out["committed_offsets_lost"]) == (2, 2, 0)
    assert "delivered again after the fault" in report.table()


def test_drill_command_registers_and_refuses_unknown_drills(capsys):
    parser = argparse.ArgumentParser(prog="tidemq")
    add_commands(parser.add_subparsers(dest="command", required=True))
    assert {"kill-master", "rebalance"} <= set(DRILLS)
    args = parser.parse_args(["drill", "no-such-drill"])
    assert args.handler(args) == 2
    assert "unknown drill 'no-such-drill'" in capsys.readouterr().err


@pytest.mark.slow
async def test_kill_master_drill_keeps_its_promises(tmp_path):
    report = await run_drill("kill-master", base_dir=str(tmp_path / "drill"), rate=30)
    assert report.error is None, report.table()
    assert report.ok, report.table()
    assert report.acknowledged > 50 and report.failed == 0
    assert report.lost == [] and report.consumed >= report.acknowledged
    assert report.consumed_from_slave > 0
    assert report.committed_offsets_lost == 0 and report.redelivered_after_fault is not None
    assert report.producers_recovered_s is not None and report.consumption_recovered_s is not None
    # the cluster was stopped: no node of the drill is left running
    state = json.loads((tmp_path / "drill" / "cluster.json").read_text())
    assert all(n["pid"] is None for n in state["nodes"])


@pytest.mark.slow
@pytest.mark.sweep  # ~20 s; the groups' rebalancing is tested in tests/cluster/test_consumer_group.py
def test_rebalance_drill_cli_json():
    """The client's default rebalance interval (20 s); 1 s heartbeats and a 5 s
    channelExpiredTimeout keep the pause step short (a silent member goes after 12 s)."""
    out = subprocess.run([sys.executable, "-m", "cluster.drills.cli", "rebalance", "--json", "--rate", "30",
                          "--heartbeat", "1", "--channel-expired", "5"], cwd=REPO, capture_output=True, timeout=300)
    assert out.returncode == 0, out.stdout.decode() + out.stderr.decode()[-3000:]
    report = json.loads(out.stdout)
    assert report["ok"] and report["acknowledged_but_lost"] == 0
    assert report["promises"]["every queue has one owner at a time"]
    assert report["consumed"] >= report["acknowledged"] > 0
    took = report["takeovers"]
    assert took["m3 joins: served"] <= 1.0 and took["m1 leaves: taken over"] <= 1.0, took
    assert took["p1 SIGKILLed: taken over"] <= 2.0 and 10.0 <= took["p2 SIGSTOPped: taken over"] <= 14.0, took


@pytest.mark.slow
async def test_a_sigtermed_drill_stops_its_cluster_and_exits_143(tmp_path):
    """A drill stopped mid-run (SIGTERM, as an operator's Ctrl-C or a CI timeout sends)
    leaves no node behind, says so in one line and exits 128 + 15."""
    base = tmp_path / "drill"
    proc = subprocess.Popen([sys.executable, "-m", "cluster.drills.cli", "rebalance", "--base-dir", str(base),
                             "--rate", "30"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        def nodes_up() -> list[int]:
            try:
                nodes = json.loads((base / "cluster.json").read_text())["nodes"]
            except (OSError, ValueError, KeyError):
                return []
            pids = [n["pid"] for n in nodes if n.get("pid")]
            return pids if len(pids) == len(nodes) and pids else []

        pids = await wait_until(nodes_up, timeout=60, what="the drill's cluster running")
        proc.send_signal(signal.SIGTERM)
        out, err = await trio.to_thread.run_sync(lambda: proc.communicate(timeout=60))
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err.decode()[-2000:]
    assert err.decode().strip().splitlines()[-1].endswith("stopped by SIGTERM: what was done so far is kept")
    assert "Traceback" not in err.decode()
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["kill-master", "promote"])
async def test_drills_keep_their_promises_on_the_secure_layout(tmp_path, name):
    """conf/2m-2s-secure: accounts, permissions, TLS on the client ports and mutual TLS on the
    HA ports, with fresh secrets; the drill's clients log in as its admin account."""
    report = await run_drill(name, base_dir=str(tmp_path / "drill"), rate=30, secure=True)
    assert report.error is None, report.table()
    assert report.ok, report.table()
    assert report.acknowledged > 50 and report.failed == 0 and report.lost == []
    assert (tmp_path / "drill" / "conf" / "secrets" / "node-key.pem").stat().st_mode & 0o777 == 0o600
