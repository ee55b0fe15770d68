"""Where topics live: route data and the two discovery modes.

A client learns routes either from name servers (`get_route`, `get_cluster_info`, see
cluster/namesrv/server.py) or, without a name server, by asking a fixed list of brokers for
their `status` and `topic_list` and grouping them by brokerName the way the name server
would. Producer, PullConsumer and Admin (cluster/client/) share this module: they see
the same `TopicRoute` whichever mode they run in.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import trio

from store.address import AddressError, parse_address_list
from wire.client import (
    ConnectionLost,
    ConnectionPool,
    NotFound,
    RequestTimeout,
    TidemqError,
)
from wire.protocol import (
    GetStatus,
    StatusReply,
    TopicList,
    TopicListReply,
    WireGroupRoute,
    WireQueueData,
    WireRequest,
    WireRouteBroker,
)
from wire.protocol.namesrv import ClusterInfo, ClusterInfoReply, GetRoute, RouteReply

log = logging.getLogger("tidemq.client")

__all__ = [
    "BrokerInfo",
    "BrokerRoute",
    "Discovery",
    "GroupRoute",
    "MessageQueue",
    "NameServerDiscovery",
    "QueueData",
    "StaticDiscovery",
    "TopicRoute",
    "parse_addresses",
]

PERM_READ = 4
PERM_WRITE = 2
UNREACHABLE = (ConnectionLost, RequestTimeout)
"""Errors that say nothing about the request, only that the peer did not answer."""


def parse_addresses(value: str | Sequence[str] | None, what: str) -> list[str]:
    """"a:1;b:2" or ["a:1", "b:2"] → ["a:1", "b:2"] (RocketMQ's namesrvAddr form)."""
    if value is None:
        return []
    try:
        if isinstance(value, str):
            return parse_address_list(value)
        return [address for v in value for address in parse_address_list(v)]
    except AddressError as e:
        raise AddressError(f"{what} {e}") from None


# ---------------------------------------------------------------- route data


@attrs.frozen
class QueueData:
    """A topic's queue counts and PermName bits on one broker group."""

    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ | PERM_WRITE

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any]) -> QueueData:
        return cls.of(WireQueueData.from_wire(raw))

    @classmethod
    def of(cls, q: WireQueueData) -> QueueData:
        return cls(q.read_queue_nums, q.write_queue_nums, q.perm)

    def to_wire(self) -> WireQueueData:
        return WireQueueData(read_queue_nums=self.read_queue_nums, write_queue_nums=self.write_queue_nums,
                             perm=self.perm)


def _in_sync(raw: Mapping[str, Any]) -> tuple[str, ...] | None:
    """A wire entry's `in_sync` (controllerMode etcd), None when it has none."""
    return tuple(raw["in_sync"]) if raw.get("in_sync") is not None else None


@attrs.frozen
class BrokerRoute:
    """One broker of a group as a route lists it. `alive` is false once the name server saw
    its registration connection close (until it expires or registers again)."""

    broker_id: int
    role: str
    address: str
    ha_address: str | None = None
    alive: bool = True
    epoch: int | None = None
    lease_holder: str | None = None
    """controllerMode etcd: who holds the group's leadership lease, as this broker sees it."""
    in_sync: tuple[str, ...] | None = None
    """controllerMode etcd: the group's in-sync slaves, as this broker sees them."""

    @property
    def is_master(self) -> bool:
        return self.broker_id == 0

    @classmethod
    def of(cls, b: WireRouteBroker) -> BrokerRoute:
        """A `get_route` answer's broker entry (BrokerInfo.route_entry writes it)."""
        return cls(b.broker_id, b.role, b.address, b.ha_address, b.alive, b.epoch, b.lease_holder,
                   tuple(b.in_sync) if b.in_sync is not None else None)

    def as_route(self) -> BrokerRoute:
        """Just the route's fields (a BrokerInfo is a BrokerRoute with more)."""
        return BrokerRoute(self.broker_id, self.role, self.address, self.ha_address, self.alive, self.epoch,
                           self.lease_holder, self.in_sync)


@attrs.frozen
class GroupRoute:
    """One broker group (a brokerName: a master and its slaves) serving a topic."""

    broker_name: str
    brokers: tuple[BrokerRoute, ...]
    queue_data: QueueData | None
    cluster: str = ""

    @property
    def master(self) -> BrokerRoute | None:
        return next((b for b in self.brokers if b.is_master), None)

    def controller_view(self) -> dict[str, Any]:
        """controllerMode etcd: the lease holder and in-sync slaves as the group's master
        registered them (else as its first broker that did); empty without a controller."""
        for b in sorted(self.brokers, key=lambda b: b.broker_id):
            if b.lease_holder is not None or b.in_sync is not None:
                return {"lease_holder": b.lease_holder, "in_sync": list(b.in_sync or ())}
        return {}

    @property
    def slaves(self) -> tuple[BrokerRoute, ...]:
        """Slaves, alive ones first, then by brokerId."""
        return tuple(sorted((b for b in self.brokers if not b.is_master), key=lambda b: (not b.alive, b.broker_id)))


@attrs.frozen
class TopicRoute:
    topic: str
    groups: tuple[GroupRoute, ...]

    def group(self, broker_name: str) -> GroupRoute | None:
        return next((g for g in self.groups if g.broker_name == broker_name), None)

    @classmethod
    def of(cls, topic: str, wire_groups: Sequence[WireGroupRoute]) -> TopicRoute:
        """The client's view of a `get_route` answer."""
        groups = [GroupRoute(g.broker_name, tuple(BrokerRoute.of(b) for b in g.brokers),
                             QueueData.of(g.queue_data) if g.queue_data else None, g.cluster)
                  for g in wire_groups]
        return cls(topic, tuple(sorted(groups, key=lambda g: g.broker_name)))


@attrs.frozen(order=True)
class MessageQueue:
    """One queue of a topic on one broker group (RocketMQ's MessageQueue)."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


@attrs.frozen(kw_only=True)
class BrokerInfo(BrokerRoute):
    """One broker: what it registered with the name server (the name server's route table
    holds these), what `get_cluster_info` tells a client, or what a broker list probe saw:
    a route's broker (`epoch`: its newest master term, None without epoch history) and its
    group, offsets and topics. `age_ms` is how long ago the name server last heard from it
    (None from a probe)."""

    cluster: str
    broker_name: str
    max_offset: int
    topics: Mapping[str, QueueData]
    age_ms: int | None = None
    last_update_ms: int | None = None

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any]) -> BrokerInfo:
        return cls(
            cluster=str(raw.get("cluster", "")),
            broker_name=str(raw["broker_name"]),
            broker_id=int(raw["broker_id"]),
            role=str(raw["role"]),
            address=str(raw["address"]),
            ha_address=raw.get("ha_address"),
            max_offset=int(raw.get("max_offset", 0)),
            topics={t: QueueData.from_wire(q) for t, q in (raw.get("topics") or {}).items()},
            alive=bool(raw.get("alive", True)),
            age_ms=raw.get("age_ms"),
            last_update_ms=raw.get("last_update_ms"),
            epoch=raw.get("epoch") if type(raw.get("epoch")) is int else None,
            lease_holder=raw.get("lease_holder"),
            in_sync=_in_sync(raw),
        )

    def route_entry(self) -> WireRouteBroker:
        """The broker as a `get_route` answer lists it (BrokerRoute.of reads it)."""
        return WireRouteBroker(broker_id=self.broker_id, role=self.role, address=self.address,
                               ha_address=self.ha_address, alive=self.alive, max_offset=self.max_offset,
                               epoch=self.epoch, lease_holder=self.lease_holder,
                               in_sync=list(self.in_sync) if self.in_sync is not None else None, age_ms=self.age_ms)

    def to_wire(self) -> dict[str, Any]:
        """The broker as a `get_cluster_info` answer lists it (`from_wire` reads it)."""
        return {
            "cluster": self.cluster,
            "broker_name": self.broker_name,
            **self.route_entry().to_wire(),
            "topics": {t: attrs.asdict(q) for t, q in self.topics.items()},
            "last_update_ms": self.last_update_ms,
        }

    def to_json(self) -> dict[str, Any]:
        out = attrs.asdict(self, recurse=False)
        out["topics"] = {t: attrs.asdict(q) for t, q in self.topics.items()}
        return out


def groups_serving(topic: str, brokers: Iterable[BrokerInfo]) -> list[tuple[str, list[BrokerInfo], QueueData]]:
    """`(brokerName, members by brokerId, queue data)` of each group serving `topic`, by
    brokerName: a group serves it when any of its brokers has it; the queue data is the
    master's, else the lowest-id broker's that has it. The name server's routes and a
    broker-list client's routes are both built by this."""
    by_name: dict[str, list[BrokerInfo]] = {}
    for b in sorted(brokers, key=lambda b: (b.broker_name, b.broker_id)):
        by_name.setdefault(b.broker_name, []).append(b)
    out = []
    for name, members in by_name.items():
        having = [b for b in members if topic in b.topics]
        if having:
            out.append((name, members, having[0].topics[topic]))
    return out


def route_from_brokers(topic: str, brokers: Sequence[BrokerInfo]) -> TopicRoute:
    """The route a name server would answer for `topic`, from a broker list."""
    groups = []
    for name, members, queue_data in groups_serving(topic, brokers):
        routes = tuple(b.as_route() for b in members)
        groups.append(GroupRoute(name, routes, queue_data, members[0].cluster))
    return TopicRoute(topic, tuple(groups))


# ---------------------------------------------------------------- discovery


class Discovery:
    """Answers "which groups serve this topic" and "which brokers exist"."""

    description = ""

    async def route(self, topic: str) -> TopicRoute:
        """The topic's route; NotFound when no broker serves it, ConnectionLost when no
        source could be reached."""
        raise NotImplementedError

    async def cluster_info(self) -> list[BrokerInfo]:
        raise NotImplementedError


class NameServerDiscovery(Discovery):
    """Routes from name servers: asks the last one that answered, then the others."""

    def __init__(self, addresses: Sequence[str], pool: ConnectionPool) -> None:
        if not addresses:
            raise ValueError("at least one name server address is required")
        self.addresses = list(addresses)
        self.pool = pool
        self._current = 0
        self.description = f"name server {';'.join(self.addresses)}"

    async def call(self, request: WireRequest) -> Any:
        """`request` on the first name server that answers (the last one that did first);
        its reply."""
        errors = []
        n = len(self.addresses)
        for i in range(n):
            index = (self._current + i) % n
            address = self.addresses[index]
            try:
                response = await self.pool.call(address, request)
            except UNREACHABLE as e:
                errors.append(str(e))
                continue
            self._current = index
            return response
        raise ConnectionLost(f"no name server reachable ({'; '.join(errors)})")

    async def route(self, topic: str) -> TopicRoute:
        response: RouteReply = await self.call(GetRoute(topic=topic))
        return TopicRoute.of(topic, response.groups)

    async def cluster_info(self) -> list[BrokerInfo]:
        response: ClusterInfoReply = await self.call(ClusterInfo())
        return [BrokerInfo.from_wire(b) for b in response.brokers]


class StaticDiscovery(Discovery):
    """Routes from a fixed broker list, no name server: each broker is asked for `status`
    and `topic_list`. A broker that stops answering stays listed (alive false) with what it
    said last, so a consumer can still find its group's slave, and come back to it."""

    def __init__(self, addresses: Sequence[str], pool: ConnectionPool) -> None:
        if not addresses:
            raise ValueError("at least one broker address is required")
        self.addresses = list(dict.fromkeys(addresses))
        self.pool = pool
        self._known: dict[str, BrokerInfo] = {}
        self.description = f"broker {';'.join(self.addresses)}"

    async def _probe(self, address: str, out: dict[str, BrokerInfo | TidemqError]) -> None:
        try:
            status: StatusReply = await self.pool.call(address, GetStatus())
            topics: TopicListReply = await self.pool.call(address, TopicList())
        except TidemqError as e:
            out[address] = e
            return
        out[address] = BrokerInfo(
            cluster=status.broker_cluster_name or "",
            broker_name=str(status.broker_name),
            broker_id=int(status.broker_id or 0),
            role=str(status.role),
            address=address,
            ha_address=status.ha_address,
            max_offset=status.max_phy_offset,
            topics={t["topic"]: QueueData.from_wire(t) for t in topics.topics},
        )

    async def cluster_info(self) -> list[BrokerInfo]:
        results: dict[str, BrokerInfo | TidemqError] = {}
        async with trio.open_nursery() as nursery:
            for address in self.addresses:
                nursery.start_soon(self._probe, address, results)
        infos = []
        errors = []
        for address in self.addresses:
            result = results[address]
            if isinstance(result, BrokerInfo):
                self._known[address] = result
                infos.append(result)
            else:
                errors.append(str(result))
                if address in self._known:
                    infos.append(attrs.evolve(self._known[address], alive=False))
        if not infos:
            raise ConnectionLost(f"no broker reachable ({'; '.join(errors)})")
        return infos

    async def route(self, topic: str) -> TopicRoute:
        route = route_from_brokers(topic, await self.cluster_info())
        if not route.groups:
            raise NotFound("NOT_FOUND", f"no broker serves topic {topic!r}")
        return route
