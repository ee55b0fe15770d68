"""Promotion with epochs, fencing and truncation on rejoin, with real node processes: what
needs one (SIGKILL, SIGSTOP, restarts, the CLI). Failover's logic without them runs on the
simulated network in tests/node/test_failover_sim.py.

Each test runs a name server, a master and its slave of group broker-t on 127.0.0.1 with
small segments, a 1 s registration period and a 2 s haHousekeepingInterval.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from cluster.client import Admin, Producer, Status
from tests.cluster.helpers import (
    broker_conf,
    call,
    cli,
    slave_of,
    start_namesrv,
    wait_for,
    wait_slave_connected,
)
from tests.node.nodeproc import NodeProcess, Nodes, store_root
from wire.client import Connection, NoPermission, TidemqError
from wire.protocol import (
    GetByMsgId,
    GetStatus,
    Promote,
    Pull,
    Send,
    SendReply,
    StatusReply,
    SubGroupList,
    TopicCreate,
)

pytestmark = pytest.mark.slow

GROUP = "broker-t"
TOPIC = "Failover"
STORED = (Status.PUT_OK, Status.SLAVE_NOT_AVAILABLE, Status.FLUSH_SLAVE_TIMEOUT)
FAST = {"registerNameServerPeriod": 1000, "haHousekeepingInterval": 2000, "haSendHeartbeatInterval": 500}


def group(nodes: Nodes, tmp_path: Path, role: str) -> tuple[NodeProcess, NodeProcess, NodeProcess, Path, Path]:
    ns = start_namesrv(nodes, tmp_path)
    m_conf = broker_conf(tmp_path, "m", GROUP, ns.address, role=role, **FAST)
    s_conf = slave_of(tmp_path, m_conf, "s", ns.address, **FAST)
    return ns, nodes.start(m_conf), nodes.start(s_conf), m_conf, s_conf


async def status(address: str) -> StatusReply:
    return await call(address, GetStatus())


async def send_all(ns: str, n: int, prefix: str) -> list[Any]:
    """`n` sends with keys prefix0, prefix1, ...; each result gets its key as `.key`."""
    out = []
    async with Producer(namesrv=ns, send_timeout=5.0, route_ttl_s=0.5) as producer:
        for i in range(n):
            r = await producer.send(TOPIC, f"{prefix}{i}", keys=[f"{prefix}{i}"])
            out.append(_Sent.of(f"{prefix}{i}", r))
    return out


@attrs.frozen
class _Sent:
    key: str
    status: Status
    msg_id: str
    address: str
    commitlog_offset: int

    @classmethod
    def of(cls, key: str, r: Any) -> _Sent:
        return cls(key, r.status, r.msg_id, r.address, r.commitlog_offset)


async def key_of(address: str, msg_id: str) -> list[str]:
    return (await call(address, GetByMsgId(msg_id=msg_id))).message.keys


async def serves_as(address: str, broker_id: int, role: str) -> StatusReply | None:
    s = await status(address)
    return s if s.broker_id == broker_id and s.role == role else None


async def test_sync_promotion_loses_no_put_ok_and_the_old_master_rejoins(tmp_path, nodes) -> None:
    ns, m, s, m_conf, _ = group(nodes, tmp_path, "SYNC_MASTER")
    await call(m.address, TopicCreate(topic=TOPIC))
    await wait_slave_connected(m.address)
    sent = await send_all(ns.address, 20, "a")
    acked = [r for r in sent if r.status is Status.PUT_OK]
    assert len(acked) == 20
    assert (await status(m.address)).epoch == 1

    m.kill()
    async with Admin(namesrv=ns.address) as admin:
        result = await admin.promote(GROUP, 1)
    assert result["epoch"] == 2 and result["role"] == "SYNC_MASTER" and result["address"] == s.address
    promoted = await status(s.address)
    assert (promoted.broker_id, promoted.role) == (0, "SYNC_MASTER")
    assert promoted.epochs == [[1, 0], [2, result["start_offset"]]]
    assert promoted.role_file is not None and promoted.role_file["brokerId"] == 0
    with pytest.raises(TidemqError, match="is already a master of broker-t"):
        await call(s.address, Promote())
    for r in acked:  # every PUT_OK is on the new master
        assert await key_of(s.address, r.msg_id) == [r.key]

    after = await send_all(ns.address, 3, "b")  # routed to the new master
    assert all(r.address == s.address and r.status in STORED for r in after)

    back = nodes.start(m_conf)  # starts as master, learns epoch 2, fences, rejoins as slave
    rejoined = await wait_for(lambda: serves_as(back.address, 1, "SLAVE"), what="old master rejoined as slave")
    assert rejoined.fenced is None
    caught_up = await wait_for(
        lambda: _caught_up(back.address, s.address), what="old master replicating from the new one")
    assert caught_up.epochs == promoted.epochs
    assert caught_up.last_truncation is None  # a SYNC group's old master had nothing unreplicated
    final = await send_all(ns.address, 2, "c")
    assert all(r.status is Status.PUT_OK for r in final)  # the rejoined slave acks
    # log lines name the role served now (issue 21.5)
    assert f"[{GROUP}/1 SLAVE]" in s.stderr() and f"[{GROUP}/0 SYNC_MASTER]" in s.stderr()
    assert f"[{GROUP}/1 SLAVE]" in back.stderr().split("role change to brokerId 1 (SLAVE)")[-1]


async def _caught_up(slave: str, master: str) -> StatusReply | None:
    s, m = await status(slave), await status(master)
    return s if s.ha.connected and s.max_phy_offset == m.max_phy_offset else None


async def test_async_promotion_truncates_the_unreplicated_tail_and_reports_it(tmp_path, nodes) -> None:
    ns, m, s, m_conf, s_conf = group(nodes, tmp_path, "ASYNC_MASTER")
    await call(m.address, TopicCreate(topic=TOPIC))
    # a consumer group's settings (updateSubGroup) reach the slave and outlive the promotion
    stored = cli("admin", "updateSubGroup", "--namesrv", ns.address, "-g", "SG", "--consumeEnable", "false",
                 "--retryMaxTimes", "2", "--json")
    assert json.loads(stored.stdout) == {"broker_name": GROUP, "group": "SG", "consume_enable": False,
                                         "retry_max_times": 2}, stored.stderr
    await wait_slave_connected(m.address)
    first = await send_all(ns.address, 10, "a")
    await wait_for(lambda: _caught_up(s.address, m.address), what="slave caught up")

    async def synced() -> bool:  # the slave's topic/offset sync runs every 10 s
        return bool((await call(s.address, SubGroupList())).groups)
    await wait_for(synced, timeout=15, what="the slave's copy of the group settings")
    s.kill()  # the slave is gone: what the master takes now is not replicated
    tail = await send_all(ns.address, 7, "t")
    assert all(r.status is Status.PUT_OK for r in tail)
    m_end = (await status(m.address)).max_phy_offset
    m.kill()

    s = nodes.start(s_conf)
    async with Admin(namesrv=ns.address) as admin:
        await wait_for(lambda: _registered(admin, 1), what="the slave registered")
    unknown = cli("admin", "promote", "--namesrv", ns.address, GROUP, "7")
    assert unknown.returncode == 1 and b"no broker broker-t/7 is registered" in unknown.stderr
    assert cli("admin", "promote", "--namesrv", ns.address, GROUP, "0").returncode == 2
    promoted = cli("admin", "promote", "--namesrv", ns.address, GROUP, "1", "--role", "ASYNC_MASTER", "--json")
    assert promoted.returncode == 0, promoted.stderr
    result = json.loads(promoted.stdout)
    start = result["start_offset"]
    lost = [r for r in first + tail if r.commitlog_offset >= start]
    assert [r.msg_id for r in lost] == [r.msg_id for r in tail]  # exactly the unreplicated part
    assert (await status(s.address)).role == "ASYNC_MASTER"
    with pytest.raises(NoPermission, match="consumer group 'SG' may not consume"):
        await call(s.address, Pull(topic=TOPIC, queue_id=0, offset=0, group="SG"))

    back = nodes.start(m_conf)
    rejoined = await wait_for(lambda: _truncated(back.address), timeout=30, what="old master truncated")
    report = rejoined.last_truncation
    assert report is not None and (report.from_offset, report.to_offset) == (start, m_end)
    assert report.message_count == len(tail)
    assert report.msg_ids == [r.msg_id for r in tail]
    assert "dropped CommitLog" in back.stderr() and tail[0].msg_id in back.stderr()
    shown = cli("status", "--namesrv", ns.address)
    assert f"dropped CommitLog [{start}, {m_end})" in shown.stdout.decode() and tail[-1].msg_id in shown.stdout.decode()
    await wait_for(lambda: _caught_up(back.address, s.address), what="rejoined slave caught up")
    for r in tail:  # the dropped messages are gone everywhere, the others are kept
        with pytest.raises(Exception, match="no message"):
            await call(back.address, GetByMsgId(msg_id=r.msg_id))
    for r in first:
        assert await key_of(back.address, r.msg_id) == [r.key]


async def _registered(admin: Admin, broker_id: int) -> bool:
    return any(b.broker_name == GROUP and b.broker_id == broker_id for b in await admin.cluster_info())


async def _truncated(address: str) -> StatusReply | None:
    s = await status(address)
    return s if s.role == "SLAVE" and s.last_truncation else None


async def test_a_paused_master_is_fenced_after_the_promotion(tmp_path, nodes) -> None:
    ns, m, s, _, _ = group(nodes, tmp_path, "SYNC_MASTER")
    await call(m.address, TopicCreate(topic=TOPIC))
    await wait_slave_connected(m.address)
    assert all(r.status is Status.PUT_OK for r in await send_all(ns.address, 5, "a"))

    m.proc.send_signal(signal.SIGSTOP)
    try:
        # the slave drops the silent master after haHousekeepingInterval
        await wait_for(lambda: _disconnected(s.address), what="slave dropped the paused master")
        async with Admin(namesrv=ns.address) as admin:
            result = await admin.promote(GROUP, 1)
    finally:
        m.proc.send_signal(signal.SIGCONT)
    with pytest.raises(Exception, match=f"epoch {result['epoch']}") as refused:
        await call(m.address, Send(topic=TOPIC, body=b"after the promotion"))
    assert getattr(refused.value, "status", None) == "SERVICE_NOT_AVAILABLE"
    await wait_for(lambda: serves_as(m.address, 1, "SLAVE"), what="paused master rejoined as slave")


async def test_a_paused_async_master_reports_and_truncates_what_it_took_before_it_fenced(tmp_path, nodes) -> None:
    ns, m, s, _, s_conf = group(nodes, tmp_path, "ASYNC_MASTER")
    await call(m.address, TopicCreate(topic=TOPIC))
    await wait_slave_connected(m.address)
    first = await send_all(ns.address, 5, "a")
    await wait_for(lambda: _caught_up(s.address, m.address), what="slave caught up")
    s.kill()  # what the master takes now stays its own
    tail = await send_all(ns.address, 6, "t")
    assert all(r.status is Status.PUT_OK for r in tail)
    m_end = (await status(m.address)).max_phy_offset
    m.proc.send_signal(signal.SIGSTOP)
    try:
        s = nodes.start(s_conf)  # its HA connection to the paused master reads nothing and is dropped
        await wait_for(lambda: _disconnected(s.address), what="slave dropped the paused master")
        async with Admin(namesrv=ns.address) as admin:
            result = await admin.promote(GROUP, 1, role="ASYNC_MASTER")
    finally:
        m.proc.send_signal(signal.SIGCONT)
    start = result["start_offset"]
    assert [r.msg_id for r in first + tail if r.commitlog_offset >= start] == [r.msg_id for r in tail]
    rejoined = await wait_for(lambda: _truncated(m.address), timeout=30, what="paused master truncated")
    report = rejoined.last_truncation
    assert report is not None and (report.from_offset, report.to_offset) == (start, m_end)
    assert report.msg_ids == [r.msg_id for r in tail] and report.message_count == len(tail)
    await wait_for(lambda: _caught_up(m.address, s.address), what="the old master replicates from the new one")
    for r in first:
        assert await key_of(m.address, r.msg_id) == [r.key]


async def _logged(node: NodeProcess, text: str) -> bool:
    return text in node.stderr()


async def _disconnected(address: str) -> bool:
    return not (await status(address)).ha.connected


async def test_the_other_slaves_follow_the_promoted_master(tmp_path, nodes) -> None:
    ns, m, s, m_conf, _ = group(nodes, tmp_path, "ASYNC_MASTER")
    s2 = nodes.start(slave_of(tmp_path, m_conf, "s2", ns.address, brokerId=2, **FAST))
    await call(m.address, TopicCreate(topic=TOPIC))
    await send_all(ns.address, 5, "a")
    await wait_for(lambda: _caught_up(s2.address, m.address), what="second slave caught up")
    m.kill()
    async with Admin(namesrv=ns.address) as admin:
        await admin.promote(GROUP, 1, role="ASYNC_MASTER")
    after = await send_all(ns.address, 5, "b")
    assert all(r.address == s.address for r in after)
    followed = await wait_for(lambda: _caught_up(s2.address, s.address), what="second slave follows the new master")
    assert followed.ha.client.master_address == (await status(s.address)).ha_address
    assert followed.epochs == (await status(s.address)).epochs


def test_a_damaged_role_or_epoch_file_stops_the_node_with_a_clear_error(tmp_path) -> None:
    conf = broker_conf(tmp_path, "m", GROUP, None, role="ASYNC_MASTER")
    root = store_root(conf)
    root.mkdir(parents=True)
    (root / "failoverRole.json").write_text('{"brokerId": 0, "brokerRole": "LEADER"}')
    out = cli("node", "start", "-c", str(conf))
    assert out.returncode == 2 and b"failoverRole.json: cannot read the failover role" in out.stderr
    (root / "failoverRole.json").unlink()
    (root / "epochFileCheckpoint").write_text("2\n0\n1-0\n")  # says 2 entries, holds 1
    out = cli("node", "start", "-c", str(conf))
    assert out.returncode == 2 and b"expected 2 entries, found 1; no usable backup" in out.stderr
    assert (root / "epochFileCheckpoint").read_text() == "2\n0\n1-0\n"  # left as it was


async def test_a_short_pause_across_a_promotion_answers_no_put_ok(tmp_path, nodes) -> None:
    """Issue 21.1: an ASYNC_MASTER paused (SIGSTOP) for less than every interval of its
    config while its slave is promoted answers none of the sends its sockets buffered
    meanwhile with PUT_OK: each is refused (SERVICE_NOT_AVAILABLE, not stored) or
    INDETERMINATE (stored, then cut on rejoin). Every PUT_OK is on the new master."""
    ns = start_namesrv(nodes, tmp_path)
    m_conf = broker_conf(tmp_path, "m", GROUP, ns.address, role="ASYNC_MASTER")  # default intervals
    s_conf = slave_of(tmp_path, m_conf, "s", ns.address)
    m, s = nodes.start(m_conf), nodes.start(s_conf)
    await call(m.address, TopicCreate(topic=TOPIC))
    await wait_slave_connected(m.address)
    before = await send_all(ns.address, 10, "a")
    assert all(r.status is Status.PUT_OK for r in before)
    await wait_for(lambda: _caught_up(s.address, m.address), what="slave caught up")

    answers: list[SendReply | TidemqError] = []
    async with trio.open_nursery() as nursery:
        conns = [await Connection.open(m.address, nursery, request_timeout=30) for _ in range(4)]

        async def send(conn: Connection, key: str) -> None:
            try:
                answers.append(await conn.call(Send(topic=TOPIC, body=key.encode(), keys=[key])))
            except TidemqError as e:
                answers.append(e)

        m.proc.send_signal(signal.SIGSTOP)
        try:
            for i in range(12):  # written into the paused master's sockets
                nursery.start_soon(send, conns[i % len(conns)], f"p{i}")
            await trio.testing.wait_all_tasks_blocked()
            async with Admin(namesrv=ns.address) as admin:
                result = await admin.promote(GROUP, 1, role="ASYNC_MASTER")
        finally:
            m.proc.send_signal(signal.SIGCONT)
    assert len(answers) == 12
    put_ok = [a for a in answers if isinstance(a, SendReply) and a.status is Status.PUT_OK]
    assert not put_ok, f"the replaced master acknowledged {len(put_ok)} send(s) after epoch {result['epoch']}"
    assert all(isinstance(a, TidemqError) and a.status in ("SERVICE_NOT_AVAILABLE", "INDETERMINATE")
               for a in answers), answers
    assert "stalled for" in m.stderr()  # the pause was seen as one
    print("answers:", sorted(a.status for a in answers))
    rejoined = await wait_for(lambda: serves_as(m.address, 1, "SLAVE"), timeout=30, what="old master rejoined")
    truncated = set(rejoined.last_truncation.msg_ids if rejoined.last_truncation else [])
    indeterminate = [a for a in answers if a.status == "INDETERMINATE"]
    assert all("stored, but not acknowledged" in a.message for a in indeterminate)
    await wait_for(lambda: _caught_up(m.address, s.address), what="the old master replicates from the new one")
    for r in before:  # every PUT_OK survived the promotion
        assert await key_of(s.address, r.msg_id) == [r.key]
        assert r.msg_id not in truncated


async def test_the_rejoin_survives_repeated_kills_of_the_new_master(tmp_path, nodes) -> None:
    """Issue 21.2: while the fenced old master shuts down and rejoins, the new master is
    SIGKILLed and restarted again and again; every connection the rejoining node holds to
    it (topic sync, HA, epoch asks) is lost mid-flight. The node stays up and ends as a
    slave replicating from the new master."""
    ns, m, s, _, s_conf = group(nodes, tmp_path, "ASYNC_MASTER")
    await call(m.address, TopicCreate(topic=TOPIC))
    await wait_slave_connected(m.address)
    async with Admin(namesrv=ns.address) as admin:
        await admin.promote(GROUP, 1)  # the old master never stopped: it fences and rejoins
    for _ in range(4):
        s.kill()
        s = nodes.start(s_conf)  # as master of the new epoch (its role file says so)
        assert m.proc.poll() is None, m.stderr()[-3000:]
    rejoined = await wait_for(lambda: _slave(m.address), timeout=30, what="the old master rejoined")
    assert rejoined.fenced is None and (rejoined.broker_id or 0) > 0
    await wait_for(lambda: _caught_up(m.address, s.address), timeout=30, what="replicating from the new master")
    assert m.proc.poll() is None
    assert "ExceptionGroup" not in m.stderr() and "Traceback" not in m.stderr()


async def _slave(address: str) -> StatusReply | None:
    s = await status(address)
    return s if s.role == "SLAVE" else None
