"""The remoting read path: PULL_MESSAGE (its status rows, long polling, offset commits),
the offset queries and the lookups, first as a lean client sees the wire, then with the
real C++ PullConsumer, across protocols both ways.

The first test expires the oldest CommitLog segments of the shared cluster's master; it
runs first, so the segments it ages hold only its own topic."""

from __future__ import annotations

import contextlib
import functools
import os
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from cluster.client.consumer import PullConsumer
from cluster.client.producer import Producer
from store.layout import commitlog_dir, find_segment, list_segments
from store.message import StoredMessage
from store.record_codec import RecordKind, decode_record
from tests.remoting.client import RemotingClient
from tests.remoting.cpp import run_cpp
from tests.waiting import wait_until
from wire.client import connect
from wire.protocol import DeleteExpiredFiles, GetStatus, Send, SubGroupUpdate, TopicCreate
from wire.remoting.codes import RequestCode, ResponseCode
from wire.remoting.command import RemotingCommand

FLAG_COMMIT_OFFSET, FLAG_SUSPEND, FLAG_SUBSCRIPTION = 0x1, 0x2, 0x4
HEADER_KEYS = {"suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset"}


def _pull_fields(topic: str, queue_id: int, offset: int, *, group: str = "rmq-pull", sys_flag: int = FLAG_SUBSCRIPTION,
                 subscription: str = "*", suspend_ms: int = 0, commit: int = 0, max_msgs: int = 32) -> dict[str, str]:
    return {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), "queueOffset": str(offset),
            "maxMsgNums": str(max_msgs), "sysFlag": str(sys_flag), "commitOffset": str(commit),
            "suspendTimeoutMillis": str(suspend_ms), "subscription": subscription, "subVersion": "0"}


def _records(body: bytes) -> list[StoredMessage]:
    """A pull body as RocketMQ clients read it: records back to back."""
    out, pos = [], 0
    while pos < len(body):
        decoded = decode_record(body, pos)
        assert decoded.kind is RecordKind.MESSAGE and decoded.message is not None, decoded.error
        out.append(decoded.message)
        pos += decoded.size
    return out


def _commitlog_bytes(root: Path, offset: int, size: int) -> bytes:
    segments = list_segments(commitlog_dir(root))
    i = find_segment(segments, offset)
    assert i is not None
    start, path = segments[i]
    with open(path, "rb") as f:
        f.seek(offset - start)
        return f.read(size)


def _master_root(rmq_cluster: Any) -> Path:
    return rmq_cluster.directory / "store" / "m"


async def _call(address: str, request: Any) -> Any:
    async with connect(address, connect_timeout=3.0, request_timeout=10.0) as conn:
        return await conn.call(request)


async def _send(address: str, topic: str, queue_id: int, items: list[tuple[str, str | None, str]]) -> None:
    async with connect(address, connect_timeout=3.0, request_timeout=10.0) as conn:
        for body, tags, key in items:
            await conn.call(Send(topic=topic, queue_id=queue_id, body=body.encode(), tags=tags, keys=[key]))


def test_expired_segments_move_the_pull_and_leave_a_new_group_unplaced(rmq_cluster) -> None:
    """OFFSET_TOO_SMALL → PULL_OFFSET_MOVED at the new minimum; a group that never
    committed on a queue that no longer starts at 0 gets QUERY_NOT_FOUND."""
    root = _master_root(rmq_cluster)

    async def fill_and_expire() -> None:
        async with connect(rmq_cluster.master, request_timeout=10.0) as conn:
            before = (await conn.call(GetStatus())).max_phy_offset
            assert before == 0, "this test runs first: the segments it expires must hold only RmqOld"
            for i in range(0, 240, 8):
                batch = [{"body": bytes([65 + i % 26]) * 4000} for _ in range(8)]
                await conn.request("send_batch", topic="RmqOld", queue_id=0, messages=batch)
        segments = list_segments(commitlog_dir(root))
        assert len(segments) >= 3

        async def expired() -> int:
            old = time.time() - 100 * 3600  # older than fileReservedTime (72 h); again after a
            for _, path in segments[:-1]:  # late flush of the segment touched its mtime
                os.utime(path, (old, old))
            return (await _call(rmq_cluster.master, DeleteExpiredFiles())).deleted_files

        await wait_until(expired, timeout=10, what="the master to delete its aged CommitLog segments")

    trio.run(fill_and_expire)
    with RemotingClient(rmq_cluster.master) as c:
        r = c.call(RequestCode.PULL_MESSAGE, _pull_fields("RmqOld", 0, 0))
        assert (r.code, r.remark) == (ResponseCode.PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL")
        least = int(r.ext_fields["minOffset"])
        assert least > 0 and r.ext_fields["nextBeginOffset"] == str(least)
        r = c.call(RequestCode.GET_MIN_OFFSET, {"topic": "RmqOld", "queueId": "0"})
        assert (r.code, r.ext_fields) == (ResponseCode.SUCCESS, {"offset": str(least)})
        r = c.call(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "rmq-late", "topic": "RmqOld", "queueId": "0"})
        assert r.code == ResponseCode.QUERY_NOT_FOUND
        r = c.call(RequestCode.PULL_MESSAGE, _pull_fields("RmqOld", 0, least, max_msgs=2))
        assert r.code == ResponseCode.SUCCESS and [m.queue_offset for m in _records(r.body)] == [least, least + 1]


@pytest.fixture(scope="module")
def pulled_topic(rmq_cluster) -> list[tuple[str, str | None, str]]:
    """RmqPull: 4 queues, three messages in queue 0 (one without a tag), none elsewhere."""
    sent = [("p-0", "TagA", "pk-0"), ("p-1", None, "pk-1"), ("p-2", "TagB", "pk-2")]

    async def setup() -> None:
        await _call(rmq_cluster.master, TopicCreate(topic="RmqPull"))
        await _send(rmq_cluster.master, "RmqPull", 0, sent)

    trio.run(setup)
    return sent


def test_found_pull_answers_the_commitlog_records_byte_for_byte(rmq_cluster, pulled_topic) -> None:
    with RemotingClient(rmq_cluster.master) as c:
        r = c.call(RequestCode.PULL_MESSAGE, _pull_fields("RmqPull", 0, 0))
    assert (r.code, r.remark) == (ResponseCode.SUCCESS, "FOUND")
    assert r.ext_fields == {"suggestWhichBrokerId": "0", "nextBeginOffset": "3", "minOffset": "0", "maxOffset": "3"}
    got = _records(r.body)
    assert [(m.body.decode(), m.tags, m.keys) for m in got] == [(b, t, (k,)) for b, t, k in pulled_topic]
    assert [m.queue_offset for m in got] == [0, 1, 2] and {m.topic for m in got} == {"RmqPull"}
    # the body is the stored records, not a re-encoding
    assert r.body == b"".join(_commitlog_bytes(_master_root(rmq_cluster), m.commitlog_offset, m.size) for m in got)


def test_each_store_status_answers_its_pull_code_and_next_offset(rmq_cluster, pulled_topic) -> None:
    rows = [  # (queue, offset, subscription) → (code, remark, nextBeginOffset)
        ((1, 0, "*"), (ResponseCode.PULL_NOT_FOUND, "NO_MATCHED_LOGIC_QUEUE", "0")),  # a queue never written
        ((1, 5, "*"), (ResponseCode.PULL_OFFSET_MOVED, "NO_MATCHED_LOGIC_QUEUE", "0")),
        ((0, 3, "*"), (ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", "3")),
        ((0, 9, "*"), (ResponseCode.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY", "3")),
        ((0, 0, "TagZ"), (ResponseCode.PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE", "3")),
    ]
    with RemotingClient(rmq_cluster.master) as c:
        for (queue, offset, sub), want in rows:
            r = c.call(RequestCode.PULL_MESSAGE, _pull_fields("RmqPull", queue, offset, subscription=sub))
            assert (r.code, r.remark, r.ext_fields["nextBeginOffset"]) == want, (queue, offset, sub)
            assert set(r.ext_fields) == HEADER_KEYS and r.body == b""
        # the tag filter applies with FLAG_SUBSCRIPTION; without it everything matches
        r = c.call(RequestCode.PULL_MESSAGE, _pull_fields("RmqPull", 0, 0, subscription="TagB || TagA"))
        assert [m.body for m in _records(r.body)] == [b"p-0", b"p-2"]
        r = c.call(RequestCode.PULL_MESSAGE, _pull_fields("RmqPull", 0, 0, sys_flag=0, subscription="TagZ"))
        assert len(_records(r.body)) == 3


def test_pull_checks_answer_in_rocketmq_order(rmq_cluster, pulled_topic) -> None:
    async def setup() -> None:
        await _call(rmq_cluster.master, SubGroupUpdate(group="rmq-off", consume_enable=False))
        await _call(rmq_cluster.master, TopicCreate(topic="RmqWriteOnly", perm=2))

    trio.run(setup)
    with RemotingClient(rmq_cluster.master) as c:
        def code(**kw: Any) -> int:
            fields = _pull_fields(kw.pop("topic", "RmqPull"), kw.pop("queue", 0), 0, **kw)
            return c.call(RequestCode.PULL_MESSAGE, fields).code

        assert code(group="rmq-off", topic="RmqNoSuchTopic") == ResponseCode.NO_PERMISSION
        assert code(topic="RmqNoSuchTopic", queue=99, subscription="||") == ResponseCode.TOPIC_NOT_EXIST
        assert code(topic="RmqWriteOnly", queue=99, subscription="||") == ResponseCode.NO_PERMISSION
        assert code(queue=4, subscription="||") == ResponseCode.SYSTEM_ERROR
        assert code(subscription="||") == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        missing = c.call(RequestCode.PULL_MESSAGE, {"topic": "RmqPull", "queueId": "0"})
        assert missing.code == ResponseCode.SYSTEM_ERROR and "consumerGroup" in (missing.remark or "")


def test_suspended_pull_answers_when_a_message_lands(rmq_cluster, pulled_topic) -> None:
    with RemotingClient(rmq_cluster.master, timeout=30) as c:
        opaque = c.send(RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields=_pull_fields(
            "RmqPull", 2, 0, sys_flag=FLAG_SUSPEND | FLAG_SUBSCRIPTION, suspend_ms=15_000)))
        with pytest.raises(TimeoutError):  # parked: nothing to answer yet
            c.receive(opaque, timeout=0.5)
        sent_at = time.monotonic()
        trio.run(_send, rmq_cluster.master, "RmqPull", 2, [("late", "TagL", "late-k")])
        r = c.receive(opaque, timeout=20)
        woke_after = time.monotonic() - sent_at
    assert r.code == ResponseCode.SUCCESS and [m.body for m in _records(r.body)] == [b"late"]
    assert woke_after < 5.0, woke_after  # well before the 15 s suspend timeout


def test_suspended_pull_times_out_with_pull_not_found(rmq_cluster, pulled_topic) -> None:
    with RemotingClient(rmq_cluster.master) as c:
        began = time.monotonic()
        r = c.call(RequestCode.PULL_MESSAGE, _pull_fields("RmqPull", 3, 0, sys_flag=FLAG_SUSPEND | FLAG_SUBSCRIPTION,
                                                          suspend_ms=1500))
        took = time.monotonic() - began
    assert (r.code, r.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_NOT_FOUND, "0")
    assert 1.4 <= took < 5.0, took
    # filtered units are scanned past while parked: the answer continues after them
    with RemotingClient(rmq_cluster.master) as c:
        r = c.call(RequestCode.PULL_MESSAGE, _pull_fields("RmqPull", 0, 0, sys_flag=FLAG_SUSPEND | FLAG_SUBSCRIPTION,
                                                          suspend_ms=500, subscription="TagZ"))
    assert (r.code, r.remark, r.ext_fields["nextBeginOffset"]) == (ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE",
                                                                   "3")


def test_offsets_and_times(rmq_cluster, pulled_topic) -> None:
    q0 = {"topic": "RmqPull", "queueId": "0"}
    with RemotingClient(rmq_cluster.master) as c:
        def ok(code: int, fields: dict[str, str]) -> dict[str, str]:
            r = c.call(code, fields)
            assert r.code == ResponseCode.SUCCESS and r.ext_fields is not None, (code, r)
            return r.ext_fields

        group = {"consumerGroup": "rmq-offsets", **q0}
        assert ok(RequestCode.QUERY_CONSUMER_OFFSET, group) == {"offset": "0"}  # new group, young queue
        assert ok(RequestCode.UPDATE_CONSUMER_OFFSET, {**group, "commitOffset": "2"}) == {}
        assert ok(RequestCode.QUERY_CONSUMER_OFFSET, group) == {"offset": "2"}
        # a pull commits with FLAG_COMMIT_OFFSET
        c.call(RequestCode.PULL_MESSAGE, _pull_fields("RmqPull", 0, 2, group="rmq-offsets", commit=1,
                                                      sys_flag=FLAG_COMMIT_OFFSET | FLAG_SUBSCRIPTION))
        assert ok(RequestCode.QUERY_CONSUMER_OFFSET, group) == {"offset": "1"}
        assert ok(RequestCode.GET_MAX_OFFSET, q0) == {"offset": "3"}
        assert ok(RequestCode.GET_MIN_OFFSET, q0) == {"offset": "0"}
        first = _records(c.call(RequestCode.PULL_MESSAGE, _pull_fields("RmqPull", 0, 0)).body)
        earliest = ok(RequestCode.GET_EARLIEST_MSG_STORETIME, q0)
        assert earliest == {"timestamp": str(first[0].store_timestamp)}
        assert ok(RequestCode.GET_EARLIEST_MSG_STORETIME, {"topic": "RmqPull", "queueId": "3"}) == {"timestamp": "-1"}
        at = ok(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**q0, "timestamp": str(first[2].store_timestamp)})
        assert at["offset"] in {str(m.queue_offset) for m in first if m.store_timestamp == first[2].store_timestamp}
        assert ok(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {**q0, "timestamp": "0"}) == {"offset": "0"}


def test_query_message_by_key_and_view_by_offset(rmq_cluster, pulled_topic) -> None:
    root = _master_root(rmq_cluster)
    with RemotingClient(rmq_cluster.master) as c:
        r = c.call(RequestCode.QUERY_MESSAGE, {"topic": "RmqPull", "key": "pk-1", "maxNum": "32",
                                               "beginTimestamp": "0", "endTimestamp": str(2**63 - 1)})
        assert r.code == ResponseCode.SUCCESS
        assert {"indexLastUpdateTimestamp", "indexLastUpdatePhyoffset"} <= set(r.ext_fields or {})
        (found,) = _records(r.body)
        assert (found.body, found.keys) == (b"p-1", ("pk-1",))
        assert r.body == _commitlog_bytes(root, found.commitlog_offset, found.size)
        r = c.call(RequestCode.QUERY_MESSAGE, {"topic": "RmqPull", "key": "no-such-key", "maxNum": "32",
                                               "beginTimestamp": "0", "endTimestamp": str(2**63 - 1)})
        assert r.code == ResponseCode.QUERY_NOT_FOUND
        r = c.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(found.commitlog_offset)})
        assert r.code == ResponseCode.SUCCESS and r.body == _commitlog_bytes(root, found.commitlog_offset, found.size)
        r = c.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(found.commitlog_offset + 1)})
        assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR,
                                      f"can not find message by the offset, {found.commitlog_offset + 1}")


def test_a_slave_serves_pulls_and_leaves_commits_to_the_master(rmq_cluster, pulled_topic) -> None:
    with RemotingClient(rmq_cluster.slave) as c:
        def pulled() -> Any:
            r = c.call(RequestCode.PULL_MESSAGE, _pull_fields("RmqPull", 0, 0))
            return r if r.code == ResponseCode.SUCCESS and len(_records(r.body)) == 3 else None

        r = trio.run(functools.partial(wait_until, pulled, timeout=30,
                                       what="the slave to hold RmqPull's topic and messages"))
        assert r.ext_fields["suggestWhichBrokerId"] == "0"
        assert [m.body for m in _records(r.body)] == [b"p-0", b"p-1", b"p-2"]
        group = {"consumerGroup": "rmq-slave-only", "topic": "RmqPull", "queueId": "0"}
        r = c.call(RequestCode.UPDATE_CONSUMER_OFFSET, {**group, "commitOffset": "2"})
        assert r.code == ResponseCode.SUCCESS
        r = c.call(RequestCode.PULL_MESSAGE, _pull_fields("RmqPull", 0, 0, group="rmq-slave-only", commit=2,
                                                          sys_flag=FLAG_COMMIT_OFFSET | FLAG_SUBSCRIPTION))
        assert r.code == ResponseCode.SUCCESS
    with RemotingClient(rmq_cluster.master) as m:
        r = m.call(RequestCode.QUERY_CONSUMER_OFFSET, group)
        assert r.ext_fields == {"offset": "0"}  # the slave did not commit it


# ---------------------------------------------------------------- the real C++ client


def test_cpp_pull_consumer_reads_what_a_tidemq_producer_sent(rmq_cluster) -> None:
    sent = [(f"cbor-{i}", f"Tag{i % 3}", f"ck-{i}") for i in range(10)]

    async def produce() -> None:
        async with Producer(namesrv=rmq_cluster.namesrv) as producer:
            for body, tag, key in sent:
                await producer.send("RmqCborToCpp", body, tags=tag, keys=[key])

    trio.run(produce)
    out = run_cpp("pull", "--namesrv", rmq_cluster.namesrv, "--topic", "RmqCborToCpp", "--group", "cpp-pull-a",
                  "--count", str(len(sent)), "--max-num", "4")
    got = sorted((m["body"], m["tags"], m["keys"]) for m in out["received"])
    assert got == sorted(sent)
    assert all(m["topic"] == "RmqCborToCpp" for m in out["received"])


def test_cpp_producer_to_cpp_pull_consumer_round_trips(rmq_cluster) -> None:
    sent = run_cpp("produce", "--namesrv", rmq_cluster.namesrv, "--topic", "RmqCppRound", "--count", "6",
                   "--prefix", "round", "--tags", "TagR")["sent"]
    assert [s["status"] for s in sent] == [0] * 6
    out = run_cpp("pull", "--namesrv", rmq_cluster.namesrv, "--topic", "RmqCppRound", "--group", "cpp-pull-b",
                  "--count", "6", "--expression", "TagR")
    got = {m["body"]: m for m in out["received"]}
    assert sorted(got) == sorted(s["body"] for s in sent)
    for s in sent:
        m = got[s["body"]]
        assert (m["tags"], m["keys"], m["uniq_key"], m["queue_offset"]) == ("TagR", f"round-k{s['body'].split('-')[1]}",
                                                                             s["msg_id"], s["offset"])


def test_cpp_producer_to_tidemq_pull_consumer(rmq_cluster) -> None:
    sent = run_cpp("produce", "--namesrv", rmq_cluster.namesrv, "--topic", "RmqCppToCbor", "--count", "5",
                   "--prefix", "x", "--tags", "TagX")["sent"]
    assert [s["status"] for s in sent] == [0] * 5

    async def consume() -> list[Any]:
        got: list[Any] = []
        consumer = PullConsumer(namesrv=rmq_cluster.namesrv, group="cbor-reads-cpp", topic="RmqCppToCbor")
        async with consumer, contextlib.aclosing(consumer.messages(idle_timeout_ms=3000)) as messages:
            async for m in messages:
                got.append(m)
                if len(got) == len(sent):
                    break
        return got

    got = trio.run(consume)
    assert sorted((m.body.decode(), m.tags, m.keys, m.properties.get("UNIQ_KEY")) for m in got) == sorted(
        (s["body"], "TagX", (f"x-k{i}",), s["msg_id"]) for i, s in enumerate(sent))
