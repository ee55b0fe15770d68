"""`tidemq chaos` through chaos.cli's own parser (`python -m chaos.cli`), as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # CLI processes
REPO = Path(__file__).resolve().parents[2]


def chaos(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidemq", "chaos", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_list_names_every_scenario():
    r = chaos("list", "--json")
    assert r.returncode == 0, r.stderr
    names = {s["name"]: s for s in json.loads(r.stdout)}
    assert {"kill-master", "cut-ha", "full-disk", "fuzz"} <= set(names)
    assert {"promote-under-load", "old-master-returns", "tx-kill-master", "tx-unreplicated"} <= set(names)
    assert all(s["ci_modes"] for s in names.values())


@pytest.mark.parametrize(("args", "needle"), [
    (("run", "no-such"), "no scenario 'no-such'"),
    (("run", "kill-slave", "--mode", "FAST"), "unknown mode 'FAST'"),
    (("run", "kill-slave", "--duration", "0.5"), "--duration must be"),
    (("soak", "--minutes", "1", "--scenarios", "bogus"), "unknown scenario"),
])
def test_bad_input_is_a_usage_error_with_a_message(args, needle):
    r = chaos(*args)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_run_prints_a_table_and_a_verdict():
    r = chaos("run", "kill-namesrv", "--seed", "2", "--duration", "4")
    assert r.returncode == 0, r.stdout[-3000:]
    assert r.stdout.strip().splitlines()[-1].startswith("PASS kill-namesrv")
    assert "acknowledged but missing" in r.stdout


@pytest.mark.slow
def test_proxy_command_serves_the_api():
    proc = subprocess.Popen([sys.executable, "-m", "chaos.cli", "chaos", "proxy", "--port", "0"], cwd=REPO,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY 127.0.0.1:")
        import requests

        port = int(line.strip().rsplit(":", 1)[1])
        assert requests.get(f"http://127.0.0.1:{port}/version", timeout=5).json()["version"].startswith("2.")
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.slow
def test_soak_writes_a_json_line_per_run_and_a_summary(tmp_path):
    log = tmp_path / "soak.jsonl"
    r = chaos("soak", "--minutes", "0.01", "--duration", "3", "--scenarios", "kill-slave", "--seed", "5",
              "--log", str(log))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == 1 and lines[0]["scenario"] == "kill-slave" and lines[0]["seed"] == 5
    assert lines[0]["passed"] and lines[0]["check"]["acked"] > 0
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["runs"] == 1 and summary["losses"] == 0 and summary["acked_checked"] == lines[0]["check"]["acked"]
