"""The name server's requests: its op table, validated by node/protocol.parse_request."""

from __future__ import annotations

from typing import Any

from node.protocol import (
    INT,
    LIST_STR,
    STR,
    Field,
    FieldType,
    InvalidRequest,
    wrong_type,
)
from store.address import AddressError, split_host_port
from store.message import topic_error

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
_CLUSTER = Field("cluster", STR, True, None, _non_empty)
_BROKER_NAME = Field("broker_name", STR, True, None, _non_empty)
_BROKER_ID = Field("broker_id", INT, True, None, _non_negative)
_ADDRESS = Field("address", STR, True, None, _address)

NAMESRV_OPS: dict[str, tuple[Field, ...]] = {
    "register_broker": (
        _CLUSTER,
        _BROKER_NAME,
        _BROKER_ID,
        Field("role", STR, True, None, _role),
        _ADDRESS,
        Field("ha_address", STR, False, None, _address),
        Field("topics", TOPICS, False, {}),
        Field("max_offset", INT, False, 0, _non_negative),
        Field("epoch", INT, False, None, _non_negative),
        # controllerMode etcd: the group's lease holder and in-sync slaves, as this broker sees them
        Field("lease_holder", STR, False, None, _address),
        Field("in_sync", LIST_STR, False, None, _addresses),
    ),
    "unregister_broker": (_CLUSTER, _BROKER_NAME, _BROKER_ID, _ADDRESS),
    "get_route": (Field("topic", STR, True, None, _topic),),
    "get_cluster_info": (),
    "status": (),
}
"""The name server's op table (node/protocol.parse_request validates against it)."""
