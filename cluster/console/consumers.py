"""The Consumer page's reads and changes: every consumer group with its lag, members and
settings; a group's progress per queue; resetOffsetByTime, through `cluster.client.Admin`."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

import attrs
import trio

from wire.client import NotFound

from ..client import Admin, MessageQueue
from .inputs import InputError, checked_group, known_topic

DEFAULT_RETRY_MAX_TIMES = 16  # a group without settings of its own (node/tables/subscription_groups.py)


@attrs.frozen
class GroupRow:
    """One consumer group on the Consumer page."""

    group: str
    topics: tuple[str, ...]
    lag: int
    members: int
    consume_enable: bool
    retry_max_times: int


async def _max_offsets(admin: Admin, topics: Sequence[str]) -> dict[tuple[str, str, int], int]:
    """(topic, broker name, queue id) → the queue's max offset, for each topic still served."""
    out: dict[tuple[str, str, int], int] = {}

    async def one(topic: str) -> None:
        try:
            for q in await admin.topic_status(topic):
                out[(topic, q["broker_name"], q["queue_id"])] = q["max_offset"]
        except NotFound:  # offsets of a deleted topic: nothing serves it any more
            pass

    async with trio.open_nursery() as nursery:
        for topic in topics:
            nursery.start_soon(one, topic)
    return out


async def live_members(admin: Admin) -> dict[str, set[str]]:
    """group → its live members' client ids, as the masters that answer know them."""
    members: dict[str, set[str]] = {}
    for s in await admin.status():
        if s.status is None or s.status.broker_id != 0:
            continue
        for group, ids in s.status.consumer_groups.items():
            members.setdefault(group, set()).update(ids)
    return members


async def group_rows(admin: Admin, *, filter_text: str = "", system: bool = False) -> list[GroupRow]:
    """Every consumer group the cluster knows (committed offsets, settings of its own, or a
    live member) whose name contains `filter_text`: its topics, total lag, live members and
    settings. The console's own producer group and tidemq's system groups show with `system`."""
    offsets, settings, members = await admin.committed_offsets(), await admin.sub_groups(), await live_members(admin)
    topics = sorted({o["topic"] for o in offsets})
    maxes = await _max_offsets(admin, topics)
    by_group: dict[str, list[dict[str, Any]]] = {}
    for o in offsets:
        by_group.setdefault(o["group"], []).append(o)
    needle = filter_text.strip().lower()
    rows = []
    for group in sorted(set(by_group) | set(settings) | set(members)):
        if needle and needle not in group.lower():
            continue
        if not system and (group.startswith(("TOOLS_", "CID_RMQ_SYS_", "TIDEMQ_")) or group == "DEFAULT"):
            continue
        mine = by_group.get(group, [])
        lag = sum(max(0, maxes[k] - o["offset"]) for o in mine
                  if (k := (o["topic"], o["broker_name"], o["queue_id"])) in maxes)
        s = settings.get(group, {})
        rows.append(GroupRow(group, tuple(sorted({o["topic"] for o in mine})), lag, len(members.get(group, ())),
                             bool(s.get("consume_enable", True)),
                             int(s.get("retry_max_times", DEFAULT_RETRY_MAX_TIMES))))
    return rows


@attrs.frozen
class GroupDetail:
    group: str
    progress: list[dict[str, Any]]
    members: list[dict[str, Any]]
    consume_enable: bool
    retry_max_times: int
    topics: list[str]


async def group_detail(admin: Admin, group: str) -> GroupDetail:
    """A group's progress per queue of each topic it committed offsets for or subscribes
    (broker offset, consumer offset, lag, who holds the queue), its live members and settings;
    InputError when the cluster knows nothing of it."""
    group = checked_group(group)
    views = await admin.consumer_list(group)
    settings = (await admin.sub_groups()).get(group)
    offsets = await admin.committed_offsets(group=group)
    topics = sorted({o["topic"] for o in offsets} | {t for v in views.values() for d in v.details
                                                      for t in d.get("topics") or ()})
    members: dict[str, dict[str, Any]] = {}
    holders: dict[tuple[str, str, int], str] = {}
    for broker_name, view in sorted(views.items()):
        for d in view.details:
            entry = members.setdefault(d["client_id"], {**d, "brokers": [], "queues": []})
            entry["brokers"].append(broker_name)
        for key, holder in view.locks.items():
            topic, _, queue_id = key.rpartition(":")
            holders[(topic, broker_name, int(queue_id))] = holder
            if holder in members:
                members[holder]["queues"].append(f"{topic}@{broker_name}:{queue_id}")
    if not topics and not members and settings is None:
        raise InputError(f"consumer group {group!r} is unknown: no committed offset, no live member, no settings")
    committed = {(o["topic"], o["broker_name"], o["queue_id"]): o["offset"] for o in offsets}
    statuses: list[dict[str, Any]] = []
    for topic in topics:
        try:
            statuses += [{"topic": topic, **q} for q in await admin.topic_status(topic)]
        except NotFound:
            continue
    progress = []
    for q in sorted(statuses, key=lambda q: (q["topic"], q["broker_name"], q["queue_id"])):
        where = (q["topic"], q["broker_name"], q["queue_id"])
        mine = committed.get(where)
        progress.append({"topic": q["topic"], "broker_name": q["broker_name"], "queue_id": q["queue_id"],
                         "broker_offset": q["max_offset"], "consumer_offset": mine,
                         "lag": q["max_offset"] - (mine or 0), "holder": holders.get(where),
                         "last_update_timestamp": q.get("last_update_timestamp")})
    s = settings or {}
    return GroupDetail(group, progress, [members[c] for c in sorted(members)],
                       bool(s.get("consume_enable", True)), int(s.get("retry_max_times", DEFAULT_RETRY_MAX_TIMES)),
                       topics)


def parse_when(text: str) -> int | None:
    """A reset's time: "now" or empty (None: each queue's end), epoch milliseconds, or an
    ISO time as a datetime-local field sends it (local time unless it names a zone)."""
    text = text.strip()
    if text in ("", "now"):
        return None
    if text.isdigit():
        return int(text)
    try:
        return int(datetime.datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise InputError(f"{text!r} is not a time: give now, milliseconds since the epoch or "
                         "2026-11-24T10:30:00") from None


async def reset_offsets(admin: Admin, group: str, topic: str, when_ms: int | None, *,
                        force: bool = False) -> list[dict[str, Any]]:
    """resetOffsetByTime: every queue of `topic` gets the first offset stored at or after
    `when_ms` (None: its end) as `group`'s committed offset. Refused while the group has
    live members (they would commit their own positions over it) unless `force`."""
    group = checked_group(group)
    topic = await known_topic(admin, topic)
    live = sorted({d["client_id"] for v in (await admin.consumer_list(group)).values() for d in v.details})
    if live and not force:
        raise InputError(f"consumer group {group!r} has {len(live)} live member(s) ({', '.join(live)}): they "
                         "would commit their own positions over the reset; stop them first (or force it)")
    route = await admin.route(topic)
    rows = []
    for g in route.groups:
        for queue_id in range(g.queue_data.read_queue_nums if g.queue_data else 0):
            mq = MessageQueue(topic, g.broker_name, queue_id)
            old = await admin.consumer_offset(mq, group)
            new = await admin.max_offset(mq) if when_ms is None else await admin.offset_by_time(mq, when_ms)
            await admin.commit_offset(mq, group, new)
            rows.append({"broker_name": g.broker_name, "queue_id": queue_id, "old_offset": old, "new_offset": new})
    return rows
