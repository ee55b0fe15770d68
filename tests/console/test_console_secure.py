"""The console beside a secure cluster (aclEnable and tlsMode enforcing): conf/1m-1s-dev
with conf/2m-2s-secure's security keys and the secrets `make_dev_secrets` writes, so the
module's one cluster is three processes, started once with `cluster up --console` (logins,
`--login`, and TLS to the nodes) and shared by its tests, as is the browser.

A wrong secret is refused; `app` (not an admin) sees the cluster but is refused a change
and the admin pages on the server; `broker` (admin) makes the change, as the CLI (logged in
as `app`) confirms. The ACL page adds an account, changes its permissions (its secret
kept: it still logs in) and removes it, as `tidemq acl list` confirms; a bad permission is
refused and changes nothing. A console with `--session-lifetime 4s` sends a user back to
the login page once their login is older than that."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.launch import launcher
from cluster.launch.layout import free_ports
from cluster.launch.secrets import NAMESRV_KEYS, NODE_KEYS, forget_layout_secrets, make_dev_secrets
from tests.cluster.helpers import REPO, cli
from tests.console.browser import Page, chromium

pytestmark = pytest.mark.slow  # a secure cluster and a browser (~30-45 s with its tests): the whole suite (CI) runs it


def secure_layout(conf: Path) -> None:
    """A copy of conf/1m-1s-dev at `conf` with security on: conf/2m-2s-secure's keys at the
    top of each file (before any table) and its secrets made."""
    launcher.copy_layout(REPO / "conf" / "1m-1s-dev", conf)
    for path in conf.glob("*.toml"):
        text = path.read_text()
        keys = NAMESRV_KEYS if path.name == "namesrv.toml" else NODE_KEYS
        lines = [f"{k} = {json.dumps(v)}" for k, v in keys.items()]  # JSON's true and "..." are TOML's
        path.write_text("\n".join(lines) + "\n" + text)
    make_dev_secrets(conf)


@pytest.fixture(scope="module")
def secure(tmp_path_factory) -> Iterator[dict[str, Any]]:
    """The secure cluster: "namesrv", "url" (its console), "secrets" (the directory)."""
    directory = tmp_path_factory.mktemp("secure-console")
    conf, base = directory / "conf", directory / "data"
    secure_layout(conf)
    try:
        up = cli("cluster", "up", "--conf", str(conf), "--base-dir", str(base), "--console", "--json", timeout=180)
        assert up.returncode == 0, up.stderr.decode()
        doc = json.loads(up.stdout)
        yield {"namesrv": next(n["address"] for n in doc["nodes"] if n["config_role"] == "NAMESRV"),
               "url": doc["console"].rstrip("/"), "secrets": conf / "secrets"}
    finally:
        launcher.down(base, grace_s=5)  # logs this process in as the layout's admin, with its TLS...
        forget_layout_secrets()  # ...which the next module's clients must not inherit


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


def secret(secure: dict[str, Any], user: str) -> str:
    return (secure["secrets"] / f"{user}.secret").read_text().strip()


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


def acl_cli(secure: dict[str, Any]) -> dict[str, str]:
    """`tidemq acl list` of the nodes' file: account → its line."""
    listed = cli("acl", "list", "-f", str(secure["secrets"] / "acl.toml"))
    assert listed.returncode == 0, listed.stderr.decode()
    return {line.split("\t")[0]: line for line in listed.stdout.decode().splitlines()}


def test_users_log_in_and_only_admins_change_the_cluster(secure, browser):
    page = Page(browser, secure["url"])
    page.goto("/cluster")  # not logged in: to the login page
    assert "/login" in page.page.url
    log_in(page, "app", "not-its-secret")
    said = page.page.wait_for_selector("#login-result .result.error").inner_text()
    assert said.startswith("login as app failed"), said
    # app (PUB|SUB, not admin) sees the cluster, and is refused changes on the server
    log_in(page, "app", secret(secure, "app"))
    page.page.wait_for_url("**/cluster")
    assert page.page.inner_text("#user") == "app"
    assert page.page.locator("#brokers tr[data-group]").count() == 2
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
    log_in(page, "broker", secret(secure, "broker"))
    page.page.wait_for_url("**/dashboard")
    create_topic(page, "SecureConsoleTopic")
    said = page.page.wait_for_selector("#topic-result .result").inner_text()
    assert said.startswith("topic SecureConsoleTopic saved on broker-a"), said
    assert page.errors == [], page.errors
    page.close()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TIDEMQ_USER": "app",
           "TIDEMQ_SECRET_FILE": str(secure["secrets"] / "app.secret"),
           "TIDEMQ_TLS_CA": str(secure["secrets"] / "ca.pem")}
    listed = subprocess.run([sys.executable, "-m", "tidemq", "admin", "topicList", "-n", secure["namesrv"], "--json"],
                            cwd=REPO, env=env, capture_output=True, timeout=60)
    assert listed.returncode == 0, listed.stderr.decode()
    assert "SecureConsoleTopic" in {json.loads(line)["topic"] for line in listed.stdout.decode().splitlines()}


def _save_account(page: Page, key: str, secret: str = "", *, admin: bool = False, topic_perm: str = "DENY",
                  topic_rules: str = "") -> str:
    page.page.evaluate("document.querySelector('#acl-result').innerHTML = ''")
    page.page.fill("#acl-key", key)
    page.page.fill("#acl-secret", secret)
    page.page.set_checked("#acl-admin", admin)
    page.page.select_option("#acl-default-topic-perm", topic_perm)
    page.page.fill("#acl-topic-perms", topic_rules)
    page.page.click("#save-account")
    return page.page.wait_for_selector("#acl-result .result").inner_text()


def test_the_acl_page_adds_changes_and_removes_an_account(secure, browser):
    page = Page(browser, secure["url"])
    log_in(page, "broker", secret(secure, "broker"))
    page.page.wait_for_url("**/dashboard")
    page.goto("/acl")
    rows = {r.get_attribute("data-account"): r.inner_text() for r in page.page.locator("#accounts tr[data-account]").all()}
    assert set(rows) == {"app", "broker"}, rows
    assert "\tyes\t" in rows["broker"] and "\tno\t" in rows["app"], rows
    assert "secret" not in page.page.inner_text("#accounts").lower()
    page.page.locator("#add-account summary").click()

    # a bad rule is refused on the page; the file keeps what it had
    said = _save_account(page, "ops", "ops-secret-1", topic_rules="orders=MAYBE")
    assert said.startswith("topic perms:") and "'orders=MAYBE'" in said, said
    # a new account needs a secret
    said = _save_account(page, "ops")
    assert "ops is a new account: give it a secret" in said, said
    assert "ops" not in acl_cli(secure)

    said = _save_account(page, "ops", "ops-secret-1", topic_perm="SUB", topic_rules="orders=PUB|SUB")
    assert said.startswith("account ops added (a new secret) on broker-a/0, broker-a/1"), said
    page.page.wait_for_selector("#accounts tr[data-account='ops']")  # the table refreshed itself
    line = acl_cli(secure)["ops"]
    assert "admin=false" in line and "topics: default SUB; orders=PUB|SUB" in line, line
    page.screenshot("acl")

    # changed with a blank secret: the permissions change, the secret stays (it still logs in)
    said = _save_account(page, "ops", topic_perm="PUB|SUB", topic_rules="orders=DENY logs-*=SUB")
    assert said.startswith("account ops changed (its secret kept)"), said
    line = acl_cli(secure)["ops"]
    assert "topics: default PUB|SUB; orders=DENY, logs-*=SUB" in line, line
    other = Page(browser, secure["url"])
    log_in(other, "ops", "ops-secret-1")
    other.page.wait_for_url("**/dashboard")
    assert other.page.inner_text("#user") == "ops"
    other.close()

    # the admin may not lock themselves out
    said = _save_account(page, "broker", admin=False)
    assert "your own account" in said, said
    assert "admin=true" in acl_cli(secure)["broker"]

    page.page.once("dialog", lambda d: d.accept())
    page.page.evaluate("document.querySelector('#acl-result').innerHTML = ''")
    page.page.click("#accounts tr[data-account='ops'] button.remove-account")
    said = page.page.wait_for_selector("#acl-result .result").inner_text()
    assert said.startswith("account ops removed on broker-a/0, broker-a/1"), said
    page.page.wait_for_selector("#accounts tr[data-account='ops']", state="detached")
    assert "ops" not in acl_cli(secure)
    assert page.errors == [], page.errors
    page.close()


def test_a_login_older_than_the_session_lifetime_goes_back_to_the_login_page(secure, browser):
    (port,) = free_ports(1)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TIDEMQ_TLS_CA": str(secure["secrets"] / "ca.pem")}
    proc = subprocess.Popen([sys.executable, "-m", "tidemq", "console", "--namesrv", secure["namesrv"], "--login",
                             "--port", str(port), "--session-lifetime", "4s"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()  # blocks until it listens (or exits: an empty line)
        assert ready.strip() == f"console: http://127.0.0.1:{port}/", (ready, proc.stderr and proc.stderr.read())
        page = Page(browser, f"http://127.0.0.1:{port}")
        page.goto("/login")
        log_in(page, "app", secret(secure, "app"))
        page.page.wait_for_url("**/dashboard")
        logged_in = time.monotonic()
        assert page.page.inner_text("#user") == "app"
        # the Dashboard polls every 3 s: past the lifetime, its request is sent to the login page
        page.page.wait_for_url(lambda url: "/login?expired=1" in url, timeout=15_000)
        assert time.monotonic() - logged_in >= 3.0  # not before its time (4 s from the login)
        assert "a login lasts 4 s" in page.page.inner_text("#login-expired")
        page.goto("/cluster")  # the old cookie opens nothing
        assert "/login" in page.page.url
        page.errors.clear()  # the browser may log the poll it was refused
        page.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
