"""The consumer-group ops on a real node: bad input answered with BAD_REQUEST, queue
locks, send-back refused by a slave, and a damaged delayOffset.json or messageDelayLevel
stopping the node with the file / key named (and the file left as it was)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import trio
import trio.testing

from cluster.client import Consumer
from tests.cluster.helpers import call
from tests.node.nodeproc import REPO, Nodes, master_conf, slave_conf, store_root
from wire.client import BadRequest, ServiceUnavailable, connect
from wire.protocol import (
    ConsumerHeartbeat,
    ConsumerList,
    ConsumerLock,
    ConsumerSendBack,
    ConsumerUnlock,
    ConsumerUnregister,
    ConsumerWatch,
    GetStatus,
    MembersReply,
    TopicList,
)


@pytest.fixture
def nodes():
    n = Nodes()
    yield n
    n.cleanup()


def test_consumer_refuses_bad_arguments():
    with pytest.raises(ValueError, match="max_messages"):
        Consumer("g", "T", print, namesrv="127.0.0.1:1", max_messages=0)
    with pytest.raises(ValueError, match="intervals"):
        Consumer("g", "T", print, namesrv="127.0.0.1:1", heartbeat_interval_s=0)
    with pytest.raises(ValueError, match="max_reconsume_times"):
        Consumer("g", "T", print, namesrv="127.0.0.1:1", max_reconsume_times=-1)


@pytest.mark.slow
async def test_heartbeats_locks_and_bad_requests(tmp_path, nodes):
    mconf = master_conf(tmp_path, "m", "ASYNC_MASTER")
    master = nodes.start(mconf)
    addr = master.address
    with pytest.raises(BadRequest, match="client_id"):
        await call(addr, ConsumerHeartbeat(group="g", client_id="has space"))
    with pytest.raises(BadRequest, match="topics"):
        await call(addr, ConsumerHeartbeat(group="g", client_id="c1", topics=["bad topic"]))
    with pytest.raises(BadRequest, match="queue_ids"):
        await call(addr, ConsumerLock(group="g", client_id="c1", topic="T", queue_ids=[-1]))
    async with connect(addr) as c1, connect(addr) as c2:  # a member lives as long as its connection
        # not a member yet: no lock
        assert (await c1.call(ConsumerLock(group="g", client_id="c1", topic="T", queue_ids=[0]))).locked == []
        hb = await c2.call(ConsumerHeartbeat(group="g", client_id="c2", topics=["T"], heartbeat_interval_ms=500))
        assert hb.members == ["c2"]
        hb = await c1.call(ConsumerHeartbeat(group="g", client_id="c1", topics=["T"], heartbeat_interval_ms=500))
        assert hb.members == ["c1", "c2"]
        assert "%RETRY%g" in {t["topic"] for t in (await call(addr, TopicList())).topics}
        got = await c1.call(ConsumerLock(group="g", client_id="c1", topic="T", queue_ids=[0, 1]))
        assert got.locked == [0, 1]
        got = await c2.call(ConsumerLock(group="g", client_id="c2", topic="T", queue_ids=[1, 2]))
        assert got.locked == [2], "queue 1 is c1's"
        await c2.call(ConsumerUnlock(group="g", client_id="c2", topic="T", queue_ids=[1]))  # not c2's
        assert (await call(addr, ConsumerList(group="g"))).locks == {"T:0": "c1", "T:1": "c1", "T:2": "c2"}
        left = await c1.call(ConsumerUnregister(group="g", client_id="c1"))
        assert left.removed and left.members == ["c2"]
        got = await c2.call(ConsumerLock(group="g", client_id="c2", topic="T", queue_ids=[0, 1]))
        assert got.locked == [0, 1], "c1's locks went with it"
        assert (await c1.call(ConsumerUnregister(group="g", client_id="c1"))).removed is False

    sconf = slave_conf(tmp_path, mconf, "s")
    slave = nodes.start(sconf)
    with pytest.raises(ServiceUnavailable, match="SLAVE"):
        await call(slave.address, ConsumerSendBack(group="g", commitlog_offset=0))
    hb = await call(slave.address, ConsumerHeartbeat(group="g", client_id="c3"))
    assert hb.members == ["c3"], "a slave keeps its own member table"


@pytest.mark.slow
async def test_consumer_watch_answers_at_once_on_a_join_a_closed_connection_and_a_freed_lock(tmp_path, nodes):
    """Issue 24: members hear of a change of their group at once (a parked `consumer_watch`)."""
    addr = nodes.start(master_conf(tmp_path, "m", "ASYNC_MASTER")).address
    async with connect(addr) as watcher, connect(addr) as c1:
        await c1.call(ConsumerHeartbeat(group="w", client_id="c1", topics=["T"]))
        v1 = (await watcher.call(ConsumerWatch(group="w", since=-1, timeout_ms=0))).version
        idle = await watcher.call(ConsumerWatch(group="w", since=v1, timeout_ms=100))
        assert idle.version == v1 and idle.members == ["c1"]  # nothing changed: the timeout answers

        async def changed(since: int) -> MembersReply:
            with trio.fail_after(5):  # far below every interval: a notice, not a poll
                return await watcher.call(ConsumerWatch(group="w", since=since, timeout_ms=30_000))

        async with connect(addr) as c2:
            async with trio.open_nursery() as nursery:
                got: list[MembersReply] = []
                nursery.start_soon(lambda: _append(got, changed(v1)))
                await trio.testing.wait_all_tasks_blocked()
                await c2.call(ConsumerHeartbeat(group="w", client_id="c2", topics=["T"]))
            assert got[0].members == ["c1", "c2"]
            v2 = got[0].version
            await c2.call(ConsumerLock(group="w", client_id="c2", topic="T", queue_ids=[3]))
            v3 = (await watcher.call(ConsumerWatch(group="w", since=-1, timeout_ms=0))).version
            assert v3 == v2  # taking a free lock changes nothing another member waits for
            await c2.call(ConsumerUnlock(group="w", client_id="c2", topic="T", queue_ids=[3]))
            assert (await changed(v3)).version > v3  # a freed lock: a waiting member may take it
            v4 = (await watcher.call(ConsumerWatch(group="w", since=-1, timeout_ms=0))).version
        left = await changed(v4)  # c2's connection closed: it left the group
        assert left.members == ["c1"]
        assert (await call(addr, ConsumerList(group="w"))).members == ["c1"]


async def _append(into: list, awaitable) -> None:
    into.append(await awaitable)


@pytest.mark.slow
async def test_a_damaged_delay_offset_file_or_level_string_stops_the_node_naming_it(tmp_path, nodes):
    conf = master_conf(tmp_path, "m", "ASYNC_MASTER")
    node = nodes.start(conf)
    await call(node.address, GetStatus())
    assert node.stop() == 0
    path = store_root(conf) / "config" / "delayOffset.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"offsetTable": {"1": "seven"}}')
    done = subprocess.run([sys.executable, "-m", "tidemq", "node", "start", "-c", str(conf)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    assert str(path) in done.stderr and "seven" in done.stderr
    assert path.read_text() == '{"offsetTable": {"1": "seven"}}', "the file is left for the operator"
    # RocketMQ's own file (fastjson: integer keys bare) is read
    path.write_text('{\n\t"offsetTable":{1:0,3:0},"dataVersion":{"counter":2,"timestamp":1}\n}')
    node = nodes.start(conf)
    assert (await call(node.address, GetStatus())).schedule["offsets"] == {"1": 0, "3": 0}
    assert node.stop() == 0

    bad = master_conf(tmp_path, "b", "ASYNC_MASTER", messageDelayLevel="1s 5x")
    done = subprocess.run([sys.executable, "-m", "tidemq", "node", "start", "-c", str(bad)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "messageDelayLevel entry '5x'" in done.stderr, done.stderr


