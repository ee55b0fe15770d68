"""Issue 42 item 2 with real node processes: the in-sync set in manual mode, shown by
`tidemq status` and `clusterList`, and `admin promote` refusing a slave behind the confirm
offset unless `--unclean` (which prints what it drops). An in-sync slave needs no flag:
checked here, and promoted so by every promotion of tests/cluster/test_failover.py (with
the master dead, and alive in the repeated-kills test). The decision's cases without
processes: tests/node/test_insync.py.
"""

from __future__ import annotations

import json
import os
import signal
import tomllib
from pathlib import Path

import pytest
import trio

from cluster.cli.client import status_rows
from cluster.cli.tables import failover_lines
from cluster.client import Admin
from tests.cluster.helpers import (
    broker_conf,
    call,
    cli,
    slave_of,
    start_namesrv,
    wait_for,
    wait_slave_connected,
)
from tests.ha.proxy import PausableProxy
from tests.node.nodeproc import NodeProcess, Nodes
from wire.client import BadRequest, connect
from wire.protocol import GetStatus, Send, StatusReply, TopicCreate

pytestmark = pytest.mark.slow

GROUP = "broker-t"
TOPIC = "InSync"
# 1 s registrations; segments big enough for the 512 KiB bodies that make the slave lag; a
# slave leaves the set 4 s after it last caught up (heartbeats every second keep an idle one in)
CONF = {"registerNameServerPeriod": 1000, "haMaxGapNotInSync": 64 * 1024, "haMaxTimeSlaveNotCatchup": 4000,
        "haSendHeartbeatInterval": 1000, "mappedFileSizeCommitLog": 4 * 1024 * 1024, "maxMessageSize": 1024 * 1024}


def group(nodes: Nodes, tmp_path: Path) -> tuple[NodeProcess, NodeProcess, NodeProcess]:
    ns = start_namesrv(nodes, tmp_path)
    m_conf = broker_conf(tmp_path, "m", GROUP, ns.address, role="ASYNC_MASTER", **CONF)
    return ns, nodes.start(m_conf), nodes.start(slave_of(tmp_path, m_conf, "s", ns.address, **CONF))


async def status(address: str) -> StatusReply:
    return await call(address, GetStatus())


async def send(address: str, n: int, size: int) -> None:
    async with connect(address) as conn:
        for _ in range(n):
            await conn.call(Send(topic=TOPIC, body=os.urandom(size)))  # random: not compressed


async def in_sync(master: str, slave: str) -> bool:
    m, s = await status(master), await status(slave)
    rows = m.ha.slaves or []
    return bool(rows) and rows[0].in_sync and s.max_phy_offset == m.max_phy_offset


async def test_a_slave_that_has_not_caught_up_lately_is_refused_with_its_master_gone_and_promoted_unclean(
        tmp_path, nodes) -> None:
    """The slave stops (SIGSTOP) and falls behind; its master keeps it in the set
    haMaxTimeSlaveNotCatchup after it last caught up, then confirms alone; then the master
    stops too. The slave cannot ask it, and cannot know what it confirmed since: refused,
    saying so, until `--unclean` (seed 1442)."""
    ns, m, s = group(nodes, tmp_path)
    await call(m.address, TopicCreate(topic=TOPIC))
    await wait_slave_connected(m.address)
    await send(m.address, 3, 100)
    await wait_for(lambda: in_sync(m.address, s.address), what="the slave caught up, in the set")
    async with Admin(namesrv=ns.address) as admin:  # `tidemq status`'s lines, without a CLI start (3 s)
        shown = failover_lines(status_rows(await admin.status()))
    assert shown[0].startswith(f"{GROUP}/0 {m.address}: in-sync set: {m.address}, {s.address}; confirm offset "), shown
    listed = cli("admin", "clusterList", "--namesrv", ns.address, "--json")
    rows = {r["broker_id"]: r for r in map(json.loads, listed.stdout.decode().splitlines())}
    assert rows[0]["in_sync"] is True and rows[1]["in_sync"] is True, listed.stdout
    assert rows[1]["confirm_offset"] == (await status(s.address)).max_phy_offset
    async with Admin(namesrv=ns.address) as admin:  # an in-sync slave needs no --unclean
        check = await admin.promote_check(GROUP, 1)
    assert check["clean"] and check["in_set"] is True and check["master_reachable"], check
    assert (check["drop_from"], check["drop_to"], check["drop_count"]) == (check["max_offset"],) * 2 + (0,)

    s.proc.send_signal(signal.SIGSTOP)  # the slave lags: far more than haMaxGapNotInSync
    try:
        await send(m.address, 32, 512 * 1024)
        in_set = await status(m.address)
        assert in_set.ha.slaves and in_set.ha.slaves[0].in_sync  # not dropped by the gap
        assert in_set.confirm_offset is not None and in_set.confirm_offset < in_set.max_phy_offset
        out = await wait_for(lambda: _out_of_set(m.address), what="the slave out of the master's set (4 s)")
        assert out.confirm_offset == out.max_phy_offset  # the master alone: its whole log
        m.proc.send_signal(signal.SIGSTOP)  # the master's kernel still delivers what its sockets hold
    finally:
        s.proc.send_signal(signal.SIGCONT)
    m.kill()  # the master is gone, as when a promotion is needed

    refused = cli("admin", "promote", "--namesrv", ns.address, GROUP, "1")
    err = refused.stderr.decode()
    assert refused.returncode == 1, err
    assert f"{s.address} last caught up with its master " in err and "haMaxTimeSlaveNotCatchup" in err \
        and "unreachable" in err and "--unclean" in err, err
    after = await status(s.address)
    assert (after.broker_id, after.role, after.epoch) == (1, "SLAVE", 1)  # nothing promoted

    promoted = cli("admin", "promote", "--namesrv", ns.address, GROUP, "1", "--unclean")
    out_text = promoted.stdout.decode()
    assert promoted.returncode == 0, promoted.stderr
    first, last = out_text.splitlines()[0], out_text.splitlines()[-1]
    assert "is the master now" in last and (await status(s.address)).broker_id == 0
    # the range starts where the new epoch does: after the last whole record (the buffered
    # bytes may stop inside a 512 KiB one, which the promotion cuts)
    start = int(last.rsplit(" ", 1)[1])
    assert start <= out.max_phy_offset and f"drops CommitLog [{start}, " in first, out_text


async def _out_of_set(master: str) -> StatusReply | None:
    m = await status(master)
    rows = m.ha.slaves or []
    return m if rows and not rows[0].in_sync else None


async def test_with_the_master_reachable_its_confirm_offset_refuses_and_the_drop_is_counted(tmp_path, nodes) -> None:
    """The slave's HA link runs through a proxy that holds the master's frames back: the
    slave stays connected, reports, and falls behind; the master cannot name it (the proxy's
    address), so its confirm offset decides, and it counts what an unclean promotion drops."""
    ns = start_namesrv(nodes, tmp_path)
    m_conf = broker_conf(tmp_path, "m", GROUP, ns.address, role="ASYNC_MASTER", **CONF)
    m = nodes.start(m_conf)
    proxy = PausableProxy(int(tomllib.loads(m_conf.read_text())["haListenPort"]))
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.run)
        s = nodes.start(slave_of(tmp_path, m_conf, "s", ns.address, haMasterAddress=f"127.0.0.1:{proxy.port}",
                                 **CONF))
        await call(m.address, TopicCreate(topic=TOPIC))
        await wait_slave_connected(m.address)
        await send(m.address, 3, 100)
        await wait_for(lambda: in_sync(m.address, s.address), what="the slave caught up, in the set")
        proxy.to_slave.close()
        await send(m.address, 20, 10 * 1024)  # 200 KiB past haMaxGapNotInSync
        behind = await wait_for(lambda: _out_of_set(m.address), what="the slave out of the master's set")
        end = (await status(s.address)).max_phy_offset
        async with Admin(namesrv=ns.address) as admin:
            with pytest.raises(BadRequest, match=rf"refused: {s.address} is behind the confirm offset: its "
                               rf"CommitLog ends at {end}, the confirm offset is {behind.confirm_offset} \(master "
                               rf"{m.address} at offset {behind.max_phy_offset}, in-sync set: the master alone\)"):
                await admin.promote(GROUP, 1)
            check = await admin.promote_check(GROUP, 1)
            assert check["master_reachable"] and check["in_set"] is None, check  # the proxy hides the slave
            assert (check["drop_from"], check["drop_to"], check["drop_count"]) == (end, behind.max_phy_offset, 20)
            result = await admin.promote(GROUP, 1, unclean=True)
        # unclean: the node did not wait for the master (the check above was the operator's)
        assert f"master {m.address} not asked (unclean)" in result["check"]["reason"] and not result["check"]["master_reachable"]
        assert (await status(s.address)).broker_id == 0
        nursery.cancel_scope.cancel()


async def test_a_promotion_whose_answer_is_lost_is_reported_by_what_the_node_serves(tmp_path, nodes) -> None:
    """The node answers a promotion after PROMOTE_SETTLE_S (0.5 s); waiting 0.1 s for it loses
    the answer as a killed connection or a lost packet would. The promotion takes all the
    same, and `admin promote` says so (seed 800's operator took such a one for a failure)."""
    ns, m, s = group(nodes, tmp_path)
    await call(m.address, TopicCreate(topic=TOPIC))
    await wait_slave_connected(m.address)
    await send(m.address, 3, 100)
    await wait_for(lambda: in_sync(m.address, s.address), what="the slave caught up, in the set")
    async with Admin(namesrv=ns.address) as admin:
        result = await admin.promote(GROUP, 1, answer_timeout=0.1)
    now = await status(s.address)
    assert (now.broker_id, now.epoch) == (0, 2) and result["answer_lost"], result
    assert (result["broker_id"], result["epoch"], result["serving_epoch"]) == (0, 2, 2), result
    assert result["start_offset"] == now.epochs[-1][1] == now.max_phy_offset
