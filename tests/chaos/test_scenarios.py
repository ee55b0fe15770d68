"""Every ready chaos scenario once, short, in the modes CI runs it in (kill-master in all
four): a real proxied cluster, real faults, the history checked against the stores and
the mode's written expectations. The whole module stays within a few minutes on 2 cores.

The promotion scenarios (promote-under-load, old-master-returns) promote the slave with
Admin.promote; their runs must also show the old master rejoining as a slave. So does
tx-kill-master and tx-unreplicated (issue 43), which kill the master while transactions
are between their prepared send and their END; their runs must also show them open at the
kill and checks answered (their judge: tests/chaos/test_transaction_judge.py)."""

from __future__ import annotations

import json

import pytest
import trio

from chaos.network import toxiproxy
from chaos.runner import run_scenario
from chaos.scenarios import SCENARIOS

pytestmark = pytest.mark.slow

DURATION_S = 4.0
CASES = [(s.name, mode) for s in SCENARIOS.values() for mode in s.ci_modes]
IN_SUITE_TX = ("tx-kill-master", "SYNC_MASTER+SYNC_FLUSH")
"""The transaction scenarios' one case in the whole suite; the others (~17 s each) run in the
sweep tier (`scripts/test --sweeps`), to keep the suite within its 15 minutes."""
SWEEP_ONLY = {("kill-master", "SYNC_MASTER+ASYNC_FLUSH"), ("kill-master", "ASYNC_MASTER+SYNC_FLUSH")}
"""kill-master's mixed modes (~9 s each) run in the sweep tier too: the whole suite keeps its
two ends (SYNC_MASTER+SYNC_FLUSH, ASYNC_MASTER+ASYNC_FLUSH), and the simulation sweeps every
mode on every schedule."""
PARAMS = [pytest.param(n, m, id=f"{n}-{m}",
                       marks=[pytest.mark.sweep] if (n.startswith("tx-") and (n, m) != IN_SUITE_TX) or (n, m) in SWEEP_ONLY
                       else []) for n, m in CASES]


@pytest.fixture(scope="module")
def client():
    with toxiproxy() as c:
        yield c


@pytest.mark.parametrize(("name", "mode"), PARAMS)
def test_scenario(name, mode, client, tmp_path):
    report = trio.run(lambda: run_scenario(SCENARIOS[name], mode, 1, DURATION_S, client,
                                           base_dir=str(tmp_path / "run")))
    if report.skipped:
        pytest.skip(report.skipped)
    detail = json.dumps(report.to_json(), default=str)[:4000]
    assert report.violations == [], detail
    assert report.faults >= 1, detail
    assert report.check is not None and report.check.acked > 0, detail
    assert report.time_to_catch_up_s is not None, detail
    if SCENARIOS[name].promotion:
        assert any("promoted: epoch 2" in what for _, what in report.events), detail
        assert any("rejoined as a slave" in what for _, what in report.events), detail
    if name.startswith("tx-"):
        tx = report.schedule["transactions"]
        assert len(tx["open_at_kill"]) == 5 and tx["checks"] > 0 and tx["delivered"] > 0, detail
    if name == "tx-kill-master":
        lost_ends = [h for h in tx["held"].values() if not h["end_retried"]]  # resolved by checks alone
        assert lost_ends and all(h["end_error"] and h["decision"] in h["checks"] for h in lost_ends), detail
    if name == "tx-unreplicated":  # the held COMMITs' half messages died with the old master's tail
        held_commits = {k for k, h in tx["held"].items() if h["decision"] == "COMMIT"}
        assert held_commits <= set(tx["lost_with_unreplicated_tail"]), detail
        assert all(count > 0 for count in tx["decided"].values()), detail


def test_the_promotion_scenarios_run_in_ci():
    assert {n for n, _ in CASES if SCENARIOS[n].promotion} == {"promote-under-load", "old-master-returns",
                                                                "tx-kill-master", "tx-unreplicated"}
    assert {m for n, m in CASES if n == "tx-kill-master"} == {"SYNC_MASTER+SYNC_FLUSH", "ASYNC_MASTER+ASYNC_FLUSH"}


@pytest.mark.parametrize("name", [pytest.param("kill-master", marks=pytest.mark.sweep), "promote-under-load"])
def test_scenarios_hold_with_security_on(name, client, tmp_path):
    """--secure: accounts, permissions, TLS on the client links and mutual TLS on the HA
    link, every link through a proxy; the same expectations as without."""
    report = trio.run(lambda: run_scenario(SCENARIOS[name], "SYNC_MASTER+SYNC_FLUSH", 1, DURATION_S, client,
                                           base_dir=str(tmp_path / "run"), keep=True, secure=True))
    detail = json.dumps(report.to_json(), default=str)[:4000]
    assert report.violations == [] and report.faults >= 1, detail
    assert report.check is not None and report.check.acked > 0, detail
    conf = (tmp_path / "run" / "conf" / "broker-a.toml").read_text()
    assert 'tlsMode = "enforcing"' in conf and "aclEnable = true" in conf
