"""The disk side of `scripts/bench compare`: fio's figures, and a new slave's catch-up.

fio gives what this disk does without tidemq: buffered sequential write (MB/s, the bound
for a slave catching up, which writes its CommitLog sequentially into the page cache) and
4 KiB writes each followed by fdatasync (the latency a SYNC_FLUSH send must add). The
catch-up run starts a master and its slave as real processes, stops the slave and wipes
its store, fills the master with 1 KiB records, starts the slave again and times how fast
its CommitLog reaches the master's.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import trio

from cluster.launch import launcher
from store.address import split_host_port

from .peers import REPO, SEGMENT_BYTES, tidemq_status

__all__ = ["catch_up", "fio_fdatasync", "fio_sequential"]


async def _fio(work: Path, *args: str) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    argv = ["fio", "--directory", str(work), "--ioengine=psync", "--output-format=json", *args]
    done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
    shutil.rmtree(work, ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"fio failed ({done.returncode}): {done.stderr.decode(errors='replace')[-300:]}")
    return json.loads(done.stdout)["jobs"][0]


async def fio_sequential(work: Path, mb: int) -> dict:
    """Buffered sequential write of `mb` MiB in 1 MiB blocks (no fsync): MB/s."""
    job = await _fio(work, "--name=seqwrite", "--rw=write", "--bs=1M", f"--size={mb}M")
    return {"mb": mb, "mb_per_s": round(job["write"]["bw_bytes"] / 1e6, 1)}


async def fio_fdatasync(work: Path, seconds: float) -> dict:
    """4 KiB sequential writes, each followed by fdatasync, for `seconds`: IOPS and the
    fdatasync latency percentiles."""
    job = await _fio(work, "--name=fdatasync", "--rw=write", "--bs=4k", "--size=64M", "--fdatasync=1",
                     f"--runtime={seconds:g}", "--time_based")
    sync = job["sync"]["lat_ns"]
    pct = sync.get("percentile", {})
    return {"iops": round(job["write"]["iops"]),
            "fdatasync_p50_ms": round(pct.get("50.000000", 0) / 1e6, 3),
            "fdatasync_p99_ms": round(pct.get("99.000000", 0) / 1e6, 3),
            "fdatasync_mean_ms": round(sync["mean"] / 1e6, 3)}


async def _fill(address: str, port: int, target: int) -> int:
    """send_batch with the lean client until the master's CommitLog holds `target` bytes."""
    while True:
        status = await tidemq_status(address)
        if status.max_phy_offset >= target:
            return status.max_phy_offset
        argv = [sys.executable, "-m", "bench.lean", "tidemq", "--port", str(port), "--connections", "4",
                "--batch", "32", "--seconds", "2", "--warmup", "0"]
        done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False,
                                      cwd=REPO, start_new_session=True)
        if done.returncode != 0:
            raise RuntimeError(f"filling the master failed: {done.stderr.decode(errors='replace')[-300:]}")


async def catch_up(work: Path, mb: int, *, bases: list[Path], timeout_s: float = 120.0) -> dict:
    """A new slave (empty store) replicating a master that holds `mb` MiB of 1 KiB records
    (less than one segment: a new slave starts at the master's newest segment)."""
    if mb << 20 >= SEGMENT_BYTES:
        raise ValueError(f"catch-up of {mb} MiB: it must fit in one {SEGMENT_BYTES >> 20} MiB segment")
    conf, base = work / "conf", work / "data"
    size = {"mappedFileSizeCommitLog": SEGMENT_BYTES}
    launcher.copy_layout(REPO / "conf" / "1m-1s-dev", conf, overrides={
        "broker-a": {**size, "brokerRole": "ASYNC_MASTER"}, "broker-a-s": size})
    (conf / "broker-a.properties").unlink(missing_ok=True)
    bases.append(base)
    try:
        results = await trio.to_thread.run_sync(launcher.up, conf, base)
        records = {r.record.name: r.record for r in results}
        master = records["broker-a"]
        await trio.to_thread.run_sync(launcher.kill, base, "broker-a-s", "TERM")
        shutil.rmtree(base / "store" / "broker-a-s", ignore_errors=True)
        total = await _fill(master.address, split_host_port(master.address)[1], mb << 20)
        # a quiet disk: the fill's dirty pages written back first, so kernel writeback does
        # not take this machine's CPU and disk during the run (as scripts/bench ha does)
        await trio.to_thread.run_sync(os.sync)
        t_spawn = time.time()
        await trio.to_thread.run_sync(launcher.start_node, base, "broker-a-s")
        # timed by the master, which is not the busy side: from its accept of the slave's
        # connection to its first status showing the slave's ack of the whole log
        with trio.fail_after(timeout_s):
            while True:
                slaves = (await tidemq_status(master.address)).ha.slaves or []
                now = time.time()
                if slaves and slaves[0].ack_offset >= total:
                    break
                await trio.sleep(0.01)  # poll: the master's view of the slave, against a deadline
        span = now - slaves[0].connected_since / 1000
        return {
            "mb": round(total / 1e6, 1),
            "mb_per_s": round(total / span / 1e6, 1) if span > 0 else None,
            "seconds_from_connect": round(span, 2),
            "seconds_from_spawn": round(now - t_spawn, 2),
            "mb_per_s_from_spawn": round(total / (now - t_spawn) / 1e6, 1),
        }
    finally:
        await trio.to_thread.run_sync(launcher.down, base)
        bases.remove(base)
