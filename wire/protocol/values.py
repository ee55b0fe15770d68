"""The values nested in replies (a stored message, a route, a node's HA, disk, stats,
truncation and controller views), one attrs class each, written by the server and read by the clients,
so a nested map's keys are spelled once, here.

`to_wire()` is the map the wire carries (every field, in declaration order: that order is
the CBOR map's, which tests/wire/test_protocol.py pins); `from_wire(map)` keeps the fields
the class declares, ignores others (a newer node may say more) and fills a missing one
from its default (a ReplyError when it has none). A field declared with `nested()` holds
a value (or a list of them) of its own, written and read as its map.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

import attrs

from ha.master import SlaveStatus
from ha.slave import SlaveHAStatus
from store.message import StoredMessage
from store.properties import PROPERTY_KEYS, PROPERTY_TAGS

__all__ = ["ReplyError", "WireDiskUsage", "WireGroupRoute", "WireHAClient", "WireHASlave", "WireHAView", "WireMessage",
           "WireNodeStats", "WireQueueData", "WireRouteBroker", "WireTruncation", "WireValue",
           "WireControllerView", "WirePromoteCheck", "nested"]

V = TypeVar("V", bound="WireValue")


class ReplyError(ValueError):
    """An answer that lacks a field its reply class requires (a peer speaking another
    version of the protocol, or not tidemq)."""


def nested(cls: type[WireValue], *, many: bool = False, default: Any = attrs.NOTHING,
           factory: Any = None) -> Any:
    """A field holding a WireValue (or, `many`, a list of them), in a reply or in another
    value: it is written as the value's map and each map is read back as `cls`."""
    return attrs.field(metadata={"nested": cls, "many": many}, default=default, factory=factory)


class WireValue:
    """Base of the nested value classes (attrs classes): `to_wire()` and `from_wire`."""

    __slots__ = ()
    _NAMES: ClassVar[tuple[str, ...]] = ()
    _NESTED: ClassVar[tuple[tuple[str, bool, type[WireValue]], ...]] = ()

    def to_wire(self) -> dict[str, Any]:
        cls = type(self)
        out = {name: getattr(self, name) for name in cls._NAMES or _names(cls)}
        for name, many, _ in cls._NESTED:  # in place: the map keeps the declaration order
            v = out[name]
            out[name] = [x.to_wire() for x in v] if many else None if v is None else v.to_wire()
        return out

    @classmethod
    def from_wire(cls: type[V], raw: Mapping[str, Any]) -> V:
        kwargs: dict[str, Any] = {}
        for a in attrs.fields(cls):  # type: ignore[arg-type]  # subclasses are attrs classes
            if a.name in raw:
                v = raw[a.name]
                inner = a.metadata.get("nested")
                if inner is not None:  # a null list reads as an empty one (an older node's shape)
                    v = [inner.from_wire(x) for x in v or ()] if a.metadata["many"] else \
                        None if v is None else inner.from_wire(v)
                kwargs[a.name] = v
            elif a.default is attrs.NOTHING:
                raise ReplyError(f"the answer lacks the field {a.name!r} of {cls.__name__}")
        return cls(**kwargs)


def _names(cls: type[WireValue]) -> tuple[str, ...]:
    """A value class's field names and nested fields, worked out once (a pull answers with
    many messages)."""
    fields = attrs.fields(cls)  # type: ignore[arg-type]
    cls._NESTED = tuple((a.name, a.metadata["many"], a.metadata["nested"]) for a in fields if "nested" in a.metadata)
    cls._NAMES = tuple(a.name for a in fields)
    return cls._NAMES


@attrs.define(kw_only=True)
class WireMessage(WireValue):
    """A stored message as `pull`, `query_by_key` and `get_by_msg_id` answer it: TAGS and
    KEYS have fields of their own (`properties` holds the user's), and the record's own
    size, sys_flag, born_host and body_crc let a reader recheck the body it received.
    The defaults are for an older node's shorter map; a node always writes every field."""

    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    msg_id: str
    body: bytes
    tags: str | None = None
    keys: list[str] = attrs.field(factory=list)
    properties: dict[str, str] = attrs.field(factory=dict)
    born_timestamp: int = 0
    store_timestamp: int = 0
    flag: int = 0
    reconsume_times: int = 0
    size: int | None = None
    sys_flag: int | None = None
    born_host: str | None = None
    body_crc: int | None = None

    @classmethod
    def of(cls, m: StoredMessage) -> WireMessage:
        """The message a node answers for a stored record."""
        return cls(topic=m.topic, queue_id=m.queue_id, queue_offset=m.queue_offset,
                   commitlog_offset=m.commitlog_offset, msg_id=m.msg_id, body=m.body, tags=m.tags,
                   keys=list(m.keys),
                   properties={k: v for k, v in m.properties.items() if k not in (PROPERTY_TAGS, PROPERTY_KEYS)},
                   born_timestamp=m.born_timestamp, store_timestamp=m.store_timestamp, flag=m.flag,
                   reconsume_times=m.reconsume_times, size=m.size, sys_flag=m.sys_flag, born_host=m.born_host,
                   body_crc=m.body_crc)


# ---------------------------------------------------------------- a node's HA view


@attrs.define(kw_only=True)
class WireHASlave(WireValue):
    """One slave as its master's `status` lists it (ha/master.py's SlaveStatus). Every
    field has a default (a node always writes them all), so a shorter row still reads."""

    address: str = ""
    ack_offset: int = -1
    """The slave's newest reported max offset; -1 before its first report."""
    lag_bytes: int = 0
    connected_since: int = 0
    """Epoch milliseconds of the master's accept."""
    in_sync: bool = False
    """In the master's in-sync set (haMaxGapNotInSync / haMaxTimeSlaveNotCatchup, or etcd's)."""

    @classmethod
    def of(cls, s: SlaveStatus) -> WireHASlave:
        return cls(address=s.address, ack_offset=s.ack_offset, lag_bytes=s.lag_bytes,
                   connected_since=s.connected_since, in_sync=s.in_sync)


@attrs.define(kw_only=True)
class WireHAClient(WireValue):
    """A slave's replication as its `status` tells it (ha/slave.py's SlaveHAStatus). Every
    field has a default, so an older node's shorter map still reads."""

    master_address: str | None = None
    connected: bool = False
    max_offset: int = 0
    master_max_offset_seen: int = -1
    """End of the newest frame (or a heartbeat's offset) received; -1 before any."""
    lag_bytes: int = 0
    local_address: str | None = None
    """This end of the HA connection: its master's `slaves` list it by this address."""

    @classmethod
    def of(cls, s: SlaveHAStatus) -> WireHAClient:
        return cls(master_address=s.master_address, connected=s.connected, max_offset=s.max_offset,
                   master_max_offset_seen=s.master_max_offset_seen, lag_bytes=s.lag_bytes,
                   local_address=s.local_address)


_CLIENT_KEYS = frozenset(a.name for a in attrs.fields(WireHAClient))


@attrs.define(kw_only=True)
class WireHAView(WireValue):
    """`status`'s `ha`: a master's slaves, or a slave's HA client, or neither (a master
    without an HA service). The wire has one map whose shape says which (`{"slaves":
    [...]}`, the client's own fields, `{}`), so this class writes and reads that shape
    itself instead of a map of its two fields."""

    slaves: list[WireHASlave] | None = None
    """On a master: its connected slaves, oldest connection first."""
    client: WireHAClient | None = None
    """On a slave: its HA client."""

    def to_wire(self) -> dict[str, Any]:
        if self.slaves is not None:
            return {"slaves": [s.to_wire() for s in self.slaves]}
        return {} if self.client is None else self.client.to_wire()

    @classmethod
    def from_wire(cls: type[V], raw: Mapping[str, Any]) -> V:
        if "slaves" in raw:
            return cls(slaves=[WireHASlave.from_wire(s) for s in raw["slaves"] or ()])  # type: ignore[call-arg]
        if _CLIENT_KEYS.intersection(raw):
            return cls(client=WireHAClient.from_wire(raw))  # type: ignore[call-arg]
        return cls()

    @property
    def connected(self) -> bool:
        """A slave whose HA client is connected to its master (false on a master)."""
        return self.client is not None and self.client.connected

    def lag_bytes(self) -> int | None:
        """A master's largest slave lag, or a slave's own; None when it has no HA peer."""
        if self.slaves is not None:
            return max((s.lag_bytes for s in self.slaves), default=None)
        return None if self.client is None else self.client.lag_bytes


# ---------------------------------------------------------------- a node's status sections


@attrs.define(kw_only=True)
class WireDiskUsage(WireValue):
    """`status`'s `disk`: the store partition in bytes (psutil.disk_usage of the store root),
    `used_ratio` 0..1 rounded to 4 places, what the cleanup's 75/85/90 % limits compare."""

    path: str = ""
    total: int = 0
    used: int = 0
    free: int = 0
    used_ratio: float = 0.0


@attrs.define(kw_only=True)
class WireNodeStats(WireValue):
    """`status`'s `stats` (node/stats.py): messages stored and pulled, per second over the
    last minute and since start, and send requests against the CommitLog groups they were
    appended in (requests ÷ groups is what group commit gathers)."""

    put_tps: float = 0.0
    get_tps: float = 0.0
    put_total: int = 0
    get_total: int = 0
    send_requests: int = 0
    send_groups: int = 0


@attrs.define(kw_only=True)
class WireTruncation(WireValue):
    """`status`'s `last_truncation`: what the node's last rejoin cut from its CommitLog
    (node/failover/truncation.py writes it beside the store), which drills and the chaos
    checker hold against what clients were told. Every field has a default, so a report
    an older node kept still reads."""

    from_offset: int = 0
    to_offset: int = 0
    dropped_bytes: int = 0
    message_count: int = 0
    msg_ids: list[str] = attrs.field(factory=list)
    """The dropped messages' msgIds (capped: a huge cut names its first ones)."""
    at_ms: int = 0
    reason: str = ""


@attrs.define(kw_only=True)
class WireControllerView(WireValue):
    """`status`'s `controller` (controllerMode etcd, node/failover/controller.py): the node's
    view of the election, which the launcher waits on and drills check. `lease_holder` and
    `sync_state_set` are the etcd keys' JSON as stored (docs/auto-failover.md), so they stay
    maps; `events` are recent `{at_ms, event}` notes."""

    mode: str = "etcd"
    endpoints: list[str] = attrs.field(factory=list)
    lease: str | None = None
    """The node's lease id in hex; None without one."""
    lease_left_ms: int = 0
    leading: bool = False
    lease_holder: dict[str, Any] | None = None
    sync_state_set: dict[str, Any] | None = None
    etcd_reachable: bool | None = None
    """None before the first exchange with etcd."""
    unnamed_slaves: list[str] = attrs.field(factory=list)
    watching: bool = False
    watch_events: int = 0
    last_error: str | None = None
    events: list[dict[str, Any]] = attrs.field(factory=list)


@attrs.define(kw_only=True)
class WirePromoteCheck(WireValue):
    """Whether a slave may be promoted without losing what consumers may have seen
    (`promote_check`, and `promote`'s answer; node/failover/insync.py decides). `drop_from`
    .. `drop_to` is the CommitLog range a promotion drops (empty when clean)."""

    address: str = ""
    clean: bool = False
    """In its master's in-sync set (when the master answered) and not behind the confirm offset."""
    reason: str = ""
    max_offset: int = 0
    """The slave's CommitLog end."""
    confirm_offset: int | None = None
    """The highest confirm offset known: the master's when it answered, else the slave's last."""
    master_address: str | None = None
    master_reachable: bool = False
    master_offset: int | None = None
    """The master's CommitLog end, when it answered."""
    in_sync: list[str] | None = None
    """The master's in-sync slaves (HA connection addresses), when it answered."""
    in_set: bool | None = None
    """This slave is in that set; None when the master did not answer or cannot name it."""
    drop_from: int = 0
    """The end of the slave's last whole record: where its epoch would start."""
    drop_to: int = 0


# ---------------------------------------------------------------- a topic's route (the name server's)


@attrs.define(kw_only=True)
class WireQueueData(WireValue):
    """A topic's queue counts and PermName bits on one broker group (cluster.client's
    QueueData is the client's view of it)."""

    read_queue_nums: int
    write_queue_nums: int
    perm: int = 6


@attrs.define(kw_only=True)
class WireRouteBroker(WireValue):
    """One broker of a group as `get_route` lists it: also the group's brokers without the
    topic, so a consumer can read from a slave. Identity is required; the rest defaults
    (`alive` true, no epoch) for a name server that says less."""

    broker_id: int
    role: str
    address: str
    ha_address: str | None = None
    alive: bool = True
    max_offset: int = 0
    epoch: int | None = None
    lease_holder: str | None = None
    """controllerMode etcd: who holds the group's leadership lease, as this broker sees it."""
    in_sync: list[str] | None = None
    """controllerMode etcd: the group's in-sync slaves, as this broker sees them."""
    age_ms: int | None = None
    """Since the broker's last registration."""


@attrs.define(kw_only=True)
class WireGroupRoute(WireValue):
    """One broker group serving a topic in a `get_route` answer: its brokers by id and the
    queue data of its master (else of its lowest-id broker that has the topic)."""

    broker_name: str
    cluster: str = ""
    brokers: list[WireRouteBroker] = nested(WireRouteBroker, many=True, factory=list)
    queue_data: WireQueueData | None = nested(WireQueueData, default=None)
