"""The name server's requests and replies: one attrs class each (the node registers with
these, the clients ask for routes with them); requests are validated by `codec.parse_with`
against NAMESRV_REQUESTS.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from store.address import AddressError, split_host_port
from store.message import topic_error

from .codec import (
    INT,
    LIST_STR,
    STR,
    FieldType,
    InvalidRequest,
    WireRequest,
    wire,
    wrong_type,
)
from .replies import WireReply, WritePermReply
from .values import WireGroupRoute, nested

__all__ = ["NAMESRV_REQUESTS", "ROLES", "AddWritePerm", "ClusterInfo", "ClusterInfoReply", "GetRoute", "NamesrvStatus",
           "NamesrvStatusReply", "RegisterBroker", "RegisterReply", "RouteReply", "UnregisterBroker", "UnregisterReply",
           "WipeWritePerm"]

ROLES = ("SYNC_MASTER", "ASYNC_MASTER", "SLAVE")

def _non_empty(v: str) -> str | None:
    return None if v.strip() else "must not be empty"


def _address(v: str) -> str | None:
    try:
        split_host_port(v)
    except AddressError as e:
        return str(e)
    return None


def _addresses(v: list[str]) -> str | None:
    return next((f"[{i}] {problem}" for i, a in enumerate(v) if (problem := _address(a))), None)


def _role(v: str) -> str | None:
    return None if v in ROLES else f"must be one of {', '.join(ROLES)}, got {v!r}"


def _non_negative(v: int) -> str | None:
    return None if 0 <= v < 2**63 else f"must be in 0..2^63-1, got {v}"


def _topic(v: str) -> str | None:
    return topic_error(v)


_QUEUE_DATA_KEYS = (("read_queue_nums", 1, 1024), ("write_queue_nums", 1, 1024), ("perm", 0, 7))


def _check_topics(value: Any, path: str) -> dict[str, dict[str, int]]:
    """{topic: {read_queue_nums, write_queue_nums, perm}}: the broker's topic table."""
    if type(value) is not dict:
        raise wrong_type(path, "a map of topic → queue data", value)
    out: dict[str, dict[str, int]] = {}
    for topic, data in value.items():
        if type(topic) is not str:
            raise wrong_type(f"{path} key", "a text string", topic)
        problem = topic_error(topic)
        if problem:
            raise _bad(f"field {path!r}: {problem}")
        if type(data) is not dict:
            raise wrong_type(f"{path}[{topic!r}]", "a map", data)
        unknown = set(data) - {k for k, _, _ in _QUEUE_DATA_KEYS}
        if unknown:
            raise _bad(f"field {path}[{topic!r}] has unknown key {sorted(map(str, unknown))[0]!r}")
        entry = {}
        for key, low, high in _QUEUE_DATA_KEYS:
            v = data.get(key)
            if type(v) is not int or not low <= v <= high:
                raise _bad(f"field {path}[{topic!r}].{key} must be an integer in {low}..{high}, got {v!r}")
            entry[key] = v
        out[topic] = entry
    return out


def _bad(message: str) -> InvalidRequest:
    return InvalidRequest(message)


TOPICS = FieldType("a map of topic → queue data", _check_topics)


# ---------------------------------------------------------------- replies


def _str_or_none(v: Any) -> str | None:
    return v if isinstance(v, str) else None


@attrs.frozen(kw_only=True)
class RegisterReply(WireReply):
    """The name server's answer to `register_broker`: whether it took the registration (an
    older master is refused) and the group's master as it knows it, with its epoch, which a
    slave follows and a master fences on."""

    registered: bool
    master_address: str | None = None
    master_ha_address: str | None = None
    master_epoch: int | None = None
    master_role: str | None = None
    broker_expire_ms: int | None = None

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any]) -> RegisterReply:
        """Read an answer; a value of the wrong type counts as absent (an older or foreign
        name server must not crash the broker's registration loop)."""
        epoch, expire = raw.get("master_epoch"), raw.get("broker_expire_ms")
        return cls(registered=raw.get("registered") is True,
                   master_address=_str_or_none(raw.get("master_address")),
                   master_ha_address=_str_or_none(raw.get("master_ha_address")),
                   master_epoch=epoch if type(epoch) is int else None,
                   master_role=_str_or_none(raw.get("master_role")),
                   broker_expire_ms=expire if type(expire) is int else None)


@attrs.define(kw_only=True)
class UnregisterReply(WireReply):
    removed: bool


@attrs.define(kw_only=True)
class RouteReply(WireReply):
    """`get_route`: the groups serving the topic, by brokerName (cluster.client's TopicRoute
    is the client's view of them)."""

    topic: str
    groups: list[WireGroupRoute] = nested(WireGroupRoute, many=True)


@attrs.define(kw_only=True)
class ClusterInfoReply(WireReply):
    """`get_cluster_info`: every registered broker (maps; cluster.client's BrokerInfo reads them)."""

    brokers: list[dict[str, Any]]
    broker_expire_ms: int | None = None


@attrs.define(kw_only=True)
class NamesrvStatusReply(WireReply):
    """The name server's `status`."""

    role: str
    address: str | None
    brokers: int
    broker_expire_ms: int
    started_ms: int | None = None
    security: dict[str, Any] | None = None  # logins and refusals, with aclEnable


# ---------------------------------------------------------------- requests


@attrs.define(kw_only=True)
class _BrokerIdentity(WireRequest):
    """Who a broker is: the fields a registration and an unregistration share."""

    cluster: str = wire(STR, _non_empty)
    broker_name: str = wire(STR, _non_empty)
    broker_id: int = wire(INT, _non_negative)
    address: str = wire(STR, _address)


@attrs.define(kw_only=True)
class RegisterBroker(_BrokerIdentity):
    """A broker's registration (every `registerBrokerIntervalMs`, and at once on a change)."""

    OP = "register_broker"
    REPLY = RegisterReply
    role: str = wire(STR, _role)
    ha_address: str | None = wire(STR, _address, default=None)
    topics: dict[str, dict[str, int]] = wire(TOPICS, default={})
    max_offset: int = wire(INT, _non_negative, default=0)
    epoch: int | None = wire(INT, _non_negative, default=None)
    # controllerMode etcd: the group's lease holder and in-sync slaves, as this broker sees them
    lease_holder: str | None = wire(STR, _address, default=None)
    in_sync: list[str] | None = wire(LIST_STR, _addresses, default=None)


@attrs.define(kw_only=True)
class UnregisterBroker(_BrokerIdentity):
    OP = "unregister_broker"
    REPLY = UnregisterReply


@attrs.define(kw_only=True)
class GetRoute(WireRequest):
    OP = "get_route"
    REPLY = RouteReply
    topic: str = wire(STR, _topic)


@attrs.define(kw_only=True)
class ClusterInfo(WireRequest):
    OP = "get_cluster_info"
    REPLY = ClusterInfoReply


@attrs.define(kw_only=True)
class NamesrvStatus(WireRequest):
    OP = "status"
    REPLY = NamesrvStatusReply


@attrs.define(kw_only=True)
class WipeWritePerm(WireRequest):
    """mqadmin wipeWritePerm: routes show the group's topics without the write bit (until
    `add_write_perm`, or until this name server restarts: it keeps nothing on disk)."""

    OP = "wipe_write_perm"
    REPLY = WritePermReply
    broker_name: str = wire(STR, _non_empty)


@attrs.define(kw_only=True)
class AddWritePerm(WireRequest):
    """mqadmin addWritePerm: routes show the group's topics with their registered perm again."""

    OP = "add_write_perm"
    REPLY = WritePermReply
    broker_name: str = wire(STR, _non_empty)


NAMESRV_REQUESTS: dict[str, type[WireRequest]] = {cls.OP: cls for cls in (
    RegisterBroker, UnregisterBroker, GetRoute, ClusterInfo, NamesrvStatus, WipeWritePerm, AddWritePerm)}
"""The name server's op table: op name → request class."""
