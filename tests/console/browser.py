"""A real console process and a real browser for the console tests: `tidemq console` as
a user starts it, and Debian's chromium driven by Playwright (its own browser download
cannot run here, so it is pointed at the system browser)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from cluster.launch import launcher
from cluster.launch.launcher_console import CONSOLE_STATE, console_url
from tests.cluster.helpers import cli
from tests.node.nodeproc import REPO

CHROMIUM = os.environ.get("TIDEMQ_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = os.environ.get("TIDEMQ_CONSOLE_SCREENSHOTS")
"""A directory: the tests save a 1280x800 screenshot of each page there (docs/console/)."""


@contextlib.contextmanager
def cluster_with_console(directory: Path) -> Iterator[dict[str, str]]:
    """`tidemq cluster up --console` of a copy of conf/1m-1s-dev (free ports): the nodes'
    addresses and the console's URL, which `cluster status` prints too; `cluster down` at
    the end stops the console with the nodes (checked)."""
    conf, base = directory / "conf", directory / "data"
    launcher.copy_layout(REPO / "conf" / "1m-1s-dev", conf)
    pid = None
    try:
        up = cli("cluster", "up", "--conf", str(conf), "--base-dir", str(base), "--console", "--json", timeout=120)
        assert up.returncode == 0, up.stderr.decode()
        doc = json.loads(up.stdout)
        pid = json.loads((base / CONSOLE_STATE).read_text())["pid"]
        roles = {n["config_role"]: n["address"] for n in doc["nodes"]}
        yield {"namesrv": roles["NAMESRV"], "master": roles["SYNC_MASTER"], "slave": roles["SLAVE"],
               "url": doc["console"].rstrip("/"), "base": str(base)}
    finally:
        launcher.down(base, grace_s=5)
    assert console_url(base) is None
    assert pid is None or not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def topics_cli(ns: str) -> set[str]:
    """The topics `tidemq admin topicList` names."""
    done = cli("admin", "topicList", "-n", ns, "--json")
    assert done.returncode == 0, done.stderr.decode()
    return {json.loads(line)["topic"] for line in done.stdout.decode().splitlines()}


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A headless chromium (Playwright's Browser); the test is skipped when either is missing."""
    sync_api = pytest.importorskip("playwright.sync_api")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield browser
        finally:
            browser.close()


class Page:
    """A browser tab at 1280x800 that records every console error and page error."""

    def __init__(self, browser: Any, base_url: str) -> None:
        self.context = browser.new_context(viewport={"width": 1280, "height": 800}, base_url=base_url)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.requests: list[str] = []  # what the page asked, for a failure's message
        self.page.on("request", lambda r: self.requests.append(f"{r.method} {r.url}"))
        self.page.on("requestfinished", lambda r: self.requests.append(f"done {r.method} {r.url}"))
        self.page.on("response", lambda r: self.requests.append(f"{r.status} {r.request.method} {r.url}"))
        self.page.on("console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))

    def goto(self, path: str) -> Any:
        response = self.page.goto(path)
        self.page.wait_for_load_state("networkidle")
        return response

    def screenshot(self, name: str) -> None:
        if SCREENSHOTS:
            Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
            self.page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"))

    def close(self) -> None:
        self.context.close()
