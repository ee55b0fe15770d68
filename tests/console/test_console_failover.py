"""The console during failover drills, with the Cluster page open: in manual mode the
master of a SYNC_MASTER group is killed and the slave promoted from the page; in etcd mode
the election promotes it. Either way the page shows the new master within seconds, and the
Failover page the new epoch. Each starts its own cluster (it kills a node): slow tier,
~35-40 s each."""

from __future__ import annotations

import json
import time

import pytest

from cluster.launch import launcher
from tests.cluster.helpers import REPO, cli
from tests.console.browser import Page, chromium

pytestmark = [pytest.mark.slow, pytest.mark.sweep]


def test_kill_master_then_promote_from_the_cluster_page(tmp_path):
    conf, base = tmp_path / "conf", tmp_path / "data"
    launcher.copy_layout(REPO / "conf" / "1m-1s-dev", conf)
    try:
        up = cli("cluster", "up", "--conf", str(conf), "--base-dir", str(base), "--console", "--json", timeout=120)
        assert up.returncode == 0, up.stderr.decode()
        doc = json.loads(up.stdout)
        slave = next(n["address"] for n in doc["nodes"] if n["config_role"] == "SLAVE")
        namesrv = next(n["address"] for n in doc["nodes"] if n["config_role"] == "NAMESRV")
        sent = cli("send", "--namesrv", namesrv, "--topic", "BeforeFailover", "--count", "3", "m{i}")
        assert sent.returncode == 0, sent.stderr.decode()  # epoch 1 holds records (an empty one is replaced)
        with chromium() as browser:
            page = Page(browser, doc["console"].rstrip("/"))
            page.goto("/cluster")
            master_row = page.page.locator("#brokers tr[data-role='SYNC_MASTER']")
            assert master_row.count() == 1
            killed = cli("cluster", "kill", "broker-a", "--base-dir", str(base))
            assert killed.returncode == 0, killed.stderr.decode()
            page.page.locator("#promote-panel summary").click()
            page.page.fill("#promote-group", "broker-a")
            page.page.fill("#promote-id", "1")
            page.page.once("dialog", lambda d: d.accept())
            t0 = time.monotonic()
            page.page.click("#promote-button")
            said = page.page.wait_for_selector("#cluster-result .result").inner_text()
            assert "is the master of broker-a in epoch 2" in said, said
            # the live table shows the slave serving as master, in the new epoch
            row = page.page.locator(f"#brokers tr[data-address='{slave}']")
            page.page.wait_for_selector(f"#brokers tr[data-address='{slave}'][data-role='SYNC_MASTER']",
                                        timeout=10_000)
            shown_s = time.monotonic() - t0
            assert row.locator("td").nth(4).inner_text() == "2"
            page.screenshot("cluster-after-failover")
            status = cli("cluster", "status", "--base-dir", str(base), "--json")
            nodes = {n["name"]: n for n in json.loads(status.stdout)["nodes"]}
            assert nodes["broker-a-s"]["role"] == "SYNC_MASTER", nodes["broker-a-s"]
            page.goto("/failover")
            epochs = page.page.locator("section[data-group='broker-a'] table.epochs tbody tr")
            assert epochs.count() == 2 and "current" in epochs.nth(1).inner_text(), page.page.inner_text("#failover-groups")
            page.screenshot("failover")
            # the browser logged only the dead master's failed answers, if any; nothing else
            assert all("Failed to load resource" not in e for e in page.errors), page.errors
            page.close()
        assert shown_s < 15, shown_s
    finally:
        launcher.down(base, grace_s=5)


def test_etcd_mode_the_cluster_page_shows_the_elected_master_within_seconds(tmp_path):
    """Controller (etcd) mode, where rocketmq-dashboard's pages came up empty
    (rocketmq-dashboard #233): every broker shows, and after the master is killed the
    Cluster page shows the slave the election promoted, with no action on the page."""
    conf, base = tmp_path / "conf", tmp_path / "data"
    launcher.copy_layout(REPO / "conf" / "2m-2s-sync-auto", conf)
    try:
        up = cli("cluster", "up", "--conf", str(conf), "--base-dir", str(base), "--console", "--json", timeout=180)
        assert up.returncode == 0, up.stderr.decode()
        doc = json.loads(up.stdout)
        by_name = {n["name"]: n["address"] for n in doc["nodes"]}
        namesrv = next(n["address"] for n in doc["nodes"] if n["config_role"] == "NAMESRV")
        sent = cli("send", "--namesrv", namesrv, "--topic", "BeforeElection", "--count", "4", "m{i}")
        assert sent.returncode == 0, sent.stderr.decode()
        with chromium() as browser:
            page = Page(browser, doc["console"].rstrip("/"))
            page.goto("/cluster")
            assert page.page.locator("#brokers tr[data-group]").count() == 4
            assert page.page.locator("#brokers td:text('etcd: leading')").count() == 2
            killed = cli("cluster", "kill", "broker-a", "--base-dir", str(base))
            assert killed.returncode == 0, killed.stderr.decode()
            t0 = time.monotonic()
            page.page.wait_for_selector(
                f"#brokers tr[data-address='{by_name['broker-a-s']}'][data-role='SYNC_MASTER']", timeout=30_000)
            shown_s = time.monotonic() - t0
            page.goto("/failover")
            assert "elected master of broker-a with epoch 2" in page.page.inner_text(
                "section[data-group='broker-a'] table.events")
            page.close()
        assert shown_s < 20, shown_s
    finally:
        launcher.down(base, grace_s=5)
