"""Issue 42 item 4 with real node processes: a consumer that read records an unclean
promotion dropped moves back to where the logs diverge and reads the new master's records
at those queue offsets (KIP-320): none skipped. The op's cases without processes:
tests/node/test_offset_for_epoch.py.
"""

from __future__ import annotations

import tomllib

import pytest
import trio

from cluster.client import MessageQueue, PullConsumer
from tests.cluster.helpers import (
    broker_conf,
    call,
    cli,
    slave_of,
    start_namesrv,
    wait_for,
    wait_slave_connected,
)
from tests.ha.proxy import PausableProxy
from tests.node.nodeproc import Nodes
from wire.client import NotFound, TidemqError, connect
from wire.protocol import CommitOffset, FetchOffset, GetStatus, Send, StatusReply, TopicCreate

pytestmark = pytest.mark.slow

GROUP = "broker-k"
TOPIC = "Diverge"
CONSUMERS = "kip320"
# 1 s registrations; a small in-sync gap so the held-back slave leaves the set (and the
# master confirms alone what the consumer then reads); a promoted master confirms alone soon
CONF = {"registerNameServerPeriod": 1000, "haMaxGapNotInSync": 64 * 1024, "haMaxTimeSlaveNotCatchup": 1000}


async def status(address: str) -> StatusReply:
    return await call(address, GetStatus())


async def send(address: str, bodies: list[bytes]) -> list[int]:
    async with connect(address) as conn:
        return [(await conn.call(Send(topic=TOPIC, body=b, queue_id=0))).queue_offset for b in bodies]


async def read_until(consumer: PullConsumer, queue: MessageQueue, count: int) -> list[bytes]:
    got: list[bytes] = []

    async def enough() -> bool:
        got.extend(m.body for m in (await consumer.pull(queue, 64, timeout_ms=200)).messages)
        return len(got) >= count

    await wait_for(enough, what=f"{count} record(s) read")
    return got


async def test_a_consumer_past_an_unclean_promotion_moves_back_and_reads_the_new_records(tmp_path, nodes: Nodes):
    ns = start_namesrv(nodes, tmp_path)
    m_conf = broker_conf(tmp_path, "m", GROUP, ns.address, role="ASYNC_MASTER", **CONF)
    m = nodes.start(m_conf)
    proxy = PausableProxy(int(tomllib.loads(m_conf.read_text())["haListenPort"]))
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.run)
        s = nodes.start(slave_of(tmp_path, m_conf, "s", ns.address, haMasterAddress=f"127.0.0.1:{proxy.port}",
                                 **CONF))
        await call(m.address, TopicCreate(topic=TOPIC, read_queue_nums=1, write_queue_nums=1))
        await wait_slave_connected(m.address)
        first = [b"both-%d" % i for i in range(3)]
        await send(m.address, first)
        await wait_for(lambda: _caught_up(m.address, s.address), what="the slave holds the first records")
        # another group's commit the slave holds past the records it will have (commits are not
        # checked against the queue's end): the unclean promotion sets it back to that end
        await call(m.address, CommitOffset(group="ahead", topic=TOPIC, queue_id=0, offset=50))
        await wait_for(lambda: _committed(s.address, "ahead", 50), what="the commit streamed to the slave")
        queue = MessageQueue(TOPIC, GROUP, 0)
        async with PullConsumer(ns.address, group=CONSUMERS, topic=TOPIC, master_retry_s=0.2) as consumer:
            assert await read_until(consumer, queue, 3) == first
            proxy.to_slave.close()  # the slave stops receiving: what follows is on the master only
            lost = [b"lost-%02d-" % i + b"x" * 10_000 for i in range(20)]  # 200 KiB: past haMaxGapNotInSync
            await send(m.address, lost)
            assert await read_until(consumer, queue, 20) == lost  # confirmed by the master alone
            assert await consumer.commit(queue, 23)
            assert consumer.position(queue) == 23
            m.kill()
            # (the slave, cut off before the master confirmed alone, cannot know it is behind:
            # the check passes, docs/failover.md Limits; --unclean is what an operator uses anyway)
            promoted = await trio.to_thread.run_sync(
                lambda: cli("admin", "promote", "--namesrv", ns.address, GROUP, "1", "--unclean"))
            lines = promoted.stdout.decode().splitlines()
            assert promoted.returncode == 0 and "is the master now" in lines[-2] and "epoch 2" in lines[-2], lines
            assert lines[-1] == (f"{GROUP}: 1 committed consumer offset(s) past the new log's queue ends set back "
                                 "to the ends (their records were dropped)")
            await wait_for(lambda: _master(s.address), what="the slave serving as master")
            fresh = [b"new-%d" % i for i in range(4)]
            assert await send(s.address, fresh) == [3, 4, 5, 6]  # the dropped records' queue offsets
            # the consumer (at 23) learns of the newer epoch, moves back to 3 and reads every new record
            assert await read_until(consumer, queue, 4) == fresh
            assert consumer.moved_back == [(queue, 23, 3)]
            assert consumer.position(queue) == 7
        assert (await call(s.address, FetchOffset(group=CONSUMERS, topic=TOPIC, queue_id=0))).offset == 3
        assert (await call(s.address, FetchOffset(group="ahead", topic=TOPIC, queue_id=0))).offset == 3  # clamped
        # a consumer of the group that starts now begins at the offset it committed: nothing skipped
        async with PullConsumer(ns.address, group=CONSUMERS, topic=TOPIC) as later:
            assert await read_until(later, queue, 4) == fresh
        nursery.cancel_scope.cancel()


async def _committed(address: str, group: str, offset: int) -> bool:
    try:
        return (await call(address, FetchOffset(group=group, topic=TOPIC, queue_id=0))).offset == offset
    except NotFound:
        return False


async def _caught_up(master: str, slave: str) -> bool:
    return (await status(slave)).max_phy_offset == (await status(master)).max_phy_offset


async def _master(address: str) -> bool:
    try:
        return (await status(address)).broker_id == 0
    except (OSError, TidemqError):
        return False
