"""MessageStore.attach_replicator / add_append_listener: the one way the HA service hooks
into the store. A SYNC_MASTER put waits on the attached replicator only."""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing

from store import BrokerRole, Message, PutMessageStatus, StoreConfig, open_store


class AckAll:
    """A replicator whose slave has acked everything: puts wait for it and get PUT_OK."""

    def __init__(self) -> None:
        self.waited: list[int] = []

    def is_slave_ok(self, master_put_where: int) -> bool:
        return True

    async def wait_for_slave(self, next_offset: int, timeout_s: float) -> bool:
        self.waited.append(next_offset)
        return True


async def test_attach_detach_and_append_listeners(tmp_path):
    config = StoreConfig(store_path_root_dir=str(tmp_path), broker_role=BrokerRole.SYNC_MASTER,
                         mapped_file_size_commit_log=64 * 1024)
    async with open_store(config) as store:
        r = await store.put_message(Message("T", b"x"))
        assert r.status is PutMessageStatus.SLAVE_NOT_AVAILABLE  # nothing attached
        replicator, other = AckAll(), AckAll()
        store.attach_replicator(replicator)
        store.attach_replicator(replicator)  # the same one again: fine
        with pytest.raises(RuntimeError, match="another replicator"):
            store.attach_replicator(other)
        appends: list[int] = []

        def listener() -> None:
            appends.append(store.get_max_phy_offset())

        store.add_append_listener(listener)
        r = await store.put_message(Message("T", b"y"))
        assert r.status is PutMessageStatus.PUT_OK
        assert replicator.waited == [r.append.end_offset] == appends
        store.remove_append_listener(listener)
        store.detach_replicator(other)  # not attached: no-op
        assert store.replicator is replicator
        store.detach_replicator(replicator)
        assert store.replicator is None
        r = await store.put_message(Message("T", b"z"))
        assert r.status is PutMessageStatus.SLAVE_NOT_AVAILABLE
        assert len(appends) == 1  # the removed listener heard nothing more
        with pytest.raises(AttributeError):
            store.replicator = other  # one owner: only attach_replicator sets it


class AckUpTo:
    """A replicator whose slave acked up to `acked` and no further."""

    def __init__(self, acked: int) -> None:
        self.acked = acked
        self.waits: list[tuple[int, float]] = []

    def is_slave_ok(self, master_put_where: int) -> bool:
        return True

    async def wait_for_slave(self, next_offset: int, timeout_s: float) -> bool:
        self.waits.append((next_offset, timeout_s))
        return next_offset <= self.acked


async def test_a_group_of_puts_waits_once_and_each_put_gets_its_own_status(tmp_path):
    """finish_puts: one wait for the group's largest end offset; after its timeout each
    put is judged by its own end: acked ones PUT_OK, the rest FLUSH_SLAVE_TIMEOUT, puts
    without WAIT PUT_OK, a refused one keeps its status."""
    config = StoreConfig(store_path_root_dir=str(tmp_path), broker_role=BrokerRole.SYNC_MASTER,
                         mapped_file_size_commit_log=64 * 1024)
    async with open_store(config) as store:
        msgs = [Message("G", b"m%d" % i) for i in range(4)]
        prepared = [store.prepare_message(m) for m in msgs]
        prepared.insert(2, store.prepare_message(Message("G", b"x", queue_id=-1)))  # refused
        appended = store.append_prepared(prepared)
        ends = [a.end_offset for i, a in enumerate(appended) if i != 2]
        replicator = AckUpTo(ends[1])
        store.attach_replicator(replicator)
        results = await store.finish_puts([(a, i != 3) for i, a in enumerate(appended)])
        assert [r.status for r in results] == [
            PutMessageStatus.PUT_OK, PutMessageStatus.PUT_OK, PutMessageStatus.MESSAGE_ILLEGAL,
            PutMessageStatus.PUT_OK,  # no WAIT
            PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
        ]
        assert replicator.waits[0][0] == ends[3]  # the group's one real wait: its largest end
        assert all(timeout == 0.0 for _, timeout in replicator.waits[1:])
        # one group, one write: contiguous records in put order
        assert [r.commitlog_offset for r in results if r.append] == sorted(r.commitlog_offset for r in results
                                                                           if r.append)
        assert [store.look_message_by_offset(r.commitlog_offset).body for r in results if r.append] == [
            b"m0", b"m1", b"m2", b"m3"]


async def test_dispatch_stops_at_the_visible_end_and_a_clean_exit_dispatches_the_rest(tmp_path):
    """ReplicaLog.limit_visibility (RocketMQ 5's confirmOffset): consumers see no record that
    ends past the limit; moving it wakes dispatch and a long poll parked on the queue; a
    shutdown dispatches the rest, so the exit is clean and a reopened store shows it all."""
    config = StoreConfig(store_path_root_dir=str(tmp_path), broker_role=BrokerRole.ASYNC_MASTER,
                         mapped_file_size_commit_log=64 * 1024)
    limit = [0]
    async with open_store(config) as store:
        store.replica_log.limit_visibility(lambda: limit[0])
        ends = [(await store.put_message(Message("V", b"m%d" % i, queue_id=0))).append.end_offset
                for i in range(3)]
        await trio.testing.wait_all_tasks_blocked()
        assert store.get_max_offset_in_queue("V", 0) == 0  # appended, none visible
        limit[0] = ends[0] + 1  # the second record does not fit below the limit
        store.replica_log.visibility_moved()
        await trio.testing.wait_all_tasks_blocked()
        assert store.get_max_offset_in_queue("V", 0) == 1
        assert [m.body for m in store.get_message("g", "V", 0, 0, 10).messages] == [b"m0"]
        limit[0] = ends[1]
        async with trio.open_nursery() as nursery:
            woken = trio.Event()

            async def long_poll() -> None:
                await store.reput.wait_dispatched("V", 0)
                woken.set()
            nursery.start_soon(long_poll)
            await trio.testing.wait_all_tasks_blocked()
            assert not woken.is_set()
            store.replica_log.visibility_moved()
            with trio.fail_after(5):
                await woken.wait()
        assert store.get_max_offset_in_queue("V", 0) == 2
        store.replica_log.limit_visibility(None)
        await trio.testing.wait_all_tasks_blocked()
        assert store.get_max_offset_in_queue("V", 0) == 3
        store.replica_log.limit_visibility(lambda: ends[0])
        await store.put_message(Message("V", b"tail", queue_id=0))
        await trio.testing.wait_all_tasks_blocked()
        assert store.get_max_offset_in_queue("V", 0) == 3
    assert not (tmp_path / "abort").exists()  # shutdown dispatched the tail: a clean exit
    async with open_store(config) as store:
        assert [m.body for m in store.get_message("g", "V", 0, 0, 10).messages] == [b"m0", b"m1", b"m2", b"tail"]


async def test_the_confirm_offset_known_holds_dispatch_across_a_restart_as_slave(tmp_path):
    """The confirm offset a node last knew (the checkpoint's confirmPhyOffset) is where a
    shutdown stops dispatch and where a store reopened as a slave stops it: a fenced master
    rejoining, or a restarted slave, serves nothing past it. Reopened as a master, or once
    the hold is released (a promotion), it dispatches the rest."""
    config = StoreConfig(store_path_root_dir=str(tmp_path), broker_role=BrokerRole.ASYNC_MASTER,
                         mapped_file_size_commit_log=64 * 1024)
    limit = [0]
    async with open_store(config) as store:
        store.replica_log.limit_visibility(lambda: limit[0])  # what the HA service does
        ends = [(await store.put_message(Message("V", b"m%d" % i, queue_id=0))).append.end_offset
                for i in range(3)]
        limit[0] = ends[0]
        store.replica_log.note_confirm(ends[0])
        store.replica_log.visibility_moved()
        await trio.testing.wait_all_tasks_blocked()
        assert store.get_max_offset_in_queue("V", 0) == 1
        store.replica_log.hold_at_known_confirm()  # the service stops before the store
        store.replica_log.limit_visibility(None)
        await trio.testing.wait_all_tasks_blocked()
        assert store.get_max_offset_in_queue("V", 0) == 1
    assert not (tmp_path / "abort").exists()  # the held tail is no unclean exit
    as_slave = attrs.evolve(config, broker_role=BrokerRole.SLAVE)
    async with open_store(as_slave) as store:
        await trio.testing.wait_all_tasks_blocked()
        assert store.get_max_offset_in_queue("V", 0) == 1
        assert store.replica_log.known_confirm == ends[0]
        store.replica_log.release_hold()  # promoted: what it holds is its own
        await trio.testing.wait_all_tasks_blocked()
        assert store.get_max_offset_in_queue("V", 0) == 3


async def test_a_store_reopened_as_master_holds_at_the_confirm_offset_known_until_its_limit_attaches(tmp_path):
    """A master's recovery dispatches nothing past the confirm offset its checkpoint kept:
    its replication service decides when consumers see the rest (a restarted master's hold,
    ha/master.py), and a master alone (its limit says None) shows it all then (seed 1647)."""
    config = StoreConfig(store_path_root_dir=str(tmp_path), broker_role=BrokerRole.ASYNC_MASTER,
                         mapped_file_size_commit_log=64 * 1024)
    async with open_store(config) as store:
        store.replica_log.limit_visibility(lambda: 0)
        first = await store.put_message(Message("V", b"m0", queue_id=0))
        store.replica_log.note_confirm(first.append.end_offset)
        await store.put_message(Message("V", b"m1", queue_id=0))
        store.replica_log.hold_at_known_confirm()
        store.replica_log.limit_visibility(None)
    async with open_store(config) as store:
        assert store.get_max_offset_in_queue("V", 0) == 1  # m1 lies past the confirm offset known
        assert store.replica_log.known_confirm == first.append.end_offset
        # m1 took queue offset 1 when it was written: held back or not, a put takes the next
        assert (await store.put_message(Message("V", b"m2", queue_id=0))).append.queue_offset == 2
        store.replica_log.limit_visibility(lambda: None)  # the replication service of a master alone
        with trio.fail_after(5):
            while store.get_max_offset_in_queue("V", 0) < 3:
                await trio.sleep(0.01)  # poll: the reput service dispatches on its own turn
        assert [m.body for m in store.get_message("g", "V", 0, 0, 10).messages] == [b"m0", b"m1", b"m2"]


async def test_a_cap_bounds_what_dispatch_shows_whatever_the_limit_says(tmp_path):
    """An etcd candidate's replication service attaches a limit that waits for no member
    (None: the whole log); its cap, the confirm offset it knew, still bounds dispatch until
    an election makes it master (chaos/sim seed 251 --storage)."""
    config = StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=64 * 1024)
    async with open_store(config) as store:
        first = await store.put_message(Message("T", b"confirmed"))
        store.reput.do_reput()
        log = store.replica_log
        log.note_confirm(first.append.end_offset)
        log.cap_at_known_confirm()
        log.limit_visibility(lambda: None)
        assert log.visible_end() == first.append.end_offset
        assert (await store.put_message(Message("T", b"unconfirmed"))).ok
        store.reput.do_reput()
        assert store.get_max_offset_in_queue("T", 0) == 1
        log.release_cap()
        assert log.visible_end() is None
        store.reput.do_reput()
        assert store.get_max_offset_in_queue("T", 0) == 2
