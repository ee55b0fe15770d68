"""`scripts/bench compare` end to end with tiny durations (the floor and one tidemq mode, no
apt): it writes valid JSON and a Markdown table, and stops every process it started, also
when interrupted with SIGINT. The speed figures themselves are the benchmark's, not asserted."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.node.nodeproc import REPO

DEADLINE_S = 240.0


class Descendants:
    """Every process below `pid` seen while it runs (polled), to check later that none is left."""

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self.seen: dict[int, psutil.Process] = {}
        self.cmdlines: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                for child in self.root.children(recursive=True):
                    self.seen.setdefault(child.pid, child)
                    # read again each round: a child caught between fork and exec still
                    # shows its parent's command line (and a zombie shows none: kept)
                    with contextlib.suppress(psutil.Error):
                        if cmdline := " ".join(child.cmdline()):
                            self.cmdlines[child.pid] = cmdline
            except psutil.Error:
                return
            self._stop.wait(0.05)  # poll: sampling the process tree while the run goes on

    def names(self) -> list[str]:
        return [self.cmdlines.get(pid, "") for pid, p in list(self.seen.items()) if _alive(p)]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def left_alive(self, timeout_s: float = 20.0) -> list[str]:
        deadline = time.monotonic() + timeout_s
        while True:
            alive = [p for p in self.seen.values() if _alive(p)]
            if not alive or time.monotonic() > deadline:
                return [f"{p.pid} {' '.join(p.cmdline()[:5])}" for p in alive]
            time.sleep(0.1)  # poll: processes end a moment after their group is signalled


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _start(tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "scripts.bench_compare", "--quick", "--no-install",
            "--out", str(tmp_path / "out"), "--dir", str(tmp_path / "work"), *extra]
    return subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_default_sigint)


def _default_sigint() -> None:
    """The harness takes Ctrl-C as a terminal gives it: a suite started as a background job of
    a shell inherits SIGINT ignored, and the interrupt test then saw the run go on to its end."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_quick_run_writes_json_and_markdown_and_leaves_nothing_running(tmp_path):
    proc = _start(tmp_path, "--only", "floor,tidemq-async", "--seconds", "0.3")
    tree = Descendants(proc.pid)
    out, err = proc.communicate(timeout=DEADLINE_S)
    tree.stop()
    assert proc.returncode == 0, err
    result = json.loads((tmp_path / "out" / "compare.json").read_text())
    cells = result["summary"]["table"]
    assert set(cells) == {"floor", "tidemq-async"}
    assert set(cells["tidemq-async"]) == {"1x1", "16x1", "1x64", "16xB"}
    for system in cells.values():
        for cell in system.values():
            assert cell["msgs_per_s"] > 0 and cell["failed"] == 0, cell
    assert result["summary"]["master_rss_mb_max"]["tidemq-async"] > 0
    goal = next(g for g in result["goals"] if g["goal"].startswith("async, 16 x 1"))
    assert goal["ratio"] == round(cells["tidemq-async"]["16x1"]["msgs_per_s"] / cells["floor"]["16x1"]["msgs_per_s"], 3)
    md = (tmp_path / "out" / "compare.md").read_text()
    assert md.strip() == out.strip()
    assert "| case | trio floor | tidemq async |" in md
    assert "| async, 16 x 1 >= 0.5 x trio floor |" in md
    # the serving process's CPU per message: its cores over its messages
    floor_cell = cells["floor"]["16x1"]
    assert floor_cell["server_us_per_msg"] == pytest.approx(
        floor_cell["cpu_cores"]["floor"] * 1e6 / floor_cell["msgs_per_s"], rel=0.05, abs=1.0)
    assert cells["tidemq-async"]["1x1"]["server_us_per_msg"] > 0
    assert "## Serving process CPU per message" in md
    # the floor, the name server, the master and the lean clients all ran, and all are gone
    ran = " ".join(tree.cmdlines.values())
    for what in ("bench.floor", "namesrv", "broker-a", "bench.lean"):
        assert what in ran, ran
    assert tree.left_alive() == []


@pytest.mark.slow
def test_sigint_stops_every_server_it_started(tmp_path):
    # long cases: the interrupt lands while they run (with 1.5 s a loaded machine saw the run end first)
    proc = _start(tmp_path, "--only", "tidemq-syncmaster", "--seconds", "6")
    tree = Descendants(proc.pid)
    deadline = time.monotonic() + DEADLINE_S
    # wait until the master and its slave run (the interrupt then lands in the cluster's start-up
    # or its cases, both of which must stop it: waiting for a lean client too saw, on a loaded
    # machine, the run finish first)
    while not any("broker-a-s" in n for n in tree.names()):
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, tree.names()
        time.sleep(0.1)  # poll: the harness starts the cluster in its own time
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    tree.stop()
    assert proc.returncode == 130, err
    assert "interrupted; every server it started is stopped" in err
    assert tree.left_alive() == []
    assert not (tmp_path / "out" / "compare.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("args, message", [
    (["--only", "floor,mongodb"], "unknown system(s) mongodb"),
    (["--runs", "0"], "--runs must be >= 1"),
    (["--seconds", "-1"], "--seconds must be > 0"),
])
def test_bad_options_are_usage_errors(tmp_path, args, message):
    done = subprocess.run([sys.executable, "-m", "scripts.bench_compare", "--out", str(tmp_path / "out"), *args],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_missing_server_with_no_install_says_what_to_install(tmp_path):
    bin_dir = tmp_path / "bin"  # a PATH with python but no redis-server
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    done = subprocess.run([sys.executable, "-m", "scripts.bench_compare", "--no-install", "--only", "floor,redis-always",
                           "--out", str(tmp_path / "out")], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={"PATH": str(bin_dir)})
    assert done.returncode == 1, done.stderr
    assert "redis-server not installed (--no-install): apt-get install redis-server" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()
