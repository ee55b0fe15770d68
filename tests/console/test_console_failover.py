"""The console during the etcd-mode failover drill, with the Cluster page open: the
election promotes the slave, and the page shows the new master within seconds, the Failover
page the election. Its own cluster of four brokers and etcd (~26 s). The manual drill (the
slave promoted from the page) is the last test of test_console_pages.py, on that module's
cluster."""

from __future__ import annotations

import json
import time

import pytest

from cluster.launch import launcher
from tests.cluster.helpers import REPO, cli
from tests.console.browser import Page, chromium

pytestmark = pytest.mark.slow  # a cluster of its own, etcd and a browser: the whole suite (CI) runs it


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
            page.screenshot("cluster-etcd")
            page.goto("/failover")
            assert "elected master of broker-a with epoch 2" in page.page.inner_text(
                "section[data-group='broker-a'] table.events")
            page.close()
        assert shown_s < 20, shown_s
    finally:
        launcher.down(base, grace_s=5)
