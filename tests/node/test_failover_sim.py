"""Failover between whole nodes in one trio run, on chaos/sim/network.py's in-memory network.

The production `Broker` and `NameServer` with real stores in tmp_path, every connection
through one `SimNetwork`, simulated time (store/runtime.py `simulated`, the autojump clock):
admission refusing an older master and a live master fenced by its slave's promotion are
decided by Failover's logic, which needs no process (tests/cluster/test_failover.py keeps
what needs one: SIGKILL, SIGSTOP, restarts)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from chaos.sim.network import SimNetwork
from cluster.namesrv.config import NamesrvConfig
from cluster.namesrv.server import NameServer
from node.broker import Broker
from node.config import load_config
from store import runtime
from store.epoch_file import EPOCH_FILE_NAME, EpochEntry, format_entries
from tests.node.nodeproc import master_conf, slave_conf
from tests.waiting import wait_until
from wire.client import ConnectionLost, ServiceUnavailable, connect
from wire.protocol import Send, SendReply, Status, TopicCreate

NAMESRV, M, S, S2, C = "10.0.0.9", "10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.1.1"
NAMESRV_ADDRESS = f"{NAMESRV}:9876"
PORTS = {"listenPort": 10911, "haListenPort": 10912}
TOPIC = "Failover"


def _master(tmp_path: Path, **extra: Any) -> Path:
    return master_conf(tmp_path, role="ASYNC_MASTER", brokerIP1=M, **PORTS, **extra)


def _slave(tmp_path: Path, master: Path, name: str, host: str, **extra: Any) -> Path:
    return slave_conf(tmp_path, master, name=name, brokerIP1=host, haMasterAddress=f"{M}:10912",
                      masterAddr=f"{M}:10911", **PORTS, **extra)


@asynccontextmanager
async def _serving(net: SimNetwork, confs: dict[str, Path], *, namesrv: bool) -> AsyncIterator[dict[str, Broker]]:
    """The nodes (host → config), and a name server when asked, until the block ends."""
    with runtime.simulated(0.0):
        async with trio.open_nursery() as nursery:
            if namesrv:
                await nursery.start(NameServer(NamesrvConfig(listen_address=NAMESRV, listen_port=9876),
                                               handle_signals=False, net=net.host(NAMESRV)).run)
            brokers = {host: Broker(load_config(str(conf)), handle_signals=False, net=net.host(host))
                       for host, conf in confs.items()}
            for broker in brokers.values():
                await nursery.start(broker.run)
            yield brokers
            for broker in brokers.values():
                broker.stop()
            nursery.cancel_scope.cancel()


async def _send(net: SimNetwork, host: str, body: bytes) -> SendReply:
    async with connect(f"{host}:10911", net=net.host(C)) as conn:
        return await conn.call(Send(topic=TOPIC, body=body))


async def _create_topic(net: SimNetwork, host: str) -> None:
    async with connect(f"{host}:10911", net=net.host(C)) as conn:
        await conn.call(TopicCreate(topic=TOPIC))


async def test_a_slave_refuses_a_master_with_an_older_epoch(tmp_path, autojump_clock) -> None:
    net = SimNetwork()
    m_conf = _master(tmp_path)  # no name server: nothing tells it about newer epochs; epoch 1
    s_conf = _slave(tmp_path, m_conf, "s", S)
    root = Path(load_config(str(s_conf)).store.store_path_root_dir)
    root.mkdir(parents=True)
    # this slave followed a master of epoch 2 before (its history says so)
    (root / EPOCH_FILE_NAME).write_text(format_entries([EpochEntry(2, 0)]))
    fresh_conf = _slave(tmp_path, m_conf, "fresh", S2)
    async with _serving(net, {M: m_conf, S: s_conf, S2: fresh_conf}, namesrv=False) as nodes:
        master, refusing, fresh = nodes[M], nodes[S], nodes[S2]
        await _create_topic(net, M)
        assert (await _send(net, M, b"epoch 1 data")).status is Status.PUT_OK
        end = master.services.store.get_max_phy_offset()
        await wait_until(lambda: fresh.services.store.get_max_phy_offset() == end,
                         what="a slave without history replicates")
        await wait_until(lambda: refusing.failover.term.follow_namesrv, what="the older master refused")
        assert master.failover.epoch == 1 and fresh.failover.epoch == 1
        assert refusing.services.store.get_max_phy_offset() == 0  # nothing taken from it
        assert refusing.services.ha_client is not None and not refusing.services.ha_client.connected
        assert refusing.failover.status()["epochs"] == [[2, 0]]


async def test_a_live_master_that_lost_its_slave_to_a_promotion_is_fenced(tmp_path, autojump_clock) -> None:
    net = SimNetwork()
    m_conf = _master(tmp_path, namesrvAddr=NAMESRV_ADDRESS)
    s_conf = _slave(tmp_path, m_conf, "s", S, namesrvAddr=NAMESRV_ADDRESS)
    async with _serving(net, {M: m_conf, S: s_conf}, namesrv=True) as nodes:
        master, slave = nodes[M], nodes[S]
        await _create_topic(net, M)
        await wait_until(lambda: master.services.ha_master.connection_count == 1, what="the slave connected")
        assert (await _send(net, M, b"before")).status is Status.PUT_OK
        promoted = await slave.failover.promote("ASYNC_MASTER")  # the master never stopped
        assert promoted["epoch"] == 2
        await wait_until(lambda: slave.services is not None and slave.cfg.role.is_master and slave.failover.epoch == 2,
                         what="the slave serves as master of epoch 2")
        # the old master's next write is never stored: refused as fenced (naming the new
        # epoch), or as a slave once it rejoined, or it is restarting in between
        with pytest.raises((ServiceUnavailable, ConnectionLost)) as refused:
            await _send(net, M, b"split brain?")
        if "fenced" in str(refused.value):
            assert "epoch 2" in str(refused.value)
        await wait_until(lambda: master.services is not None and master.cfg.broker_id == 1
                         and not master.cfg.role.is_master, what="the old master rejoined as a slave")
        assert master.failover.term.role_state is not None
        assert "epoch 2" in master.failover.term.role_state.reason  # fenced by the promotion
        assert master.failover.last_truncation is None  # it stored nothing after its slave left
        await wait_until(lambda: master.failover.epoch == 2, what="the rejoined node took the new history")
        with pytest.raises(attrs.exceptions.FrozenAttributeError):  # members are handed over at construction
            master.services.failover = None
