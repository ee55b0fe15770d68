"""Consumer groups over remoting (node/remoting/clients.py): heartbeats join the same member
table the CBOR ops use, members hear of each change (NOTIFY_CONSUMER_IDS_CHANGED), queue
locks are exclusive, and send-back shares the retry and DLQ topics. The lean client shows
what the broker answers; each test uses its own group."""

from __future__ import annotations

import json
import subprocess
import time
import warnings
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.remoting.client import RemotingClient
from tests.remoting.cpp import run_cpp, start_cpp
from tests.waiting import wait_until
from wire.client import NotFound, connect
from wire.protocol import (
    ConsumerHeartbeat,
    ConsumerList,
    ConsumerUnregister,
    ProducerList,
    Pull,
    Send,
    TopicCreate,
    TopicStatus,
)
from wire.protocol.namesrv import GetRoute
from wire.remoting.codes import RequestCode, ResponseCode
from wire.remoting.command import RemotingCommand

TOPIC = "RmqGroups"


def cpp_heartbeat(client_id: str, group: str, topics: list[str]) -> bytes:
    """A C++ 1.2.3 HeartbeatData: ordinals, subVersion a string, codeSet atoi'd, no producers."""
    subs = [{"topic": t, "subString": "*", "tagsSet": [], "codeSet": [0], "subVersion": "1700000000000"}
            for t in topics]
    return json.dumps({"clientID": client_id, "consumerDataSet": [
        {"groupName": group, "consumeType": 1, "messageModel": 1, "consumeFromWhere": 0,
         "subscriptionDataSet": subs}]}).encode()


def java_heartbeat(client_id: str, group: str, topics: list[str], producer: str) -> bytes:
    """A Java HeartbeatData: enum names, subVersion a number, an inner producer group."""
    subs = [{"classFilterMode": False, "topic": t, "subString": "*", "tagsSet": [], "codeSet": [],
             "subVersion": 1700000000000, "expressionType": "TAG"} for t in topics]
    return json.dumps({"clientID": client_id, "producerDataSet": [{"groupName": producer},
                                                                  {"groupName": "CLIENT_INNER_PRODUCER"}],
                       "consumerDataSet": [{"groupName": group, "consumeType": "CONSUME_PASSIVELY",
                                            "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                                            "unitMode": False, "subscriptionDataSet": subs}]}).encode()


def heartbeat(c: RemotingClient, client_id: str, group: str) -> float:
    """A C++ consumer's heartbeat; how long its answer took."""
    start = time.monotonic()
    r = c.call(RequestCode.HEART_BEAT, body=cpp_heartbeat(client_id, group, [TOPIC, f"%RETRY%{group}"]))
    assert (r.code, r.body) == (ResponseCode.SUCCESS, b""), r.remark
    return time.monotonic() - start


def member_list(c: RemotingClient, group: str) -> RemotingCommand:
    return c.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})


def members(c: RemotingClient, group: str) -> list[str]:
    r = member_list(c, group)
    if r.code == ResponseCode.SYSTEM_ERROR:
        return []
    assert r.code == ResponseCode.SUCCESS, r.remark
    return sorted(json.loads(r.body)["consumerIdList"])


def notices(c: RemotingClient, group: str) -> int:
    """How many NOTIFY_CONSUMER_IDS_CHANGED for `group` the client has read so far."""
    return sum(1 for p in c.pushed if p.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
               and (p.ext_fields or {}).get("consumerGroup") == group)


async def cbor(address: str, request: Any) -> Any:
    async with connect(address) as conn:
        return await conn.call(request)


@pytest.fixture(scope="module")
def topic(rmq_cluster) -> str:
    trio.run(cbor, rmq_cluster.master, TopicCreate(topic=TOPIC, read_queue_nums=4, write_queue_nums=4))
    return TOPIC


def test_heartbeat_registers_a_member_both_protocols_list(rmq_cluster, topic) -> None:
    group = "g-hb"
    with RemotingClient(rmq_cluster.master) as c:
        r = member_list(c, group)
        assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        # the first one creates the retry topic; C++ closes the connection after 3 s
        assert heartbeat(c, "10.0.0.1@hb", group) < 3.0
        assert members(c, group) == ["10.0.0.1@hb"]
        listed = trio.run(cbor, rmq_cluster.master, ConsumerList(group=group))
        assert listed.members == ["10.0.0.1@hb"]
        assert sorted(listed.details[0]["topics"]) == sorted([TOPIC, f"%RETRY%{group}"])
        assert listed.details[0]["heartbeat_interval_ms"] == 30_000
        # the heartbeat made the group's retry topic, as the CBOR heartbeat does
        status = trio.run(cbor, rmq_cluster.master, TopicStatus(topic=f"%RETRY%{group}"))
        assert [q["queue_id"] for q in status.queues] == [0]


def test_java_heartbeat_with_enum_names_and_producers(rmq_cluster, topic) -> None:
    group = "g-java"
    with RemotingClient(rmq_cluster.master) as c:
        r = c.call(RequestCode.HEART_BEAT, body=java_heartbeat("10.0.0.9@java", group, [TOPIC], "pg-java"))
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert members(c, group) == ["10.0.0.9@java"]
        producers = trio.run(cbor, rmq_cluster.master, ProducerList(group="pg-java")).producers
        assert [p["client_id"] for p in producers] == ["10.0.0.9@java"]
        # a C++ producer's heartbeat: no consumerDataSet at all (empty arrays are left out)
        r = c.call(RequestCode.HEART_BEAT, body=b'{"clientID":"10.0.0.8@cpp","producerDataSet":[{"groupName":"pg-c"}]}')
        assert r.code == ResponseCode.SUCCESS, r.remark
        r = c.call(RequestCode.HEART_BEAT, body=b'{"clientID":"x"')
        assert r.code == ResponseCode.SYSTEM_ERROR


def test_a_join_notifies_the_members_and_a_close_removes_and_notifies(rmq_cluster, topic) -> None:
    group = "g-notify"
    with RemotingClient(rmq_cluster.master) as a:
        heartbeat(a, "10.0.0.1@a", group)
        with RemotingClient(rmq_cluster.master) as b:
            seen = notices(a, group)
            heartbeat(b, "10.0.0.2@b", group)
            # the notice went out before b's answer, so it precedes a's next answer
            assert members(a, group) == ["10.0.0.1@a", "10.0.0.2@b"]
            assert notices(a, group) > seen
            seen = notices(a, group)
            heartbeat(b, "10.0.0.2@b", group)  # a refresh is no change
            assert members(a, group) == ["10.0.0.1@a", "10.0.0.2@b"]
            assert notices(a, group) == seen
        trio.run(lambda: wait_until(lambda: members(a, group) == ["10.0.0.1@a"], what="b's member gone"))
        assert notices(a, group) > seen


def test_unregister_removes_and_notifies_the_rest(rmq_cluster, topic) -> None:
    group = "g-unreg"
    with RemotingClient(rmq_cluster.master) as a, RemotingClient(rmq_cluster.master) as b:
        heartbeat(a, "10.0.0.1@a", group)
        heartbeat(b, "10.0.0.2@b", group)
        members(a, group)
        seen = notices(a, group)
        r = b.call(RequestCode.UNREGISTER_CLIENT, {"clientID": "10.0.0.2@b", "producerGroup": "",
                                                   "consumerGroup": group})
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert members(a, group) == ["10.0.0.1@a"]
        assert notices(a, group) == seen + 1


def test_a_group_mixes_cbor_and_remoting_members(rmq_cluster, topic) -> None:
    group = "g-mixed"
    with RemotingClient(rmq_cluster.master) as c:
        heartbeat(c, "10.0.0.1@rmq", group)
        members(c, group)
        seen = notices(c, group)

        async def cbor_member() -> None:
            async with connect(rmq_cluster.master) as conn:
                await conn.call(ConsumerHeartbeat(group=group, client_id="tidemq-1", topics=[TOPIC]))
                assert members(c, group) == ["10.0.0.1@rmq", "tidemq-1"]
                assert notices(c, group) == seen + 1  # a CBOR join notifies the remoting member
                await conn.call(ConsumerUnregister(group=group, client_id="tidemq-1"))
                assert members(c, group) == ["10.0.0.1@rmq"]
                assert notices(c, group) == seen + 2

        trio.run(cbor_member)


def lock_body(group: str, client_id: str, queue_ids: list[int]) -> bytes:
    return json.dumps({"consumerGroup": group, "clientId": client_id, "mqSet": [
        {"topic": TOPIC, "brokerName": "broker-r", "queueId": q} for q in queue_ids]}).encode()


def locked(c: RemotingClient, group: str, client_id: str, queue_ids: list[int]) -> list[int]:
    r = c.call(RequestCode.LOCK_BATCH_MQ, body=lock_body(group, client_id, queue_ids))
    assert r.code == ResponseCode.SUCCESS, r.remark
    return sorted(mq["queueId"] for mq in json.loads(r.body)["lockOKMQSet"])


def test_queue_locks_are_exclusive_between_members(rmq_cluster, topic) -> None:
    group = "g-lock"
    with RemotingClient(rmq_cluster.master) as a, RemotingClient(rmq_cluster.master) as b:
        heartbeat(a, "10.0.0.1@a", group)
        heartbeat(b, "10.0.0.2@b", group)
        assert locked(a, group, "10.0.0.1@a", [0, 1]) == [0, 1]
        assert locked(b, group, "10.0.0.2@b", [0, 1, 2]) == [2]
        assert locked(a, group, "10.0.0.1@a", [0, 1]) == [0, 1]  # a re-lock keeps them
        r = a.call(RequestCode.UNLOCK_BATCH_MQ, body=lock_body(group, "10.0.0.1@a", [0]))
        assert (r.code, r.body) == (ResponseCode.SUCCESS, b"")
        assert locked(b, group, "10.0.0.2@b", [0, 1]) == [0]
        held = trio.run(cbor, rmq_cluster.master, ConsumerList(group=group)).locks
        assert held == {f"{TOPIC}:0": "10.0.0.2@b", f"{TOPIC}:1": "10.0.0.1@a", f"{TOPIC}:2": "10.0.0.2@b"}


def test_send_back_goes_to_the_retry_topic_then_the_dlq(rmq_cluster, topic) -> None:
    group = "g-back"

    async def run() -> None:
        async with connect(rmq_cluster.master) as conn:
            sent = await conn.call(Send(topic=TOPIC, body=b"fails", queue_id=0, keys=["back-1"]))
            with RemotingClient(rmq_cluster.master) as c:
                heartbeat(c, "10.0.0.1@back", group)
                r = c.call(RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": str(sent.commitlog_offset),
                                                                 "group": group, "delayLevel": "1"})
                assert r.code == ResponseCode.SUCCESS, r.remark

                async def retried() -> Any:
                    got = await conn.call(Pull(topic=f"%RETRY%{group}", queue_id=0, offset=0))
                    return got.messages

                (copy,) = await wait_until(retried, what="the copy on the retry topic (delay level 1: 1 s)")
                assert (copy.body, copy.reconsume_times) == (b"fails", 1)
                assert copy.properties["RETRY_TOPIC"] == TOPIC
                # the copy fails again, at the client's maximum of 1: the DLQ, at once
                r = c.call(RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": str(copy.commitlog_offset),
                                                                 "group": group, "delayLevel": "0",
                                                                 "maxReconsumeTimes": "1",
                                                                 "originMsgId": sent.msg_id})
                assert r.code == ResponseCode.SUCCESS, r.remark
                dead = (await conn.call(Pull(topic=f"%DLQ%{group}", queue_id=0, offset=0))).messages
                assert [(m.body, m.reconsume_times) for m in dead] == [(b"fails", 2)]
                assert dead[0].properties["ORIGIN_MESSAGE_ID"] == sent.msg_id
                # nothing at an offset where no message starts
                r = c.call(RequestCode.CONSUMER_SEND_MSG_BACK, {"offset": str(2**40), "group": group,
                                                                 "delayLevel": "0"})
                assert r.code == ResponseCode.SYSTEM_ERROR

    trio.run(run)


# ---------------------------------------------------------------- the C++ push consumer


class PushConsumers:
    """C++ push consumers in child processes, each writing what it is given to a file."""

    def __init__(self, directory: Path, namesrv: str) -> None:
        self.directory, self.namesrv = directory, namesrv
        self.stop_file = directory / "stop"
        self.children: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, group: str, topic: str, instance: str, *extra: str) -> Path:
        out = self.directory / f"{instance}.jsonl"
        out.touch()
        child = start_cpp("push", "--namesrv", self.namesrv, "--group", group, "--topic", topic,
                          "--instance", instance, "--out", str(out), "--stop-file", str(self.stop_file), *extra)
        self.children.append((child, out))
        return out

    @staticmethod
    def received(out: Path) -> list[dict[str, Any]]:
        return [json.loads(line) for line in out.read_text().splitlines() if line.endswith("}")]

    def stop(self) -> None:
        """Shut them all down. client-cpp 1.2.3 can hang in shutdown when a peer's
        unregister notice makes it rebalance just then (it waits forever on a pull event of
        a queue it takes while stopping: "has unfinished pullMsgEvent"); such a child is
        killed with a warning, since what it received is already in its file."""
        self.stop_file.touch()
        for child, out in self.children:
            try:
                _, err = child.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                child.kill()
                child.communicate()
                warnings.warn(f"C++ push consumer {out.stem} hung in shutdown; killed", stacklevel=1)
                continue
            assert child.returncode == 0, err.decode(errors="replace")


@pytest.fixture
def push_consumers(rmq_cluster, tmp_path) -> Iterator[PushConsumers]:
    consumers = PushConsumers(tmp_path, rmq_cluster.namesrv)
    try:
        yield consumers
    finally:
        consumers.stop()


async def group_members(address: str, group: str) -> list[dict[str, Any]]:
    return list((await cbor(address, ConsumerList(group=group))).details)


async def wait_members(address: str, group: str, n: int) -> list[dict[str, Any]]:
    async def joined() -> list[dict[str, Any]] | None:
        details = await group_members(address, group)
        return details if len(details) == n else None

    found: list[dict[str, Any]] = await wait_until(joined, timeout=30, what=f"{n} member(s) in group {group}")
    return found


def test_cpp_push_consumers_join_the_group_with_their_retry_subscription(rmq_cluster, topic, push_consumers) -> None:
    group = "g-cpp-join"
    push_consumers.start(group, TOPIC, "cpp-a")
    push_consumers.start(group, TOPIC, "cpp-b")
    details = trio.run(wait_members, rmq_cluster.master, group, 2)
    assert all(sorted(d["topics"]) == sorted([TOPIC, f"%RETRY%{group}"]) for d in details), details
    assert all(d["heartbeat_interval_ms"] == 30_000 for d in details)
    with RemotingClient(rmq_cluster.master) as c:
        assert members(c, group) == sorted(d["client_id"] for d in details)


def create_topic(address: str, name: str, namesrv: str) -> None:
    """Create the topic on the master and wait until the name server routes it: the C++
    producer asks for the route at once, and a registration still on its way answered "No
    route info of this topic" (a full run failed so)."""
    trio.run(cbor, address, TopicCreate(topic=name, read_queue_nums=4, write_queue_nums=4))

    async def routed() -> bool:
        try:
            await cbor(namesrv, GetRoute(topic=name))
        except NotFound:
            return False
        return True

    trio.run(partial(wait_until, routed, what=f"the name server routing {name}"))


async def send_cbor(address: str, topic: str, bodies: list[str]) -> None:
    async with connect(address) as conn:
        for i, body in enumerate(bodies):
            await conn.call(Send(topic=topic, body=body.encode(), queue_id=i % 4))


async def wait_received(outs: list[Path], bodies: set[str], what: str, timeout: float = 60) -> list[dict[str, Any]]:
    """Every record the consumers wrote, once their bodies cover `bodies`."""
    def covered() -> list[dict[str, Any]] | None:
        records = [r for out in outs for r in PushConsumers.received(out)]
        return records if bodies <= {r["body"] for r in records} else None

    found: list[dict[str, Any]] = await wait_until(covered, timeout=timeout, interval=0.1, what=what)
    return found


def test_a_cpp_push_consumer_receives_what_cpp_and_tidemq_producers_sent(rmq_cluster, push_consumers) -> None:
    topic, group = "RmqPushAll", "g-push-all"
    create_topic(rmq_cluster.master, topic, rmq_cluster.namesrv)
    cpp_sent = run_cpp("produce", "--namesrv", rmq_cluster.namesrv, "--topic", topic, "--count", "6",
                       "--prefix", "cpp", "--group", "pg-push-all")
    assert [s["status"] for s in cpp_sent["sent"]] == [0] * 6
    tide = [f"tide-{i}" for i in range(6)]
    trio.run(send_cbor, rmq_cluster.master, topic, tide)
    out = push_consumers.start(group, topic, "all")
    expected = {s["body"] for s in cpp_sent["sent"]} | set(tide)
    records = trio.run(wait_received, [out], expected, "all 12 messages at the C++ push consumer")
    assert sorted(r["body"] for r in records) == sorted(expected)  # each once
    assert {r["topic"] for r in records} == {topic}


def test_two_cpp_push_consumers_split_the_queues(rmq_cluster, push_consumers) -> None:
    topic, group = "RmqPushSplit", "g-push-split"
    create_topic(rmq_cluster.master, topic, rmq_cluster.namesrv)
    outs = [push_consumers.start(group, topic, name) for name in ("split-a", "split-b")]
    trio.run(wait_members, rmq_cluster.master, group, 2)
    first = [f"first-{i}" for i in range(8)]
    trio.run(send_cbor, rmq_cluster.master, topic, first)
    trio.run(wait_received, outs, set(first), "the first batch, between the two consumers")
    # steady state: each consumer owns its queues, so a second batch is split without duplicates
    seen = [len(PushConsumers.received(out)) for out in outs]
    second = [f"second-{i}" for i in range(8)]
    trio.run(send_cbor, rmq_cluster.master, topic, second)
    trio.run(wait_received, outs, set(second), "the second batch, between the two consumers")
    shares = [[r for r in PushConsumers.received(out)[n:] if r["body"].startswith("second-")]
              for out, n in zip(outs, seen, strict=True)]
    assert sorted(r["body"] for share in shares for r in share) == sorted(second)  # no duplicates
    assert all(shares), shares  # each got a share
    queues = [{r["queue_id"] for r in share} for share in shares]
    assert not queues[0] & queues[1] and queues[0] | queues[1] == {0, 1, 2, 3}, queues


def test_a_failed_message_comes_back_from_the_retry_topic(rmq_cluster, push_consumers) -> None:
    topic, group = "RmqPushRetry", "g-push-retry"
    create_topic(rmq_cluster.master, topic, rmq_cluster.namesrv)
    trio.run(send_cbor, rmq_cluster.master, topic, ["fine", "bad"])
    out = push_consumers.start(group, topic, "retry", "--fail-body", "bad", "--fail-times", "1")

    async def retried() -> list[dict[str, Any]] | None:
        records = PushConsumers.received(out)
        return records if any(r["body"] == "bad" and r["reconsume_times"] >= 1 for r in records) else None

    # sent back with delay level 0: the broker delays the first retry by level 3 (10 s)
    records = trio.run(lambda: wait_until(retried, timeout=60, interval=0.2, what="'bad' again, from the retry topic"))
    bad = [r for r in records if r["body"] == "bad"]
    assert [(r["reconsume_times"], r["failed"]) for r in bad] == [(0, True), (1, False)]
    assert bad[1]["topic"] == topic  # the client restores the topic from RETRY_TOPIC
    assert [r["body"] for r in records].count("fine") == 1


def test_an_orderly_cpp_push_consumer_locks_its_queues_and_reads_them_in_order(rmq_cluster, push_consumers) -> None:
    topic, group = "RmqPushOrderly", "g-push-orderly"
    create_topic(rmq_cluster.master, topic, rmq_cluster.namesrv)
    bodies = [f"o-{i}" for i in range(12)]
    trio.run(send_cbor, rmq_cluster.master, topic, bodies)  # queue i % 4, in order
    out = push_consumers.start(group, topic, "orderly", "--orderly")
    records = trio.run(wait_received, [out], set(bodies), "all messages at the orderly consumer")
    for q in range(4):
        assert [r["body"] for r in records if r["queue_id"] == q] == bodies[q::4]
    # it holds its queues' locks here (LOCK_BATCH_MQ, re-locked every 20 s)
    locks = trio.run(cbor, rmq_cluster.master, ConsumerList(group=group)).locks
    assert {k for k in locks if k.startswith(topic)} == {f"{topic}:{q}" for q in range(4)}, locks
