"""Replication between two real node processes on 127.0.0.1: CommitLog files byte-identical
after a workload with segment rolls, and a master SIGKILLed mid-transfer that the slave
outlives without losing or duplicating a byte."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import trio

from tests.node.nodeproc import master_conf, slave_conf, store_root
from tests.node.wire import call
from tests.waiting import wait_until

pytestmark = pytest.mark.slow  # every test here starts node processes

SEGMENT = 256 * 1024


async def send_workload(address: str, start: int, count: int, size: int = 900) -> int:
    """Batches of 16 to rotating queues; returns how many messages were acknowledged."""
    acked = 0
    for i in range(start, start + count, 16):
        batch = [{"body": (f"m{j} ".encode() * size)[:size], "keys": [f"k{j}"]} for j in range(i, i + 16)]
        r = await call(address, "send_batch", topic="HaProc", queue_id=(i // 16) % 4, messages=batch)
        assert r["status"] == "PUT_OK", r
        acked += len(batch)
    return acked


async def max_offset(address: str) -> int:
    return (await call(address, "status"))["max_phy_offset"]


async def wait_caught_up(master: str, slave: str, timeout: float = 30) -> int:
    target = await max_offset(master)

    async def caught_up() -> bool:
        return await max_offset(slave) == target

    await wait_until(caught_up, timeout=timeout, what=f"the slave at the master's offset {target}")
    return target


def assert_identical_files(
    master_root: Path, slave_root: Path, end: int, min_segments: int = 1, segment: int = SEGMENT
) -> None:
    """Same segment names from the slave's first one on (an empty slave starts at the
    master's newest segment), each byte-identical up to `end`."""
    m_dir, s_dir = master_root / "commitlog", slave_root / "commitlog"
    slave_names = sorted(n for n in os.listdir(s_dir) if n.isdigit() and int(n) < end)
    assert slave_names, "the slave holds no segment"
    names = sorted(n for n in os.listdir(m_dir) if n.isdigit() and slave_names[0] <= n and int(n) < end)
    assert slave_names == names
    assert len(names) >= min_segments, "the workload must roll segments"
    for name in names:
        limit = min(segment, end - int(name))
        want = (m_dir / name).read_bytes()[:limit]
        got = (s_dir / name).read_bytes()[:limit]
        assert got == want, f"segment {name} differs"


async def test_two_processes_replicate_byte_identical(tmp_path, nodes):
    mconf = master_conf(tmp_path, role="ASYNC_MASTER", mappedFileSizeCommitLog=SEGMENT)
    sconf = slave_conf(tmp_path, mconf, mappedFileSizeCommitLog=SEGMENT)
    master = nodes.start(mconf)
    slave = nodes.start(sconf)
    await send_workload(master.address, 0, 1000)
    end = await wait_caught_up(master.address, slave.address)
    # reads on the slave answer like the master's
    for key in ("k0", "k517", "k999"):
        want = await call(master.address, "query_by_key", topic="HaProc", key=key)
        got = await call(slave.address, "query_by_key", topic="HaProc", key=key)
        assert [m["msg_id"] for m in got["messages"]] == [m["msg_id"] for m in want["messages"]] != []
    assert slave.stop() == 0 and master.stop() == 0
    assert_identical_files(store_root(mconf), store_root(sconf), end, min_segments=3)


async def test_master_killed_mid_transfer(tmp_path, nodes):
    # one big segment holding a 24 MiB backlog: a slave joining late ships all of it, which
    # takes long enough (hundreds of ms) for the kill to land mid-transfer
    big = {"mappedFileSizeCommitLog": 32 * 1024 * 1024, "haTransferBatchSize": 4096, "maxMessageSize": 256 * 1024}
    mconf = master_conf(tmp_path, role="ASYNC_MASTER", **big)
    sconf = slave_conf(tmp_path, mconf, **big)
    master = nodes.start(mconf)
    await send_workload(master.address, 0, 3000, size=8000)
    slave = nodes.start(sconf)
    total = await max_offset(master.address)
    with trio.fail_after(30):
        while (got := await max_offset(slave.address)) == 0:
            await trio.sleep(0.002)  # poll: catch the transfer in flight
    master.stop(signal.SIGKILL)
    kept = await max_offset(slave.address)
    assert 0 < got <= kept < total, (got, kept, total)
    assert await max_offset(slave.address) == kept, "the slave keeps what it has while the master is gone"
    master = nodes.start(mconf)
    assert await max_offset(master.address) == total, "the master recovered everything it had"
    await send_workload(master.address, 3000, 160, size=8000)
    end = await wait_caught_up(master.address, slave.address)
    assert slave.stop() == 0 and master.stop() == 0
    assert_identical_files(store_root(mconf), store_root(sconf), end, segment=32 * 1024 * 1024)
