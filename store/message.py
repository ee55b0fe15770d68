"""The message model: `Message`, what a put stores, and `StoredMessage`, a decoded CommitLog
record; the topic rule and the tags hash (ConsumeQueue tagsCode) that both carry. The record
bytes are record_codec.py's, the properties codec properties.py's, the host and msgId codec
msg_id.py's and the SYSFLAG bits sysflag.py's.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping

import attrs

from .accel import COMPILED
from .msg_id import decode_msg_id, encode_msg_id
from .properties import (
    KEY_SEPARATOR,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
    split_keys,
)

# the property names and the msgId decoder stay importable from here, as before: node/,
# cluster/, wire/ and pipeline/ import them with the message classes
__all__ = [
    "MAX_TOPIC_LENGTH",
    "PROPERTY_DELAY",
    "PROPERTY_KEYS",
    "PROPERTY_TAGS",
    "PROPERTY_UNIQ_KEY",
    "PROPERTY_WAIT",
    "Message",
    "StoredMessage",
    "decode_msg_id",
    "encode_msg_id",
    "java_string_hash",
    "reference_java_string_hash",
    "tags_code",
    "topic_error",
]

MAX_TOPIC_LENGTH = 127

_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")


def reference_java_string_hash(s: str) -> int:
    """Java String.hashCode: 31*h + c over UTF-16 code units, wrapped to a signed int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


java_string_hash: Callable[[str], int] = (reference_java_string_hash if COMPILED is None
                                          else COMPILED.java_string_hash)
"""The compiled hash when store._accel is built (every indexed key pays it), else the reference."""


@functools.lru_cache(maxsize=4096)
def tags_code(tags: str | None) -> int:
    """ConsumeQueue tagsCode: the tag's Java hash sign-extended to 64 bits, 0 when no tag."""
    return java_string_hash(tags) if tags else 0


def topic_error(topic: str) -> str | None:
    """Why a topic is not acceptable (RocketMQ TopicValidator), or None."""
    if not topic or not topic.strip():
        return "topic is empty"
    if len(topic) > MAX_TOPIC_LENGTH:
        return f"topic is {len(topic)} characters long; the limit is {MAX_TOPIC_LENGTH}"
    if not _TOPIC_RE.match(topic):
        return f"topic {topic!r} has characters outside [A-Za-z0-9_%|-]"
    return None


def _freeze_props(value: Mapping[str, str] | None) -> dict[str, str]:
    return dict(value or {})


@attrs.define(on_setattr=attrs.setters.NO_OP)
class Message:
    """A message to be stored. `tags` and `keys` become the TAGS and KEYS properties.

    `keys` and `properties` are converted (and copied) on construction only: attribute
    assignment runs no hooks, which halves the cost of building one (the put path builds
    one per message).
    """

    topic: str
    body: bytes
    queue_id: int = 0
    tags: str | None = None
    keys: tuple[str, ...] = attrs.field(default=(), converter=split_keys)
    properties: dict[str, str] = attrs.field(factory=dict, converter=_freeze_props)
    flag: int = 0
    born_timestamp: int | None = None
    born_host: str | None = None
    sys_flag: int = 0
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    def all_properties(self) -> dict[str, str]:
        """Properties as stored: the explicit ones plus TAGS and KEYS."""
        props = dict(self.properties)
        if self.tags:
            props[PROPERTY_TAGS] = self.tags
        if self.keys:
            props[PROPERTY_KEYS] = KEY_SEPARATOR.join(self.keys)
        return props

    @property
    def wait_store_msg_ok(self) -> bool:
        """WAIT property: absent means true (RocketMQ isWaitStoreMsgOK)."""
        value = self.properties.get(PROPERTY_WAIT)
        return value is None or value.strip().lower() == "true"


@attrs.frozen
class StoredMessage:
    """A decoded CommitLog record; field names follow FORMATS.md in snake_case."""

    size: int
    magic_version: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    commitlog_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str]
    crc_ok: bool = True

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> tuple[str, ...]:
        return split_keys(self.properties.get(PROPERTY_KEYS))

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)

    @property
    def tags_code(self) -> int:
        return tags_code(self.tags)

    @property
    def msg_id(self) -> str:
        return encode_msg_id(self.store_host, self.commitlog_offset)
