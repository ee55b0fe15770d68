"""PullConsumer against real processes: long polling, commit / fetch, offsets surviving a
master restart, reading from the slave while the master is SIGKILLed (everything the
SYNC_MASTER acknowledged is there) and going back to the master once it returns."""

from __future__ import annotations

import signal

import pytest
import trio
import trio.testing

from cluster.client import Admin, Producer, PullConsumer, Status
from tests.cluster.helpers import (
    broker_conf,
    call,
    slave_of,
    start_namesrv,
    wait_for,
    wait_slave_connected,
)
from wire.protocol import FetchOffset

pytestmark = pytest.mark.slow  # every test here starts node processes

NO_MESSAGE = {Status.NO_MESSAGE_IN_QUEUE, Status.OFFSET_OVERFLOW_ONE, Status.NO_MATCHED_LOGIC_QUEUE}


async def create_topic(namesrv: str, topic: str, queues: int) -> None:
    async with Admin(namesrv=namesrv) as admin:
        async def masters():
            return any(i.is_master for i in await admin.cluster_info())

        await wait_for(masters, what="a master registered")
        await admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
        await wait_for(lambda: admin.route(topic, refresh=True), what=f"route of {topic}")


async def test_long_poll_commit_fetch_and_offsets_survive_a_master_restart(tmp_path, nodes):
    ns = start_namesrv(nodes, tmp_path)
    mconf = broker_conf(tmp_path, "m", "broker-a", ns.address)
    master = nodes.start(mconf)
    await create_topic(ns.address, "LP", 1)

    async with PullConsumer(namesrv=ns.address, group="G", topic="LP") as consumer, \
            Producer(namesrv=ns.address) as producer:
        [queue] = await consumer.queues()
        assert (queue.broker_name, queue.queue_id) == ("broker-a", 0)
        assert await consumer.fetch_offset(queue) is None

        started = trio.current_time()
        empty = await consumer.pull(queue, timeout_ms=300)
        assert empty.status in NO_MESSAGE and not empty.messages and empty.next_begin_offset == 0
        assert trio.current_time() - started >= 0.25, "an empty long poll waits for its timeout"

        # a parked pull is answered by the message that lands, long before its 20 s timeout
        woken = {}
        async with trio.open_nursery() as nursery:
            async def park() -> None:
                woken["result"] = await consumer.pull(queue, timeout_ms=20_000)
                woken["at"] = trio.current_time()

            nursery.start_soon(park)
            await trio.testing.wait_all_tasks_blocked()  # the pull is out, awaiting its answer
            sent_at = trio.current_time()
            await producer.send("LP", b"x0")
        assert [m.body for m in woken["result"].messages] == [b"x0"]
        assert woken["at"] - sent_at < 10, "woken by the message, not by the timeout"

        for i in (1, 2, 3):
            await producer.send("LP", f"x{i}".encode())
        rest = await consumer.pull(queue, timeout_ms=1000)
        assert [m.body for m in rest.messages] == [b"x1", b"x2", b"x3"]
        assert rest.status is Status.FOUND and rest.next_begin_offset == 4 == consumer.position(queue)
        assert [m.queue_offset for m in rest.messages] == [1, 2, 3]

        assert await consumer.commit(queue, 2) is True
        assert await consumer.fetch_offset(queue) == 2
        assert not consumer.pending_commits

    assert master.stop(signal.SIGTERM) == 0  # graceful: offsets are persisted
    nodes.start(mconf)

    async with PullConsumer(namesrv=ns.address, group="G", topic="LP") as again:
        # the restarted master registers right after READY
        [queue] = await wait_for(lambda: again.queues(refresh=True), what="route after the restart")
        assert await again.fetch_offset(queue) == 2
        resumed = await again.pull(queue, timeout_ms=0)
        assert [m.body for m in resumed.messages] == [b"x2", b"x3"], "a new consumer resumes at the commit"
        async with PullConsumer(namesrv=ns.address, group="other", topic="LP", start="last") as late:
            assert (await late.pull(queue, timeout_ms=0)).messages == [], "start='last' skips the backlog"


async def test_consumer_reads_the_slave_while_the_master_is_down_and_returns(tmp_path, nodes):
    ns = start_namesrv(nodes, tmp_path)
    mconf = broker_conf(tmp_path, "m", "broker-a", ns.address, role="SYNC_MASTER")
    master = nodes.start(mconf)
    slave = nodes.start(slave_of(tmp_path, mconf, "s", ns.address))
    await wait_slave_connected(master.address)
    await create_topic(ns.address, "FO", 2)

    async with Producer(namesrv=ns.address, send_timeout=10.0) as producer:
        sent = [await producer.send("FO", f"m{i}") for i in range(20)]
    # PUT_OK from a SYNC_MASTER: the slave has acknowledged every one of them
    assert {r.status for r in sent} == {Status.PUT_OK}

    async with PullConsumer(namesrv=ns.address, group="G", topic="FO",
                            master_retry_s=0.2, master_retry_max_s=0.5) as consumer:
        queues = await consumer.queues()
        assert len(queues) == 2
        got = []
        for q in queues:
            r = await consumer.pull(q, max_msgs=4, timeout_ms=0)
            assert not r.from_slave and r.address == master.address and len(r.messages) == 4
            got += r.messages
            assert await consumer.commit(q, r.next_begin_offset) is True

        master.kill()
        ends = {}
        for q in queues:
            r = await consumer.pull(q, timeout_ms=0)
            assert r.from_slave and r.address == slave.address, r
            got += r.messages
            ends[q] = r.next_begin_offset
            # the slave refuses commits: kept here until the master is back
            assert await consumer.commit(q, r.next_begin_offset) is False
        assert consumer.reading_from_slave("broker-a")
        assert sorted(m.body for m in got) == sorted(f"m{i}".encode() for i in range(20)), \
            "every acknowledged message is read exactly once across the failover"
        assert consumer.pending_commits == ends
        assert await consumer.fetch_offset(queues[0]) == ends[queues[0]], "a pending commit is the group's offset"
        nothing = await consumer.pull(queues[0], timeout_ms=200)
        assert nothing.status in NO_MESSAGE and nothing.from_slave

        master = await trio.to_thread.run_sync(nodes.start, mconf)

        async def back_on_master() -> bool:
            return not (await consumer.pull(queues[0], timeout_ms=0)).from_slave

        await wait_for(back_on_master, what="reads back on the restarted master")  # after the back-off
        assert not consumer.reading_from_slave("broker-a")

        async def commits_through() -> bool:  # a read from the master tries refused ones again
            await consumer.pull(queues[0], timeout_ms=0)
            return consumer.pending_commits == {}

        # a master restarted after a kill takes writes, commits too, once its new epoch begins
        # (docs/failover.md): until then the commits stay pending, then they reach it
        await wait_for(commits_through, what="pending commits reached the master")
        for q in queues:
            fetched = await call(master.address, FetchOffset(group="G", topic="FO", queue_id=q.queue_id))
            assert fetched.offset == ends[q]

        async with Producer(namesrv=ns.address) as producer:
            late = await producer.send("FO", b"after", queue_id=queues[1].queue_id, wait=False)
        assert late.status is Status.PUT_OK
        fresh = await consumer.pull(queues[1], timeout_ms=2000)
        assert [m.body for m in fresh.messages] == [b"after"] and fresh.address == master.address
