"""The value checks of the node's request fields (`check(value) -> problem | None`), which
`wire()` attaches to a field: names, tags, keys and properties as the store will hold them,
msgIds, permissions, config keys. Kept apart from the request classes (requests.py) so
those read as the ops' schemas.
"""

from __future__ import annotations

from store.message import topic_error
from store.msg_id import decode_msg_id
from store.properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_WAIT,
)
from store.tag_filter import parse_tag_expression

from .codec import INT32_MAX, MAX_GROUP_LENGTH, MAX_QUEUE_NUMS
from .sql92 import sql92_error

__all__ = [
    "check_body", "check_client_id", "check_config_key", "check_config_value", "check_group",
    "check_keys", "check_master_role", "check_msg_id", "check_non_empty", "check_perm", "check_properties",
    "check_queue_ids", "check_sql_filter", "check_tag_filter", "check_tags", "check_topic", "check_topics", "parse_tag_filter",
]


def check_topic(v: str) -> str | None:
    return topic_error(v)


def check_group(v: str) -> str | None:
    problem = topic_error(v[:127])  # same character set as a topic
    if problem:
        return problem.replace("topic", "group")
    if len(v) > MAX_GROUP_LENGTH:
        return f"group is {len(v)} characters long; the limit is {MAX_GROUP_LENGTH}"
    return None


def check_body(v: bytes) -> str | None:
    return "message body is empty; an empty body is not sent" if not v else None


def check_tags(v: str) -> str | None:
    if not v:
        return "must not be empty (omit the field for no tag)"
    if NAME_VALUE_SEPARATOR in v or PROPERTY_SEPARATOR in v:
        return "must not contain the characters \\x01 or \\x02"
    return None


def check_keys(v: list[str]) -> str | None:
    for k in v:
        if not k or " " in k:
            return f"each key must be non-empty and without spaces (keys are stored space-separated), got {k!r}"
        if NAME_VALUE_SEPARATOR in k or PROPERTY_SEPARATOR in k:
            return f"key {k!r} contains \\x01 or \\x02"
    return None


_DEDICATED = {PROPERTY_TAGS: "tags", PROPERTY_KEYS: "keys", PROPERTY_WAIT: "wait"}


def check_properties(v: dict[str, str]) -> str | None:
    for name, value in v.items():
        if name in _DEDICATED:
            return f"property {name!r} is set through the field {_DEDICATED[name]!r}"
        if not name or not value:
            return f"property names and values must be non-empty, got {name!r}={value!r}"
        for s in (name, value):
            if NAME_VALUE_SEPARATOR in s or PROPERTY_SEPARATOR in s:
                return f"property {name!r} contains \\x01 or \\x02"
    return None


def check_msg_id(v: str) -> str | None:
    try:
        decode_msg_id(v)
    except ValueError as e:
        return str(e)
    return None


def check_perm(v: int) -> str | None:
    return None if 0 <= v <= 7 else f"must be READ(4) | WRITE(2) | INHERIT(1), 0..7, got {v}"


def check_non_empty(v: str) -> str | None:
    return None if v else "must not be empty"


parse_tag_filter = parse_tag_expression
"""RocketMQ subscription expression → the set of tags, or None for "all" ("*" or ""): the
store's parser (store/tag_filter.py), so a request is checked exactly as the pull reads it."""


def check_client_id(v: str) -> str | None:
    if not v or len(v) > MAX_GROUP_LENGTH:
        return f"must be 1..{MAX_GROUP_LENGTH} characters, got {len(v)}"
    if any(c.isspace() or not c.isprintable() for c in v):
        return "must not contain spaces or control characters"
    return None


def check_queue_ids(v: list[int]) -> str | None:
    if len(v) > MAX_QUEUE_NUMS or any(not 0 <= q <= INT32_MAX for q in v):
        return f"must hold at most {MAX_QUEUE_NUMS} queue ids in 0..{INT32_MAX}"
    return None


def check_topics(v: list[str]) -> str | None:
    for t in v:
        problem = topic_error(t)
        if problem:
            return problem
    return None


def check_tag_filter(v: str) -> str | None:
    try:
        parse_tag_filter(v)
    except ValueError as e:
        return str(e)
    return None


check_sql_filter = sql92_error
"""A SQL92 subscription (wire/protocol/sql92.py): the problem with its line and column."""


def check_config_key(v: str) -> str | None:
    if not v or len(v) > 128 or not v.replace("_", "").isalnum():
        return f"must be a config key name (letters, digits, '_'; 1..128 characters), got {v!r}"
    return None


def check_config_value(v: str) -> str | None:
    return None if len(v) <= 4096 else f"must be at most 4096 characters, got {len(v)}"


def check_message_model(v: str) -> str | None:
    return None if v in ("CLUSTERING", "BROADCASTING") else f"must be CLUSTERING or BROADCASTING, got {v!r}"


def check_master_role(v: str) -> str | None:
    return None if v in ("SYNC_MASTER", "ASYNC_MASTER") else f"must be SYNC_MASTER or ASYNC_MASTER, got {v!r}"
