"""The name server with real broker processes: registration, routes, unregistration on a
graceful stop, `alive: false` and expiry of a killed broker, and a name server that is
down (or restarts) never hurting a node."""

from __future__ import annotations

import signal

import pytest

from cluster.client import Admin, BadRequest, NotFound
from tests.cluster.helpers import (
    broker_conf,
    call,
    slave_of,
    start_namesrv,
    wait_for,
    wait_slave_connected,
)
from tests.node.nodeproc import free_port
from wire.client import connect
from wire.protocol import GetStatus
from wire.protocol.namesrv import (
    ClusterInfo,
    GetRoute,
    NamesrvStatus,
    RegisterBroker,
    UnregisterBroker,
)
from wire.protocol.values import WireQueueData

pytestmark = pytest.mark.slow  # every test here starts node processes


def by_id(infos):
    return {(b.broker_name, b.broker_id): b for b in infos}


async def test_registration_route_and_master_discovery(tmp_path, nodes):
    ns = start_namesrv(nodes, tmp_path)
    mconf = broker_conf(tmp_path, "m", "broker-a", ns.address, role="SYNC_MASTER")
    master = nodes.start(mconf)
    # no haMasterAddress / masterAddr: the slave learns its master from the name server
    sconf = slave_of(tmp_path, mconf, "s", ns.address, haMasterAddress="", masterAddr="")
    slave = nodes.start(sconf)

    async with Admin(namesrv=ns.address) as admin:
        infos = await wait_for(lambda: _both(admin), what="master and slave registered")
        m, s = infos[("broker-a", 0)], infos[("broker-a", 1)]
        assert (m.role, m.address, m.alive, m.cluster) == ("SYNC_MASTER", master.address, True, "DefaultCluster")
        assert (s.role, s.address, s.alive) == ("SLAVE", slave.address, True)
        assert m.age_ms is not None and m.age_ms < 15_000
        await wait_slave_connected(master.address)  # replication found the master's HA port

        # a created topic is routable at once: the master re-registers on topic changes
        with pytest.raises(NotFound, match="no broker serves topic 'Fresh'"):
            await admin.route("Fresh")
        created = await admin.create_topic("Fresh", read_queue_nums=3, write_queue_nums=2)
        assert [(t.broker_name, t.write_queue_nums) for t in created] == [("broker-a", 2)]
        route = await wait_for(lambda: admin.route("Fresh", refresh=True), timeout=5, what="route of Fresh")
        [group] = route.groups
        assert group.broker_name == "broker-a"
        assert (group.queue_data.read_queue_nums, group.queue_data.write_queue_nums, group.queue_data.perm) == (3, 2, 6)
        assert group.master.address == master.address
        assert [b.address for b in group.slaves] == [slave.address]
        assert any(t.topic == "Fresh" for t in await admin.topics())

        # the node reports its registrations
        status = await call(master.address, GetStatus())
        [reg] = status.namesrv
        assert reg["address"] == ns.address and reg["last_error"] is None and reg["last_register_ms"]


async def _both(admin: Admin):
    infos = by_id(await admin.cluster_info())
    return infos if {("broker-a", 0), ("broker-a", 1)} <= set(infos) else None


async def test_register_answer_names_the_master_and_schema_is_checked(tmp_path, nodes):
    ns = start_namesrv(nodes, tmp_path)
    base = {"cluster": "C", "broker_name": "g", "role": "SLAVE", "ha_address": "127.0.0.1:2",
            "topics": {"T": {"read_queue_nums": 1, "write_queue_nums": 1, "perm": 6}}, "max_offset": 5}
    slave = RegisterBroker(broker_id=1, address="127.0.0.1:1", **base)
    async with connect(ns.address) as conn:
        alone = await conn.call(slave)
        assert alone.registered and alone.master_address is None and alone.master_ha_address is None
        await conn.call(RegisterBroker(**{**base, "role": "ASYNC_MASTER", "ha_address": "127.0.0.1:11"},
                                       broker_id=0, address="127.0.0.1:10"))
        again = await conn.call(slave)
        assert (again.master_address, again.master_ha_address) == ("127.0.0.1:10", "127.0.0.1:11")
        route = await conn.call(GetRoute(topic="T"))
        [group] = route.groups
        assert [b.broker_id for b in group.brokers] == [0, 1]
        assert group.queue_data == WireQueueData(read_queue_nums=1, write_queue_nums=1, perm=6)

        # an unregister naming another address does not remove the broker
        kept = await conn.call(UnregisterBroker(cluster="C", broker_name="g", broker_id=1, address="127.0.0.1:9"))
        assert kept.removed is False
        gone = await conn.call(UnregisterBroker(cluster="C", broker_name="g", broker_id=1, address="127.0.0.1:1"))
        assert gone.removed is True

        # the client sends a request object as it is: the name server checks the values
        with pytest.raises(BadRequest, match="field 'role' of op 'register_broker': must be one of"):
            await conn.call(RegisterBroker(broker_id=1, address="127.0.0.1:1", **{**base, "role": "BOSS"}))
        with pytest.raises(BadRequest, match=r"read_queue_nums must be an integer in 1\.\.1024"):
            await conn.call(RegisterBroker(
                broker_id=1, address="127.0.0.1:1",
                **{**base, "topics": {"T": {"read_queue_nums": 0, "write_queue_nums": 1, "perm": 6}}}))
        # controllerMode etcd: the lease holder and in-sync set ride on the registration
        await conn.call(RegisterBroker(**{**base, "role": "SYNC_MASTER", "ha_address": "127.0.0.1:11"},
                                       broker_id=0, address="127.0.0.1:10", epoch=3, lease_holder="127.0.0.1:10",
                                       in_sync=["127.0.0.1:1"]))
        [group] = (await conn.call(GetRoute(topic="T"))).groups
        [master] = [b for b in group.brokers if b.broker_id == 0]
        assert (master.epoch, master.lease_holder, master.in_sync) == (3, "127.0.0.1:10", ["127.0.0.1:1"])
        with pytest.raises(BadRequest, match=r"field 'in_sync' of op 'register_broker': \[1\]"):
            await conn.call(RegisterBroker(broker_id=0, address="127.0.0.1:10", epoch=3,
                                           in_sync=["127.0.0.1:1", "nowhere"], **{**base, "role": "SYNC_MASTER"}))
        # a field of the wrong wire type, which a request object cannot carry: raw, by hand
        with pytest.raises(BadRequest, match="field 'in_sync'"):
            await conn.request("register_broker", broker_id=0, address="127.0.0.1:10", epoch=3,
                               in_sync="127.0.0.1:1", **{**base, "role": "SYNC_MASTER"})

        with pytest.raises(BadRequest, match="unknown op 'send'"):
            await conn.request("send", topic="T", body=b"x")  # a name server is not a broker: raw on purpose
        assert (await conn.call(NamesrvStatus())).role == "NAMESRV"


async def test_stop_unregisters_kill_marks_not_alive_then_expires(tmp_path, nodes):
    ns = start_namesrv(nodes, tmp_path, expire_ms=3000)
    fast = {"registerNameServerPeriod": 1000}
    a = nodes.start(broker_conf(tmp_path, "a", "broker-a", ns.address, **fast))
    b = nodes.start(broker_conf(tmp_path, "b", "broker-b", ns.address, **fast))
    c = nodes.start(broker_conf(tmp_path, "c", "broker-c", ns.address, **fast))

    async with Admin(namesrv=ns.address) as admin:
        async def names():
            return {i.broker_name: i for i in await admin.cluster_info()}

        await wait_for(lambda: _has(names, {"broker-a", "broker-b", "broker-c"}), what="three brokers")

        assert a.stop(signal.SIGTERM) == 0  # graceful: unregisters before it closes
        after_stop = await names()
        assert "broker-a" not in after_stop, "a stopped broker is gone at once, not after expiry"

        b.kill()  # its registration connection closes with the process
        await wait_for(lambda: _not_alive(names, "broker-b"), timeout=5, what="killed broker marked not alive")
        await wait_for(lambda: _gone(names, "broker-b"), timeout=10, what="killed broker expired")
        live = await names()
        assert live["broker-c"].alive, "a broker that keeps registering does not expire"
        assert live["broker-c"].address == c.address


async def _has(names, wanted):
    return wanted <= set(await names())


async def _not_alive(names, name):
    infos = await names()
    return name in infos and not infos[name].alive


async def _gone(names, name):
    return name not in await names()


async def test_name_server_down_or_restarting_is_not_fatal(tmp_path, nodes):
    port = free_port()
    address = f"127.0.0.1:{port}"
    node = nodes.start(broker_conf(tmp_path, "m", "broker-a", address, registerNameServerPeriod=60000))
    # nothing listens on the name server's port: the node serves anyway and says why
    status = await wait_for(lambda: _failing(node.address), timeout=10, what="registration error reported")
    assert "cannot connect" in status.namesrv[0]["last_error"]

    ns = start_namesrv(nodes, tmp_path, port=port)
    # the node retries with a back-off far shorter than its 60 s period
    await wait_for(lambda: _listed(ns.address), timeout=10, what="node registered once the name server is up")

    ns.kill()
    ns2 = start_namesrv(nodes, tmp_path, port=port)  # empty tables after a restart
    await wait_for(lambda: _listed(ns2.address), timeout=10, what="node registered again after a restart")


async def _failing(address):
    status = await call(address, GetStatus())
    return status if status.namesrv[0]["last_error"] else None


async def _listed(namesrv):
    return (await call(namesrv, ClusterInfo())).brokers
