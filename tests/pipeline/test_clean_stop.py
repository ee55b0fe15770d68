"""`tidemq pipeline` stopped by SIGTERM or Ctrl-C (issue 24): one line, exit 143 / 130, no
traceback, and no local JVM left behind, whether the signal comes while Spark starts or
while its job runs. A real `tidemq pipeline stats` process."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.node.nodeproc import REPO
from tests.pipeline.sessions import SUBMIT_ENV
from tests.pipeline.test_jobs import msgs
from tests.store.test_tools import write_store

pytestmark = pytest.mark.slow  # each case starts a JVM


def _jvms(pid: int) -> list[psutil.Process]:
    try:
        return [p for p in psutil.Process(pid).children(recursive=True) if "java" in p.name()]
    except psutil.NoSuchProcess:
        return []


def _read_until(proc: subprocess.Popen, text: str, timeout: float) -> str:
    """stderr up to the line holding `text` (AssertionError at the deadline)."""
    assert proc.stderr is not None
    seen, deadline = b"", time.monotonic() + timeout
    while text.encode() not in seen:
        left = deadline - time.monotonic()
        assert left > 0 and proc.poll() is None, f"no {text!r} on stderr: {seen.decode()[-2000:]}"
        ready, _, _ = select.select([proc.stderr], [], [], left)
        if ready:
            seen += os.read(proc.stderr.fileno(), 65536)
    return seen.decode()


@pytest.mark.parametrize(("sig", "code", "when"), [(signal.SIGINT, 130, "starting"),
                                                  (signal.SIGTERM, 143, "running")])
def test_a_signalled_job_stops_its_jvm_and_says_so_in_one_line(tmp_path, sig, code, when) -> None:
    store = write_store(tmp_path / "node-a", msgs(20_000 if when == "running" else 40))
    proc = subprocess.Popen([sys.executable, "-m", "tidemq", "pipeline", "stats", str(store.root),
                             "--master", "local[1]"], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO), **SUBMIT_ENV},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        before = _read_until(proc, "starting Spark" if when == "starting" else "[stats] stage", timeout=120)
        deadline = time.monotonic() + 60
        while not (jvms := _jvms(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.02)  # poll: the JVM is launched just after the line
        assert jvms, "no JVM was started"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = before + err.decode()
    assert proc.returncode == code, (proc.returncode, text)
    assert "Traceback" not in text and "\tat " not in text, text
    assert text.strip().splitlines()[-1] == f"tidemq pipeline stats: stopped by {signal.Signals(sig).name}", text
    _, alive = psutil.wait_procs(jvms, timeout=10)
    assert not alive, f"JVM left running: {alive}"
