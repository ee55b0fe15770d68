"""Broadcasting over remoting: a heartbeat whose messageModel is BROADCASTING (Java's name,
C++'s ordinal 0) lists the member with its group but leaves it out of
GET_CONSUMER_LIST_BY_GROUP, so clustering members never allocate it queues; RocketMQ's C++
PushConsumer in BROADCASTING gets every message at each member, keeps its offsets in its
own file and commits nothing to the broker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from tests.remoting.client import RemotingClient
from tests.remoting.test_groups import (
    cbor,
    cpp_heartbeat,
    create_topic,
    members,
    notices,
    push_consumers,  # noqa: F401 -- the fixture
    send_cbor,
    wait_members,
    wait_received,
)
from wire.client import NotFound
from wire.protocol import ConsumerList, FetchOffset
from wire.remoting.codes import RequestCode, ResponseCode

TOPIC = "RmqBroadcast"


def broadcasting_heartbeat(client_id: str, group: str, model: str | int) -> bytes:
    body = json.loads(cpp_heartbeat(client_id, group, [TOPIC]))
    body["consumerDataSet"][0]["messageModel"] = model
    return json.dumps(body).encode()


def test_a_broadcasting_member_is_listed_but_takes_no_share(rmq_cluster) -> None:
    group = "g-bcast-hb"
    create_topic(rmq_cluster.master, TOPIC, rmq_cluster.namesrv)
    with RemotingClient(rmq_cluster.master) as c:
        for client_id, model in (("10.0.0.1@java-b", "BROADCASTING"), ("10.0.0.2@cpp-b", 0), ("10.0.0.3@clu", 1)):
            r = c.call(RequestCode.HEART_BEAT, body=broadcasting_heartbeat(client_id, group, model))
            assert r.code == ResponseCode.SUCCESS, r.remark
        assert members(c, group) == ["10.0.0.3@clu"], "only the clustering member shares the queues"
        details = trio.run(cbor, rmq_cluster.master, ConsumerList(group=group)).details
        assert {d["client_id"]: d["message_model"] for d in details} == {
            "10.0.0.1@java-b": "BROADCASTING", "10.0.0.2@cpp-b": "BROADCASTING", "10.0.0.3@clu": "CLUSTERING"}
        r = c.call(RequestCode.HEART_BEAT, body=broadcasting_heartbeat("10.0.0.4@odd", group, "SOMETIMES"))
        assert r.code == ResponseCode.SYSTEM_ERROR and "messageModel" in (r.remark or ""), r.remark
        only = "g-bcast-only"
        r = c.call(RequestCode.HEART_BEAT, body=broadcasting_heartbeat("10.0.0.5@b", only, 0))
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert members(c, only) == [], "a broadcasting-only group has no member to allocate to"


def test_a_broadcasting_join_or_leave_moves_nothing(rmq_cluster) -> None:
    group = "g-bcast-quiet"
    create_topic(rmq_cluster.master, TOPIC, rmq_cluster.namesrv)
    with RemotingClient(rmq_cluster.master) as a, RemotingClient(rmq_cluster.master) as b:
        r = a.call(RequestCode.HEART_BEAT, body=broadcasting_heartbeat("10.0.0.1@clu", group, 1))
        assert r.code == ResponseCode.SUCCESS, r.remark
        members(a, group)
        seen = notices(a, group)
        r = b.call(RequestCode.HEART_BEAT, body=broadcasting_heartbeat("10.0.0.2@bc", group, 0))
        assert r.code == ResponseCode.SUCCESS, r.remark
        r = b.call(RequestCode.UNREGISTER_CLIENT, {"clientID": "10.0.0.2@bc", "producerGroup": "",
                                                   "consumerGroup": group})
        assert r.code == ResponseCode.SUCCESS, r.remark
        # a notice goes out before the answer that caused it, so it would precede a's next answer
        assert members(a, group) == ["10.0.0.1@clu"]
        assert notices(a, group) == seen, "clustering members were not told to rebalance"
        r = b.call(RequestCode.HEART_BEAT, body=broadcasting_heartbeat("10.0.0.2@bc", group, 1))  # now clustering
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert members(a, group) == ["10.0.0.1@clu", "10.0.0.2@bc"]
        assert notices(a, group) == seen + 1, "a clustering join is a change"


def test_cpp_broadcasting_push_consumers_each_get_every_message(rmq_cluster, push_consumers,  # noqa: F811
                                                                tmp_path: Path) -> None:
    topic, group, clustering = "RmqBcastPush", "g-bcast-push", "g-bcast-clu"
    create_topic(rmq_cluster.master, topic, rmq_cluster.namesrv)
    home = tmp_path / "home"
    home.mkdir()
    outs = [push_consumers.start(group, topic, name, "--broadcast", "--home", str(home)) for name in ("bc-a", "bc-b")]
    clu = [push_consumers.start(clustering, topic, name) for name in ("cl-a", "cl-b")]
    details = trio.run(wait_members, rmq_cluster.master, group, 2)
    assert {d["message_model"] for d in details} == {"BROADCASTING"}
    trio.run(wait_members, rmq_cluster.master, clustering, 2)
    bodies = [f"b-{i}" for i in range(12)]
    trio.run(send_cbor, rmq_cluster.master, topic, bodies)
    for out in outs:
        records = trio.run(wait_received, [out], set(bodies), f"every message at {out.stem}")
        assert sorted(r["body"] for r in records) == sorted(bodies), "each broadcasting member: each message once"
        assert {r["queue_id"] for r in records} == {0, 1, 2, 3}
    shared = trio.run(wait_received, clu, set(bodies), "every message across the clustering group")
    assert sorted(r["body"] for r in shared) == sorted(bodies), "the clustering group on the topic: once in all"
    push_consumers.stop()  # a clean shutdown persists the C++ client's offsets file
    # client-cpp 1.2.3 names it offsets.Json (a boost archive of MessageQueue JSON and offsets)
    files = sorted(p.parent.parent.name for p in home.glob(f".rocketmq_offsets/*/{group}/offsets.[Jj]son"))
    assert len(files) == 2 and all(f.endswith(("@bc-a", "@bc-b")) for f in files), sorted(map(str, home.rglob("*")))
    for queue_id in range(4):  # nothing committed on the broker for the broadcasting group
        with pytest.raises(NotFound):
            trio.run(cbor, rmq_cluster.master, FetchOffset(group=group, topic=topic, queue_id=queue_id))

