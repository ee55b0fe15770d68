"""The kill-master drill with RocketMQ's C++ producer as its load (`tidemq drill kill-master
--client rocketmq`): the client is told only what the cluster keeps, and its own retries move
it off the killed master."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from cluster.drills import basic  # noqa: F401  (registers the drills)
from cluster.drills.framework import DrillUnavailable, run_drill
from tests.node.nodeproc import REPO


@pytest.mark.slow
async def test_kill_master_under_the_cpp_producer_loses_nothing_acknowledged(tmp_path) -> None:
    report = await run_drill("kill-master", base_dir=str(tmp_path / "drill"), rate=30, client="rocketmq")
    assert report.error is None
    assert report.acknowledged > 0
    assert not report.lost, f"acknowledged but lost: {report.lost[:10]}"
    assert not report.failed_stored
    assert report.acknowledged_after_fault > 0  # sends resumed after the kill (on broker-b)
    assert report.producers_recovered_s is not None
    assert report.ok, report.table()


async def test_the_cpp_load_needs_the_rocketmq_package(tmp_path, monkeypatch) -> None:
    """Without PyPI `rocketmq` the drill refuses before it starts anything, saying why."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "rocketmq" else real(name, *a))
    with pytest.raises(DrillUnavailable, match="pip install"):
        await run_drill("kill-master", base_dir=str(tmp_path / "drill"), client="rocketmq")
    assert not (tmp_path / "drill").exists()


def test_the_cli_refuses_an_unknown_client() -> None:
    proc = subprocess.run([sys.executable, "-m", "cluster.drills.cli", "kill-master", "--client", "java"],
                          capture_output=True, cwd=REPO, timeout=60)
    assert proc.returncode == 2
    assert b"invalid choice" in proc.stderr
