"""bench/client_load.py: tidemq's Producer.send and redis-py's XADD, one after another,
against a real name server + master and a real redis-server: every counted send is
stored, and a server that cannot be reached is a clear error. The speed is the benchmark's.
The load runs in this process (`main`), as `python -m bench.client_load` runs it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import trio

from bench import client_load, peers
from bench.procs import Processes


def _load(capsys: pytest.CaptureFixture[str], kind: str, *where: str) -> dict[str, Any]:
    assert client_load.main([kind, *where, "--seconds", "0.3", "--warmup", "0.1"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["sent"] > 0 and r["failed"] == 0 and r["errors"] == {}, r
    assert r["client_us_per_msg"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"], r
    return r


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")
def test_both_client_libraries_send_one_after_another_and_every_send_is_stored(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("redis")
    procs = Processes(tmp_path / "logs")
    bases: list[Path] = []

    async def check() -> None:
        async with peers.tidemq(tmp_path / "tidemq", "ASYNC_FLUSH", "ASYNC_MASTER", bases=bases) as node, \
                peers.redis(procs, tmp_path / "redis", "everysec", replica=False) as redis:
            sent = await trio.to_thread.run_sync(lambda: _load(capsys, "tidemq", "--namesrv", node.namesrv))
            status = await peers.tidemq_status(node.address)
            assert status.stats is not None and status.stats.put_total >= sent["sent"]  # warm-up sends too
            added = await trio.to_thread.run_sync(lambda: _load(capsys, "redis", "--port", str(redis.ports[0])))
            xlen = await peers._resp(redis.ports[0], "XLEN", "bench")
            assert int(xlen[1:]) >= added["sent"]  # the stream is capped far above this

    try:
        trio.run(check)
    finally:
        procs.stop_all()
    assert bases == []  # the tidemq layout was taken down


def test_a_server_it_cannot_reach_is_a_clear_error_and_bad_options_are_usage_errors(
        capsys: pytest.CaptureFixture[str]) -> None:
    closed = str(peers.free_port())
    kinds = [("tidemq", ("--namesrv", f"127.0.0.1:{closed}"))]
    if shutil.which("redis-server") is not None:
        pytest.importorskip("redis")
        kinds.append(("redis", ("--port", closed)))
    for kind, where in kinds:
        assert client_load.main([kind, *where, "--seconds", "0.3"]) == 1
        out = capsys.readouterr()
        assert f"cannot drive {kind}" in out.err and out.out == "", out
    with pytest.raises(SystemExit) as usage:
        client_load.main(["tidemq", "--seconds", "1"])
    assert usage.value.code == 2 and "tidemq needs --namesrv" in capsys.readouterr().err
