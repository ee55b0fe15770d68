"""cluster.namesrv.RouteTable without I/O: routes, liveness, expiry, identity changes."""

from __future__ import annotations

import attrs

from cluster.client.routing import BrokerInfo, route_from_brokers
from cluster.namesrv import RouteTable
from wire.protocol.namesrv import RegisterBroker


def reg(name: str, broker_id: int, address: str, topics: dict | None = None, role: str | None = None,
        **more) -> RegisterBroker:
    return RegisterBroker(
        cluster="C", broker_name=name, broker_id=broker_id,
        role=role or ("SLAVE" if broker_id else "SYNC_MASTER"), address=address,
        ha_address=address + "0", max_offset=0,
        topics=topics if topics is not None else {"T": {"read_queue_nums": 4, "write_queue_nums": 4, "perm": 6}},
        **more)


def test_route_groups_brokers_and_falls_back_to_slave_queue_data():
    table = RouteTable(expire_ms=1000)
    table.register(reg("b", 0, "h:2", {"T": {"read_queue_nums": 2, "write_queue_nums": 2, "perm": 6}}), "p1", now=0)
    table.register(reg("a", 1, "h:3", {}), "p2", now=0)  # a slave that has not synced the topic yet
    table.register(reg("a", 0, "h:1"), "p3", now=0)
    assert table.route("nope", now=0) == []
    route = table.route("T", now=0.5)
    assert [g.broker_name for g in route] == ["a", "b"]
    assert [b.broker_id for b in route[0].brokers] == [0, 1], "the slave is listed for reads"
    assert route[0].brokers[0].age_ms == 500
    assert route[1].queue_data.write_queue_nums == 2
    # the master goes away: the group stays routable through the slave once it has the topic
    assert table.unregister("a", 0, "h:1")
    assert table.route("T", now=0.5)[0].broker_name == "b"
    table.register(reg("a", 1, "h:3"), "p2", now=0.6)
    assert [g.broker_name for g in table.route("T", now=0.6)] == ["a", "b"]


def test_connection_close_marks_not_alive_and_expiry_drops():
    table = RouteTable(expire_ms=1000)
    table.register(reg("a", 0, "h:1"), "peer-1", now=0)
    table.register(reg("a", 1, "h:2"), "peer-2", now=0.5)
    table.connection_closed("peer-1")
    alive = {b.broker_id: b.alive for b in table.route("T", now=0.6)[0].brokers}
    assert alive == {0: False, 1: True}
    assert [e.broker_id for e in table.expire(now=1.2)] == [0]
    assert [b["broker_id"] for b in table.cluster_info(now=1.2)] == [1]
    table.register(reg("a", 0, "h:1"), "peer-3", now=1.3)  # back, over a new connection
    assert all(b["alive"] for b in table.cluster_info(now=1.3))


def test_identity_change_and_stale_unregister():
    table = RouteTable(expire_ms=1000)
    table.register(reg("a", 1, "h:2"), "p", now=0)
    assert table.master_of("a") is None
    table.register(reg("a", 0, "h:2", role="SYNC_MASTER"), "p", now=0)  # promoted: same address, id 0
    assert [(b["broker_id"], b["address"]) for b in table.cluster_info(now=0)] == [(0, "h:2")]
    assert table.master_of("a").address == "h:2"
    assert not table.unregister("a", 0, "h:9"), "an unregister for another address is ignored"
    assert len(table) == 1


def test_clients_read_the_table_as_one_broker_class():
    """The table's wire form is what BrokerInfo reads and writes; a broker-list client
    groups BrokerInfos into the same route the name server answers."""
    table = RouteTable(expire_ms=1000)
    table.register(reg("a", 0, "h:1"), "p1", now=0)
    table.register(reg("a", 1, "h:2", {}), "p2", now=0)
    table.connection_closed("p2")
    wire = table.cluster_info(now=0.25)
    brokers = [BrokerInfo.from_wire(b) for b in wire]
    assert [b.to_wire() for b in brokers] == wire
    assert [b.age_ms for b in brokers] == [250, 250] and [b.alive for b in brokers] == [True, False]
    assert attrs.evolve(table.master_of("a"), age_ms=250) == brokers[0]
    served = table.route("T", now=0.25)[0]
    route = route_from_brokers("T", brokers).groups[0]
    assert route.broker_name == served.broker_name and route.cluster == served.cluster
    assert [(r.broker_id, r.alive) for r in route.brokers] == [(b.broker_id, b.alive) for b in served.brokers]
    assert route.queue_data is not None and route.queue_data.write_queue_nums == served.queue_data.write_queue_nums


def test_a_master_with_an_older_epoch_cannot_take_the_route_back():
    table = RouteTable(expire_ms=1000)
    assert table.register(reg("a", 0, "h:1", epoch=1), "p1", now=0) is not None
    assert table.register(reg("a", 1, "h:2", epoch=1), "p2", now=0) is not None
    # the slave is promoted: epoch 2 replaces the master and drops its own slave entry
    assert table.register(reg("a", 0, "h:2", epoch=2), "p2", now=1) is not None
    assert table.master_of("a").address == "h:2"
    assert [b.broker_id for b in table.route("T", now=1)[0].brokers] == [0]
    # the old master comes back claiming brokerId 0: refused, with or without an epoch
    assert table.register(reg("a", 0, "h:1", epoch=1), "p3", now=2) is None
    assert table.register(reg("a", 0, "h:1"), "p3", now=2) is None
    assert table.master_of("a").address == "h:2" and table.master_of("a").epoch == 2
    # it rejoins as a slave: accepted; a newer epoch would win brokerId 0 again
    assert table.register(reg("a", 1, "h:1", epoch=2), "p3", now=3) is not None
    assert table.register(reg("a", 0, "h:1", epoch=3), "p3", now=4) is not None
    assert table.master_of("a").address == "h:1"


def test_without_epochs_registrations_replace_as_before():
    table = RouteTable(expire_ms=1000)
    table.register(reg("a", 0, "h:1"), "p1", now=0)
    assert table.register(reg("a", 0, "h:9"), "p2", now=1) is not None  # a RocketMQ 4.x style move
    assert table.master_of("a").address == "h:9" and table.master_of("a").epoch is None


def test_route_changes_count_what_clients_are_told_not_heartbeats():
    """rocketmq_namesrv_route_changes_total: a new broker, a new topic, a closed connection,
    an expiry count; a registration that only moves the max offset does not."""
    t = RouteTable(expire_ms=1000)
    t.register(reg("a", 0, "h:1"), "p1", now=0)
    assert t.route_changes == 1
    t.register(attrs.evolve(reg("a", 0, "h:1"), max_offset=500), "p1", now=0.1)  # a heartbeat
    assert t.route_changes == 1
    t.register(reg("a", 0, "h:1", topics={"T": {"read_queue_nums": 4, "write_queue_nums": 4, "perm": 6},
                                          "U": {"read_queue_nums": 2, "write_queue_nums": 2, "perm": 6}}), "p1", now=0.2)
    t.register(reg("a", 1, "h:2"), "p2", now=0.2)
    assert t.route_changes == 3
    assert t.counts() == {("C", "SYNC_MASTER", True): 1, ("C", "SLAVE", True): 1}
    t.connection_closed("p2")
    assert t.route_changes == 4 and t.counts()[("C", "SLAVE", False)] == 1
    t.expire(now=5)
    assert t.route_changes == 6 and t.counts() == {}
