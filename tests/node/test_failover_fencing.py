"""Failover's fencing decisions in one process: a real name server in the same trio run on
chaos/sim/network.py's in-memory network (no sockets), a MockClock whose jump is what a
stall looks like to the node (monotonic time moved while its loop did not run). Issue 21.1:
a write admitted before a stall is acknowledged only after an epoch check that started
after it."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from chaos.sim.network import SimNetwork
from cluster.namesrv import NameServer, NamesrvConfig
from node.config import load_config
from node.failover.fencing import STALL_S
from node.failover.promotion import Failover
from node.ops.services import OpError
from tests.node.nodeproc import master_conf
from wire.client import connect
from wire.protocol import Status
from wire.protocol.namesrv import RegisterBroker

NODE, NAMESRV, OTHER = "10.0.0.1", "10.0.0.9", "10.0.0.2"
NAMESRV_ADDRESS = f"{NAMESRV}:9876"


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock()


@pytest.fixture
def net() -> SimNetwork:
    return SimNetwork()


async def _failover(tmp_path, net: SimNetwork) -> Failover:
    cfg = master_conf(tmp_path, role="ASYNC_MASTER", brokerIP1=NODE, namesrvAddr=NAMESRV_ADDRESS)
    return Failover(load_config(str(cfg)), net=net.host(NODE))


async def _register_newer_master(net: SimNetwork, epoch: int) -> None:
    async with connect(NAMESRV_ADDRESS, net=net.host(OTHER)) as conn:
        await conn.call(RegisterBroker(cluster="DefaultCluster", broker_name="broker-t", broker_id=0,
                                       role="ASYNC_MASTER", address=f"{OTHER}:10911",
                                       ha_address=f"{OTHER}:10912", topics={}, max_offset=0, epoch=epoch))


async def _with_namesrv(net: SimNetwork, body: Any) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(NameServer(NamesrvConfig(listen_address=NAMESRV, listen_port=9876),
                                       handle_signals=False, net=net.host(NAMESRV)).run)
        await body()
        nursery.cancel_scope.cancel()


async def test_a_write_admitted_before_a_stall_across_a_promotion_is_indeterminate(tmp_path, clock, net) -> None:
    async def body() -> None:
        f = await _failover(tmp_path, net)
        admitted = await f.before_write()
        clock.jump(STALL_S * 4)  # paused with the write in flight ...
        await _register_newer_master(net, 2)  # ... while a slave was promoted
        with pytest.raises(OpError) as refused:
            await f.after_write(admitted)
        assert refused.value.status is Status.INDETERMINATE
        assert "stored, but not acknowledged" in refused.value.message and "epoch 2" in refused.value.message
        assert f.term.fencing.stalls == 1 and f.term.fenced is not None
        with pytest.raises(OpError) as after:  # the next write is refused before it is stored
            await f.before_write()
        assert after.value.status is Status.SERVICE_NOT_AVAILABLE

    await _with_namesrv(net, body)


async def test_a_stall_with_no_promotion_costs_one_check_and_acknowledges(tmp_path, clock, net) -> None:
    async def body() -> None:
        f = await _failover(tmp_path, net)
        admitted = await f.before_write()
        clock.jump(STALL_S * 4)
        await f.after_write(admitted)  # a check after the stall found no newer epoch: PUT_OK
        assert f.term.fencing.stalls == 1 and f.term.fenced is None and not f.term.fencing.held
        assert f.term.fencing.confirmed_at >= f.term.fencing.stalled_at
        clock.jump(STALL_S / 2)  # a gap under STALL_S is no stall
        admitted = await f.before_write()
        await f.after_write(admitted)
        assert f.term.fencing.stalls == 1

    await _with_namesrv(net, body)


async def test_after_a_stall_with_no_name_server_answering_writes_are_held(tmp_path, clock, net) -> None:
    f = await _failover(tmp_path, net)  # no name server listens there
    admitted = await f.before_write()
    clock.jump(STALL_S * 4)
    with pytest.raises(OpError) as unconfirmed:
        await f.after_write(admitted)
    assert unconfirmed.value.status is Status.INDETERMINATE and "stalled for 1.0 s" in unconfirmed.value.message
    with pytest.raises(OpError) as held:
        await f.before_write()
    assert held.value.status is Status.SERVICE_NOT_AVAILABLE and "no write until one does" in held.value.message
    assert f.status()["writes_held"]


async def test_without_a_stall_after_write_asks_nothing(tmp_path, clock, net) -> None:
    """The common path: no stall, every slave there: no check, whatever the name server says."""
    async def body() -> None:
        f = await _failover(tmp_path, net)
        admitted = await f.before_write()
        await _register_newer_master(net, 2)
        await f.after_write(admitted)  # not asked: the registration answer fences it, later
        assert f.term.fenced is None and f.term.fencing.last_check == float("-inf")

    await _with_namesrv(net, body)
