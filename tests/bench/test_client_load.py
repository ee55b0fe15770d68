"""bench/client_load.py: tidemq's Producer.send and redis-py's XADD, one after another,
against a real name server + master and a real redis-server: every counted send is
stored, and a server that cannot be reached is a clear error. The speed is the benchmark's."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from bench import peers
from bench.procs import Processes
from tests.node.nodeproc import REPO


def _load(kind: str, *where: str, seconds: str = "0.3") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench.client_load", kind, *where, "--seconds", seconds,
                           "--warmup", "0.1"], cwd=REPO, capture_output=True, text=True, timeout=120)


def _result(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    r = json.loads(done.stdout)
    assert r["sent"] > 0 and r["failed"] == 0 and r["errors"] == {}, r
    assert r["client_us_per_msg"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"], r
    return r


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")
def test_both_client_libraries_send_one_after_another_and_every_send_is_stored(tmp_path: Path) -> None:
    pytest.importorskip("redis")
    procs = Processes(tmp_path / "logs")
    bases: list[Path] = []

    async def check() -> None:
        async with peers.tidemq(tmp_path / "tidemq", "ASYNC_FLUSH", "ASYNC_MASTER", bases=bases) as node, \
                peers.redis(procs, tmp_path / "redis", "everysec", replica=False) as redis:
            sent = await trio.to_thread.run_sync(lambda: _result(_load("tidemq", "--namesrv", node.namesrv)))
            status = await peers.tidemq_status(node.address)
            assert status.stats is not None and status.stats.put_total >= sent["sent"]  # warm-up sends too
            added = await trio.to_thread.run_sync(lambda: _result(_load("redis", "--port", str(redis.ports[0]))))
            xlen = await peers._resp(redis.ports[0], "XLEN", "bench")
            assert int(xlen[1:]) >= added["sent"]  # the stream is capped far above this

    try:
        trio.run(check)
    finally:
        procs.stop_all()
    assert bases == []  # the tidemq layout was taken down


@pytest.mark.slow
def test_a_server_it_cannot_reach_is_a_clear_error_and_bad_options_are_usage_errors() -> None:
    closed = str(peers.free_port())
    for kind, where in (("tidemq", ("--namesrv", f"127.0.0.1:{closed}")), ("redis", ("--port", closed))):
        if kind == "redis" and shutil.which("redis-server") is None:
            continue
        done = _load(kind, *where)
        assert done.returncode == 1 and f"cannot drive {kind}" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and done.stdout == ""
    usage = subprocess.run([sys.executable, "-m", "bench.client_load", "tidemq", "--seconds", "1"], cwd=REPO,
                           capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "tidemq needs --namesrv" in usage.stderr, usage.stderr
