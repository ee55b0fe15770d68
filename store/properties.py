"""Message properties (FORMATS.md): the PROPERTIES field's codec and the property names
the store reads. A string of name\x01value pairs joined by \x02; KEYS holds several keys
separated by spaces."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
KEY_SEPARATOR = " "

PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_WAIT = "WAIT"
PROPERTY_DELAY = "DELAY"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
PROPERTY_TRAN_MSG = "TRAN_MSG"
"""True on a transactional half message."""
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
"""The topic a retry or dead-letter copy was first stored under (its original topic)."""


def encode_properties(props: Mapping[str, str]) -> str:
    """RocketMQ's writer form: name\\x01value joined by \\x02, no trailing separator."""
    return PROPERTY_SEPARATOR.join(
        f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items() if v is not None
    )


def decode_properties(text: str) -> dict[str, str]:
    """RocketMQ 4.9.8's reader: accepts a trailing \\x02, skips malformed segments."""
    props: dict[str, str] = {}
    if not text:
        return props
    for seg in text.split(PROPERTY_SEPARATOR):
        name, sep, value = seg.partition(NAME_VALUE_SEPARATOR)
        if sep and name and value:
            props[name] = value
    return props


def split_keys(value: Iterable[str] | str | None) -> tuple[str, ...]:
    """KEYS as a tuple: a space-separated string is split, an iterable kept as it is."""
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(k for k in value.split(KEY_SEPARATOR) if k)
    return tuple(value)
