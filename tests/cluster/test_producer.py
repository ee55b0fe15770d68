"""Producer against real processes: round robin over the writable queues of two masters,
retry on the other group when one master is killed, returned (not raised) durability
statuses, batches, and typed errors."""

from __future__ import annotations

import json
import logging
import signal
from collections import Counter

import pytest
import trio

from cluster.client import (
    Admin,
    BadRequest,
    ConnectionLost,
    OutcomeUnknown,
    OutgoingMessage,
    Producer,
    PullConsumer,
    RequestTimeout,
    Status,
    TidemqError,
    connect,
)
from tests.cluster.helpers import broker_conf, cli, slave_of, start_namesrv, wait_for
from tests.node.nodeproc import free_port
from wire.client import Connection
from wire.protocol import QueryByKey, WireMessage

pytestmark = pytest.mark.slow  # every test here starts node processes


async def test_round_robin_over_two_masters_then_retry_on_the_other_group(tmp_path, nodes, caplog):
    ns = start_namesrv(nodes, tmp_path)
    a = nodes.start(broker_conf(tmp_path, "a", "broker-a", ns.address))
    b = nodes.start(broker_conf(tmp_path, "b", "broker-b", ns.address))
    async with Admin(namesrv=ns.address) as admin:
        await wait_for(lambda: _masters(admin, 2), what="both masters registered")
        await admin.create_topic("RR", read_queue_nums=2, write_queue_nums=2)
        await wait_for(lambda: _groups(admin, "RR", 2), what="route of RR on both groups")

    async with Producer(namesrv=ns.address, send_timeout=5.0) as producer:
        # a topic no route knows is created on every master, as with RocketMQ's TBW102
        auto = [await producer.send("Auto", f"a{i}") for i in range(4)]
        assert Counter(r.broker_name for r in auto) == {"broker-a": 2, "broker-b": 2}
        async with Admin(namesrv=ns.address) as admin:
            await wait_for(lambda: _groups(admin, "Auto", 2), what="Auto routed on both groups")

        results = [await producer.send("RR", f"m{i}", keys=[f"k{i}"]) for i in range(8)]
        assert all(r.status is Status.PUT_OK for r in results)
        placed = Counter((r.broker_name, r.queue_id) for r in results)
        assert placed == {("broker-a", 0): 2, ("broker-a", 1): 2, ("broker-b", 0): 2, ("broker-b", 1): 2}
        assert {r.address for r in results if r.broker_name == "broker-b"} == {b.address}
        # RocketMQ's order: the route's queues group by group, from a random first queue
        route_order = [("broker-a", 0), ("broker-a", 1), ("broker-b", 0), ("broker-b", 1)]
        first = route_order.index((results[0].broker_name, results[0].queue_id))
        assert [(r.broker_name, r.queue_id) for r in results[:4]] == route_order[first:] + route_order[:first]

        b.kill()
        with caplog.at_level(logging.INFO, logger="tidemq.client"):
            after = [await producer.send("RR", f"n{i}") for i in range(6)]
        assert all(r.status is Status.PUT_OK and r.broker_name == "broker-a" for r in after)
        assert {r.queue_id for r in after} == {0, 1}, "round robin goes on over a's queues"
        retried = [r.getMessage() for r in caplog.records if "failed (attempt 1 of 3)" in r.getMessage()]
        assert retried and all(b.address in m for m in retried), "the cached route sent to b first"

    # nothing reached b after it died; a holds its four plus the six
    async with PullConsumer(brokers=[a.address], group="check", topic="RR") as consumer:
        bodies = [m.body for q in await consumer.queues() for m in (await consumer.pull(q, timeout_ms=0)).messages]
    assert sorted(bodies) == sorted([f"m{i}".encode() for i in range(8) if results[i].broker_name == "broker-a"]
                                    + [f"n{i}".encode() for i in range(6)])

    async with Producer(brokers=[b.address], retries=0) as lonely:
        with pytest.raises(ConnectionLost, match="no broker reachable"):
            await lonely.send("RR", b"x")


async def _masters(admin, n):
    return len([i for i in await admin.cluster_info() if i.is_master]) == n


async def _groups(admin, topic, n):
    return len((await admin.route(topic, refresh=True)).groups) == n


async def test_statuses_batches_and_errors_without_a_name_server(tmp_path, nodes):
    # a SYNC_MASTER without a slave stores a waiting send but cannot confirm the copy
    m = nodes.start(broker_conf(tmp_path, "m", "broker-s", None, role="SYNC_MASTER"))
    async with Producer(brokers=[m.address]) as producer:
        unconfirmed = await producer.send("St", b"stored anyway", tags="t1", properties={"p": "v"})
        assert unconfirmed.status is Status.SLAVE_NOT_AVAILABLE and not unconfirmed.ok
        assert unconfirmed.broker_name == "broker-s" and len(unconfirmed.msg_id) == 32
        quick = await producer.send("St", b"no wait", wait=False, queue_id=unconfirmed.queue_id)
        assert quick.status is Status.PUT_OK and quick.queue_offset == unconfirmed.queue_offset + 1

        batch = await producer.send_batch("St", [b"b0", OutgoingMessage("b1", tags="t2", keys=["kb"])],
                                          queue_id=3, wait=False)
        assert batch.status is Status.PUT_OK and len(batch.msg_ids) == 2 and batch.msg_id == batch.msg_ids[0]
        assert (batch.queue_id, batch.queue_offset) == (3, 0)

        with pytest.raises(BadRequest, match="topic 'bad topic' has characters outside"):
            await producer.send("bad topic", b"x")
        with pytest.raises(BadRequest, match="queue_id 9 is out of range: topic 'St' has 4 write queues"):
            await producer.send("St", b"x", queue_id=9)

    async with PullConsumer(brokers=[m.address], group="g", topic="St") as consumer:
        queue = next(q for q in await consumer.queues() if q.queue_id == unconfirmed.queue_id)
        got = await consumer.pull(queue, timeout_ms=0)
        first = got.messages[0]
        assert (first.body, first.tags, dict(first.properties)) == (b"stored anyway", "t1", {"p": "v"})
        batch_queue = next(q for q in await consumer.queues() if q.queue_id == 3)
        assert [(x.body, x.keys) for x in (await consumer.pull(batch_queue, timeout_ms=0)).messages] == [
            (b"b0", ()), (b"b1", ("kb",))]

    dead = f"127.0.0.1:{free_port()}"
    async with Producer(namesrv=dead) as producer:
        with pytest.raises(ConnectionLost, match="no name server reachable"):
            await producer.send("St", b"x")


async def test_send_many_pipelines_batches_in_order(tmp_path, nodes):
    """send_many: batches of `batch_size`, several in flight on one connection, stored in
    order on a pinned queue; results in message order; a bad message raises."""
    m = nodes.start(broker_conf(tmp_path, "m", "broker-p", None))
    bodies = [f"p{i}".encode() for i in range(203)]
    async with Producer(brokers=[m.address]) as producer:
        results = await producer.send_many("Pipe", bodies, batch_size=10, in_flight=6, queue_id=1)
        assert [len(r.msg_ids) for r in results] == [10] * 20 + [3]
        assert all(r.status is Status.PUT_OK and r.queue_id == 1 for r in results)
        assert [r.queue_offset for r in results] == list(range(0, 203, 10))
        spread = await producer.send_many("Pipe", bodies[:40], batch_size=5, wait=False)
        assert len(spread) == 8 and len({r.queue_id for r in spread}) == 4  # round robin
        with pytest.raises(BadRequest, match="body"):
            await producer.send_many("Pipe", [b"ok", b""], batch_size=1)
        with pytest.raises(ValueError, match="batch_size"):
            await producer.send_many("Pipe", bodies, batch_size=0)
    async with PullConsumer(brokers=[m.address], group="g", topic="Pipe") as consumer:
        queue = next(q for q in await consumer.queues() if q.queue_id == 1)
        got: list[bytes] = []
        while len(got) < len(bodies):
            pulled = await consumer.pull(queue, offset=len(got), timeout_ms=0)
            assert pulled.messages, f"queue 1 holds only {len(got)} messages"
            got += [msg.body for msg in pulled.messages]
    assert got[:len(bodies)] == bodies


async def test_an_unknown_outcome_is_raised_as_such_never_as_a_failure(tmp_path, nodes) -> None:
    """Issue 21.4: a send that timed out on a paused master may be stored (it is, once the
    master resumes): Producer.send, send_many and `tidemq send` report it as an unknown
    outcome; a send no node can have seen (connection refused) is a plain failure."""
    ns = start_namesrv(nodes, tmp_path)
    m = nodes.start(broker_conf(tmp_path, "m", "broker-a", ns.address))
    dead = f"127.0.0.1:{free_port()}"
    async with Admin(namesrv=ns.address) as admin:
        await wait_for(lambda: _masters(admin, 1), what="the master registered")
        await admin.create_topic("Unknown", read_queue_nums=1, write_queue_nums=1)
        await wait_for(lambda: _groups(admin, "Unknown", 1), what="Unknown routed")
    async with Producer(namesrv=ns.address, send_timeout=0.5, retries=1) as producer:
        assert (await producer.send("Unknown", "warm", keys=["warm"])).ok
        m.proc.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(OutcomeUnknown, match="outcome unknown after 2 attempt") as single:
                await producer.send("Unknown", "paused", keys=["paused"])
            assert isinstance(single.value, RequestTimeout)
            with pytest.raises(OutcomeUnknown):
                await producer.send_many("Unknown", [f"b{i}" for i in range(4)], batch_size=2)
            cli_out = await trio.to_thread.run_sync(lambda: cli(
                "send", "--namesrv", ns.address, "--topic", "Unknown", "--keys", "by-cli",
                "--timeout", "0.5", "--retries", "0", "by-cli"))
        finally:
            m.proc.send_signal(signal.SIGCONT)
    assert cli_out.returncode == 1, cli_out.stderr  # issue 40: 0, 1 or 2 (INDETERMINATE: a problem found)
    line = json.loads(cli_out.stdout.decode().splitlines()[0])
    assert line["status"] == "INDETERMINATE" and "outcome unknown" in cli_out.stderr.decode()
    async with connect(m.address) as conn:  # the paused master took them once it ran again
        for key in ("paused", "by-cli"):
            found = await wait_for(lambda k=key: _by_key(conn, k), what=f"{key} stored after the pause")
            assert found

    async with Producer(brokers=[dead], send_timeout=0.5, retries=1) as producer:
        with pytest.raises(ConnectionLost) as refused:
            await producer.send("Unknown", "never")
        assert not isinstance(refused.value, OutcomeUnknown)  # nothing was written anywhere


async def _by_key(conn: Connection, key: str) -> list[WireMessage]:
    return (await conn.call(QueryByKey(topic="Unknown", key=key))).messages


async def test_sends_resume_on_a_promoted_master_within_a_second(tmp_path, nodes) -> None:
    """Issue 21.5: after its master dies, a group's promoted slave takes sends within 1 s of
    serving, although routes are cached for 30 s: a producer that avoids a failed master
    fetches the route again (at most every ROUTE_RECHECK_S) until the group is back."""
    ns = start_namesrv(nodes, tmp_path)
    fast = {"registerNameServerPeriod": 1000}
    m_conf = broker_conf(tmp_path, "am", "broker-a", ns.address, **fast)
    am, bm = nodes.start(m_conf), nodes.start(broker_conf(tmp_path, "bm", "broker-b", ns.address, **fast))
    a_s = nodes.start(slave_of(tmp_path, m_conf, "as", ns.address, **fast))
    async with Admin(namesrv=ns.address) as admin:
        await wait_for(lambda: _masters(admin, 2), what="both masters registered")
        await admin.create_topic("Resume", read_queue_nums=2, write_queue_nums=2)
        await wait_for(lambda: _groups(admin, "Resume", 2), what="Resume routed on both groups")
    landed: list[tuple[float, str]] = []
    async with Producer(namesrv=ns.address, send_timeout=2.0) as producer, trio.open_nursery() as nursery:
        async def load() -> None:
            while True:
                try:
                    r = await producer.send("Resume", b"x")
                    landed.append((trio.current_time(), r.address))
                except TidemqError:
                    pass
                await trio.sleep(0.02)  # poll-exempt: pacing

        nursery.start_soon(load)
        await wait_for(lambda: _landed_on(landed, am.address, 0), what="sends on broker-a")
        am.kill()
        async with Admin(namesrv=ns.address) as admin:
            await admin.promote("broker-a", 1, role="ASYNC_MASTER")
        serving = trio.current_time()
        await wait_for(lambda: _landed_on(landed, a_s.address, serving), timeout=10, what="sends on the new master")
        # the other group takes sends throughout (waited for: the first send after the
        # promotion may land on the new master before any lands on broker-b: a whole-suite run saw it)
        await wait_for(lambda: _landed_on(landed, bm.address, serving), timeout=10, what="sends on broker-b")
        nursery.cancel_scope.cancel()
    first = min(t for t, address in landed if address == a_s.address and t >= serving)
    assert first - serving <= 1.0, f"the first send reached the new master {first - serving:.2f} s after it served"


async def _landed_on(landed: list[tuple[float, str]], address: str, since: float) -> bool:
    return any(a == address and t >= since for t, a in landed)
