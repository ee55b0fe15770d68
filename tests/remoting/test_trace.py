"""Message trace over remoting. RocketMQ's C++ client 1.2.3 (PyPI rocketmq 0.4.4) has no
message trace (its library holds no trace code, only the TRACE_ON property name), so it
cannot write traces itself. What a RocketMQ client with trace on does write is an ordinary
message to RMQ_SYS_TRACE_TOPIC, keyed by msgId and keys: the C++ producer sends such a
record (a Pub, in the format built here), a tidemq Consumer with trace on takes the C++
message, and queryMsgTraceById tells the message's life from both, by the C++ msgId."""

from __future__ import annotations

import time

import pytest

from cluster.client import Admin, Consumer
from tests.cluster.helpers import broker_conf, start_namesrv, wait_for
from tests.node.nodeproc import Nodes
from tests.remoting.cpp import run_cpp
from wire.protocol.trace import TRACE_TOPIC, MessageType, PubTrace, encode_trace

TOPIC = "RmqTraced"


@pytest.fixture
def nodes():
    n = Nodes()
    yield n
    n.cleanup()


@pytest.mark.slow
async def test_a_cpp_message_traced_by_its_pub_and_our_consumer(tmp_path, nodes):
    """A name server and one master of its own (the module cluster's slave is not needed)."""
    ns = start_namesrv(nodes, tmp_path).address
    master = nodes.start(broker_conf(tmp_path, "m", "broker-a", ns)).address
    async with Admin(namesrv=ns) as admin:
        async def registered() -> bool:  # the master registers after it started: under load, a moment later
            return any(b.is_master for b in await admin.cluster_info())
        await wait_for(registered, what="the master registered")
        for topic in (TOPIC, TRACE_TOPIC):
            await admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
            await wait_for(lambda t=topic: admin.route(t, refresh=True), what=f"{topic}'s route")
        [sent] = run_cpp("produce", "--namesrv", ns, "--topic", TOPIC, "--group", "cpp-trace-pg",
                         "--prefix", "tr")["sent"]
        uniq = sent["msg_id"]
        [stored] = await wait_for(lambda: admin.query_by_unique_key(TOPIC, uniq), what="the message indexed")
        pub = PubTrace(timestamp=int(time.time() * 1000), region_id="DefaultRegion", group="cpp-trace-pg",
                       topic=TOPIC, msg_id=uniq, tags="TagA", keys="tr-k0", store_host=master,
                       body_length=len(b"tr-0"), cost_ms=3, msg_type=MessageType.NORMAL,
                       offset_msg_id=stored.msg_id, success=True)
        run_cpp("raw", "--namesrv", ns, "--topic", TRACE_TOPIC, "--group", "_INNER_TRACE_PRODUCER-cpp",
                "--body", encode_trace(pub), "--keys", f"{uniq} tr-k0")

        bodies: list[bytes] = []
        async with Consumer("trace-cg", TOPIC, lambda m: bodies.append(m.body), namesrv=ns, enable_msg_trace=True,
                            heartbeat_interval_s=0.3, rebalance_interval_s=1.0, poll_ms=200):
            await wait_for(lambda: bodies, timeout=30, what="the C++ message handled")
        assert bodies == [b"tr-0"]

        async def whole():
            life = await admin.query_msg_trace(uniq)
            return life if life.sent and life.consumed else None
        life = await wait_for(whole, what="the Pub and our consumer's trace indexed")
    [got] = life.sent
    assert got == type(got)(group="cpp-trace-pg", client_host=got.client_host, timestamp=pub.timestamp, cost_ms=3,
                            success=True, topic=TOPIC, tags="TagA", keys="tr-k0", store_host=master,
                            offset_msg_id=stored.msg_id, msg_type="NORMAL")
    assert life.stored is not None and life.stored.broker_name == "broker-a" and life.stored.topic == TOPIC
    [consumed] = life.consumed
    assert (consumed.group, consumed.retry_times, consumed.status) == ("trace-cg", 0, "success")
    assert not life.dead and not life.retries
