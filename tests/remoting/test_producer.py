"""RocketMQ's C++ producer (PyPI `rocketmq`) sends to a tidemq cluster unchanged, and
tidemq's own client reads what it sent."""

from __future__ import annotations

from typing import Any

import trio

from tests.remoting.client import RemotingClient
from tests.remoting.cpp import run_cpp
from tests.waiting import wait_until
from wire.client import connect
from wire.protocol import Pull, QueryByKey
from wire.protocol.values import WireMessage
from wire.remoting.bodies import parse_json_body
from wire.remoting.codes import RequestCode


def test_send_sync_stores_each_message_where_the_answer_says(rmq_cluster) -> None:
    out = run_cpp("produce", "--namesrv", rmq_cluster.namesrv, "--topic", "RmqSync", "--count", "4",
                  "--prefix", "sync")
    assert [s["status"] for s in out["sent"]] == [0, 0, 0, 0]  # SEND_OK: the slave has them too
    assert len({s["msg_id"] for s in out["sent"]}) == 4  # UNIQ_KEYs, one per message

    async def lookup() -> None:
        async with connect(rmq_cluster.master) as conn:
            for i, s in enumerate(out["sent"]):
                found = (await conn.call(QueryByKey(topic="RmqSync", key=f"sync-k{i}"))).messages
                assert [m.body for m in found] == [f"sync-{i}".encode()]
                assert found[0].tags == "TagA"
                assert found[0].queue_offset == s["offset"]
                assert found[0].properties["UNIQ_KEY"] == s["msg_id"]

    trio.run(lookup)


# ---------------------------------------------------------------- the C++ producer's other sends


def _cpp_send(cluster: Any, topic: str, *args: str) -> dict[str, Any]:
    return run_cpp("send", "--namesrv", cluster.namesrv, "--topic", topic, "--group", f"g-{topic}", *args)


async def _by_key(address: str, topic: str, key: str) -> list[WireMessage]:
    async with connect(address) as conn:
        messages: list[WireMessage] = (await conn.call(QueryByKey(topic=topic, key=key))).messages
        return messages


def _found(cluster: Any, topic: str, sent: list[dict[str, Any]], timeout: float = 20.0) -> list[WireMessage]:
    """Each sent message as the master stores it (one per key), waiting until all are there."""

    async def each() -> list[WireMessage] | None:
        out = []
        for s in sent:
            found = await _by_key(cluster.master, topic, s["key"])
            if not found:
                return None
            assert len(found) == 1, (s["key"], found)
            out.append(found[0])
        return out

    async def until() -> list[WireMessage]:
        found: list[WireMessage] = await wait_until(each, timeout=timeout, what=f"{len(sent)} messages on {topic}")
        return found

    return trio.run(until)


def _write_queues(cluster: Any, topic: str) -> int:
    with RemotingClient(cluster.namesrv) as ns:
        route = ns.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    assert route.code == 0, route.remark
    return sum(q["writeQueueNums"] for q in parse_json_body(route.body, "route")["queueDatas"])


def test_send_oneway_messages_arrive(rmq_cluster) -> None:
    """C++ sends oneway requests with flag 0 (facts §8 P1): the node answers them and the
    client drops the answers; every message is stored once."""
    out = _cpp_send(rmq_cluster, "RmqOneway", "--mode", "oneway", "--count", "5", "--prefix", "ow")
    found = _found(rmq_cluster, "RmqOneway", out["sent"])
    assert [m.body for m in found] == [s["body"].encode() for s in out["sent"]]
    assert len({m.properties["UNIQ_KEY"] for m in found}) == 5


def test_send_orderly_puts_each_order_on_one_queue_in_order(rmq_cluster) -> None:
    out = _cpp_send(rmq_cluster, "RmqOrderly", "--mode", "orderly", "--count", "18", "--orders", "6",
                    "--prefix", "ord")
    assert {s["status"] for s in out["sent"]} == {0}
    found = _found(rmq_cluster, "RmqOrderly", out["sent"])
    n = _write_queues(rmq_cluster, "RmqOrderly")
    by_order: dict[int, list[WireMessage]] = {}
    for s, m in zip(out["sent"], found, strict=True):
        assert m.body == s["body"].encode() and m.queue_offset == s["offset"]
        by_order.setdefault(s["order"], []).append(m)
    for order, messages in by_order.items():
        assert {m.queue_id for m in messages} == {order % n}  # the hashing selector's queue
        offsets = [m.queue_offset for m in messages]  # in send order
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)


def test_send_batch_stores_each_message_separately(rmq_cluster) -> None:
    """C++ 1.2.3 sends a batch as SEND_MESSAGE with batch="1"; a Java broker reads "1" as
    false and stores one message of \\x01/\\x02 junk (client-cpp#447). tidemq reads it as a
    batch: each body arrives on its own, with its own UNIQ_KEY, at consecutive offsets."""
    out = _cpp_send(rmq_cluster, "RmqBatch", "--mode", "batch", "--count", "5", "--prefix", "bt", "--tags", "TagB")
    assert out["batch"]["status"] == 0
    found = _found(rmq_cluster, "RmqBatch", out["sent"])
    assert [m.body for m in found] == [s["body"].encode() for s in out["sent"]]
    assert not any(b"\x01" in m.body or b"\x02" in m.body for m in found)
    assert {m.tags for m in found} == {"TagB"}
    assert len({m.properties["UNIQ_KEY"] for m in found}) == 5
    assert len({m.queue_id for m in found}) == 1
    first = found[0].queue_offset
    assert [m.queue_offset for m in found] == list(range(first, first + 5))
    assert out["batch"]["offset"] == first


def test_keys_and_tags_are_queryable_and_filterable(rmq_cluster) -> None:
    out = _cpp_send(rmq_cluster, "RmqKeys", "--count", "3", "--prefix", "kt", "--tags", "Paid",
                    "--extra-key", "order-7")
    found = _found(rmq_cluster, "RmqKeys", out["sent"])
    assert all(sorted(m.keys) == sorted([s["key"], "order-7"]) for s, m in zip(out["sent"], found, strict=True))
    assert all(m.tags == "Paid" for m in found)
    shared = trio.run(_by_key, rmq_cluster.master, "RmqKeys", "order-7")
    assert sorted(m.body for m in shared) == sorted(s["body"].encode() for s in out["sent"])
    _cpp_send(rmq_cluster, "RmqKeys", "--count", "2", "--prefix", "other", "--tags", "Refunded")

    async def pulled(tag_filter: str) -> list[bytes]:
        bodies = []
        async with connect(rmq_cluster.master) as conn:
            for q in range(_write_queues(rmq_cluster, "RmqKeys")):
                reply = await conn.call(Pull(topic="RmqKeys", queue_id=q, offset=0, tag_filter=tag_filter))
                bodies += [m.body for m in reply.messages]
        return sorted(bodies)

    assert trio.run(pulled, "Paid") == sorted(s["body"].encode() for s in out["sent"])
    assert trio.run(pulled, "Refunded") == [b"other-0", b"other-1"]


def test_a_delay_level_holds_the_message_back(rmq_cluster) -> None:
    """set_delay_time_level(1): the node stores it on SCHEDULE_TOPIC_XXXX queue 0 (level − 1)
    and its ScheduleMessageService puts it on the real topic once 1 s (messageDelayLevel's
    first) has passed since it was stored."""
    out = _cpp_send(rmq_cluster, "RmqDelay", "--count", "2", "--prefix", "dl", "--delay-level", "1")
    assert {s["status"] for s in out["sent"]} == {0}
    found = _found(rmq_cluster, "RmqDelay", out["sent"])
    for s, m in zip(out["sent"], found, strict=True):
        assert m.body == s["body"].encode()
        assert m.properties["REAL_TOPIC"] == "RmqDelay" and "DELAY" not in m.properties  # came by the schedule
        assert m.store_timestamp - m.born_timestamp >= 1000  # not on the topic before its delay
        assert m.store_timestamp - m.born_timestamp < 15_000

    async def scheduled() -> list[bytes]:
        async with connect(rmq_cluster.master) as conn:
            reply = await conn.call(Pull(topic="SCHEDULE_TOPIC_XXXX", queue_id=0, offset=0))
            return [m.body for m in reply.messages]

    assert {s["body"].encode() for s in out["sent"]} <= set(trio.run(scheduled))


def test_a_body_the_client_deflates_is_read_as_sent(rmq_cluster) -> None:
    """C++ deflates bodies of 4096 bytes and more (sysFlag bit 0); the node stores them
    inflated, so tidemq's consumer reads the original bytes and no compressed flag."""
    out = _cpp_send(rmq_cluster, "RmqBig", "--count", "2", "--prefix", "big", "--body-size", "10000")
    assert {s["status"] for s in out["sent"]} == {0}
    found = _found(rmq_cluster, "RmqBig", out["sent"])
    for s, m in zip(out["sent"], found, strict=True):
        assert len(s["body"]) == 10000 and m.body == s["body"].encode()
        assert m.sys_flag is not None and not m.sys_flag & 1
