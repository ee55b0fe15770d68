"""The failover timeline per broker group, from its nodes' `status` answers: the epochs
(each a master term: the first at start, then one per promotion or election, with the
CommitLog offset it began at), elections and lease changes the etcd controller noted,
truncations (what a rejoining node cut, with the msgIds dropped) and fencing now."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from ..client import Admin, BrokerStatus


@attrs.frozen
class GroupTimeline:
    group: str
    master: str | None
    epoch: int | None
    epochs: list[dict[str, Any]]  # epoch, start_offset, known_by, current
    events: list[dict[str, Any]]  # at_ms, node, kind, text, msg_ids
    fenced: list[str]


def timelines(statuses: Sequence[BrokerStatus]) -> list[GroupTimeline]:
    groups: dict[str, list[BrokerStatus]] = {}
    for s in statuses:
        if s.status is not None and s.broker_name:
            groups.setdefault(s.broker_name, []).append(s)
    out = []
    for name, members in sorted(groups.items()):
        epochs: dict[int, dict[str, Any]] = {}
        events: list[dict[str, Any]] = []
        fenced = []
        master, current = None, None
        for s in sorted(members, key=lambda s: s.broker_id if s.broker_id is not None else 1 << 30):
            a = s.status
            assert a is not None
            who = f"{name}/{a.broker_id} {s.address}"
            if a.broker_id == 0 and not a.fenced and (current is None or (a.epoch or -1) > current):
                master, current = s.address, a.epoch
            for entry in a.epochs:
                epoch, start = int(entry[0]), int(entry[1])
                row = epochs.setdefault(epoch, {"epoch": epoch, "start_offset": start, "known_by": []})
                row["known_by"].append(s.address)
            t = a.last_truncation
            if t is not None and (t.at_ms or t.dropped_bytes):
                events.append({"at_ms": t.at_ms, "node": who, "kind": "truncation",
                               "text": f"cut {t.dropped_bytes:,} bytes ({t.message_count} message(s)) from offset "
                                       f"{t.from_offset:,} to {t.to_offset:,}" + (f": {t.reason}" if t.reason else ""),
                               "msg_ids": list(t.msg_ids)})
            if a.controller is not None:
                for e in a.controller.events:
                    events.append({"at_ms": int(e.get("at_ms") or 0), "node": who, "kind": "controller",
                                   "text": str(e.get("event", e)), "msg_ids": []})
            if a.fenced:
                fenced.append(f"{who}: {a.fenced}")
                events.append({"at_ms": 0, "node": who, "kind": "fenced", "text": a.fenced, "msg_ids": []})
        # an epoch in which nothing was written shares its start offset with the next one,
        # which replaces it in the epoch file: the list starts where the log has records
        rows = [dict(r, current=r["epoch"] == current,
                     kind="first term" if r["epoch"] <= 1 else "term of a promotion or election")
                for r in sorted(epochs.values(), key=lambda r: r["epoch"])]
        out.append(GroupTimeline(name, master, current, rows,
                                 sorted(events, key=lambda e: e["at_ms"], reverse=True), fenced))
    return out


async def cluster_timelines(admin: Admin) -> list[GroupTimeline]:
    return timelines(await admin.status())
