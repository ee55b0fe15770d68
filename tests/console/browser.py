"""A real console process and a real browser for the console tests: `tidemq console` as
a user starts it, and Debian's chromium driven by Playwright (its own browser download
cannot run here, so it is pointed at the system browser)."""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.node.nodeproc import REPO

CHROMIUM = os.environ.get("TIDEMQ_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = os.environ.get("TIDEMQ_CONSOLE_SCREENSHOTS")
"""A directory: the tests save a 1280x800 screenshot of each page there (docs/console/)."""


class ConsoleProcess:
    """`tidemq console --namesrv NS --port 0`, its URL read from its `console: URL` line."""

    def __init__(self, namesrv: str, log: Path) -> None:
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop
        self.log_path = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tidemq", "console", "--namesrv", namesrv, "--port", "0"],
            cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._log,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        self.url = self._wait_url(20.0)

    def _wait_url(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        buf = b""
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while not buf.startswith(b"console: ") or not buf.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):  # poll: wait for output with a deadline
                    self.stop()
                    raise AssertionError(f"console not up in {timeout} s:\n{self.log_path.read_text()}")
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    self.stop()
                    raise AssertionError(f"console exited:\n{self.log_path.read_text()}")
                buf += chunk
        return buf.decode().split("console: ", 1)[1].strip().rstrip("/")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@contextlib.contextmanager
def console_process(namesrv: str, directory: Path) -> Iterator[ConsoleProcess]:
    console = ConsoleProcess(namesrv, directory / "console.log")
    try:
        yield console
    finally:
        console.stop()


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
