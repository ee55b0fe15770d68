"""The Message and DLQ pages' reads: by key, by msgId, by topic and time range (paged),
one message's body views and life, through `cluster.client` (Admin for lookups and offsets,
a PullConsumer reading by explicit offset, which commits nothing)."""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from typing import Any

import attrs
import trio

from wire.client import BadRequest, NotFound, TidemqError
from wire.protocol.checks import check_msg_id

from ..client import Admin, MessageQueue, PullConsumer, ReceivedMessage
from .inputs import InputError, known_topic

READER_GROUP = "TIDEMQ_CONSOLE"
"""The group the console's reads name (its pulls commit nothing)."""
MAX_PAGE = 10_000
PULL_BATCH = 32
"""What a node answers one pull with at most (maxTransferCountOnMessageInMemory)."""
PULLS_IN_FLIGHT = 16


@attrs.frozen
class MessagePage:
    """One page of a topic's messages stored in [begin_ms, end_ms)."""

    topic: str
    messages: list[ReceivedMessage]
    total: int
    page: int
    size: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.size))


def parse_time(text: str, what: str) -> int:
    """A datetime-local field's value (local time unless it names a zone) or epoch
    milliseconds, as epoch milliseconds; InputError naming `what` otherwise."""
    text = text.strip()
    if not text:
        raise InputError(f"{what} is required")
    if text.isdigit():
        return int(text)
    try:
        return int(datetime.datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise InputError(f"{what} {text!r} is not a time (e.g. 2026-11-24T10:30:00)") from None


async def by_time(admin: Admin, namesrv: str, topic: str, begin_ms: int, end_ms: int, *,
                  page: int = 1, size: int = 50) -> MessagePage:
    """Page `page` (from 1) of `size` of the topic's messages stored from `begin_ms` up to
    (not including) `end_ms`, queue by queue in offset order. Each queue's range comes from
    its ConsumeQueue's time search (offset_by_time), so a page reads only its own messages."""
    if end_ms <= begin_ms:
        raise InputError("the time range is backwards: the end must come after the begin")
    if not 1 <= size <= MAX_PAGE:
        raise InputError(f"page size must be between 1 and {MAX_PAGE}")
    if page < 1:
        raise InputError("page must be 1 or more")
    topic = await known_topic(admin, topic)
    async with PullConsumer(namesrv, group=READER_GROUP, topic=topic) as reader:
        queues = sorted(await admin.topic_status(topic), key=lambda q: (q["broker_name"], q["queue_id"]))
        bounds: list[tuple[int, int]] = [(0, 0)] * len(queues)

        async def bound(i: int, q: dict[str, Any]) -> None:
            mq = MessageQueue(topic, q["broker_name"], q["queue_id"])
            limits = (q["min_offset"], q["max_offset"])
            bounds[i] = (await _first_at_or_after(admin, reader, mq, begin_ms, *limits),
                         await _first_at_or_after(admin, reader, mq, end_ms, *limits))

        async with trio.open_nursery() as nursery:  # each queue's range at once
            for i, q in enumerate(queues):
                nursery.start_soon(bound, i, q)
        total = sum(max(0, hi - lo) for lo, hi in bounds)
        # the page's slice of each queue's range (queues in order, each in offset order)
        slices: list[tuple[MessageQueue, int, int]] = []
        skip, want = (page - 1) * size, size
        for q, (lo, hi) in zip(queues, bounds, strict=True):
            n = max(0, hi - lo)
            if want <= 0:
                break
            if skip >= n:
                skip -= n
                continue
            take = min(want, n - skip)
            slices.append((MessageQueue(topic, q["broker_name"], q["queue_id"]), lo + skip, lo + skip + take))
            skip, want = 0, want - take
        parts: list[list[ReceivedMessage]] = [[] for _ in slices]

        in_flight = trio.CapacityLimiter(PULLS_IN_FLIGHT)

        async def read(i: int, mq: MessageQueue, start: int, stop: int) -> None:
            # a queue's offsets are contiguous: its pulls of PULL_BATCH go out together
            chunks: dict[int, list[ReceivedMessage]] = {}

            async def chunk(offset: int) -> None:
                async with in_flight:
                    chunks[offset] = await _read(reader, mq, offset, min(PULL_BATCH, stop - offset))

            async with trio.open_nursery() as inner:
                for offset in range(start, stop, PULL_BATCH):
                    inner.start_soon(chunk, offset)
            parts[i] = [m for offset in sorted(chunks) for m in chunks[offset]]

        async with trio.open_nursery() as nursery:  # every queue's slice at once
            for i, (mq, start, stop) in enumerate(slices):
                nursery.start_soon(read, i, mq, start, stop)
    out = [m for part in parts for m in part]
    return MessagePage(topic, out, total, page, size)


async def _read(reader: PullConsumer, mq: MessageQueue, offset: int, count: int) -> list[ReceivedMessage]:
    """Up to `count` messages of `mq` from `offset` on (no long polling, nothing committed)."""
    got = await reader.pull(mq, count, timeout_ms=0, offset=offset)
    return [m for m in got.messages if offset <= m.queue_offset < offset + count]


async def _first_at_or_after(admin: Admin, reader: PullConsumer, mq: MessageQueue, ts: int,
                             low: int, high: int) -> int:
    """The first offset in [low, high] of `mq` whose message was stored at or after `ts`
    (`high`: none). The ConsumeQueue's time search (offset_by_time) lands on the unit
    nearest in time, either side, so the answer is settled by reading around it: a
    queue's store times only grow."""
    guess = min(max(await admin.offset_by_time(mq, ts), low), high)
    while guess > low:  # back while the message before the guess is not earlier
        start = max(low, guess - PULL_BATCH)
        before = await _read(reader, mq, start, guess - start)
        earlier = [m for m in before if m.store_timestamp < ts]
        if earlier or not before:
            guess = earlier[-1].queue_offset + 1 if earlier else guess
            break
        guess = start
    while guess < high:  # forward past messages stored before ts
        batch = await _read(reader, mq, guess, PULL_BATCH)
        if not batch:
            break
        later = [m for m in batch if m.store_timestamp >= ts]
        if later:
            return later[0].queue_offset
        guess = batch[-1].queue_offset + 1
    return min(guess, high)


async def by_key(admin: Admin, topic: str, key: str, *, max_num: int = 64) -> list[ReceivedMessage]:
    topic = await known_topic(admin, topic)
    key = key.strip()
    if not key:
        raise InputError("a key is required")
    return await admin.query_by_key(topic, key, max_num=max_num)


async def by_msg_id(admin: Admin, msg_id: str) -> ReceivedMessage:
    msg_id = msg_id.strip()
    problem = check_msg_id(msg_id) if msg_id else "a msgId is required"
    if problem:
        raise InputError(f"malformed msgId: {problem}")
    try:
        return await admin.get_by_msg_id(msg_id)
    except BadRequest as e:
        raise InputError(f"malformed msgId: {e}") from None
    except NotFound:
        raise InputError(f"no message with msgId {msg_id} is stored (it may have been cleaned up)") from None


def body_views(body: bytes) -> dict[str, str | None]:
    """The body as text (None when not UTF-8), pretty JSON (None when not JSON) and hex."""
    try:
        text: str | None = body.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    pretty = None
    if text is not None:
        try:
            pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pretty = None
    rows = [f"{i:08x}  {body[i:i + 16].hex(' '):<47}  "
            + "".join(chr(b) if 32 <= b < 127 else "." for b in body[i:i + 16]) for i in range(0, len(body), 16)]
    return {"text": text, "json": pretty, "hex": "\n".join(rows)}


async def life(admin: Admin, m: ReceivedMessage) -> dict[str, Any]:
    """Where the message is stored (its group's brokers) and which groups consumed it: a
    group whose committed offset on its queue is past the message's offset has consumed it
    (what rocketmq-dashboard's message track asks too); `pending` groups have not yet."""
    stored = []
    try:
        route = await admin.route(m.topic)
        group = route.group(m.broker_name or "")
        if group is not None:
            stored = [{"broker_id": b.broker_id, "role": b.role, "address": b.address} for b in group.brokers]
    except TidemqError:
        pass
    consumed: list[str] = []
    pending: list[str] = []
    groups: set[str] = set()
    for o in await admin.committed_offsets(topic=m.topic):
        groups.add(o["group"])
        if o["broker_name"] == m.broker_name and o["queue_id"] == m.queue_id:
            (consumed if o["offset"] > m.queue_offset else pending).append(o["group"])
    return {"stored": stored, "consumed": sorted(set(consumed)), "pending": sorted(set(pending)),
            "copies": await _copies(admin, m, groups)}


async def _copies(admin: Admin, m: ReceivedMessage, groups: set[str]) -> list[dict[str, Any]]:
    """The message's retry and DLQ copies in the groups that consume its topic: found by
    its keys in `%RETRY%<group>` and `%DLQ%<group>` (a copy keeps them), told apart by
    ORIGIN_MESSAGE_ID. A message without keys has none found (there is nothing to look up by)."""
    if not m.keys:
        return []
    origin = {m.msg_id, m.properties.get("UNIQ_KEY"), m.properties.get("ORIGIN_MESSAGE_ID")} - {None}
    served = {t.topic for t in await admin.topics()}
    found: dict[str, dict[str, Any]] = {}
    for group in sorted(groups):
        for prefix, kind in (("%RETRY%", "retry"), ("%DLQ%", "DLQ")):
            topic = prefix + group
            if topic not in served:
                continue
            for key in m.keys:
                for c in await admin.query_by_key(topic, key):
                    if c.properties.get("ORIGIN_MESSAGE_ID") in origin and c.msg_id not in found:
                        found[c.msg_id] = {"msg_id": c.msg_id, "kind": kind, "group": group, "topic": topic,
                                           "reconsume_times": c.reconsume_times,
                                           "store_timestamp": c.store_timestamp}
    return sorted(found.values(), key=lambda c: c["store_timestamp"])


def summary(m: ReceivedMessage, limit: int = 80) -> str:
    """The body's start as text, for a list."""
    text = m.body[:limit * 4].decode("utf-8", errors="replace")
    return text[:limit] + ("…" if len(text) > limit or len(m.body) > limit * 4 else "")


def as_rows(messages: Sequence[ReceivedMessage]) -> list[dict[str, Any]]:
    return [{"msg_id": m.msg_id, "topic": m.topic, "tags": m.tags, "keys_text": " ".join(m.keys),
             "broker_name": m.broker_name, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
             "store_timestamp": m.store_timestamp, "body": summary(m), "size": len(m.body),
             "reconsume_times": m.reconsume_times} for m in messages]
