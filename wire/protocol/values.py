"""The values nested in replies (a stored message), one attrs class each, written by the
server and read by the clients, so a nested map's keys are spelled once, here.

`to_wire()` is the map the wire carries (every field, in declaration order: that order is
the CBOR map's, which tests/wire/test_protocol.py pins); `from_wire(map)` keeps the fields
the class declares, ignores others (a newer node may say more) and fills a missing one
from its default (a ReplyError when it has none).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

import attrs

from store.message import StoredMessage
from store.properties import PROPERTY_KEYS, PROPERTY_TAGS

__all__ = ["ReplyError", "WireMessage", "WireValue"]

V = TypeVar("V", bound="WireValue")


class ReplyError(ValueError):
    """An answer that lacks a field its reply class requires (a peer speaking another
    version of the protocol, or not tidemq)."""


class WireValue:
    """Base of the nested value classes (attrs classes): `to_wire()` and `from_wire`."""

    __slots__ = ()
    _NAMES: ClassVar[tuple[str, ...]] = ()

    def to_wire(self) -> dict[str, Any]:
        names = type(self)._NAMES or _names(type(self))
        return {name: getattr(self, name) for name in names}

    @classmethod
    def from_wire(cls: type[V], raw: Mapping[str, Any]) -> V:
        kwargs: dict[str, Any] = {}
        for a in attrs.fields(cls):  # type: ignore[arg-type]  # subclasses are attrs classes
            if a.name in raw:
                kwargs[a.name] = raw[a.name]
            elif a.default is attrs.NOTHING:
                raise ReplyError(f"the answer lacks the field {a.name!r} of {cls.__name__}")
        return cls(**kwargs)


def _names(cls: type[WireValue]) -> tuple[str, ...]:
    """A value class's field names, worked out once (a pull answers with many messages)."""
    cls._NAMES = tuple(a.name for a in attrs.fields(cls))  # type: ignore[arg-type]
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
