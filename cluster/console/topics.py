"""The Topic page's reads: the topic list (by kind and name), a topic's route, queues and
consumer groups, and the wait for a new topic's route, through `cluster.client.Admin`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import trio

from wire.client import NotFound, TidemqError

from ..client import Admin
from .inputs import known_topic

SYSTEM_PREFIXES = ("RMQ_SYS_", "SCHEDULE_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "%RETRY%", "%DLQ%", "TBW102")
"""Topics the Topic page counts as SYSTEM (rocketmq-dashboard's filter), besides retry and DLQ topics."""


@attrs.frozen
class TopicRow:
    """One topic on the Topic page, over every broker group serving it."""

    topic: str
    kind: str  # NORMAL, RETRY, DLQ or SYSTEM (rocketmq-dashboard's filter)
    groups: tuple[str, ...]
    read_queue_nums: int
    write_queue_nums: int
    perm: int


def topic_kind(topic: str) -> str:
    if topic.startswith("%RETRY%"):
        return "RETRY"
    if topic.startswith("%DLQ%"):
        return "DLQ"
    if topic.startswith(SYSTEM_PREFIXES):
        return "SYSTEM"
    return "NORMAL"


def perm_text(perm: int) -> str:
    return ("R" if perm & 4 else "-") + ("W" if perm & 2 else "-")


async def topic_rows(admin: Admin, *, filter_text: str = "", kinds: Sequence[str] = ("NORMAL",)) -> list[TopicRow]:
    """Topics whose name contains `filter_text` (case-insensitive) of the given kinds."""
    by_topic: dict[str, list[Any]] = {}
    for t in await admin.topics():
        by_topic.setdefault(t.topic, []).append(t)
    needle = filter_text.strip().lower()
    rows = []
    for name, infos in sorted(by_topic.items()):
        kind = topic_kind(name)
        if kind not in kinds or (needle and needle not in name.lower()):
            continue
        rows.append(TopicRow(name, kind, tuple(i.broker_name for i in infos),
                             max(i.read_queue_nums for i in infos), max(i.write_queue_nums for i in infos),
                             infos[0].perm))
    return rows


@attrs.frozen
class TopicDetail:
    topic: str
    route: list[dict[str, Any]]
    queues: list[dict[str, Any]]
    consumers: list[dict[str, Any]]


async def topic_detail(admin: Admin, topic: str) -> TopicDetail:
    """The topic's route (groups, brokers, queue counts), its queues' offsets, and the
    consumer groups with committed offsets on it (with their lag)."""
    topic = await known_topic(admin, topic)
    route = await admin.route(topic)
    groups = []
    for g in route.groups:
        q = g.queue_data
        groups.append({"broker_name": g.broker_name, "cluster": g.cluster,
                       "read_queue_nums": q.read_queue_nums if q else None,
                       "write_queue_nums": q.write_queue_nums if q else None,
                       "perm": perm_text(q.perm) if q else "",
                       "brokers": [{"broker_id": b.broker_id, "role": b.role, "address": b.address,
                                    "alive": b.alive, "epoch": b.epoch} for b in g.brokers]})
    queues = sorted(await admin.topic_status(topic), key=lambda q: (q["broker_name"], q["queue_id"]))
    consumers = await topic_consumers(admin, topic, queues)
    return TopicDetail(topic, groups, queues, consumers)


async def topic_consumers(admin: Admin, topic: str, queues: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each group with a committed offset on the topic: its total lag, queues committed,
    and how many live members its masters know."""
    offsets = await admin.committed_offsets(topic=topic)
    max_by_queue = {(q["broker_name"], q["queue_id"]): q["max_offset"] for q in queues}
    by_group: dict[str, dict[str, Any]] = {}
    for o in offsets:
        row = by_group.setdefault(o["group"], {"group": o["group"], "lag": 0, "queues": 0, "members": 0})
        row["queues"] += 1
        row["lag"] += max(0, max_by_queue.get((o["broker_name"], o["queue_id"]), 0) - o["offset"])

    async def members(row: dict[str, Any]) -> None:
        try:
            views = await admin.consumer_list(row["group"])
        except TidemqError:
            return
        row["members"] = len({m for v in views.values() for m in v.members})

    async with trio.open_nursery() as nursery:
        for row in by_group.values():
            nursery.start_soon(members, row)
    return [by_group[g] for g in sorted(by_group)]


async def wait_routed(admin: Admin, topic: str, broker_names: Sequence[str], timeout_s: float = 10.0) -> None:
    """Until the name server routes `topic` on every one of `broker_names` (a master
    registers a new topic at once; the page then lists it), or `timeout_s`."""
    wanted = set(broker_names)
    with trio.move_on_after(timeout_s):
        while True:
            try:
                route = await admin.route(topic, refresh=True)
                if wanted <= {g.broker_name for g in route.groups}:
                    return
            except NotFound:
                pass
            await trio.sleep(0.1)
