"""What each console page shows, gathered from the cluster through `cluster.client.Admin`
(no store files are read). Each function returns plain rows the templates render; bad
input raises InputError with a sentence the page shows (nothing in the cluster changes)."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

import attrs
import trio

from wire.client import NotFound, TidemqError
from wire.protocol import StatusReply
from wire.protocol.checks import check_group, check_topic

from ..client import Admin, BrokerStatus, MessageQueue
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


# ---------------------------------------------------------------- consumers

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


def checked_group(group: str) -> str:
    group = group.strip()
    problem = check_group(group) if group else "a consumer group name is required"
    if problem:
        raise InputError(problem)
    return group


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
