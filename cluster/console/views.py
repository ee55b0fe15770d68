"""What each console page shows, gathered from the cluster through `cluster.client.Admin`
(no store files are read). Each function returns plain rows the templates render; bad
input raises InputError with a sentence the page shows (nothing in the cluster changes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import trio

from wire.client import NotFound, TidemqError
from wire.protocol import StatusReply
from wire.protocol.checks import check_topic

from ..client import Admin, BrokerStatus
from ..client.insync import in_sync_sets

SYSTEM_PREFIXES = ("RMQ_SYS_", "SCHEDULE_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "%RETRY%", "%DLQ%", "TBW102")


class InputError(ValueError):
    """Input a page refuses, with the sentence it shows."""


# ---------------------------------------------------------------- cluster


@attrs.frozen
class BrokerRow:
    """One broker on the Cluster page."""

    group: str
    broker_id: int | None
    role: str
    address: str
    epoch: int | None = None
    max_offset: int | None = None
    confirm_offset: int | None = None
    lag_bytes: int | None = None
    lag_s: float | None = None
    in_sync: str = ""
    fenced: str | None = None
    disk_ratio: float | None = None
    put_tps: float | None = None
    get_tps: float | None = None
    error: str | None = None
    notes: str = ""


def _lag_seconds(answer: StatusReply, master: StatusReply | None) -> float | None:
    """How far a slave's newest record is behind its master's, in seconds (0 when caught up)."""
    if master is None:
        return None
    if not answer.lag_bytes():
        return 0.0
    newest, own = master.last_store_timestamp, answer.last_store_timestamp
    return max(0.0, (newest - own) / 1000) if newest else None


def broker_rows(statuses: Sequence[BrokerStatus]) -> list[BrokerRow]:
    """The Cluster page's rows, by group then brokerId: each broker's role and epoch as it
    serves them now, offsets, replication lag, the group's in-sync set, fencing and disk."""
    answers = [s.status for s in statuses if s.status is not None]
    sets = in_sync_sets(answers)
    masters = {a.broker_name: a for a in answers if a.broker_id == 0 and not a.fenced}
    rows = []
    for s in statuses:
        a = s.status
        group = s.broker_name or "?"
        if a is None:
            rows.append(BrokerRow(group, s.broker_id, s.role or "?", s.address, error=s.error))
            continue
        master = masters.get(group)
        if a.broker_id == 0:
            slave_lags = [_lag_seconds(o, a) for o in answers if o.broker_name == group and o.broker_id != 0]
            lag_s = max((x for x in slave_lags if x is not None), default=None)
        else:
            lag_s = _lag_seconds(a, master)
        sync = sets.get(group)
        in_sync = ""
        if sync is not None and a.broker_id == 0:
            in_sync = ", ".join([sync.master, *sync.members])
            if sync.outside:
                in_sync += f" (outside: {', '.join(sync.outside)})"
        elif sync is not None:
            in_sync = "in the set" if sync.has(a.address or s.address) else "NOT in the set"
        notes = list(a.running_flags)
        if a.ha.client is not None and not a.ha.client.connected:
            notes.append("not connected to its master")
        if a.controller is not None:
            notes.append("etcd: leading" if a.controller.leading else "etcd: following")
        rows.append(BrokerRow(
            group, a.broker_id, a.role or s.role or "?", s.address, epoch=a.epoch, max_offset=a.max_phy_offset,
            confirm_offset=a.confirm_offset, lag_bytes=a.lag_bytes(), lag_s=lag_s, in_sync=in_sync,
            fenced=a.fenced, disk_ratio=a.disk.used_ratio if a.disk else None,
            put_tps=a.stats.put_tps if a.stats else None, get_tps=a.stats.get_tps if a.stats else None,
            notes=", ".join(notes)))
    return sorted(rows, key=lambda r: (r.group, r.broker_id if r.broker_id is not None else 1 << 30))


async def cluster_rows(admin: Admin) -> list[BrokerRow]:
    return broker_rows(await admin.status())


# ---------------------------------------------------------------- topics


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


def checked_topic(topic: str) -> str:
    topic = topic.strip()
    problem = check_topic(topic) if topic else "a topic name is required"
    if problem:
        raise InputError(problem)
    return topic


def checked_int(value: str, what: str, low: int, high: int) -> int:
    try:
        n = int(value)
    except ValueError:
        raise InputError(f"{what} must be a whole number, not {value!r}") from None
    if not low <= n <= high:
        raise InputError(f"{what} must be between {low} and {high}, not {n}")
    return n


async def known_topic(admin: Admin, topic: str) -> str:
    """`topic` when a route serves it; InputError naming it otherwise."""
    topic = checked_topic(topic)
    try:
        route = await admin.route(topic, refresh=True)
    except NotFound:
        raise InputError(f"topic {topic!r} does not exist (no broker group serves it)") from None
    if not route.groups:
        raise InputError(f"topic {topic!r} does not exist (no broker group serves it)")
    return topic


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
    offsets = await admin.topic_offsets(topic)
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
