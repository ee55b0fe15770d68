"""Input the console's pages take, checked before anything is sent: InputError carries the
sentence a page shows when it refuses (nothing in the cluster changes)."""

from __future__ import annotations

from wire.client import NotFound
from wire.protocol.checks import check_group, check_topic

from ..client import Admin


class InputError(ValueError):
    """Input a page refuses, with the sentence it shows."""


def checked_topic(topic: str) -> str:
    topic = topic.strip()
    problem = check_topic(topic) if topic else "a topic name is required"
    if problem:
        raise InputError(problem)
    return topic


def checked_group(group: str) -> str:
    group = group.strip()
    problem = check_group(group) if group else "a consumer group name is required"
    if problem:
        raise InputError(problem)
    return group


def checked_int(value: str, what: str, low: int, high: int) -> int:
    try:
        n = int(value)
    except ValueError:
        raise InputError(f"{what} must be a whole number, not {value!r}") from None
    if not low <= n <= high:
        raise InputError(f"{what} must be between {low} and {high}, not {n}")
    return n


async def known_topic(admin: Admin, topic: str) -> str:
    """`topic` when a route serves it; InputError naming it otherwise."""
    topic = checked_topic(topic)
    try:
        route = await admin.route(topic, refresh=True)
    except NotFound:
        raise InputError(f"topic {topic!r} does not exist (no broker group serves it)") from None
    if not route.groups:
        raise InputError(f"topic {topic!r} does not exist (no broker group serves it)")
    return topic
