"""The consumer-group ops on a real node: bad input answered with BAD_REQUEST, queue
locks, send-back refused by a slave, and a damaged delayOffset.json or messageDelayLevel
stopping the node with the file / key named (and the file left as it was)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cluster.push_consumer import Consumer
from node.client import BadRequest, ServiceUnavailable
from tests.cluster.helpers import call
from tests.node.nodeproc import REPO, Nodes, master_conf, slave_conf, store_root


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
        await call(addr, "consumer_heartbeat", group="g", client_id="has space")
    with pytest.raises(BadRequest, match="topics"):
        await call(addr, "consumer_heartbeat", group="g", client_id="c1", topics=["bad topic"])
    with pytest.raises(BadRequest, match="queue_ids"):
        await call(addr, "consumer_lock", group="g", client_id="c1", topic="T", queue_ids=[-1])
    # not a member yet: no lock
    assert (await call(addr, "consumer_lock", group="g", client_id="c1", topic="T", queue_ids=[0]))["locked"] == []
    hb = await call(addr, "consumer_heartbeat", group="g", client_id="c2", topics=["T"], heartbeat_interval_ms=500)
    assert hb["members"] == ["c2"]
    hb = await call(addr, "consumer_heartbeat", group="g", client_id="c1", topics=["T"], heartbeat_interval_ms=500)
    assert hb["members"] == ["c1", "c2"]
    assert "%RETRY%g" in {t["topic"] for t in (await call(addr, "topic_list"))["topics"]}
    got = await call(addr, "consumer_lock", group="g", client_id="c1", topic="T", queue_ids=[0, 1])
    assert got["locked"] == [0, 1]
    got = await call(addr, "consumer_lock", group="g", client_id="c2", topic="T", queue_ids=[1, 2])
    assert got["locked"] == [2], "queue 1 is c1's"
    await call(addr, "consumer_unlock", group="g", client_id="c2", topic="T", queue_ids=[1])  # not c2's
    assert (await call(addr, "consumer_list", group="g"))["locks"] == {"T:0": "c1", "T:1": "c1", "T:2": "c2"}
    left = await call(addr, "consumer_unregister", group="g", client_id="c1")
    assert left["removed"] and left["members"] == ["c2"]
    got = await call(addr, "consumer_lock", group="g", client_id="c2", topic="T", queue_ids=[0, 1])
    assert got["locked"] == [0, 1], "c1's locks went with it"
    assert (await call(addr, "consumer_unregister", group="g", client_id="c1"))["removed"] is False

    sconf = slave_conf(tmp_path, mconf, "s")
    slave = nodes.start(sconf)
    with pytest.raises(ServiceUnavailable, match="SLAVE"):
        await call(slave.address, "consumer_send_back", group="g", commitlog_offset=0)
    hb = await call(slave.address, "consumer_heartbeat", group="g", client_id="c3")
    assert hb["members"] == ["c3"], "a slave keeps its own member table"


@pytest.mark.slow
async def test_a_damaged_delay_offset_file_or_level_string_stops_the_node_naming_it(tmp_path, nodes):
    conf = master_conf(tmp_path, "m", "ASYNC_MASTER")
    node = nodes.start(conf)
    await call(node.address, "status")
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
    assert (await call(node.address, "status"))["schedule"]["offsets"] == {"1": 0, "3": 0}
    assert node.stop() == 0

    bad = master_conf(tmp_path, "b", "ASYNC_MASTER", messageDelayLevel="1s 5x")
    done = subprocess.run([sys.executable, "-m", "tidemq", "node", "start", "-c", str(bad)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "messageDelayLevel entry '5x'" in done.stderr, done.stderr


