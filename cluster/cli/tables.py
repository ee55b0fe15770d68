"""The rich tables of `tidemq status` and `tidemq cluster status`, one row per broker,
grouped by broker group (RocketMQ's `brokerStatus` columns, one line each).

Per row: role, epoch ("-" until the node's `status` answer has an `epoch`), max CommitLog
offset, replication lag in bytes and seconds (a master shows its furthest slave), disk use,
and put/get TPS of the last minute (node/stats.py). `cluster status` adds the process
columns and a slave's catch-up progress (a bar and the bytes behind, or "caught up").

The lag in seconds is the master's newest dispatched store time minus the slave's: 0 when
the slave has every byte.

`rows_table` is every other table (the `admin` actions'): one row per map, a column per key.
Every cell goes through `cell`: `-` for nothing, booleans as `true` / `false` (as mqadmin
prints them), lists comma-separated, maps as `key=value`, never raw JSON or Python's
`True`; times through `timestamp`.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from wire.protocol import StatusReply, WireControllerView

if TYPE_CHECKING:  # rich is imported where a table is drawn: `send` and `consume` draw none
    from rich.table import Table

__all__ = ["BrokerRow", "broker_table", "cell", "rows_table", "size", "timestamp"]

_STATE_COLORS = {"running": "green", "stopped": "yellow", "dead": "red", "down": "dim", "never started": "dim"}


@attrs.frozen
class BrokerRow:
    """One node as a table row: what it answered to `status`, or why it did not."""

    group: str
    broker_id: int | None
    role: str
    address: str
    answer: StatusReply | None = None
    error: str | None = None
    node: str | None = None  # cluster status: the node's name, pid and process state
    pid: int | None = None
    state: str | None = None
    note: str = ""  # what a node that is not a broker (the name server) said


def size(n: float | None) -> str:
    """Bytes for people: 512 B, 1.5 KiB, 64.0 MiB."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def cell(value: Any) -> str:
    """One value as a table cell (see the module docstring)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(cell(v) for v in value) or "-"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={cell(v)}" for k, v in value.items()) or "-"
    return str(value)


def timestamp(ms: int | None) -> str:
    """Epoch milliseconds as local time, 2026-11-24 10:30:00.123 (mqadmin's shape); `-` for none."""
    if not ms:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def rows_table(rows: Sequence[Mapping[str, Any]], title: str) -> Table:
    """One row per map, its keys the columns (of the first row; `_` shown as a space); a
    column of numbers is right-aligned. Cells are plain text, never rich markup."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, title_justify="left")
    columns = list(rows[0]) if rows else []
    for column in columns:
        values = [r.get(column) for r in rows if r.get(column) is not None]
        numeric = bool(values) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        table.add_column(column.replace("_", " "), justify="right" if numeric else "left", overflow="fold")
    for row in rows:
        table.add_row(*(Text(cell(row.get(c))) for c in columns))
    return table


def _lag_seconds(row: BrokerRow, master: BrokerRow | None, slaves: list[BrokerRow]) -> float | None:
    answer = row.answer
    if answer is None:
        return None
    if row.broker_id == 0:
        lags = [_lag_seconds(s, row, []) for s in slaves]
        return max((x for x in lags if x is not None), default=None)
    if master is None or master.answer is None:
        return None
    if not answer.lag_bytes():
        return 0.0
    newest = master.answer.last_store_timestamp
    own = answer.last_store_timestamp
    return max(0.0, (newest - own) / 1000) if newest else None


def _ha_note(answer: StatusReply) -> str:
    ha = answer.ha
    flags = ", ".join(answer.running_flags + (["FENCED"] if answer.fenced else [])
                      + (["REPLICATION REFUSED"] if answer.replication_refused else [])
                      + [f"DAMAGED [{d['start']}, {d['end']})" for d in answer.damaged])
    if ha.slaves is not None:
        note = f"{len(ha.slaves)} slave(s)" if ha.slaves else "no slave"
    elif ha.client is not None:
        note = "connected" if ha.client.connected else "NOT connected to master"
    else:
        note = ""
    return ", ".join(x for x in (note, flags) if x) or "ok"


def _catch_up(row: BrokerRow, master: BrokerRow | None) -> Any:
    if row.broker_id == 0 or row.answer is None or master is None or master.answer is None:
        return "-"
    target = master.answer.max_phy_offset
    own = row.answer.max_phy_offset
    if own >= target:
        return "caught up"  # an empty group's slave too (nothing to copy is not 0%)
    # what this slave copies: from where its log starts (a new slave starts at the master's
    # newest segment) to the master's end
    start = min(max(row.answer.min_phy_offset, 0), own)
    total, done = target - start, own - start
    from rich.progress_bar import ProgressBar
    from rich.table import Table

    bar = Table.grid(padding=(0, 1))
    bar.add_row(ProgressBar(total=total, completed=done, width=12), f"{done / total:.0%}",
                f"{size(target - own)} behind")
    return bar


def failover_lines(rows: Iterable[BrokerRow]) -> list[str]:
    """One line per group's master with its in-sync set (cluster/client/insync.py), then
    one per broker that is fenced, that refuses to replicate from its master, or that cut
    its log when it rejoined (what it dropped: range, count, msgIds; docs/failover.md)."""
    from ..client.insync import in_sync_sets

    rows = list(rows)
    sets = in_sync_sets(r.answer for r in rows if r.answer is not None)
    lines = [f"{group}/0 {sync.master}: {sync.line()}" for group, sync in sorted(sets.items())]
    for row in rows:
        s = row.answer
        if s is None:
            continue
        who = f"{row.group}/{row.broker_id} {row.address}"
        if s.fenced:
            lines.append(f"{who}: {s.fenced}")
        if s.replication_refused:
            lines.append(f"{who}: {s.replication_refused}")
        if s.controller:
            lines.append(f"{who}: {controller_line(s.controller)}")
        cut = s.last_truncation
        if cut:
            ids = cut.msg_ids
            lines.append(f"{who}: dropped CommitLog [{cut.from_offset}, {cut.to_offset}) when it rejoined "
                         f"({cut.message_count} message(s)): {', '.join(ids[:20])}{' ...' if len(ids) > 20 else ''}")
    return lines


def controller_line(c: WireControllerView) -> str:
    """A node's view of the etcd election (docs/auto-failover.md)."""
    holder = c.lease_holder or {}
    sync = c.sync_state_set or {}
    if c.leading:
        text = (f"etcd lease holder, epoch {holder.get('epoch', '-')}, lease {c.lease_left_ms} ms left, "
                f"in-sync set: {', '.join([sync.get('master', '?'), *(sync.get('in_sync') or [])])}")
    else:
        text = f"etcd holder {holder.get('address', 'none')} (epoch {holder.get('epoch', '-')})"
    if c.unnamed_slaves:
        text += (f"; cannot name the slave(s) on HA connection(s) {', '.join(c.unnamed_slaves)} "
                 "(a proxy or NAT?): kept out of the in-sync set")
    if c.etcd_reachable is False:
        text += f"; etcd UNREACHABLE: {c.last_error}"
    return text


def broker_table(rows: Iterable[BrokerRow], title: str, *, processes: bool = False) -> Table:
    """The table, ordered by group then brokerId; `processes` adds node, pid, state and
    catch-up columns (cluster status)."""
    rows = sorted(rows, key=lambda r: (r.group, r.broker_id if r.broker_id is not None else 1 << 30, r.node or ""))
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, title_justify="left")
    columns = ["group", "id", "role", "address", "epoch", "max offset", "lag", "lag s", "disk",
               "put/s", "get/s", "notes"]
    if processes:
        columns[0:0] = ["node", "pid", "state"]
        columns.insert(columns.index("notes"), "catch-up")
    for column in columns:
        numeric = column in ("id", "pid", "epoch", "max offset", "lag", "lag s", "disk", "put/s", "get/s")
        table.add_column(column, justify="right" if numeric else "left", no_wrap=column != "notes")
    groups: dict[str, list[BrokerRow]] = {}
    for row in rows:
        groups.setdefault(row.group, []).append(row)
    for members in groups.values():
        master = next((r for r in members if r.broker_id == 0), None)
        slaves = [r for r in members if r.broker_id not in (0, None)]
        for row in members:
            a = row.answer
            stats = a.stats if a else None
            disk = a.disk if a else None
            lag_s = _lag_seconds(row, master, slaves) if a else None
            cells: list[Any] = [
                row.group, "-" if row.broker_id is None else str(row.broker_id), row.role, row.address,
                "-" if a is None or a.epoch is None else str(a.epoch),
                f"{a.max_phy_offset:,}" if a else "-",
                size(a.lag_bytes()) if a else "-",
                "-" if lag_s is None else f"{lag_s:.1f}",
                "-" if disk is None else f"{disk.used_ratio:.0%}",
                "-" if stats is None else f"{stats.put_tps:g}",
                "-" if stats is None else f"{stats.get_tps:g}",
                # Text, not markup: "[Errno 111]" in an error is not a style
                Text(row.error, style="red") if row.error else Text(_ha_note(a) if a else row.note or "-"),
            ]
            if processes:
                state = row.state or "-"
                cells[0:0] = [row.node or "-", str(row.pid or "-"), Text(state, style=_STATE_COLORS.get(state, ""))]
                cells.insert(len(cells) - 1, _catch_up(row, master))
            table.add_row(*cells)
    return table
