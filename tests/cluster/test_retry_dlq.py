"""Consume retry and DLQ with a real node: a failing handler's message comes back through
`%RETRY%<group>` after the delay ladder with reconsume_times + 1 and its original topic,
and gives up to `%DLQ%<group>` after max_reconsume_times retries (16 by default)."""

from __future__ import annotations

import pytest

from cluster.client import Consumer, Producer
from tests.cluster.helpers import broker_conf, call, start_namesrv, wait_for
from tests.cluster.test_consumer_group import setup_cluster
from tests.node.nodeproc import Nodes
from wire.client import NoPermission, NotFound, connect
from wire.protocol import ConsumerHeartbeat, ConsumerSendBack, Pull, Send, TopicCreate

LEVELS = " ".join(["1s"] * 18)


@pytest.fixture
def nodes():
    n = Nodes()
    yield n
    n.cleanup()


@pytest.mark.slow
async def test_send_back_ladder_reaches_the_dlq_after_16_retries(tmp_path, nodes):
    ns = start_namesrv(nodes, tmp_path)
    node = nodes.start(broker_conf(tmp_path, "m", "broker-a", ns.address, messageDelayLevel=LEVELS))
    addr = node.address
    await call(addr, TopicCreate(topic="T", read_queue_nums=1, write_queue_nums=1))
    sent = await call(addr, Send(topic="T", body=b"b", tags="t", keys=["k"], properties={"UNIQ_KEY": "U"}))
    async with connect(addr) as conn:  # a member's connection: its heartbeat lives while it is open
        with pytest.raises(NotFound):
            await conn.call(ConsumerSendBack(group="g", commitlog_offset=10**9))
        with pytest.raises(NoPermission, match="which group 'g' does not consume"):  # no member of g reads T yet
            await conn.call(ConsumerSendBack(group="g", commitlog_offset=sent.commitlog_offset))
        await conn.call(ConsumerHeartbeat(group="g", client_id="c1", topics=["T"]))
        offset = sent.commitlog_offset
        for n in range(16):  # each send-back stores the next try; its record is what fails next
            back = await conn.call(ConsumerSendBack(group="g", commitlog_offset=offset))
            assert (back.topic, back.reconsume_times, back.delay_level) == ("%RETRY%g", n + 1, 3 + n)
            offset = back.commitlog_offset
        dead = await conn.call(ConsumerSendBack(group="g", commitlog_offset=offset))
    assert dead.topic == "%DLQ%g" and dead.reconsume_times == 17
    [m] = (await call(addr, Pull(topic="%DLQ%g", queue_id=0, offset=0))).messages
    assert (m.body, m.tags, m.keys) == (b"b", "t", ["k"])
    assert m.properties["RETRY_TOPIC"] == "T" and m.properties["ORIGIN_MESSAGE_ID"] == "U"
    assert "DELAY" not in m.properties


@pytest.mark.slow
async def test_handler_failures_retry_later_then_go_to_the_dlq(tmp_path, nodes):
    ns, master = await setup_cluster(tmp_path, nodes, "R", 1, messageDelayLevel=LEVELS)
    calls: dict[bytes, list[tuple[str, int]]] = {}

    def handle(msg):
        calls.setdefault(msg.body, []).append((msg.topic, msg.reconsume_times))
        if msg.body == b"flaky" and msg.reconsume_times < 2:
            raise RuntimeError("not yet")
        if msg.body == b"poison":
            return False

    opts = dict(namesrv=ns.address, heartbeat_interval_s=0.3, rebalance_interval_s=1.0, poll_ms=200,
                max_reconsume_times=2)
    async with Producer(namesrv=ns.address) as producer, Consumer("rg", "R", handle, **opts) as consumer:
        for body in (b"ok", b"flaky", b"poison"):
            await producer.send("R", body)

        async def settled():
            return len(calls.get(b"flaky", ())) == 3 and len(calls.get(b"poison", ())) == 3
        await wait_for(settled, timeout=40, what="flaky consumed on its 3rd try, poison tried 3 times")
        assert calls[b"ok"] == [("R", 0)]
        assert calls[b"flaky"] == [("R", 0), ("R", 1), ("R", 2)], "retries show the original topic"
        assert calls[b"poison"] == [("R", 0), ("R", 1), ("R", 2)]

        async def in_dlq():
            r = await call(master.address, Pull(topic="%DLQ%rg", queue_id=0, offset=0))
            return r.messages
        [dead] = await wait_for(in_dlq, what="poison in the DLQ")
        assert dead.body == b"poison" and dead.properties["RETRY_TOPIC"] == "R"
        assert consumer.stats.dead == 1 and consumer.stats.retried == 4
        assert sum(len(v) for v in calls.values()) == 7
