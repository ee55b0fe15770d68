"""The DLQ page: each group's dead-letter topic (`%DLQ%<group>`, docs/consumer-groups.md),
its messages paged, resend (one or a batch) to the topic each came from, and export.

A resend stores a new message on the original topic (RETRY_TOPIC) with the dead one's
body, tags, keys and user properties, and ORIGIN_MESSAGE_ID naming the first message, so
the group consumes it again; the DLQ copy stays (as rocketmq-dashboard leaves it)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from wire.client import NotFound
from wire.protocol.checks import check_properties

from ..client import Admin, MessageQueue, Producer, PullConsumer, ReceivedMessage
from .inputs import InputError, checked_group
from .messages import READER_GROUP, _read, by_msg_id

DLQ_PREFIX = "%DLQ%"
RETRY_PROPERTIES = {"RETRY_TOPIC", "RECONSUME_TIME", "MAX_RECONSUME_TIMES", "DELAY", "REAL_TOPIC", "REAL_QID",
                    "ORIGIN_MESSAGE_ID"}
"""What a retry or DLQ copy carries that a resent message must not (it sets its own
ORIGIN_MESSAGE_ID)."""


@attrs.frozen
class DlqRow:
    group: str
    topic: str
    count: int


async def dlq_rows(admin: Admin) -> list[DlqRow]:
    """Every DLQ topic with the number of messages it holds (max - min offsets)."""
    topics = sorted({t.topic for t in await admin.topics() if t.topic.startswith(DLQ_PREFIX)})
    rows = []
    for topic in topics:
        try:
            queues = await admin.topic_status(topic)
        except NotFound:
            continue
        rows.append(DlqRow(topic[len(DLQ_PREFIX):], topic, sum(q["max_offset"] - q["min_offset"] for q in queues)))
    return rows


async def dlq_messages(admin: Admin, namesrv: str, group: str, *, page: int = 1,
                       size: int = 50) -> tuple[list[ReceivedMessage], int]:
    """Page `page` of the group's DLQ (oldest first, queue by queue) and how many it holds."""
    topic = DLQ_PREFIX + checked_group(group)
    try:
        queues = sorted(await admin.topic_status(topic), key=lambda q: (q["broker_name"], q["queue_id"]))
    except NotFound:
        raise InputError(f"consumer group {group!r} has no DLQ (no message gave up yet)") from None
    total = sum(q["max_offset"] - q["min_offset"] for q in queues)
    skip, want = (page - 1) * size, size
    out: list[ReceivedMessage] = []
    async with PullConsumer(namesrv, group=READER_GROUP, topic=topic) as reader:
        for q in queues:
            lo, hi = q["min_offset"], q["max_offset"]
            if want <= 0:
                break
            if skip >= hi - lo:
                skip -= hi - lo
                continue
            offset, skip = lo + skip, 0
            mq = MessageQueue(topic, q["broker_name"], q["queue_id"])
            while offset < hi and want > 0:
                got = await _read(reader, mq, offset, min(32, want, hi - offset))
                if not got:
                    break
                out += got[:want]
                want -= min(len(got), want)
                offset = got[-1].queue_offset + 1
    return out, total


def _resend_properties(m: ReceivedMessage) -> dict[str, str]:
    props = {k: v for k, v in m.properties.items()
             if k not in RETRY_PROPERTIES and check_properties({k: v}) is None}
    props["ORIGIN_MESSAGE_ID"] = m.properties.get("ORIGIN_MESSAGE_ID") or m.msg_id
    return props


async def resend(admin: Admin, producer: Producer, group: str, msg_ids: Sequence[str]) -> list[dict[str, Any]]:
    """Send each DLQ message (by msgId, of this group's DLQ) again to the topic it came
    from; one row per message: its msgId, the topic, and the new msgId. InputError before
    anything is sent when one is not a message of this DLQ."""
    group = checked_group(group)
    if not msg_ids:
        raise InputError("select at least one message to resend")
    dead = [await by_msg_id(admin, i) for i in msg_ids]
    for m in dead:
        if m.topic != DLQ_PREFIX + group:
            raise InputError(f"message {m.msg_id} is on {m.topic}, not on {DLQ_PREFIX + group}")
        if not m.properties.get("RETRY_TOPIC"):
            raise InputError(f"message {m.msg_id} does not say which topic it came from (no RETRY_TOPIC)")
    rows = []
    for m in dead:
        topic = m.properties["RETRY_TOPIC"]
        sent = await producer.send(topic, m.body, tags=m.tags, keys=m.keys, properties=_resend_properties(m))
        rows.append({"msg_id": m.msg_id, "topic": topic, "new_msg_id": sent.msg_id, "status": sent.status.name})
    return rows


def export_lines(messages: Iterable[ReceivedMessage]) -> str:
    """JSON lines, one message each: ids, position, times, tags, keys, properties and the
    body (text when it is UTF-8, else base64 with body_encoding "base64")."""
    lines = []
    for m in messages:
        try:
            body, encoding = m.body.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            body, encoding = base64.b64encode(m.body).decode(), "base64"
        lines.append(json.dumps({
            "msg_id": m.msg_id, "topic": m.topic, "broker_name": m.broker_name, "queue_id": m.queue_id,
            "queue_offset": m.queue_offset, "born_timestamp": m.born_timestamp,
            "store_timestamp": m.store_timestamp, "reconsume_times": m.reconsume_times, "tags": m.tags,
            "keys": list(m.keys), "properties": dict(m.properties), "body": body, "body_encoding": encoding,
        }, ensure_ascii=False))
    return "\n".join(lines) + ("\n" if lines else "")
