"""The Cluster page's rows: every broker as it serves now, from the nodes' `status` answers
through `cluster.client.Admin` (role, epoch, offsets, replication lag, the in-sync set,
fencing, disk, TPS)."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from wire.protocol import StatusReply

from ..client import Admin, BrokerStatus
from ..client.insync import in_sync_sets


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
