"""The console beside a secure cluster (conf/2m-2s-secure: aclEnable and tlsMode enforcing,
its secrets made by `cluster make-secrets`): `cluster up --console` starts it with logins
(`--login`) and TLS to the nodes. A wrong secret is refused; `app` (not an admin) sees the
cluster but is refused a change on the server; `broker` (admin) makes it, as the CLI
(logged in as `app`) confirms. Slow tier (five processes)."""

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


def log_in(page: Page, user: str, secret: str) -> None:
    if "/login" not in page.page.url:
        page.goto("/login")
    page.page.fill("#login-user", user)
    page.page.fill("#login-secret", secret)
    page.page.click("#login-button")


def create_topic(page: Page, topic: str) -> None:
    page.goto("/topic")
    page.page.locator("#add-topic summary").click()
    page.page.fill("#new-topic", topic)
    page.page.click("#save-topic")


def test_cluster_up_console_on_a_secure_layout_logs_users_in(tmp_path):
    conf, base = tmp_path / "conf", tmp_path / "data"
    launcher.copy_layout(REPO / "conf" / "2m-2s-secure", conf)
    made = cli("cluster", "make-secrets", str(conf))
    assert made.returncode == 0, made.stderr.decode()
    try:
        up = cli("cluster", "up", "--conf", str(conf), "--base-dir", str(base), "--console", "--json", timeout=180)
        assert up.returncode == 0, up.stderr.decode()
        doc = json.loads(up.stdout)
        namesrv = next(n["address"] for n in doc["nodes"] if n["config_role"] == "NAMESRV")
        secrets = conf / "secrets"
        with chromium() as browser:
            page = Page(browser, doc["console"].rstrip("/"))
            page.goto("/cluster")  # not logged in: to the login page
            assert "/login" in page.page.url
            log_in(page, "app", "not-its-secret")
            said = page.page.wait_for_selector("#login-result .result.error").inner_text()
            assert said.startswith("login as app failed"), said
            # app (PUB|SUB, not admin) sees the cluster, and is refused changes on the server
            log_in(page, "app", (secrets / "app.secret").read_text().strip())
            page.page.wait_for_url("**/cluster")
            assert page.page.inner_text("#user") == "app"
            assert page.page.locator("#brokers tr[data-group]").count() == 4
            assert page.page.locator("#brokers td.error").count() == 0, page.page.inner_text("#brokers")
            create_topic(page, "SecureConsoleTopic")
            said = page.page.wait_for_selector("#topic-result .result").inner_text()
            assert said == "POST /topic needs an admin account; app is not one", said
            assert page.goto("/consumer").status == 403
            assert page.goto("/acl").status == 403  # refused here, and by the nodes (acl_list is admin-only)
            page.errors.clear()  # the browser logs the 403s it was given
            page.page.click("#logout")
            page.page.wait_for_url("**/login")
            # broker (admin) may
            log_in(page, "broker", (secrets / "broker.secret").read_text().strip())
            page.page.wait_for_url("**/dashboard")
            create_topic(page, "SecureConsoleTopic")
            said = page.page.wait_for_selector("#topic-result .result").inner_text()
            assert said.startswith("topic SecureConsoleTopic saved on broker-a, broker-b"), said
            page.goto("/acl")
            rows = {r.get_attribute("data-account"): r.inner_text()
                    for r in page.page.locator("#accounts tr[data-account]").all()}
            assert set(rows) == {"app", "broker"}, rows
            assert "\tyes\t" in rows["broker"] and "\tno\t" in rows["app"], rows
            assert "secret" not in page.page.inner_text("#accounts").lower()
            page.screenshot("acl")
            assert page.errors == [], page.errors
            page.close()
        env = {**os.environ, "PYTHONPATH": str(REPO), "TIDEMQ_USER": "app",
               "TIDEMQ_SECRET_FILE": str(secrets / "app.secret"), "TIDEMQ_TLS_CA": str(secrets / "ca.pem")}
        listed = subprocess.run([sys.executable, "-m", "tidemq", "admin", "topicList", "-n", namesrv, "--json"],
                                cwd=REPO, env=env, capture_output=True, timeout=60)
        assert listed.returncode == 0, listed.stderr.decode()
        assert "SecureConsoleTopic" in {json.loads(line)["topic"] for line in listed.stdout.decode().splitlines()}
    finally:
        launcher.down(base, grace_s=5)
