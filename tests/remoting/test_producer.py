"""RocketMQ's C++ producer (PyPI `rocketmq`) sends to a tidemq cluster unchanged, and
tidemq's own client reads what it sent."""

from __future__ import annotations

import trio

from tests.remoting.cpp import run_cpp
from wire.client import connect
from wire.protocol import QueryByKey


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
