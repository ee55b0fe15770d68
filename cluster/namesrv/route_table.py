"""RouteTable: which brokers the name server knows, without I/O (tests and the server share it)."""

from __future__ import annotations

import logging
from typing import Any

import attrs

from store import runtime
from wire.protocol import WireGroupRoute
from wire.protocol.namesrv import RegisterBroker

from ..client.routing import PERM_WRITE, BrokerInfo, groups_serving

log = logging.getLogger("tidemq.namesrv")

@attrs.define(eq=False)
class _Registration:
    """A broker's last registration: what it said (`broker`), when (runtime.monotonic()) and
    over which connection (`peer`), which only the name server needs."""

    broker: BrokerInfo
    last_update: float
    peer: str | None

    def age_ms(self, now: float) -> int:
        return int((now - self.last_update) * 1000)

    def seen_at(self, now: float) -> BrokerInfo:
        """The broker as a client is told about it at `now` (with its age)."""
        return attrs.evolve(self.broker, age_ms=self.age_ms(now))


class RouteTable:
    """Brokers by (brokerName, brokerId): what the name server knows. No I/O, so tests and
    the server share it; `now` is runtime.monotonic() unless given."""

    def __init__(self, expire_ms: int) -> None:
        self.expire_s = expire_ms / 1000
        self._brokers: dict[tuple[str, int], _Registration] = {}
        self.route_changes = 0
        """Changes of what routes say (a broker came, left, moved, changed role, epoch or
        topics, or its write bit): rocketmq_namesrv_route_changes_total."""
        self._write_wiped: set[str] = set()
        """Broker names whose topics routes show without the write bit (mqadmin
        wipeWritePerm), whatever they register, until add_write_perm: in memory, as all else."""

    def __len__(self) -> int:
        return len(self._brokers)

    def register(self, r: RegisterBroker, peer: str | None, now: float | None = None) -> BrokerInfo | None:
        """Record a registration (a validated `register_broker`); returns the
        broker as recorded, or None when refused: a master (brokerId 0) whose epoch is older
        than the registered one's stays out (a returning old master must not take the route
        from the promoted one)."""
        now = runtime.monotonic() if now is None else now
        key = (r.broker_name, r.broker_id)
        old = self._brokers.get(key)
        epoch = r.epoch
        if (key[1] == 0 and old is not None and old.broker.address != r.address
                and old.broker.epoch is not None and (epoch is None or epoch < old.broker.epoch)):
            log.warning("refused %s as master of %s: its epoch %s is older than %s's epoch %d",
                        r.address, key[0], epoch, old.broker.address, old.broker.epoch)
            return None
        # the same address under another id or name: the node changed identity (promotion)
        for other_key, other in list(self._brokers.items()):
            if other_key != key and other.broker.address == r.address:
                log.info("%s now registers as %s/%d (was %s/%d)", r.address, key[0], key[1], *other_key)
                del self._brokers[other_key]
        if old is None:
            log.info("broker %s/%d (%s, %s) registered", key[0], key[1], r.role, r.address)
        elif old.broker.address != r.address:
            log.warning("broker %s/%d moved from %s to %s", key[0], key[1], old.broker.address, r.address)
        elif not old.broker.alive:
            log.info("broker %s/%d (%s) is back", key[0], key[1], r.address)
        broker = attrs.evolve(BrokerInfo.from_wire(attrs.asdict(r)), last_update_ms=int(runtime.wall_clock() * 1000))
        if old is None or _route_of(old.broker) != _route_of(broker):
            self.route_changes += 1
        self._brokers[key] = _Registration(broker, now, peer)
        return broker

    def set_write_perm(self, broker_name: str, writeable: bool) -> int | None:
        """wipeWritePerm (`writeable` False) / addWritePerm of a broker group: how many of its
        topics (as its master, else its lowest id, registered them) the change applies to;
        None when no broker of that name is registered."""
        members = sorted((k[1], r.broker) for k, r in self._brokers.items() if k[0] == broker_name)
        if not members:
            return None
        self.route_changes += 1
        if writeable:
            self._write_wiped.discard(broker_name)
        else:
            self._write_wiped.add(broker_name)
        log.warning("%s: routes show its topics %s", broker_name,
                    "with their registered perm again (addWritePerm)" if writeable
                    else "without the write bit (wipeWritePerm)")
        return len(members[0][1].topics)

    def write_wiped(self) -> list[str]:
        return sorted(self._write_wiped)

    def _seen(self, registration: _Registration, now: float) -> BrokerInfo:
        """The broker as clients are told about it: its age, and its topics without the write
        bit while its group's write permission is wiped."""
        b = registration.seen_at(now)
        if b.broker_name in self._write_wiped:
            b = attrs.evolve(b, topics={t: attrs.evolve(q, perm=q.perm & ~PERM_WRITE) for t, q in b.topics.items()})
        return b

    def master_of(self, broker_name: str) -> BrokerInfo | None:
        registration = self._brokers.get((broker_name, 0))
        return registration.broker if registration else None

    def unregister(self, broker_name: str, broker_id: int, address: str) -> bool:
        """Remove a broker that stops gracefully; only if `address` is the registered one,
        so a late unregister of an old process cannot remove its successor."""
        registration = self._brokers.get((broker_name, broker_id))
        if registration is None or registration.broker.address != address:
            return False
        del self._brokers[(broker_name, broker_id)]
        self.route_changes += 1
        log.info("broker %s/%d (%s) unregistered", broker_name, broker_id, address)
        return True

    def connection_closed(self, peer: str | None) -> None:
        """The connection `peer` ended: its brokers are not alive (until they register again)."""
        if peer is None:
            return
        for registration in self._brokers.values():
            b = registration.broker
            if registration.peer == peer and b.alive:
                registration.broker = attrs.evolve(b, alive=False)
                self.route_changes += 1
                log.info("broker %s/%d (%s): registration connection closed; marked not alive",
                         b.broker_name, b.broker_id, b.address)

    def expire(self, now: float | None = None) -> list[BrokerInfo]:
        """Drop brokers not heard from for brokerExpireMs; returns them."""
        now = runtime.monotonic() if now is None else now
        gone = [r for r in self._brokers.values() if now - r.last_update > self.expire_s]
        for r in gone:
            b = r.broker
            del self._brokers[(b.broker_name, b.broker_id)]
            self.route_changes += 1
            log.warning("broker %s/%d (%s) expired: not heard from for %d ms",
                        b.broker_name, b.broker_id, b.address, r.age_ms(now))
        return [r.broker for r in gone]

    def route(self, topic: str, now: float | None = None) -> list[WireGroupRoute]:
        """The groups serving `topic` (any of its brokers has it), by brokerName.

        Each group lists all its brokers (so a consumer can fall back to a slave) and the
        queue data of its master, or of its lowest-id broker that has the topic when the
        master is gone.
        """
        now = runtime.monotonic() if now is None else now
        brokers = [self._seen(r, now) for r in self._brokers.values()]
        return [
            WireGroupRoute(broker_name=name, cluster=members[0].cluster, brokers=[b.route_entry() for b in members],
                           queue_data=queue_data.to_wire())
            for name, members, queue_data in groups_serving(topic, brokers)
        ]

    def cluster_info(self, now: float | None = None) -> list[dict[str, Any]]:
        now = runtime.monotonic() if now is None else now
        brokers = sorted((self._seen(r, now) for r in self._brokers.values()),
                         key=lambda b: (b.cluster, b.broker_name, b.broker_id))
        return [b.to_wire() for b in brokers]

    def counts(self) -> dict[tuple[str, str, bool], int]:
        """(cluster, role, alive) → registered brokers, for /metrics."""
        out: dict[tuple[str, str, bool], int] = {}
        for registration in self._brokers.values():
            b = registration.broker
            key = (b.cluster, b.role, b.alive)
            out[key] = out.get(key, 0) + 1
        return out


def _route_of(b: BrokerInfo) -> tuple[object, ...]:
    """What a route tells clients about a broker (not its offsets or age)."""
    return (b.address, b.ha_address, b.role, b.alive, b.epoch, b.lease_holder, b.in_sync, dict(b.topics))
