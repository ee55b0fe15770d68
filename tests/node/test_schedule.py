"""Delay levels with a real node: a DELAY message is stored on SCHEDULE_TOPIC_XXXX queue
level-1 with REAL_TOPIC/REAL_QID (its unit's tagsCode = due time), reaches its topic when
due, and a restart (clean or SIGKILL) neither loses nor repeats a clean-restart delivery."""

from __future__ import annotations

import json
import struct

import pytest

from store.schedule import DelayError, parse_delay_levels
from tests.cluster.helpers import call, wait_for
from tests.node.nodeproc import Nodes, master_conf, slave_conf, store_root
from wire.client import PutFailed
from wire.protocol import GetStatus, Pull, Send, Status, TopicCreate, WireMessage

LEVELS = "1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s 17s 18s"


def test_delay_level_strings():
    assert parse_delay_levels("1s 5s 1m 2h 1d") == (1000, 5000, 60_000, 7_200_000, 86_400_000)
    assert len(parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h")) == 18
    for bad in ("", "1x", "0s", "s", "5"):
        with pytest.raises(DelayError):
            parse_delay_levels(bad)


@pytest.fixture
def nodes():
    n = Nodes()
    yield n
    n.cleanup()


async def topic_messages(address: str, topic: str, queue_id: int = 0) -> list[WireMessage]:
    r = await call(address, Pull(topic=topic, queue_id=queue_id, offset=0, max_msgs=100))
    return r.messages


@pytest.mark.slow
async def test_delayed_message_is_scheduled_then_delivered_and_survives_restarts(tmp_path, nodes):
    conf = master_conf(tmp_path, "m", "ASYNC_MASTER", messageDelayLevel=LEVELS, autoCreateTopicEnable=True)
    node = nodes.start(conf)
    addr = node.address
    await call(addr, TopicCreate(topic="D", read_queue_nums=2, write_queue_nums=2))

    with pytest.raises(PutFailed, match="DELAY must be a delay level"):
        await call(addr, Send(topic="D", body=b"x", properties={"DELAY": "soon"}))

    sent = await call(addr, Send(topic="D", queue_id=1, body=b"d1", keys=["k1"], tags="t",
                                 properties={"DELAY": "1", "UNIQ_KEY": "U1"}))
    assert sent.status is Status.PUT_OK
    assert await topic_messages(addr, "D", 1) == []
    [scheduled] = await topic_messages(addr, "SCHEDULE_TOPIC_XXXX", 0)
    assert scheduled.properties["REAL_TOPIC"] == "D" and scheduled.properties["REAL_QID"] == "1"
    assert scheduled.properties["DELAY"] == "1"
    # its ConsumeQueue unit holds the due time (store time + 1 s) as tagsCode
    cq = store_root(conf) / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "0" / ("0" * 20)
    _, _, code = struct.unpack(">qiq", cq.read_bytes()[:20])
    assert code == scheduled.store_timestamp + 1000

    async def delivered():
        return await topic_messages(addr, "D", 1)
    [real] = await wait_for(delivered, timeout=10, what="the delayed message delivered")
    assert (real.body, real.tags, real.keys) == (b"d1", "t", ["k1"])
    assert real.properties["UNIQ_KEY"] == "U1" and "DELAY" not in real.properties
    assert real.store_timestamp - scheduled.store_timestamp >= 1000

    # a level beyond the ladder is capped at the last level; level 3 (3 s) is pending at a
    # clean stop: delivered once after the restart, d1 not again
    await call(addr, Send(topic="D", queue_id=0, body=b"d3", properties={"DELAY": "3"}))
    assert node.stop() == 0
    offsets = json.loads((store_root(conf) / "config" / "delayOffset.json").read_text())
    assert offsets["offsetTable"]["1"] == 1 and offsets["offsetTable"].get("3", 0) == 0
    assert offsets["dataVersion"]["counter"] >= 1
    node = nodes.start(conf)
    addr = node.address

    async def d3():
        return await topic_messages(addr, "D", 0)
    [m3] = await wait_for(d3, timeout=15, what="d3 delivered after the restart")
    assert m3.body == b"d3"
    assert [m.body for m in await topic_messages(addr, "D", 1)] == [b"d1"], "d1 not delivered twice"
    status = await call(addr, GetStatus())
    assert status.schedule["offsets"]["3"] == 1

    def d3_persisted():
        table = json.loads((store_root(conf) / "config" / "delayOffset.json").read_text())["offsetTable"]
        return table.get("3") == 1

    # delivery is at least once: a crash before delayOffset.json records d3's delivery
    # would deliver it again (as RocketMQ's would); wait for the write before the kill
    await wait_for(d3_persisted, timeout=10, what="level 3's delivery persisted")

    # SIGKILL with a pending one: recovery keeps it and delivers it
    await call(addr, Send(topic="D", queue_id=0, body=b"d4", properties={"DELAY": "2"}))
    node.kill()
    node = nodes.start(conf)
    addr = node.address

    async def d4():
        got = [m.body for m in await topic_messages(addr, "D", 0)]
        return b"d4" in got and got
    got = await wait_for(d4, timeout=15, what="d4 delivered after a crash")
    assert got.count(b"d4") == 1 and got.count(b"d3") == 1


@pytest.mark.slow
async def test_a_slave_copies_the_masters_delay_offsets(tmp_path, nodes):
    mconf = master_conf(tmp_path, "m", "ASYNC_MASTER", messageDelayLevel=LEVELS)
    master = nodes.start(mconf)
    await call(master.address, TopicCreate(topic="D", read_queue_nums=1, write_queue_nums=1))
    await call(master.address, Send(topic="D", body=b"d", properties={"DELAY": "1"}))

    async def delivered():
        return (await call(master.address, GetStatus())).schedule["delivered"] == 1
    await wait_for(delivered, timeout=10, what="the master delivered the delayed message")
    sconf = slave_conf(tmp_path, mconf, "s", masterAddr=master.address)
    nodes.start(sconf)
    path = store_root(sconf) / "config" / "delayOffset.json"

    async def copied():
        return path.exists() and json.loads(path.read_text())["offsetTable"] == {"1": 1}
    await wait_for(copied, timeout=15, what="the slave's delayOffset.json matches the master's")
