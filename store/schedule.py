"""Scheduled (delay-level) messages, the store's half (RocketMQ 4.9's CommitLog.putMessage
and the dispatch's tagsCode rule; the delivery service is node/schedule.py).

A put whose `DELAY` property is a level > 0 is stored on `SCHEDULE_TOPIC_XXXX`, queue
level − 1, with its real topic and queue in `REAL_TOPIC` / `REAL_QID`; the level is
capped at the ladder's last one. Dispatch writes the delivery time (store time + the
level's delay) into that queue's tagsCode, so the delivery service reads due times from
the ConsumeQueue alone. `restore_message` turns a stored scheduled message back into the
message to deliver (real topic and queue, DELAY cleared, everything else kept: body,
tags, keys, UNIQ_KEY, born time and host, reconsume times).
"""

from __future__ import annotations

import re

from .message import Message, StoredMessage
from .properties import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_WAIT,
)
from .sysflag import SysFlag, transaction_type

__all__ = [
    "DEFAULT_DELAY_LEVELS",
    "SCHEDULE_TOPIC",
    "DelayError",
    "deliver_timestamp",
    "parse_delay_levels",
    "restore_message",
    "rewrite_delayed",
]

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_LEVEL = re.compile(r"^(\d+)([smhd])$")


class DelayError(ValueError):
    """A DELAY property or a messageDelayLevel string that cannot be used."""


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """messageDelayLevel ("1s 5s ... 2h") → each level's delay in ms (index 0 = level 1)."""
    levels = []
    for part in text.split():
        m = _LEVEL.match(part)
        if m is None or int(m.group(1)) <= 0:
            raise DelayError(
                f"messageDelayLevel entry {part!r} is not a positive number with a unit s, m, h or d "
                f"(default {DEFAULT_DELAY_LEVELS!r})"
            )
        levels.append(int(m.group(1)) * _UNIT_MS[m.group(2)])
    if not levels:
        raise DelayError("messageDelayLevel names no level")
    return tuple(levels)


def _level(msg: Message) -> int:
    raw = msg.properties.get(PROPERTY_DELAY)
    if raw is None or raw.strip() in ("", "0"):
        return 0
    try:
        return int(raw.strip())
    except ValueError:
        raise DelayError(f"property DELAY must be a delay level (an integer), got {raw!r}") from None


def rewrite_delayed(msg: Message, levels: tuple[int, ...]) -> Message:
    """The message as stored: itself, or for DELAY > 0 its SCHEDULE_TOPIC_XXXX form.

    Transaction prepare/rollback records are never delayed (RocketMQ: only
    non-transactional and commit records are). Raises DelayError for a DELAY that is
    not an integer."""
    level = _level(msg)
    tx = transaction_type(msg.sys_flag)
    if level <= 0 or tx not in (0, int(SysFlag.TRANSACTION_COMMIT)):
        return msg
    level = min(level, len(levels))
    props = dict(msg.properties)
    props[PROPERTY_DELAY] = str(level)
    props[PROPERTY_REAL_TOPIC] = msg.topic
    props[PROPERTY_REAL_QID] = str(msg.queue_id)
    return Message(
        topic=SCHEDULE_TOPIC, body=msg.body, queue_id=level - 1, tags=msg.tags, keys=msg.keys,
        properties=props, flag=msg.flag, born_timestamp=msg.born_timestamp, born_host=msg.born_host,
        sys_flag=msg.sys_flag, reconsume_times=msg.reconsume_times,
        prepared_transaction_offset=msg.prepared_transaction_offset,
    )


def deliver_timestamp(queue_id: int, store_timestamp: int, levels: tuple[int, ...]) -> int:
    """tagsCode of a SCHEDULE_TOPIC_XXXX unit: when the message is due (ms since the epoch)."""
    if 0 <= queue_id < len(levels):
        return store_timestamp + levels[queue_id]
    return store_timestamp + 1000  # RocketMQ's fallback for an unknown level


def restore_message(stored: StoredMessage) -> Message:
    """The message to deliver for a scheduled one; DelayError when REAL_TOPIC/REAL_QID
    are missing or bad (a record that was not written by `rewrite_delayed`)."""
    props = dict(stored.properties)
    topic = props.get(PROPERTY_REAL_TOPIC)
    qid = props.get(PROPERTY_REAL_QID, "")
    if not topic or not qid.isdigit():
        raise DelayError(
            f"scheduled message at offset {stored.commitlog_offset} has no usable REAL_TOPIC/REAL_QID "
            f"({topic!r}, {qid!r})"
        )
    tags = props.pop(PROPERTY_TAGS, None)
    keys = props.pop(PROPERTY_KEYS, None)
    props.pop(PROPERTY_DELAY, None)
    props[PROPERTY_WAIT] = "false"  # RocketMQ's messageTimeup: setWaitStoreMsgOK(false)
    return Message(
        topic=topic, body=stored.body, queue_id=int(qid), tags=tags, keys=keys, properties=props,
        flag=stored.flag, born_timestamp=stored.born_timestamp, born_host=stored.born_host,
        sys_flag=stored.sys_flag, reconsume_times=stored.reconsume_times,
        prepared_transaction_offset=stored.prepared_transaction_offset,
    )
