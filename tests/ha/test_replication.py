"""Master–slave replication end to end: real stores in tmp_path, real TCP on 127.0.0.1.

Small 64 KiB segments make the workloads roll several times. Waits are on conditions with
deadlines (`wait_until`); time-driven behaviour (heartbeats, housekeeping, a slave that
stays silent) runs under trio's MockClock with autojump, so it takes no real time.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import trio

from ha.master import HAService
from ha.protocol import (
    ReportDecoder,
    Transfer,
    TransferDecoder,
    encode_heartbeat,
    encode_report,
    encode_transfer,
    encode_transfer_header,
)
from ha.slave import HAClient
from store.config import BrokerRole, FlushDiskType, StoreConfig
from store.message import Message
from store.message_store import MessageStore, open_store
from store.status import PutMessageStatus
from tests.ha.proxy import PausableProxy
from tests.waiting import wait_until

SEG = 64 * 1024
TOPIC = "TopicTest"


# ---- helpers ----------------------------------------------------------------------------------
def make_config(root: os.PathLike, role: BrokerRole = BrokerRole.ASYNC_MASTER, **kw) -> StoreConfig:
    kw.setdefault("mapped_file_size_commit_log", SEG)
    kw.setdefault("broker_role", role)
    return StoreConfig(store_path_root_dir=str(root), ha_listen_port=0, **kw)


def make_message(i: int, size: int = 1500, queue_id: int | None = None, wait: bool = True) -> Message:
    body = (f"message {i} ".encode() * (size // 8 + 1))[:size]
    props = {} if wait else {"WAIT": "false"}
    return Message(
        topic=TOPIC,
        body=body,
        queue_id=i % 4 if queue_id is None else queue_id,
        tags="TagA",
        keys=(f"key{i}",),
        properties=props,
    )


async def put_workload(store: MessageStore, start: int, count: int, *, size: int = 1500) -> None:
    """Single puts mixed with 5-message batches (one topic-queue each)."""
    i = start
    while i < start + count:
        if i % 3 == 0:
            batch = [make_message(j, size, queue_id=1) for j in range(i, i + 5)]
            result = await store.put_messages(batch)
            i += 5
        else:
            result = await store.put_message(make_message(i, size))
            i += 1
        assert result.ok, result


def segment_names(store: MessageStore) -> list[str]:
    return [mf.file_name for mf in store.commit_log.queue.files]


def caught_up(master: MessageStore, slave: MessageStore) -> Callable[[], bool]:
    return lambda: slave.commit_log.max_offset() == master.commit_log.max_offset()


def assert_identical(master: MessageStore, slave: MessageStore, first: str | None = None) -> None:
    """Same max offset, same segment names (from `first`, default the master's oldest), and
    every segment byte-identical up to the master's max offset."""
    max_offset = master.commit_log.max_offset()
    assert slave.commit_log.max_offset() == max_offset
    master_names = segment_names(master)
    first = master_names[0] if first is None else first
    expected = [n for n in master_names if int(n) >= int(first)]
    assert segment_names(slave) == expected
    for name in expected:
        limit = min(SEG, max_offset - int(name))
        with open(os.path.join(master.config.path("commitlog"), name), "rb") as f:
            want = f.read(limit)
        with open(os.path.join(slave.config.path("commitlog"), name), "rb") as f:
            got = f.read(limit)
        assert len(got) == limit
        assert got == want, f"segment {name} differs"


async def slaves_joined(ha: HAService, count: int = 1) -> None:
    """Wait until `count` slaves made their first report (so none starts at a later segment)."""
    await wait_until(lambda: sum(s.ack_offset >= 0 for s in ha.status()) >= count)


def delete_oldest_segments(store: MessageStore, keep: int) -> None:
    queue = store.commit_log.queue
    while len(queue.files) > keep:
        mf = queue.first()
        while not queue.delete_file(mf, 0):  # a second call forces a held segment
            pass


@asynccontextmanager
async def running_master(root: os.PathLike, **kw) -> AsyncIterator[tuple[MessageStore, HAService]]:
    async with open_store(make_config(root, **kw)) as store, trio.open_nursery() as nursery:
        ha = HAService(store.replica_log, store.config, port=0)
        await nursery.start(ha.run)
        yield store, ha
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def running_slave(root: os.PathLike, port: int, **kw) -> AsyncIterator[tuple[MessageStore, HAClient]]:
    async with open_store(make_config(root, BrokerRole.SLAVE, **kw)) as store, trio.open_nursery() as nursery:
        client = HAClient(store.replica_log, store.config, f"127.0.0.1:{port}")
        await nursery.start(client.run)
        yield store, client
        nursery.cancel_scope.cancel()


async def start_cancellable(nursery: trio.Nursery, run: Callable[..., Awaitable[object]]) -> trio.CancelScope:
    """Start `run` (a `task_status` service) under its own scope, so a test can kill it alone."""
    scope = trio.CancelScope()

    async def wrapper(task_status=trio.TASK_STATUS_IGNORED) -> None:
        with scope:
            await run(task_status=task_status)

    await nursery.start(wrapper)
    return scope


async def read_frames(stream: trio.SocketStream, decoder: TransferDecoder, count: int = 1) -> list[Transfer] | None:
    """Read until `count` frames arrived; None at EOF."""
    frames: list[Transfer] = []
    while len(frames) < count:
        data = await stream.receive_some(65536)
        if not data:
            return None
        frames.extend(decoder.feed(data))
    return frames


async def read_until_eof(stream: trio.SocketStream) -> bytes:
    chunks = []
    while data := await stream.receive_some(65536):
        chunks.append(data)
    return b"".join(chunks)


# ---- async replication ------------------------------------------------------------------------
async def test_async_master_replicates_across_rolls(tmp_path):
    async with running_master(tmp_path / "m", ha_transfer_batch_size=8 * 1024) as (master, ha):
        await put_workload(master, 0, 10)
        async with running_slave(tmp_path / "s", ha.port, ha_transfer_batch_size=8 * 1024) as (slave, client):
            await slaves_joined(ha)
            await put_workload(master, 10, 290)
            assert len(master.commit_log.queue.files) >= 5
            await wait_until(caught_up(master, slave))
            await wait_until(lambda: ha.push2slave_max_offset == master.commit_log.max_offset())
            assert_identical(master, slave)
            [st] = ha.status()
            assert st.ack_offset == master.commit_log.max_offset() and st.lag_bytes == 0
            cst = client.status()
            assert cst.connected and cst.lag_bytes == 0
            assert cst.master_max_offset_seen == master.commit_log.max_offset()
            # The slave's log decodes record by record like the master's.
            assert [o for o, _ in slave.commit_log.iter_records(0)] == [
                o for o, _ in master.commit_log.iter_records(0)
            ]


async def test_empty_slave_joins_at_newest_segment(tmp_path):
    async with running_master(tmp_path / "m") as (master, ha):
        await put_workload(master, 0, 200)
        assert len(master.commit_log.queue.files) >= 4
        delete_oldest_segments(master, keep=2)
        assert master.commit_log.min_offset() > 0
        newest = segment_names(master)[-1]
        async with running_slave(tmp_path / "s", ha.port) as (slave, _client):
            await wait_until(caught_up(master, slave))
            assert segment_names(slave)[0] == newest
            await put_workload(master, 200, 100)
            await wait_until(caught_up(master, slave))
            assert_identical(master, slave, first=newest)
        # Restarted, a slave whose log starts past 0 recovers and resumes where it was.
        await put_workload(master, 300, 50)
        async with running_slave(tmp_path / "s", ha.port) as (slave, _client):
            assert segment_names(slave)[0] == newest
            await wait_until(caught_up(master, slave))
            assert_identical(master, slave, first=newest)


async def test_slave_restart_resumes_from_its_own_offset(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tidemq.ha")
    async with running_master(tmp_path / "m") as (master, ha):
        async with running_slave(tmp_path / "s", ha.port) as (slave, _client):
            await slaves_joined(ha)
            await put_workload(master, 0, 100)
            await wait_until(caught_up(master, slave))
        resumed_from = master.commit_log.max_offset()
        await wait_until(lambda: ha.connection_count == 0)
        await put_workload(master, 100, 120)
        caplog.clear()
        async with running_slave(tmp_path / "s", ha.port) as (slave, _client):
            assert slave.commit_log.max_offset() == resumed_from
            await wait_until(caught_up(master, slave))
            assert_identical(master, slave)
        assert f"reported {resumed_from}; shipping from offset {resumed_from}" in caplog.text


async def test_master_killed_mid_transfer(tmp_path):
    config = make_config(tmp_path / "m", ha_transfer_batch_size=4096)
    async with open_store(config) as master, trio.open_nursery() as nursery:
        ha = HAService(master.replica_log, master.config, port=0)
        kill = await start_cancellable(nursery, ha.run)
        port = ha.port
        async with running_slave(tmp_path / "s", port, ha_transfer_batch_size=4096) as (slave, client):
            await slaves_joined(ha)

            def kill_master_at_two_segments() -> None:
                if slave.commit_log.max_offset() >= 2 * SEG:
                    kill.cancel()

            # armed before the writes: a slave that keeps up would otherwise hold all of them
            # before the hook is there, and the master is never killed
            slave.commit_log.on_append.append(kill_master_at_two_segments)
            await put_workload(master, 0, 200)
            # the slave can see its connection close before the cancelled service's own
            # clean-up has run (the connection's ends before the service's): wait for both
            await wait_until(lambda: kill.cancel_called and not client.connected and master.replicator is None)
            slave.commit_log.on_append.remove(kill_master_at_two_segments)
            assert ha._on_append not in master.commit_log.on_append
            kept = slave.commit_log.max_offset()
            assert kept >= 2 * SEG
            await put_workload(master, 200, 100)  # the master keeps taking writes
            assert slave.commit_log.max_offset() == kept < master.commit_log.max_offset()
            ha2 = HAService(master.replica_log, master.config, port=port)
            await nursery.start(ha2.run)
            await wait_until(caught_up(master, slave))
            assert_identical(master, slave)
            assert master.replicator is ha2
        nursery.cancel_scope.cancel()


async def test_two_slaves_at_different_speeds(tmp_path):
    async with running_master(tmp_path / "m") as (master, ha), trio.open_nursery() as nursery:
        await put_workload(master, 0, 20)
        proxy = PausableProxy(ha.port)
        await nursery.start(proxy.run)
        async with running_slave(tmp_path / "fast", ha.port) as (fast, _a), running_slave(
            tmp_path / "slow", proxy.port
        ) as (slow, _b):
            await wait_until(lambda: caught_up(master, fast)() and caught_up(master, slow)())
            proxy.to_slave.close()
            await put_workload(master, 20, 200)
            await wait_until(caught_up(master, fast))
            await wait_until(lambda: ha.push2slave_max_offset == master.commit_log.max_offset())
            acks = sorted(s.ack_offset for s in ha.status())
            assert acks[0] < acks[1] == master.commit_log.max_offset()
            assert slow.commit_log.max_offset() < master.commit_log.max_offset()
            proxy.to_slave.open()
            await wait_until(caught_up(master, slow))
            assert_identical(master, fast)
            assert_identical(master, slow)
        nursery.cancel_scope.cancel()


async def test_update_master_address_and_backoff(tmp_path):
    async with running_master(tmp_path / "m") as (master, ha):
        await put_workload(master, 0, 10)  # all in segment 0: an empty slave starts there
        # Nothing listens on the address first given: the client keeps retrying with backoff.
        with trio.socket.socket() as s:
            await s.bind(("127.0.0.1", 0))
            dead_port = s.getsockname()[1]
        async with running_slave(tmp_path / "s", dead_port) as (slave, client):
            assert not client.status().connected
            client.update_master_address(f"127.0.0.1:{ha.port}")
            await slaves_joined(ha)
            await put_workload(master, 10, 60)
            await wait_until(caught_up(master, slave))
            assert client.status().master_address == f"127.0.0.1:{ha.port}"
            assert_identical(master, slave)


# ---- SYNC_MASTER ------------------------------------------------------------------------------
async def test_sync_master_put_ok_only_after_slave_has_bytes(tmp_path):
    async with (
        running_master(tmp_path / "m", broker_role=BrokerRole.SYNC_MASTER, slave_timeout=5000) as (master, ha),
        running_slave(tmp_path / "s", ha.port) as (slave, _client),
    ):
        await slaves_joined(ha)
        for i in range(60):
            result = await master.put_message(make_message(i))
            assert result.status is PutMessageStatus.PUT_OK, result
            assert slave.commit_log.max_offset() >= result.append.end_offset
        result = await master.put_messages([make_message(i, queue_id=2) for i in range(5)])
        assert result.status is PutMessageStatus.PUT_OK
        assert slave.commit_log.max_offset() >= result.append.end_offset
        assert_identical(master, slave)


async def test_sync_master_flush_slave_timeout_and_slave_not_available(tmp_path):
    async with running_master(tmp_path / "m", broker_role=BrokerRole.SYNC_MASTER) as (
        master,
        ha,
    ), trio.open_nursery() as nursery:
        # No slave at all.
        result = await master.put_message(make_message(0))
        assert result.status is PutMessageStatus.SLAVE_NOT_AVAILABLE
        assert result.status.stored
        proxy = PausableProxy(ha.port)
        await nursery.start(proxy.run)
        async with running_slave(tmp_path / "s", proxy.port) as (slave, _client):
            await wait_until(lambda: ha.push2slave_max_offset == master.commit_log.max_offset())
            assert (await master.put_message(make_message(1))).status is PutMessageStatus.PUT_OK
            # Acks held back while the connection stays open: the put times out. (slaveTimeout
            # is short only here, so the PUT_OK puts have room on a loaded machine.)
            proxy.to_master.close()
            master.config.slave_timeout = 300
            with trio.fail_after(5):
                result = await master.put_message(make_message(2))
            master.config.slave_timeout = 3000
            assert result.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
            await wait_until(lambda: slave.commit_log.max_offset() >= result.append.end_offset)
            proxy.to_master.open()
            await wait_until(lambda: ha.push2slave_max_offset == master.commit_log.max_offset())
            assert (await master.put_message(make_message(3))).status is PutMessageStatus.PUT_OK
        # The slave is gone (its store closed): no slave connected.
        await wait_until(lambda: ha.connection_count == 0)
        assert (await master.put_message(make_message(4))).status is PutMessageStatus.SLAVE_NOT_AVAILABLE
        nursery.cancel_scope.cancel()


async def test_a_manual_sync_master_shows_consumers_only_what_a_slave_acknowledged(tmp_path):
    """Manual mode (no controller): while a slave is connected the ConsumeQueues (what
    consumers read) stop at the slaves' acks; a slave that leaves holds the limit at its last
    ack for haMaxTimeSlaveNotCatchup (it may be leaving to be promoted); then, with none
    connected, there is no limit."""
    async with running_master(tmp_path / "m", broker_role=BrokerRole.SYNC_MASTER, slave_timeout=3000) as (
        master,
        ha,
    ), trio.open_nursery() as nursery:
        def visible() -> int:
            return master.get_max_offset_in_queue(TOPIC, 0)

        assert (await master.put_message(make_message(0, queue_id=0))).status is PutMessageStatus.SLAVE_NOT_AVAILABLE
        assert ha.visible_end() is None  # a master that never had a slave shows everything
        await wait_until(lambda: visible() == 1, what="the put dispatched")
        proxy = PausableProxy(ha.port)
        await nursery.start(proxy.run)
        async with running_slave(tmp_path / "s", proxy.port) as (slave, _client):
            await slaves_joined(ha)
            assert (await master.put_message(make_message(1, queue_id=0))).status is PutMessageStatus.PUT_OK
            await wait_until(lambda: visible() == 2, what="the acknowledged put dispatched")
            proxy.to_master.close()  # the slave gets the bytes, the master never hears its ack
            master.config.slave_timeout = 300
            result = await master.put_message(make_message(2, queue_id=0))
            assert result.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
            await wait_until(lambda: slave.commit_log.max_offset() >= result.append.end_offset)
            assert ha.visible_end() is not None and ha.visible_end() < result.append.end_offset
            assert visible() == 2
            proxy.to_master.open()
            await wait_until(lambda: visible() == 3, what="the put dispatched once the slave's ack came")
            acked = master.get_max_phy_offset()
            ha.max_silence_s = 1.5  # haMaxTimeSlaveNotCatchup, short for the test
        await wait_until(lambda: ha.connection_count == 0)
        result = await master.put_message(make_message(3, queue_id=0))
        assert result.status is PutMessageStatus.SLAVE_NOT_AVAILABLE
        assert ha.visible_end() == acked and visible() == 3  # the departed slave's last ack holds it
        await wait_until(lambda: visible() == 4, timeout=10, what="the put dispatched once the slave's hold ended")
        assert ha.visible_end() is None  # no slave: consumers go on (SLAVE_NOT_AVAILABLE names the window)
        nursery.cancel_scope.cancel()


async def test_a_manual_sync_master_with_two_slaves_answers_put_ok_only_when_both_hold_it(tmp_path):
    """A PUT_OK is on every slave of the group, so the operator may promote either: one ack
    is not enough, and with one of the two gone the puts answer SLAVE_NOT_AVAILABLE (the
    simulation found the other slave's ack confirming writes the promoted one never got).
    Slaves are counted by host (a slave that reconnects before its old connection is found
    dead is not a second one) and by the name servers' registrations."""
    async with running_master(tmp_path / "m", broker_role=BrokerRole.SYNC_MASTER, slave_timeout=3000) as (
        master,
        ha,
    ), trio.open_nursery() as nursery:
        proxy = PausableProxy(ha.port)
        await nursery.start(proxy.run)
        async with running_slave(tmp_path / "fast", ha.port) as (fast, _a):
            async with running_slave(tmp_path / "slow", proxy.port) as (slow, _b):
                await slaves_joined(ha, 2)
                assert ha.acks_needed() == 1  # both on 127.0.0.1: slaves are counted by host
                ha.expect(2)  # what an epoch check learns from the name servers' registrations
                assert ha.acks_needed() == 2
                result = await master.put_message(make_message(0, queue_id=0))
                assert result.status is PutMessageStatus.PUT_OK
                assert min(fast.commit_log.max_offset(), slow.commit_log.max_offset()) >= result.append.end_offset
                proxy.to_slave.close()  # the slow slave gets nothing more: the fast one's ack alone
                master.config.slave_timeout = 300
                result = await master.put_message(make_message(1, queue_id=0))
                assert result.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
                assert fast.commit_log.max_offset() >= result.append.end_offset
                assert ha.visible_end() is not None and ha.visible_end() < result.append.end_offset
                master.config.slave_timeout = 3000
                proxy.to_slave.open()
                await wait_until(caught_up(master, slow))
                assert (await master.put_message(make_message(2, queue_id=0))).status is PutMessageStatus.PUT_OK
                ha.max_silence_s = 1.5  # haMaxTimeSlaveNotCatchup, short for the test
            await wait_until(lambda: ha.connection_count == 1, what="the slow slave gone")
            result = await master.put_message(make_message(3, queue_id=0))
            assert result.status is PutMessageStatus.SLAVE_NOT_AVAILABLE  # one of the term's two slaves
            await wait_until(lambda: fast.commit_log.max_offset() >= result.append.end_offset)
            # the slow slave's last ack holds the limit a while (it may be leaving to be
            # promoted), then the limit follows the slave that is there, so consumers go on
            await wait_until(lambda: master.get_max_offset_in_queue(TOPIC, 0) == 4, timeout=10, what="dispatched")
        nursery.cancel_scope.cancel()


async def test_an_async_master_shows_consumers_only_what_its_in_sync_slave_holds(tmp_path):
    """The confirm offset in every mode: an ASYNC_MASTER answers PUT_OK at once, but
    consumers see a record only once every in-sync slave acked it; a slave that leaves
    holds the limit at its last ack for haMaxTimeSlaveNotCatchup, then (the master alone)
    there is no limit."""
    async with running_master(tmp_path / "m", broker_role=BrokerRole.ASYNC_MASTER) as (master, ha), \
            trio.open_nursery() as nursery:
        def visible() -> int:
            return master.get_max_offset_in_queue(TOPIC, 0)

        assert (await master.put_message(make_message(0, queue_id=0))).status is PutMessageStatus.PUT_OK
        assert ha.visible_end() is None  # the master alone
        await wait_until(lambda: visible() == 1, what="the put dispatched")
        proxy = PausableProxy(ha.port)
        await nursery.start(proxy.run)
        async with running_slave(tmp_path / "s", proxy.port) as (slave, _client):
            await slaves_joined(ha)
            await wait_until(lambda: ha.visible_end() == master.commit_log.max_offset(), what="the slave in sync")
            proxy.to_master.close()  # the slave gets the bytes, the master never hears its ack
            result = await master.put_message(make_message(1, queue_id=0))
            assert result.status is PutMessageStatus.PUT_OK  # ASYNC: not waiting for the slave
            await wait_until(lambda: slave.commit_log.max_offset() >= result.append.end_offset)
            await trio.testing.wait_all_tasks_blocked()
            assert visible() == 1  # stored, acknowledged, not on the slave as far as the master knows
            assert ha.visible_end() is not None and ha.visible_end() < result.append.end_offset
            assert ha.confirm_offset() < result.append.end_offset
            proxy.to_master.open()
            await wait_until(lambda: visible() == 2, what="the put dispatched once the slave's ack came")
            assert ha.confirm_offset() >= result.append.end_offset
            held = master.get_max_phy_offset()
            ha.max_silence_s = 1.5  # haMaxTimeSlaveNotCatchup, short for the test
        await wait_until(lambda: ha.connection_count == 0)
        assert (await master.put_message(make_message(2, queue_id=0))).status is PutMessageStatus.PUT_OK
        assert ha.visible_end() == held  # the slave that left holds the limit at its last ack a while
        await wait_until(lambda: visible() == 3, timeout=10, what="the put dispatched once the hold ended")
        assert ha.visible_end() is None  # the master alone again
        nursery.cancel_scope.cancel()


async def test_read_uncommitted_turns_the_limit_off(tmp_path):
    """readUnCommitted (RocketMQ 5's key, default false): consumers see a record at once,
    though no slave acked it; the confirm offset slaves learn is unchanged by it."""
    async with running_master(tmp_path / "m", broker_role=BrokerRole.ASYNC_MASTER, read_un_committed=True) as (
        master,
        ha,
    ), trio.open_nursery() as nursery:
        proxy = PausableProxy(ha.port)
        await nursery.start(proxy.run)
        async with running_slave(tmp_path / "s", proxy.port):
            await slaves_joined(ha)
            await wait_until(lambda: ha.confirm_limit() == master.commit_log.max_offset(), what="the slave in sync")
            proxy.to_master.close()
            result = await master.put_message(make_message(0, queue_id=0))
            assert result.status is PutMessageStatus.PUT_OK
            await wait_until(lambda: master.get_max_offset_in_queue(TOPIC, 0) == 1, what="dispatched unconfirmed")
            assert ha.visible_end() is None
            confirm = ha.confirm_limit()
            assert confirm is not None and confirm < result.append.end_offset
            proxy.to_master.open()
        nursery.cancel_scope.cancel()


async def test_a_slave_that_stops_catching_up_leaves_the_in_sync_set_after_the_silence(tmp_path):
    """Manual mode's in-sync set keeps a slave haMaxTimeSlaveNotCatchup (`max_silence_s`)
    after it last caught up (RocketMQ 5's lastCaughtUpTime), however far behind it falls:
    cut off, it could not learn that a gap rule dropped it, and would pass its promotion
    check (seed 1442). Then the master confirms alone; the slave is back once it catches up."""
    async with open_store(make_config(tmp_path / "m")) as master, trio.open_nursery() as nursery:
        ha = HAService(master.replica_log, master.config, port=0, max_gap=4096, max_silence_s=1.0)
        await nursery.start(ha.run)
        proxy = PausableProxy(ha.port)
        await nursery.start(proxy.run)
        async with running_slave(tmp_path / "s", proxy.port) as (slave, _client):
            await slaves_joined(ha)
            await wait_until(lambda: ha.visible_end() is not None, what="the slave in sync")
            held = ha.visible_end()
            proxy.to_slave.close()  # the slave gets nothing more
            await put_workload(master, 0, 10)  # 15 KB: beyond the 4 KiB gap
            assert len(ha.members()) == 1 and ha.visible_end() == held  # not dropped by the gap
            assert master.get_max_offset_in_queue(TOPIC, 1) == 0
            await wait_until(lambda: master.get_max_offset_in_queue(TOPIC, 1) > 0,
                             what="dispatched past the slave once the silence passed")
            assert ha.visible_end() is None and ha.members() == []
            proxy.to_slave.open()
            await wait_until(caught_up(master, slave))
            await wait_until(lambda: len(ha.members()) == 1, what="the slave back in sync")
        nursery.cancel_scope.cancel()


async def test_sync_master_with_sync_flush_waits_for_both_within_slave_timeout(tmp_path):
    """SYNC_MASTER + SYNC_FLUSH: PUT_OK needs the fdatasync and the slave's ack; with acks
    held back the put answers FLUSH_SLAVE_TIMEOUT after slaveTimeout, counted from the put
    (not after the flush wait as well)."""
    async with running_master(
        tmp_path / "m", broker_role=BrokerRole.SYNC_MASTER, flush_disk_type=FlushDiskType.SYNC_FLUSH
    ) as (master, ha), trio.open_nursery() as nursery:
        proxy = PausableProxy(ha.port)
        await nursery.start(proxy.run)
        async with running_slave(tmp_path / "s", proxy.port) as (slave, _client):
            await slaves_joined(ha)
            result = await master.put_message(make_message(0))
            assert result.status is PutMessageStatus.PUT_OK
            assert master.commit_log.queue.flushed_where >= result.append.end_offset
            assert ha.push2slave_max_offset >= result.append.end_offset
            proxy.to_master.close()
            master.config.slave_timeout = 300
            t0 = trio.current_time()
            with trio.fail_after(5):
                result = await master.put_message(make_message(1))
            waited = trio.current_time() - t0
            master.config.slave_timeout = 3000
            assert result.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
            assert 0.3 <= waited < 2.0
            assert master.commit_log.queue.flushed_where >= result.append.end_offset  # flushed all the same
            proxy.to_master.open()
            await wait_until(lambda: ha.push2slave_max_offset == master.commit_log.max_offset())
        nursery.cancel_scope.cancel()


async def test_sync_master_lagging_slave_not_available(tmp_path):
    async with running_master(
        tmp_path / "m", broker_role=BrokerRole.SYNC_MASTER, ha_slave_fallbehind_max=4096
    ) as (master, ha), trio.open_nursery() as nursery:
        proxy = PausableProxy(ha.port)
        await nursery.start(proxy.run)
        async with running_slave(tmp_path / "s", proxy.port) as (slave, _client):
            await slaves_joined(ha)
            assert (await master.put_message(make_message(0))).status is PutMessageStatus.PUT_OK
            proxy.to_slave.close()  # the slave falls behind
            for i in range(1, 5):  # WAIT=false: stored without waiting for the slave
                assert (await master.put_message(make_message(i, wait=False))).status is PutMessageStatus.PUT_OK
            assert ha.slave_fall_behind_much() >= 4096
            result = await master.put_message(make_message(5))
            assert result.status is PutMessageStatus.SLAVE_NOT_AVAILABLE
            proxy.to_slave.open()
            await wait_until(lambda: ha.push2slave_max_offset == master.commit_log.max_offset())
            assert (await master.put_message(make_message(6))).status is PutMessageStatus.PUT_OK
            assert_identical(master, slave)
        nursery.cancel_scope.cancel()


# ---- the master's first-offset rule, with raw sockets as slaves ----------------------------------
async def test_master_refuses_report_beyond_max_and_below_min(tmp_path):
    async with running_master(tmp_path / "m") as (master, ha):
        await put_workload(master, 0, 150)
        delete_oldest_segments(master, keep=2)
        max_offset, min_offset = master.commit_log.max_offset(), master.commit_log.min_offset()
        for bad in (max_offset + 1, min_offset - 100):
            with trio.fail_after(5):
                stream = await trio.open_tcp_stream("127.0.0.1", ha.port)
                async with stream:
                    await stream.send_all(encode_report(bad))
                    assert await read_until_eof(stream) == b""
        # A later report beyond the max closes the connection too.
        with trio.fail_after(5):
            stream = await trio.open_tcp_stream("127.0.0.1", ha.port)
            async with stream:
                await stream.send_all(encode_report(max_offset))
                await wait_until(lambda: ha.status() and ha.status()[0].ack_offset == max_offset)
                await stream.send_all(encode_report(max_offset + 10))
                await read_until_eof(stream)
        await wait_until(lambda: ha.connection_count == 0)


async def test_master_ships_from_newest_segment_on_report_zero(tmp_path):
    async with running_master(tmp_path / "m", ha_transfer_batch_size=16 * 1024) as (master, ha):
        await put_workload(master, 0, 150)
        newest = master.commit_log.queue.last().file_from_offset
        assert newest > 0
        max_offset = master.commit_log.max_offset()
        with trio.fail_after(5):
            stream = await trio.open_tcp_stream("127.0.0.1", ha.port)
            async with stream:
                await stream.send_all(encode_report(0))
                decoder = TransferDecoder(16 * 1024)
                frames: list[Transfer] = []
                while not frames or frames[-1].end < max_offset:
                    frames += await read_frames(stream, decoder)
        assert frames[0].offset == newest
        assert all(a.end == b.offset for a, b in zip(frames, frames[1:], strict=False))
        assert all(0 < len(f.body) <= 16 * 1024 for f in frames)
        with master.commit_log.get_data(newest) as selected:
            assert b"".join(f.body for f in frames) == bytes(selected.view)


# ---- time-driven behaviour under MockClock ---------------------------------------------------------
async def test_master_waits_for_first_report_then_heartbeats_then_housekeeps(tmp_path, autojump_clock):
    async with running_master(tmp_path / "m") as (master, ha):
        await put_workload(master, 0, 10)
        max_offset = master.commit_log.max_offset()
        stream = await trio.open_tcp_stream("127.0.0.1", ha.port)
        async with stream:
            # Silent like a RocketMQ 4.9 slave for its first ~5 s: nothing is sent meanwhile.
            with trio.move_on_after(10) as silent:
                await stream.receive_some(65536)
            assert silent.cancelled_caught
            assert ha.connection_count == 1
            await stream.send_all(encode_report(0))
            decoder = TransferDecoder()
            frames = await read_frames(stream, decoder)
            assert frames[0].offset == 0 and frames[0].end == max_offset  # one batch: < 32 KiB
            # Caught up and idle: a heartbeat carrying the next offset after haSendHeartbeatInterval.
            start = trio.current_time()
            [beat] = await read_frames(stream, decoder)
            elapsed = trio.current_time() - start
            assert beat.is_heartbeat and beat.offset == max_offset
            assert 5.0 <= elapsed < 5.2
            # No report since the first: closed haHousekeepingInterval after that read.
            beats = 1
            while (more := await read_frames(stream, decoder)) is not None:
                assert all(f.is_heartbeat for f in more)
                beats += len(more)
            assert 20.0 <= trio.current_time() - start < 20.2
            assert beats >= 3
        await wait_until(lambda: ha.connection_count == 0)


async def test_master_closes_a_connection_that_never_reports(tmp_path, autojump_clock):
    async with running_master(tmp_path / "m") as (master, ha):
        await put_workload(master, 0, 10)
        stream = await trio.open_tcp_stream("127.0.0.1", ha.port)
        async with stream:
            start = trio.current_time()
            assert await read_until_eof(stream) == b""  # no data, no heartbeat, then closed
            assert 20.0 <= trio.current_time() - start < 20.2


async def test_slave_reports_at_once_and_closes_a_silent_master(tmp_path, autojump_clock):
    accepted: trio.MemorySendChannel
    accepted, connections = trio.open_memory_channel(10)

    async def fake_master(stream: trio.SocketStream) -> None:
        start = trio.current_time()
        reports = []
        async with stream:
            while data := await stream.receive_some(64):
                reports.append((trio.current_time() - start, data))
        await accepted.send((reports, trio.current_time() - start))

    async with trio.open_nursery() as nursery:
        [listener] = await nursery.start(functools.partial(trio.serve_tcp, fake_master, 0, host="127.0.0.1"))
        port = listener.socket.getsockname()[1]
        async with running_slave(tmp_path / "s", port) as (slave, client):
            reports, lifetime = await connections.receive()
            assert reports[0][1] == encode_report(0)
            assert reports[0][0] < 1.0  # reported on connect, not after 5 s as RocketMQ 4.9 does
            times = [t for t, _ in reports[1:4]]
            assert all(abs(t - want) < 0.1 for t, want in zip(times, [5.0, 10.0, 15.0], strict=True))
            assert 20.0 <= lifetime < 20.2  # nothing read for haHousekeepingInterval
            reports, _ = await connections.receive()  # it reconnects
            assert reports[0][1] == encode_report(0)
            assert slave.commit_log.max_offset() == 0
        nursery.cancel_scope.cancel()


# ---- slave-side checks against a fake master --------------------------------------------------------
async def test_slave_drops_connection_on_bad_frames(tmp_path):
    """Offset mismatch, an empty log offered a mid-segment start, an oversized body: each
    closes the connection; the slave reconnects and reports its (unchanged) offset."""
    script = [  # frames sent on the n-th connection
        [encode_transfer(SEG + 100, b"x" * 10)],  # empty log: only a segment boundary works
        [encode_transfer(0, b"a" * 100), encode_transfer(5000, b"b" * 10)],  # mismatch after 100
        [encode_transfer_header(100, 32 * 1024 + 1)],  # body over the batch limit
        [encode_heartbeat(100), encode_transfer(100, b"c" * 50)],  # fine; then the master closes
    ]
    seen: list[int] = []
    done = trio.Event()

    async def receive_report(stream: trio.SocketStream) -> int:
        data = b""
        while len(data) < 8:
            more = await stream.receive_some(8 - len(data))
            assert more
            data += more
        return int.from_bytes(data, "big")

    async def fake_master(stream: trio.SocketStream) -> None:
        async with stream:
            seen.append(await receive_report(stream))
            if len(seen) > len(script):
                done.set()
                await trio.sleep_forever()
            for frame in script[len(seen) - 1]:
                await stream.send_all(frame)
            if len(seen) == len(script):
                # the report after the append; when the two frames reach the slave in
                # separate reads, the heartbeat's reports come first (a tidemq slave offers
                # the HA extension on its first frame: 100, 0, 100; ha/protocol.py)
                report = await receive_report(stream)
                while report in (0, 100):
                    report = await receive_report(stream)
                seen.append(report)
                return
            await read_until_eof(stream)

    async with trio.open_nursery() as nursery:
        [listener] = await nursery.start(functools.partial(trio.serve_tcp, fake_master, 0, host="127.0.0.1"))
        port = listener.socket.getsockname()[1]
        async with running_slave(tmp_path / "s", port) as (slave, client):
            with trio.fail_after(10):
                await done.wait()
            assert seen == [0, 0, 100, 100, 150, 150]
            assert segment_names(slave) == ["00000000000000000000"]
            with slave.commit_log.get_data(0) as selected:
                assert bytes(selected.view) == b"a" * 100 + b"c" * 50
            assert client.status().master_max_offset_seen == 150
        nursery.cancel_scope.cancel()


async def test_empty_slave_starts_at_a_later_segment_boundary(tmp_path):
    """The store fix this relies on: CommitLog.append_data on an empty log creates the first
    segment at the given boundary (RocketMQ: startOffset - startOffset % fileSize)."""
    async with open_store(make_config(tmp_path / "s", BrokerRole.SLAVE)) as slave:
        cl = slave.commit_log
        assert not cl.append_data(3 * SEG + 8, b"x")  # mid-segment: refused, nothing created
        assert cl.queue.last() is None
        assert cl.append_data(3 * SEG, b"y" * 10)
        assert segment_names(slave) == [f"{3 * SEG:020d}"]
        assert cl.max_offset() == 3 * SEG + 10 and cl.min_offset() == 3 * SEG
        assert not cl.append_data(3 * SEG, b"z")  # not at the end any more


async def test_slave_queues_and_index_answer_like_the_master(tmp_path):
    """The slave's ReputMessageService builds its ConsumeQueue and index from replicated
    bytes (batches cut records anywhere), so reads by queue, key and msgId agree."""
    async with (
        running_master(tmp_path / "m", ha_transfer_batch_size=1000) as (master, ha),
        running_slave(tmp_path / "s", ha.port, ha_transfer_batch_size=1000) as (slave, _client),
    ):
        await slaves_joined(ha)
        await put_workload(master, 0, 120, size=700)
        await wait_until(caught_up(master, slave))
        await wait_until(lambda: slave.dispatch_behind_bytes() == 0 and master.dispatch_behind_bytes() == 0)
        for qid in range(4):
            assert slave.get_max_offset_in_queue(TOPIC, qid) == master.get_max_offset_in_queue(TOPIC, qid)
            want = master.get_message("g", TOPIC, qid, 0, 32)
            got = slave.get_message("g", TOPIC, qid, 0, 32)
            assert got.status == want.status
            assert [(m.msg_id, m.body, m.queue_offset) for m in got.messages] == [
                (m.msg_id, m.body, m.queue_offset) for m in want.messages
            ]
        for i in (0, 7, 64, 119):
            want = [m.msg_id for m in master.query_message(TOPIC, f"key{i}")]
            assert want and [m.msg_id for m in slave.query_message(TOPIC, f"key{i}")] == want
            assert slave.look_message_by_msg_id(want[0]).body == master.look_message_by_msg_id(want[0]).body


async def test_replicating_from_names_the_live_connection_and_none_while_it_is_replaced(tmp_path):
    """Issue 38: right after update_master_address the old connection is still open
    (cancelled, not yet unwound), so `connected` stays True; `replicating_from` already says
    no master's bytes are to be trusted as the new one's until the client reconnects."""
    async with running_master(tmp_path / "m") as (master, ha):
        await put_workload(master, 0, 10)
        old = f"127.0.0.1:{ha.port}"
        async with running_slave(tmp_path / "s", ha.port) as (slave, client):
            await wait_until(caught_up(master, slave))
            assert client.replicating_from() == (old, 1)
            client.update_master_address("127.0.0.1:1")  # the new master (nothing listens there)
            assert client.connected  # what the etcd controller asked: still the old connection
            assert client.replicating_from() is None
            client.update_master_address(old)  # back before it unwound: still the cancelled one
            assert client.connected and client.replicating_from() is None
            await wait_until(lambda: client.replicating_from() is not None)
            assert client.replicating_from() == (old, 2)


async def test_a_tidemq_slave_of_a_rocketmq_4x_master_sends_only_reports_and_serves_its_log(tmp_path):
    """Against a master that speaks only RocketMQ 4.x's HA wire (raw here: it never answers
    the offer), the slave's bytes are all plain 8-byte reports (the offer is E, 0, E) and,
    with no confirm offset, it serves its whole log as before."""
    async with running_master(tmp_path / "m") as (master, _ha):
        await put_workload(master, 0, 6)
        end = master.commit_log.max_offset()
        with master.replica_log.read(0) as selected:
            data = bytes(selected.view[: selected.size])
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        received = bytearray()
        async with trio.open_nursery() as nursery:
            async def raw_master() -> None:
                stream = await listeners[0].accept()
                async with stream:
                    while len(received) < 8:
                        received.extend(await stream.receive_some(64))
                    await stream.send_all(encode_transfer(0, data))
                    while (chunk := await stream.receive_some(64)):
                        received.extend(chunk)
            nursery.start_soon(raw_master)
            async with running_slave(tmp_path / "s", port) as (slave, client):
                await wait_until(lambda: len(received) >= 32, what="the first report and the offer")
                await wait_until(lambda: slave.get_max_offset_in_queue(TOPIC, 1) > 0, what="dispatched")
                assert client.confirm_offset is None and client.visible_end() is None
            nursery.cancel_scope.cancel()
        for listener in listeners:
            await listener.aclose()
    reports = ReportDecoder().feed(bytes(received))
    assert len(received) % 8 == 0 and all(r >= 0 for r in reports)
    assert reports[:4] == [0, end, 0, end]  # first report, then the offer


async def test_an_append_during_a_confirm_only_write_wakes_the_writer(tmp_path):
    """With a tidemq slave, each ack moves the confirm offset and the caught-up writer sends
    it alone; a put appended while that write is under way must be sent at once, not after
    the writer's 100 ms fallback (sequential SYNC_MASTER puts, each read back once
    dispatched, hit it every other put: 102 ms a delivery)."""
    async with running_master(tmp_path / "m", broker_role=BrokerRole.SYNC_MASTER, slave_timeout=3000) as (
        master,
        ha,
    ), running_slave(tmp_path / "s", ha.port):
        await slaves_joined(ha)
        assert (await master.put_message(make_message(0, queue_id=0))).status is PutMessageStatus.PUT_OK
        # a slave offers the extension once it holds a record
        await wait_until(lambda: any(c.extension for c in ha._connections), what="the slave took the extension")
        for i in range(1, 31):
            result = await master.put_message(make_message(i, queue_id=0))
            assert result.status is PutMessageStatus.PUT_OK
            while master.get_max_offset_in_queue(TOPIC, 0) <= result.append.queue_offset:
                await master.reput.wait_dispatched(TOPIC, 0)
        assert ha.missed_wakeups == 0


async def test_a_confirm_offset_rides_on_the_next_push_and_alone_only_when_none_comes(tmp_path):
    """Each ack moves the confirm offset; sent alone at once, it woke the slave a second time
    per SYNC_MASTER round trip. It waits up to CONFIRM_LINGER_S for the next append's frame,
    so sequential puts send few confirm-only frames, and after the last put the slave still
    learns the final confirm offset."""
    async with running_master(tmp_path / "m", broker_role=BrokerRole.SYNC_MASTER, slave_timeout=3000) as (
        master,
        ha,
    ), running_slave(tmp_path / "s", ha.port) as (_, client):
        await slaves_joined(ha)
        assert (await master.put_message(make_message(0, queue_id=0))).status is PutMessageStatus.PUT_OK
        await wait_until(lambda: any(c.extension for c in ha._connections), what="the slave took the extension")
        (conn,) = ha._connections
        before = conn.confirms_alone
        for i in range(1, 41):
            assert (await master.put_message(make_message(i, queue_id=0))).status is PutMessageStatus.PUT_OK
            await trio.sleep(0.0003)  # poll: a producer's think time between puts, well within the linger
        end = master.commit_log.max_offset()
        await wait_until(lambda: client.confirm_offset == end, what="the slave learns the last confirm offset")
        assert conn.confirms_alone - before <= 20  # one after every ack (40) without the linger
        assert ha.missed_wakeups == 0
