"""TagFilter: a subscription's tag expression (RocketMQ's SubscriptionData for TAG type):
"*" or "" means every message, else tags joined by "||". Pulls match the ConsumeQueue
unit's tags hash code first, then the message's real tag (hash codes collide).

The one parser of tag expressions: the store's pulls and the client protocol's request
check (wire/protocol.py) both use it.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from .message import StoredMessage, tags_code


def parse_tag_expression(expression: str | None) -> frozenset[str] | None:
    """The set of tags, or None for "all" (None, "", "*"); ValueError when it names no tag."""
    if expression is None:
        return None
    expression = expression.strip()
    if expression in ("", "*"):
        return None
    tags = frozenset(t.strip() for t in expression.split("||") if t.strip())
    if not tags:
        raise ValueError(f"tag filter {expression!r} names no tag; use '*' for all")
    return tags


MessageFilter = Callable[[StoredMessage], bool]
"""A pull's second look at a message its tags let through (RocketMQ's isMatchedByCommitLog):
the node passes a SQL92 expression's `matches` over the properties; the store knows no SQL."""


@attrs.frozen
class TagFilter:
    """A subscription's tags: None matches everything (also messages without a tag)."""

    tags: frozenset[str] | None
    codes: frozenset[int] = frozenset()

    @classmethod
    def parse(cls, expression: str | None) -> TagFilter:
        tags = parse_tag_expression(expression)
        if tags is None:
            return cls(None)
        return cls(tags, frozenset(tags_code(t) for t in tags))

    def matches_code(self, code: int) -> bool:
        return self.tags is None or code in self.codes

    def matches_tag(self, tag: str | None) -> bool:
        return self.tags is None or tag in self.tags
