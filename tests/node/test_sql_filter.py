"""SQL92 filters end to end: real node processes, one with enablePropertyFilter and one
without, messages with properties sent through our producer, read through our PullConsumer
(CBOR) and through RocketMQ's remoting PULL_MESSAGE (expressionType SQL92)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from cluster.client.consumer import PullConsumer
from cluster.client.producer import Producer
from store.record_codec import decode_record
from tests.node.nodeproc import master_conf
from tests.remoting.client import RemotingClient
from wire.client import BadRequest
from wire.protocol.sql92 import Sql92Error
from wire.remoting.codes import RequestCode, ResponseCode

TOPIC = "Filtered"
# (body, tags, properties); the filter below matches m1 and m3 only
MESSAGES = [
    ("m0", "x", {"a": "1", "region": "eu"}),
    ("m1", "x", {"a": "7", "region": "eu"}),
    ("m2", "y", {"a": "9", "region": "eu"}),  # TAGS y
    ("m3", "x", {"a": "12", "region": "us"}),
    ("m4", "x", {"region": "eu"}),  # no a: unknown, no match
    ("m5", "x", {"a": "many", "region": "eu"}),  # not a number: no match, as RocketMQ
]
REPO = Path(__file__).resolve().parents[2]
SQL = "a > 5 AND TAGS IN ('x') AND region IS NOT NULL"


async def _fill(address: str) -> None:
    async with Producer(brokers=[address]) as producer:
        for body, tags, props in MESSAGES:
            await producer.send(TOPIC, body, tags=tags, properties=props, queue_id=0)


async def _read(address: str, sql: str) -> list[str]:
    async with PullConsumer(brokers=[address], group="sqlg", topic=TOPIC, sql_filter=sql) as consumer:
        bodies: list[str] = []
        async with contextlib.aclosing(consumer.messages(idle_timeout_ms=500)) as stream:
            async for m in stream:
                bodies.append(m.body.decode())
        return bodies


def _pull_fields(sql: str, offset: int = 0) -> dict[str, str]:
    return {"consumerGroup": "rmq-sql", "topic": TOPIC, "queueId": "0", "queueOffset": str(offset),
            "maxMsgNums": "32", "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0",
            "subscription": sql, "subVersion": "1", "expressionType": "SQL92"}


def _bodies(body: bytes) -> list[str]:
    out, pos = [], 0
    while pos < len(body):
        decoded = decode_record(body, pos)
        assert decoded.message is not None, decoded.error
        out.append(decoded.message.body.decode())
        pos += decoded.size
    return out


def test_sql92_filters_on_a_node_with_enable_property_filter(tmp_path, nodes) -> None:
    node = nodes.start(master_conf(tmp_path, role="ASYNC_MASTER", enablePropertyFilter=True))
    trio.run(_fill, node.address)

    assert trio.run(_read, node.address, SQL) == ["m1", "m3"]
    assert trio.run(_read, node.address, "a IS NULL OR NOT (region = 'eu')") == ["m3", "m4"]

    # a bad expression: the client refuses it before sending, the node refuses a raw pull
    with pytest.raises(Sql92Error, match="line 1, column 7"):
        PullConsumer(brokers=[node.address], group="sqlg", topic=TOPIC, sql_filter="a > 5 b")

    async def raw_bad_pull() -> None:
        async with PullConsumer(brokers=[node.address], group="sqlg", topic=TOPIC) as consumer:
            consumer.sql_filter = "a >> 5"  # past the constructor's check: the node judges it
            queue = next(q for q in await consumer.queues() if q.queue_id == 0)
            with pytest.raises(BadRequest, match=r"sql_filter.*line 1, column 4"):
                await consumer.pull(queue, timeout_ms=0)

    trio.run(raw_bad_pull)

    # RocketMQ's remoting pull: the same filter, SUBSCRIPTION_PARSE_FAILED with the position
    with RemotingClient(node.address) as c:
        r = c.call(RequestCode.PULL_MESSAGE, _pull_fields(SQL))
        assert (r.code, r.remark) == (ResponseCode.SUCCESS, "FOUND")
        assert _bodies(r.body) == ["m1", "m3"]
        assert r.ext_fields["nextBeginOffset"] == str(len(MESSAGES))
        bad = c.call(RequestCode.PULL_MESSAGE, _pull_fields("a BETWEEN 5 AND 1"))
        assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert "line 1, column 11" in (bad.remark or "")
        none = c.call(RequestCode.PULL_MESSAGE, _pull_fields("a > 100"))
        assert (none.code, none.remark) == (ResponseCode.PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE")


def _java_heartbeat(expression_type: str, expression: str, version: int) -> bytes:
    """A Java push consumer's HeartbeatData subscribing TOPIC (postSubscriptionWhenPull off:
    its pulls carry no subscription, the broker uses this one)."""
    sub = {"classFilterMode": False, "topic": TOPIC, "subString": expression, "tagsSet": [], "codeSet": [],
           "subVersion": version, "expressionType": expression_type}
    return json.dumps({"clientID": "127.0.0.1@java-sql", "producerDataSet": [], "consumerDataSet": [
        {"groupName": "rmq-sql", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
         "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False, "subscriptionDataSet": [sub]}]}).encode()


def test_a_heartbeat_sql92_subscription_filters_pulls_without_one(tmp_path, nodes) -> None:
    node = nodes.start(master_conf(tmp_path, role="ASYNC_MASTER", enablePropertyFilter=True))
    trio.run(_fill, node.address)
    plain = {**_pull_fields("*"), "sysFlag": "0"}
    plain.pop("expressionType")
    with RemotingClient(node.address) as c:
        assert len(_bodies(c.call(RequestCode.PULL_MESSAGE, plain).body)) == len(MESSAGES)  # no subscription yet
        assert c.call(RequestCode.HEART_BEAT, body=_java_heartbeat("SQL92", SQL, 2)).code == ResponseCode.SUCCESS
        r = c.call(RequestCode.PULL_MESSAGE, plain)
        assert (r.code, _bodies(r.body)) == (ResponseCode.SUCCESS, ["m1", "m3"])
        # an older subscription (a member not restarted yet) does not replace the newer one
        assert c.call(RequestCode.HEART_BEAT, body=_java_heartbeat("TAG", "*", 1)).code == ResponseCode.SUCCESS
        assert _bodies(c.call(RequestCode.PULL_MESSAGE, plain).body) == ["m1", "m3"]
        # a newer TAG subscription does
        assert c.call(RequestCode.HEART_BEAT, body=_java_heartbeat("TAG", "*", 3)).code == ResponseCode.SUCCESS
        assert len(_bodies(c.call(RequestCode.PULL_MESSAGE, plain).body)) == len(MESSAGES)


def test_a_node_without_enable_property_filter_refuses_sql92(tmp_path, nodes) -> None:
    node = nodes.start(master_conf(tmp_path, role="ASYNC_MASTER"))
    trio.run(_fill, node.address)

    with pytest.raises(BadRequest, match="does not support consumer to filter message by SQL92"):
        trio.run(_read, node.address, SQL)
    with RemotingClient(node.address) as c:
        r = c.call(RequestCode.PULL_MESSAGE, _pull_fields(SQL))
        assert r.code == ResponseCode.SYSTEM_ERROR
        assert "The broker does not support consumer to filter message by SQL92" in (r.remark or "")
        # RocketMQ parses first: a bad expression is a parse failure even here
        assert c.call(RequestCode.PULL_MESSAGE, _pull_fields("a >")).code == ResponseCode.SUBSCRIPTION_PARSE_FAILED


def test_cli_consume_sql(tmp_path, nodes) -> None:
    """`tidemq consume --sql` prints only the matches; a bad expression is a clear error."""
    node = nodes.start(master_conf(tmp_path, role="ASYNC_MASTER", enablePropertyFilter=True))
    trio.run(_fill, node.address)
    base = [sys.executable, "-m", "tidemq", "consume", "--broker", node.address, "-t", TOPIC, "--timeout-ms", "500"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([*base, "-g", "cli-sql", "--sql", SQL], cwd=REPO, capture_output=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr.decode()
    assert sorted(json.loads(line)["body"] for line in done.stdout.decode().splitlines()) == ["m1", "m3"]
    # --commit: a member of the group (push_consumer.Consumer) with the same filter
    member = subprocess.run([*base, "-g", "cli-sql-member", "--commit", "--sql", SQL], cwd=REPO, capture_output=True,
                            timeout=60, env=env)
    assert member.returncode == 0, member.stderr.decode()
    assert sorted(json.loads(line)["body"] for line in member.stdout.decode().splitlines()) == ["m1", "m3"]
    bad = subprocess.run([*base, "-g", "cli-sql", "--sql", "a > 5 b"], cwd=REPO, capture_output=True, timeout=60, env=env)
    assert bad.returncode != 0 and "line 1, column 7" in bad.stderr.decode()
