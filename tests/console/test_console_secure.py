"""The console beside a secure cluster (conf/2m-2s-secure: aclEnable and tlsMode enforcing,
its secrets made by `cluster make-secrets`): `cluster up --console` logs the console in as
the layout's admin account over TLS, so every page has the cluster's data and a change
goes through, as the CLI (logged in as `app`) confirms. Slow tier (five processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cluster.launch import launcher
from tests.cluster.helpers import REPO, cli
from tests.console.browser import Page, chromium

pytestmark = [pytest.mark.slow, pytest.mark.sweep]


def test_cluster_up_console_on_a_secure_layout(tmp_path):
    conf, base = tmp_path / "conf", tmp_path / "data"
    launcher.copy_layout(REPO / "conf" / "2m-2s-secure", conf)
    made = cli("cluster", "make-secrets", str(conf))
    assert made.returncode == 0, made.stderr.decode()
    try:
        up = cli("cluster", "up", "--conf", str(conf), "--base-dir", str(base), "--console", "--json", timeout=180)
        assert up.returncode == 0, up.stderr.decode()
        doc = json.loads(up.stdout)
        namesrv = next(n["address"] for n in doc["nodes"] if n["config_role"] == "NAMESRV")
        with chromium() as browser:
            page = Page(browser, doc["console"].rstrip("/"))
            page.goto("/cluster")
            assert page.page.locator("#brokers tr[data-group]").count() == 4
            assert page.page.locator("#brokers td.error").count() == 0, page.page.inner_text("#brokers")
            page.goto("/topic")
            page.page.locator("#add-topic summary").click()
            page.page.fill("#new-topic", "SecureConsoleTopic")
            page.page.click("#save-topic")
            said = page.page.wait_for_selector("#topic-result .result").inner_text()
            assert said.startswith("topic SecureConsoleTopic saved on broker-a, broker-b"), said
            assert page.errors == [], page.errors
            page.close()
        secrets = conf / "secrets"
        env = {**os.environ, "PYTHONPATH": str(REPO), "TIDEMQ_USER": "app",
               "TIDEMQ_SECRET_FILE": str(secrets / "app.secret"), "TIDEMQ_TLS_CA": str(secrets / "ca.pem")}
        listed = subprocess.run([sys.executable, "-m", "tidemq", "admin", "topicList", "-n", namesrv, "--json"],
                                cwd=REPO, env=env, capture_output=True, timeout=60)
        assert listed.returncode == 0, listed.stderr.decode()
        assert "SecureConsoleTopic" in {json.loads(line)["topic"] for line in listed.stdout.decode().splitlines()}
    finally:
        launcher.down(base, grace_s=5)
