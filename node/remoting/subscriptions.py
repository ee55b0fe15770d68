"""The SQL92 subscriptions RocketMQ consumers declare in their heartbeats.

A Java push consumer pulls without FLAG_SUBSCRIPTION (postSubscriptionWhenPull is off by
default): the broker filters with the subscription of the group's last heartbeat
(PullMessageProcessor, ConsumerFilterManager). Tags need nothing here (the clients filter
tags again themselves, so "*" loses nothing), but no client evaluates SQL92, so a pull of a
group whose heartbeat subscribed a topic by SQL92 uses that expression.
"""

from __future__ import annotations

import weakref
from typing import Any

import attrs

from wire.protocol.sql92 import SQL92
from wire.remoting.bodies import BodyError, parse_json_body

from ..tables.consumers import ConsumerManager

__all__ = ["HeartbeatSubscriptions", "heartbeat_subscriptions", "sql_subscriptions"]


@attrs.frozen
class _Declared:
    expression: str
    sub_version: int


class HeartbeatSubscriptions:
    """(group, topic) → the SQL92 expression its newest heartbeat declared (by subVersion,
    the subscription's creation time); a TAG subscription in a later heartbeat replaces it."""

    def __init__(self) -> None:
        self._table: dict[tuple[str, str], _Declared] = {}

    def declare(self, group: str, topic: str, expression_type: str, expression: str, sub_version: int) -> None:
        key = (group, topic)
        known = self._table.get(key)
        if known is not None and known.sub_version > sub_version:
            return  # an older member's heartbeat: the newest subscription stands
        if expression_type.upper() == SQL92:
            self._table[key] = _Declared(expression, sub_version)
        else:
            self._table.pop(key, None)

    def sql92(self, group: str, topic: str) -> str | None:
        declared = self._table.get((group, topic))
        return None if declared is None else declared.expression


def _version(value: Any) -> int:
    """subVersion: a number from Java, a string from C++; anything else counts as 0."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def heartbeat_subscriptions(body: bytes) -> list[tuple[str, str, str, str, int]]:
    """(group, topic, expressionType, subString, subVersion) of each subscription of a
    HeartbeatData body (the body was already checked by `parse_heartbeat`)."""
    try:
        data = parse_json_body(body, "heartbeat")
    except BodyError:
        return []
    out: list[tuple[str, str, str, str, int]] = []
    for consumer in data.get("consumerDataSet") or []:
        group = consumer.get("groupName") if isinstance(consumer, dict) else None
        if not isinstance(group, str):
            continue
        for sub in consumer.get("subscriptionDataSet") or []:
            if isinstance(sub, dict) and isinstance(sub.get("topic"), str):
                out.append((group, sub["topic"], str(sub.get("expressionType") or "TAG"),
                            str(sub.get("subString") or "*"), _version(sub.get("subVersion"))))
    return out


_TABLES: weakref.WeakKeyDictionary[ConsumerManager, HeartbeatSubscriptions] = weakref.WeakKeyDictionary()


def sql_subscriptions(consumers: ConsumerManager) -> HeartbeatSubscriptions:
    """The table of this consumer table's node (a new term's table starts empty)."""
    table = _TABLES.get(consumers)
    if table is None:
        table = _TABLES[consumers] = HeartbeatSubscriptions()
    return table
