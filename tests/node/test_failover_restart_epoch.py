"""Issue 45: a master that restarts after an abnormal exit (the abort file is there: a crash,
or a power loss whose recovery cut its unflushed tail) takes no write on its old epoch. The
first epoch check that finds no newer master begins epoch N+1 at its recovered end, so its
slaves' admission cuts their tails there; a slave promoted meanwhile to the same number
keeps it. A real store and a real name server on chaos/sim's in-memory network."""

from __future__ import annotations

import os

import attrs
import pytest
import trio
import trio.testing

from chaos.sim.network import SimNetwork
from cluster.namesrv import NameServer, NamesrvConfig
from node.config import load_config
from node.failover.fencing import STALL_S
from node.failover.promotion import Failover
from node.failover.term import PROMOTE_SETTLE_S
from node.ops.services import OpError
from node.tables.offsets import ConsumerOffsetManager
from store import Message, MessageStore, open_store
from store.epoch_file import EPOCH_FILE_NAME, EpochEntry, EpochFileCache
from store.layout import ABORT_FILE
from tests.node.nodeproc import master_conf
from wire.client import connect
from wire.protocol import Status
from wire.protocol.namesrv import RegisterBroker

NODE, NAMESRV, OTHER = "10.0.0.1", "10.0.0.9", "10.0.0.2"
NAMESRV_ADDRESS = f"{NAMESRV}:9876"


@attrs.define
class _Services:
    """What a term's start and its checks read of NodeServices: the store and the offset
    table (and no HA)."""

    store: MessageStore
    offsets: ConsumerOffsetManager = attrs.field(factory=lambda: ConsumerOffsetManager(os.devnull))
    ha_master: None = None


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock()


async def _stored_master(tmp_path, *, crashed: bool, net: SimNetwork | None = None) -> tuple[Failover, MessageStore]:
    """A master of epoch 1 with three records, its last exit a crash or not."""
    cfg = load_config(str(master_conf(tmp_path, role="ASYNC_MASTER", brokerIP1=NODE, namesrvAddr=NAMESRV_ADDRESS)))
    async with open_store(cfg.store) as store:
        for i in range(3):
            assert (await store.put_message(Message("TA", b"x" * 50, queue_id=0, keys=[f"k{i}"]))).ok
    if crashed:
        open(os.path.join(cfg.store.store_path_root_dir, ABORT_FILE), "wb").close()
    EpochFileCache(os.path.join(cfg.store.store_path_root_dir, EPOCH_FILE_NAME)).append(EpochEntry(1, 0))
    store = MessageStore(cfg.store).load()
    return Failover(cfg, net=(net or SimNetwork()).host(NODE)), store


async def _serve(net: SimNetwork, body) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(NameServer(NamesrvConfig(listen_address=NAMESRV, listen_port=9876),
                                       handle_signals=False, net=net.host(NAMESRV)).run)
        await body()
        nursery.cancel_scope.cancel()


async def test_no_write_on_the_old_epoch_until_a_check_answers(tmp_path, clock) -> None:
    f, store = await _stored_master(tmp_path, crashed=True)  # no name server listens
    try:
        f.start_term(_Services(store))
        assert f.epoch == 1 and f.epoch_answer()["pending"] and f.status()["writes_held"]
        with pytest.raises(OpError) as held:
            await f.before_write()
        assert held.value.status is Status.SERVICE_NOT_AVAILABLE and "abnormal exit" in held.value.message
        assert f.epoch == 1
    finally:
        store.close()


async def test_the_first_answered_check_begins_a_new_epoch_at_the_recovered_end(tmp_path, clock) -> None:
    net = SimNetwork()
    f, store = await _stored_master(tmp_path, crashed=True, net=net)
    end = store.get_max_phy_offset()

    services = _Services(store, ConsumerOffsetManager(str(tmp_path / "offsets")))
    services.offsets.commit("G", "TA", 0, 7)  # past the queue's end (3): records a power loss took
    services.offsets.commit("H", "TA", 0, 2)

    async def body() -> None:
        f.start_term(services)
        with pytest.raises(OpError):  # a slave promoted just before this start may not have announced yet
            await f.before_write()
        assert f.epoch == 1
        for _ in range(int(PROMOTE_SETTLE_S / (STALL_S / 2)) + 1):  # the loop runs on: no stall
            clock.jump(STALL_S / 2)
            f._observe_stall()
        await f.before_write()  # a check after the settle time, no newer master: epoch 2 begins at the end
        assert f.epoch == 2 and [e.to_wire() for e in f.epochs.entries] == [[1, 0], [2, end]]
        # the new epoch's messages take queue offsets 3..: a consumer starting from 7 skipped them
        assert (services.offsets.fetch("G", "TA", 0), services.offsets.fetch("H", "TA", 0)) == (3, 2)
        # and written at once: a crash soon after restarts from the clamped table (seed 5840)
        written = ConsumerOffsetManager(str(tmp_path / "offsets"))
        written.load()
        assert (written.fetch("G", "TA", 0), written.fetch("H", "TA", 0)) == (3, 2)
        assert f.epoch_answer()["pending"] is None and not f.status()["writes_held"]
        reloaded = EpochFileCache.load(os.path.join(f.term.root, EPOCH_FILE_NAME))
        assert reloaded.entries == f.epochs.entries  # durable before the first write
        # a slave promoted while it was down took epoch 2 too: the promoted one keeps it
        async with connect(NAMESRV_ADDRESS, net=net.host(OTHER)) as conn:
            await conn.call(RegisterBroker(cluster="DefaultCluster", broker_name="broker-t", broker_id=0,
                                           role="ASYNC_MASTER", address=f"{OTHER}:10911",
                                           ha_address=f"{OTHER}:10912", topics={}, max_offset=0, epoch=2))
        f.term.fencing.needs_check = True
        with pytest.raises(OpError):
            await f.before_write()
        assert f.fenced is not None and "epoch 2" in f.fenced

    try:
        await _serve(net, body)
    finally:
        store.close()


async def test_a_clean_restart_keeps_its_epoch(tmp_path, clock) -> None:
    f, store = await _stored_master(tmp_path, crashed=False)  # no name server: nothing to ask
    try:
        f.start_term(_Services(store))
        assert f.epoch == 1 and f.epoch_answer()["pending"] is None and not f.term.restart_epoch_due
    finally:
        store.close()


async def test_an_etcd_candidate_shows_consumers_nothing_past_its_confirm_offset(tmp_path, clock) -> None:
    """A candidate is not the group's master: a slave elected instead cuts the tail no member
    holds, so its consumers see nothing past the confirm offset it knew (seed 251 with
    --storage), until its own election (`begin_epoch`)."""
    f, store = await _stored_master(tmp_path, crashed=True)
    try:
        store.replica_log.note_confirm(100)
        f.term.start(_Services(store), None, elected=True)
        assert f.term.candidate and store.replica_log.cap == 100
        assert store.replica_log.visible_end() == 100
        f.term.begin_epoch(2)
        assert not f.term.candidate and store.replica_log.cap is None
    finally:
        store.close()
