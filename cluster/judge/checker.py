"""The history checker: after the faults heal and the nodes are stopped cleanly, read
every queue of every node from its store files (store.tools, read-only) and compare with
what the clients were told (`check`: the chaos suite and the simulation); or compare what
the clients were told with what a consumer group received (`check_consumption`: the drills,
whose nodes run on).

Reported per run: acknowledged-but-missing (on the master, and per node), duplicates by
key (beyond the copies a client's retries allow: `Op.copies`), per-queue order and contiguity breaks, CRC failures and damage, master/slave
divergence (records that differ in the range both hold, and a slave's bytes past the
master's end), indeterminate sends that landed or not, failed sends that landed anyway,
and consumed messages no longer stored. Acknowledged messages below a node's first
CommitLog offset were removed by cleanup on purpose and are counted apart.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Collection, Mapping
from typing import Any

import attrs

from store.layout import StoreToolError, iter_segments
from store.queue_tools import dump_queue
from store.tools import dump, verify

from .history import FAIL, INFO, OK, History, parse_key

MAX_LISTED = 20  # examples kept per finding


@attrs.define
class NodeReport:
    name: str
    messages: int = 0
    min_offset: int = 0
    end_offset: int = 0
    bad_crcs: int = 0
    damage: list[dict[str, Any]] = attrs.field(factory=list)
    queue_errors: list[str] = attrs.field(factory=list)  # contiguity / order / unreadable units
    duplicates: list[str] = attrs.field(factory=list)
    acked_missing: list[str] = attrs.field(factory=list)
    expired: int = 0  # acknowledged, below min_offset: removed by cleanup
    records: set[tuple[str, str]] = attrs.field(factory=set, repr=False)
    """(msgId, first key) of the topic's records held (not reported): a msgId names a node and
    an offset, which a node that cut a record reuses for the next one it stores there."""


@attrs.define
class CheckReport:
    acked: int = 0
    failed: int = 0
    indeterminate: int = 0
    indeterminate_landed: int = 0
    failed_but_stored: list[str] = attrs.field(factory=list)
    acked_missing: list[str] = attrs.field(factory=list)  # on the master, the clients' node
    acked_missing_offsets: list[int] = attrs.field(factory=list)  # their acknowledged CommitLog offsets
    acked_missing_msg_ids: list[str] = attrs.field(factory=list)  # and msgIds
    acked_missing_statuses: list[str] = attrs.field(factory=list)  # and send statuses
    acked_moved: list[str] = attrs.field(factory=list)  # found, but not at the acknowledged queue offset
    duplicates: list[str] = attrs.field(factory=list)
    order_breaks: list[str] = attrs.field(factory=list)
    contiguity_breaks: list[str] = attrs.field(factory=list)
    crc_failures: int = 0
    damage: list[str] = attrs.field(factory=list)
    divergence: list[str] = attrs.field(factory=list)
    slave_ahead_bytes: int = 0
    consumed: int = 0
    consumed_missing: list[str] = attrs.field(factory=list)
    consumed_missing_offsets: list[int] = attrs.field(factory=list)  # the CommitLog offsets they were read at
    expired: int = 0
    nodes: dict[str, NodeReport] = attrs.field(factory=dict)
    statuses: dict[str, int] = attrs.field(factory=dict)
    stored: dict[str, int] = attrs.field(factory=dict, repr=False)  # key → copies on the master (not reported)

    @property
    def losses(self) -> int:
        return len(self.acked_missing)

    def to_json(self) -> dict[str, Any]:
        out = attrs.asdict(self)
        del out["stored"]
        for key, value in list(out.items()):
            if isinstance(value, list):
                out[key] = {"count": len(value), "examples": value[:MAX_LISTED]}
        for node in out["nodes"].values():
            del node["records"]
            for key in ("queue_errors", "duplicates", "acked_missing"):
                node[key] = {"count": len(node[key]), "examples": node[key][:MAX_LISTED]}
        return out


def _read_node(name: str, root: str, topic: str, queues: int,
               repeatable: Mapping[str, int]) -> tuple[NodeReport, dict[str, list[tuple[int, int]]]]:
    """The node's summary and key → [(queue_id, queue_offset)] for the topic. A key in
    `repeatable` may be stored up to that many times (a client retried it), anywhere in
    its producer's order: its copies are neither duplicates nor order breaks."""
    rep = NodeReport(name)
    where: dict[str, list[tuple[int, int]]] = {}
    try:
        summary = verify(root)
        segments = iter_segments(root)
    except StoreToolError as e:
        rep.damage.append({"offset": -1, "reason": str(e)})
        return rep, where
    rep.bad_crcs = summary["badCrcs"]
    rep.damage = summary["damage"]
    rep.end_offset = summary["endOffset"] or 0
    rep.min_offset = segments[0][0] if segments else 0
    for qid in range(queues):
        expected: int | None = None
        last_seq: dict[int, int] = {}
        try:
            records = list(dump_queue(root, topic, qid))
        except StoreToolError:
            continue  # the node never had this queue
        for rec in records:
            q_off = rec["queueOffset"]
            if expected is not None and q_off != expected:
                rep.queue_errors.append(f"{topic}-{qid}: offset {q_off} follows {expected - 1}")
            expected = q_off + 1
            if "error" in rec:
                if rec["offset"] < rep.min_offset:
                    continue  # the unit's record was removed by cleanup: below the min offset
                rep.queue_errors.append(f"{topic}-{qid}@{q_off}: {rec['error']}")
                continue
            rep.messages += 1
            rep.records.add((rec["msgId"], rec["keys"][0] if rec["keys"] else ""))
            for key in rec["keys"]:
                where.setdefault(key, []).append((qid, q_off))
                parsed = parse_key(key)
                if parsed is not None and key not in repeatable:
                    process, seq = parsed
                    if seq <= last_seq.get(process, -1):
                        rep.queue_errors.append(f"order: {topic}-{qid}@{q_off} producer {process} "
                                                f"seq {seq} after {last_seq[process]}")
                    last_seq[process] = seq
    rep.duplicates = sorted(k for k, places in where.items() if len(places) > repeatable.get(k, 1))
    return rep, where


_COMPARED = ("blank", "msgId", "bodyCrc", "body", "topic", "queueId", "queueOffset", "properties", "sysFlag")
"""Record fields that must be equal on master and slave (the body CRC alone misses
damage to the properties, which no CRC covers)."""


def _divergence(master_root: str, slave_root: str, limit: int = MAX_LISTED) -> tuple[list[str], int]:
    """Records that differ between the two CommitLogs where both hold data, and how many
    bytes the slave holds past the master's end."""
    out: list[str] = []
    try:
        master = {r["offset"]: r for r in dump(master_root) if "error" not in r}
        slave = {r["offset"]: r for r in dump(slave_root) if "error" not in r}
    except StoreToolError as e:
        return [f"cannot compare: {e}"], 0

    def end(records: Mapping[int, dict[str, Any]]) -> int:
        if not records:
            return 0
        last = max(records)
        return last + (records[last].get("size") or records[last].get("blank") or 0)

    common_start = max(min(master, default=0), min(slave, default=0))
    common_end = min(end(master), end(slave))
    for offset in sorted(o for o in slave if common_start <= o < common_end):
        m, s = master.get(offset), slave[offset]
        same = m is not None and all(m.get(f) == s.get(f) for f in _COMPARED)
        if not same:
            out.append(f"offset {offset}: master {_label(m)} / slave {_label(s)}")
            if len(out) >= limit:
                break
    return out, max(0, end(slave) - end(master))


def _label(rec: Mapping[str, Any] | None) -> str:
    if rec is None:
        return "no record"
    if "blank" in rec:
        return f"blank {rec['blank']}"
    keys = rec.get("keys") or [base64.b64decode(rec.get("body", ""))[:16]]
    return f"{rec.get('msgId')} {keys[0]!r}"


def check(history: History, roots: Mapping[str, str], *, master: str, topic: str, queues: int,
          consumed: Mapping[str, int] | None = None) -> CheckReport:
    """Compare `history` with the stores at `roots` (node name → storePathRootDir);
    `consumed` maps each key the consumer saw to its CommitLog offset."""
    report = CheckReport(statuses=history.statuses())
    found: dict[str, dict[str, list[tuple[int, int]]]] = {}
    repeatable = {op.key: op.copies for op in history.ops if op.copies > 1}
    for name, root in roots.items():
        if not os.path.isdir(root):
            continue
        node, where = _read_node(name, root, topic, queues, repeatable)
        report.nodes[name] = node
        found[name] = where
    on_master = found.get(master, {})
    report.stored = {key: len(places) for key, places in on_master.items()}
    master_min = report.nodes[master].min_offset if master in report.nodes else 0
    for op in history.ops:
        outcome = op.outcome or INFO
        if outcome == OK:
            report.acked += 1
            for name, where in found.items():
                if op.key in where:
                    continue
                node = report.nodes[name]
                if op.commitlog_offset is not None and op.commitlog_offset < node.min_offset:
                    node.expired += 1
                    if name == master:
                        report.expired += 1
                    continue
                node.acked_missing.append(op.key)
                if name == master:
                    report.acked_missing.append(op.key)
                    report.acked_missing_offsets.append(op.commitlog_offset or 0)
                    report.acked_missing_msg_ids.append(op.msg_id or "")
                    report.acked_missing_statuses.append(op.status or "")
            places = on_master.get(op.key)
            if places and (op.queue_id, op.queue_offset) not in places:
                report.acked_moved.append(f"{op.key}: acked at {op.queue_id}@{op.queue_offset}, stored at {places}")
        elif outcome == FAIL:
            report.failed += 1
            if op.key in on_master:
                report.failed_but_stored.append(f"{op.key} ({op.status})")
        else:
            report.indeterminate += 1
            if op.key in on_master:
                report.indeterminate_landed += 1
    for name, node in report.nodes.items():
        report.duplicates += [f"{name}: {k}" for k in node.duplicates]
        for err in node.queue_errors:
            (report.order_breaks if err.startswith("order") else report.contiguity_breaks).append(f"{name}: {err}")
        report.crc_failures += node.bad_crcs
        report.damage += [f"{name}@{d['offset']}: {d['reason']}" for d in node.damage]
    for name, root in roots.items():
        if name != master and name in report.nodes and master in report.nodes:
            diffs, ahead = _divergence(roots[master], root)
            report.divergence += [f"{name}: {d}" for d in diffs]
            report.slave_ahead_bytes = max(report.slave_ahead_bytes, ahead)
    if consumed:
        report.consumed = len(consumed)
        missing = sorted((k, offset) for k, offset in consumed.items() if k not in on_master and offset >= master_min)
        report.consumed_missing = [k for k, _ in missing]
        report.consumed_missing_offsets = [offset for _, offset in missing]
    return report


@attrs.define
class ConsumptionReport:
    acked: int = 0  # acknowledged with a status that promises the message is kept
    lost: list[str] = attrs.field(factory=list)  # those never consumed
    failed_consumed: list[str] = attrs.field(factory=list)  # reported failed, consumed: stored after all
    duplicates: int = 0  # deliveries past each key's first (at least once: a redelivery or a retry's copy)


def check_consumption(history: History, delivered: Mapping[str, int], *,
                      promised: Collection[str] | None = None) -> ConsumptionReport:
    """Compare `history` with what a consumer group received (`delivered`: key → times it was
    consumed). An acknowledgement counts as a promise when its status is in `promised`
    (default: every `ok`); a send still in flight promises nothing."""
    report = ConsumptionReport(duplicates=sum(n - 1 for n in delivered.values() if n > 1))
    for op in history.ops:
        if op.outcome == OK and (promised is None or op.status in promised):
            report.acked += 1
            if not delivered.get(op.key):
                report.lost.append(op.key)
        elif op.outcome == FAIL and delivered.get(op.key):
            report.failed_consumed.append(op.key)
    report.lost.sort()
    report.failed_consumed.sort()
    return report
