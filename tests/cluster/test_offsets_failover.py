"""Consumer offsets across a promotion, with real node processes: a commit a SYNC_MASTER
answered OK is on the slave it travelled to over the HA stream (node/offset_stream.py), so
the promoted slave has it at once, with no 10 s sync window; a commit no in-sync slave
confirmed is answered FLUSH_SLAVE_TIMEOUT (SLAVE_NOT_AVAILABLE while the slave is gone),
never OK."""

from __future__ import annotations

import signal

import pytest
import trio

from cluster.client import Admin
from tests.cluster.helpers import (
    broker_conf,
    call,
    slave_of,
    start_namesrv,
    wait_for,
    wait_slave_connected,
)
from tests.cluster.test_failover import FAST, GROUP, TOPIC, send_all, serves_as, status
from wire.client import connect
from wire.protocol import CommitOffset, OffsetList, TopicCreate

pytestmark = pytest.mark.slow


def _commits(round_: int) -> list[CommitOffset]:
    """Commits of three groups on four queues, their offsets different in each round."""
    return [CommitOffset(group=f"g{g}", topic=TOPIC, queue_id=q, offset=100 * round_ + 10 * g + q)
            for g in range(3) for q in range(4)]


async def _commit_all(address: str, commits: list[CommitOffset]) -> list[str]:
    """Each commit's answer status, in order, on one connection."""
    async with connect(address, connect_timeout=3.0, request_timeout=20.0) as conn:
        return [(await conn.request(c))["status"] for c in commits]


async def _table(address: str) -> dict[tuple[str, str, int], int]:
    entries = (await call(address, OffsetList())).offsets
    return {(e["group"], e["topic"], e["queue_id"]): e["offset"] for e in entries}


async def test_offsets_committed_on_a_sync_master_are_on_the_promoted_slave_at_once(tmp_path, nodes) -> None:
    ns = start_namesrv(nodes, tmp_path)
    m_conf = broker_conf(tmp_path, "m", GROUP, ns.address, role="SYNC_MASTER", **FAST)
    m = nodes.start(m_conf)
    s = nodes.start(slave_of(tmp_path, m_conf, "s", ns.address, **FAST))
    await call(m.address, TopicCreate(topic=TOPIC))
    await wait_slave_connected(m.address)
    # a replicated record: the slave then takes the HA extension (offset > 0), and the
    # master streams it the offset table and every commit after
    assert all(r.status.value == "PUT_OK" for r in await send_all(ns.address, 3, "a"))
    for round_ in range(1, 4):  # later rounds overwrite the earlier offsets
        assert await _commit_all(m.address, _commits(round_)) == ["OK"] * 12
    expected = {(c.group, c.topic, c.queue_id): c.offset for c in _commits(3)}
    assert await _table(m.address) == expected

    m.kill()  # at once: no 10 s slave sync round can have run since the commits
    with trio.fail_after(30):
        async with Admin(namesrv=ns.address) as admin:
            await admin.promote(GROUP, 1)
    assert await serves_as(s.address, 0, "SYNC_MASTER") is not None
    assert await _table(s.address) == expected  # no wait: exactly what was answered OK


async def test_a_commit_no_in_sync_slave_confirms_is_not_answered_ok(tmp_path, nodes) -> None:
    """A stopped slave stays in the in-sync set until haMaxTimeSlaveNotCatchup: a commit
    waits for it for slaveTimeout and is answered FLUSH_SLAVE_TIMEOUT (on the master only);
    once the slave runs again it acks and commits are OK again."""
    ns = start_namesrv(nodes, tmp_path)
    m_conf = broker_conf(tmp_path, "m", GROUP, ns.address, role="SYNC_MASTER", slaveTimeout=1000, **FAST)
    m = nodes.start(m_conf)
    s = nodes.start(slave_of(tmp_path, m_conf, "s", ns.address, **FAST))
    await call(m.address, TopicCreate(topic=TOPIC))
    await wait_slave_connected(m.address)
    assert all(r.status.value == "PUT_OK" for r in await send_all(ns.address, 2, "a"))
    assert await _commit_all(m.address, _commits(1)[:1]) == ["OK"]

    s.proc.send_signal(signal.SIGSTOP)
    try:
        assert await _commit_all(m.address, _commits(2)[:1]) == ["FLUSH_SLAVE_TIMEOUT"]
        assert (await _table(m.address))[("g0", TOPIC, 0)] == 200  # kept on the master
    finally:
        s.proc.send_signal(signal.SIGCONT)
    assert await _commit_all(m.address, _commits(3)[:1]) == ["OK"]
    assert (await status(m.address)).role == "SYNC_MASTER"


async def test_a_commit_while_the_slave_is_gone_is_answered_slave_not_available(tmp_path, nodes) -> None:
    """A SYNC_MASTER whose slave disconnected (killed, or stopping its HA client to be
    promoted) answers a commit SLAVE_NOT_AVAILABLE at once, as it answers a put: kept on the
    master, never OK (the simulation found the slave being promoted missing commits answered
    OK while it was away); OK again once the slave is back."""
    ns = start_namesrv(nodes, tmp_path)
    m_conf = broker_conf(tmp_path, "m", GROUP, ns.address, role="SYNC_MASTER", **FAST)
    m = nodes.start(m_conf)
    s_conf = slave_of(tmp_path, m_conf, "s", ns.address, **FAST)
    s = nodes.start(s_conf)
    await call(m.address, TopicCreate(topic=TOPIC))
    await wait_slave_connected(m.address)
    assert all(r.status.value == "PUT_OK" for r in await send_all(ns.address, 2, "a"))
    assert await _commit_all(m.address, _commits(1)[:1]) == ["OK"]

    s.kill()

    async def no_slave() -> bool:
        return not (await status(m.address)).ha.slaves

    await wait_for(no_slave, what="the master seeing its slave gone")
    with trio.fail_after(2):  # at once, not after slaveTimeout
        assert await _commit_all(m.address, _commits(2)[:1]) == ["SLAVE_NOT_AVAILABLE"]
    assert (await _table(m.address))[("g0", TOPIC, 0)] == 200  # kept on the master

    nodes.start(s_conf)
    await wait_slave_connected(m.address)

    async def commit_ok() -> bool:
        return await _commit_all(m.address, _commits(3)[:1]) == ["OK"]

    await wait_for(commit_ok, what="a commit answered OK with the slave back")
