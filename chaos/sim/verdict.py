"""What a simulated run must not do, checked on the chaos suite's CheckReport
(cluster/judge/checker.py, the stores read back from their files) and on what the run observed.

- No acknowledged message lost beyond the mode's promise: SYNC_MASTER loses no PUT_OK; any
  other acknowledgement (ASYNC_MASTER's PUT_OK, SYNC_MASTER's FLUSH_SLAVE_TIMEOUT /
  SLAVE_NOT_AVAILABLE) may be lost only if a rejoining node reported dropping its msgId.
- No queue offset reused: two acknowledgements of one queue offset (but for a dropped one),
  or a message stored at another queue offset than it was acknowledged at.
- One master per epoch, epochs monotonic: no two nodes served as master in one epoch,
  promotions take ascending epochs, every epoch file ascends and agrees with the others
  on where each epoch starts; a write sent after a promotion returned is acknowledged by
  the promoted node, never by the old master (the fencing's promise).
- Every indeterminate send stored once or not at all; no failed send stored; no duplicate,
  order or contiguity break, damage, CRC failure or divergence between the nodes.
- Consumers read nothing a failover later cuts and skip nothing, in every mode: a node
  shows consumers only what every member of its in-sync set holds (the confirm offset,
  ha/master.py confirm_limit; a slave or a fenced master only up to the confirm offset it
  learned), so no record a consumer read is among those a rejoining node dropped, every
  acknowledged message stored below a queue's committed offset was consumed, and nothing
  consumed is gone (docs/failover.md).
- After an `--unclean` promotion (simulation.py draws some, when the plain one is refused)
  what it drops (the old log from its epoch's start on) may have been acknowledged (in
  every mode) and read; the consumer still
  skips nothing: it moves back to where the logs diverge (KIP-320) and reads the new
  master's records there, so the skip rule above holds unchanged.
"""

from __future__ import annotations

import math
from collections import defaultdict

import attrs

from cluster.judge.checker import CheckReport
from cluster.judge.history import OK, History, parse_key
from node.failover.promotion import ASK_TIMEOUT_S
from store.msg_id import decode_msg_id

__all__ = ["Observed", "verdict"]

SHOWN = 3


@attrs.define
class Observed:
    truncated: set[str] = attrs.field(factory=set)  # msgIds a rejoining node reported dropping
    truncated_ranges: list[tuple[int, int]] = attrs.field(factory=list)  # and their CommitLog ranges
    cuts: list[tuple[float, frozenset[str]]] = attrs.field(factory=list)
    """(wall time, msgIds) of each cut: a msgId read before a cut that dropped it was a
    dropped record (one read after it is another record the node stored at that offset)."""
    terms: list[tuple[float, str, str, int | None]] = attrs.field(factory=list)  # (wall time, node, role, epoch)
    promotions: list[tuple[float, str, int]] = attrs.field(factory=list)  # (wall time it returned, node, epoch)
    first_master: str = ""  # the node serving as master before any promotion
    addresses: dict[str, str] = attrs.field(factory=dict)  # client address "ip:port" → node
    nodes: frozenset[str] = frozenset()  # the group's nodes
    cut_off: list[tuple[str, float, float]] = attrs.field(factory=list)
    """(node, from, to): wall times its link to the name server was cut or slowed past an
    epoch check's timeout; it learns of peers only there (docs/failover.md, Limits)."""
    epochs: dict[str, list[tuple[int, int]]] = attrs.field(factory=dict)  # node → epoch file entries
    committed: dict[int, int] = attrs.field(factory=dict)  # queue → the group's committed offset
    takeovers: list[tuple[float, str, dict[int, int]]] = attrs.field(factory=list)
    """(the last time the run saw the group before it, node, its committed offsets) for each
    node that began serving as master in a newer epoch (a promotion or an election)."""
    commits: list[tuple[float, int, int]] = attrs.field(factory=list)  # (time, queue, offset) answered OK
    unclean: list[tuple[float, str, int]] = attrs.field(factory=list)
    """(wall time it was asked, node, CommitLog offset its epoch starts at) of each `--unclean`
    promotion: what it drops, the old master's records from there on, may have been
    acknowledged and read (docs/failover.md); a consumer still never skips."""
    power_windows: list[tuple[str, int, int]] = attrs.field(factory=list)
    """(node, recovered end, end before) of each power loss that took CommitLog bytes (power.py)."""
    power_lost: set[str] = attrs.field(factory=set)
    """Keys of acknowledged sends whose records lay in such a window of the node that stored them."""
    corrupted: list[tuple[str, int, int]] = attrs.field(factory=list)
    """(node, start, end) of each CommitLog record a `corrupt` fault damaged (corrupt.py): its
    bad CRC on that node, and the difference from the other nodes' copies, are the fault's."""
    power_struck: list[tuple[float, str, int, int]] = attrs.field(factory=list)
    """(wall time, node, recovered end, end before) of each such power loss."""
    group_power_losses: list[float] = attrs.field(factory=list)
    """Wall times of each power loss of the whole group: every node restarts with its offsets
    file (written every 5 s), so commits answered before it may be gone (docs/simulation.md)."""
    powered_off: list[tuple[str, float, float]] = attrs.field(factory=list)
    """(node, from, to): wall times each power loss kept a node off."""


def _struck(damage: str, struck: set[tuple[str, int]]) -> bool:
    """A checker damage line ("node@offset: reason") at a record a `corrupt` fault flipped,
    on that node or on another of the group: a master keeps a damaged record (its only
    copy, once the slave that held a good one cut its log at damage of its own) and the HA
    stream carries its bytes as they are to a slave fetching again (storage seed 6474); the
    master reports the range, and the slave serves none of it (a read checks the CRC)."""
    where = damage.split(":", 1)[0]
    _name, _, offset = where.rpartition("@")
    return offset.lstrip("-").isdigit() and int(offset) in {start for _n, start in struck} \
        and "body CRC mismatch" in damage


def _diverged_at(divergence: str, offsets: set[int]) -> bool:
    """A checker divergence line ("node: offset N: ...") at a record a `corrupt` fault flipped."""
    parts = divergence.split(": ", 2)
    return len(parts) > 1 and parts[1].startswith("offset ") and parts[1][7:].isdigit() and int(parts[1][7:]) in offsets


def verdict(report: CheckReport, history: History, observed: Observed, *, replication: str, master: str,
            consumed: dict[str, int], read_ids: dict[tuple[str, str], float] | None = None,
            flush: str = "ASYNC_FLUSH") -> list[str]:
    """The broken promises. `read_ids`: (msgId, first key) of every record the consumer
    read, and the wall time it first read it."""
    out: list[str] = []

    def finding(label: str, items: list[str]) -> None:
        if items:
            out.append(f"{len(items)} {label}: {items[:SHOWN]}")

    acked_at = {op.key: op.completed_at for op in history.ops if op.outcome == OK}
    lost = [f"{k} ({s} at {o})" for k, o, m, s in zip(report.acked_missing, report.acked_missing_offsets,
                                                      report.acked_missing_msg_ids, report.acked_missing_statuses,
                                                      strict=True)
            if not (m in observed.truncated or _power_lost(k, s, observed, flush))
            or (replication == "SYNC_MASTER" and s == "PUT_OK" and not _unclean_drop(m, math.inf, observed)
                and not ((m in observed.truncated or observed.group_power_losses
                          or _lost_on_every_node(m, acked_at.get(k), observed))
                         and _power_lost(k, s, observed, flush))
                and not (flush == "ASYNC_FLUSH" and m in observed.truncated and _kept_only_while_off(m, observed)))]
    finding("acknowledged message(s) lost beyond the mode's promise", lost)
    master_lost = set(report.acked_missing)
    for name, node in report.nodes.items():
        if name != master:
            finding(f"acknowledged message(s) missing on {name} after it caught up",
                    [k for k in node.acked_missing if k not in master_lost])
    finding("queue offset(s) acknowledged twice", _reused(history, observed))
    finding("acknowledged message(s) stored at another queue offset",
            [m for m in report.acked_moved if not _dropped_retry(m.split(":", 1)[0], history, observed, replication)])
    finding("duplicate(s)", report.duplicates)
    finding("order break(s)", report.order_breaks)
    finding("contiguity break(s)", report.contiguity_breaks)
    struck = {(name, start) for name, start, _end in observed.corrupted}
    damage = [d for d in report.damage if not _struck(d, struck)]
    finding("damaged record(s)", damage)
    finding("failed send(s) stored anyway", report.failed_but_stored)
    finding("divergent record(s) between nodes",
            [d for d in report.divergence if not _diverged_at(d, {start for _n, start in struck})])
    crc_failures = report.crc_failures - sum(1 for d in report.damage if _struck(d, struck) and "body CRC" in d)
    if crc_failures:
        out.append(f"{crc_failures} CRC failure(s)")
    if report.slave_ahead_bytes:
        out.append(f"a slave holds {report.slave_ahead_bytes} B past the master's end")
    out += _epoch_findings(observed)
    finding("write(s) sent after a promotion acknowledged by another node than the new master",
            _acked_by_the_old_master(history, observed))
    # a consumed record whose send had no answer (indeterminate) is in no acknowledged
    # window: with ASYNC_FLUSH its offset in a power loss's window is the promise's loss
    # (storage seed 8904: a group power loss)
    gone = [k for k, o in zip(report.consumed_missing, report.consumed_missing_offsets, strict=True)
            if not any(low <= o < high for low, high in observed.truncated_ranges)
            and not _power_lost(k, "", observed, flush)
            and not (flush == "ASYNC_FLUSH" and any(low <= o < high for _n, low, high in observed.power_windows))]
    finding("consumed message(s) no longer stored", gone)
    # a cut that dropped records the new master holds byte for byte (its epoch file lacked
    # the epoch they were written in) took nothing: the follower copies them back
    held = report.nodes[master].records if master in report.nodes else set()
    finding("record(s) a consumer read that a node later dropped (msgId key)",
            sorted(f"{m} {k}" for (m, k), at in (read_ids or {}).items()
                   if (m, k) not in held and not _power_lost(k, "", observed, flush)
                   and not _unflushed(m, observed, flush)
                   and _cut_after_read(m, at, observed)))
    finding("acknowledged message(s) the consumer committed past without reading",
            [k for k, _o in _skipped(report, history, observed, consumed)])
    if replication == "SYNC_MASTER":
        finding("commit(s) a SYNC_MASTER answered OK missing on the node that took over", _commits_lost(observed))
    return out


def _cut_after_read(msg_id: str, read_at: float, observed: Observed) -> bool:
    """A cut after the read dropped the record, and none of those cuts was an --unclean
    promotion's drop (what such a promotion drops may have been read): a slave's recovery
    that cut its copy at a damaged record of its own, to fetch it again, did not lose it
    from the group; the unclean promotion of that slave did (storage seed 7075)."""
    cuts = [cut_at for cut_at, ids in observed.cuts if msg_id in ids and read_at < cut_at]
    return bool(cuts) and not any(_unclean_drop(msg_id, cut_at, observed) for cut_at in cuts)


def _unflushed(msg_id: str, observed: Observed, flush: str) -> bool:
    """ASYNC_FLUSH: the record `msg_id` names lay in the window a power loss took from a
    node of the group, whichever node stored it first. A slave acknowledges (and so
    confirms, for consumers) what it wrote, not what it flushed: when that slave is elected
    and then loses its unflushed tail, the old master, outside its in-sync set, cuts the
    same records to follow it (seed 106 with --storage; RocketMQ 5 elects from the
    SyncStateSet alike). The ASYNC_FLUSH promise: the loss is that window, reported."""
    offset = decode_msg_id(msg_id)[1]
    return flush == "ASYNC_FLUSH" and any(low <= offset < high for _n, low, high in observed.power_windows)


def _power_lost(key: str, status: str, observed: Observed, flush: str) -> bool:
    """An acknowledgement a power loss may take: its record lay in the window a power loss
    took from the node that stored it, and the mode did not promise it durable there (a
    SYNC_FLUSH PUT_OK was fsynced before it was answered). SYNC_MASTER's PUT_OK is judged
    apart: it must survive the loss of any one node, but for one in its master's unflushed
    window (ASYNC_FLUSH) that a cut reported dropping (the master restarted with a new epoch
    at its recovered end and its slaves cut their tails there) or that a power loss of the
    whole group took (every copy was unflushed) (docs/simulation.md)."""
    return key in observed.power_lost and not (flush == "SYNC_FLUSH" and status == "PUT_OK")


def _lost_on_every_node(msg_id: str, acked_at: float | None, observed: Observed) -> bool:
    """Did every node of the group lose the record's offset to a power loss after it was
    acknowledged? With ASYNC_FLUSH no copy was durable: the power losses of the nodes one
    after the other take it as a power loss of the whole group does (storage seed 5160:
    SYNC_MASTER+ASYNC_FLUSH, the master's power cut, then its slave's before the lease let it
    be elected). Any one node's power loss still loses no SYNC_MASTER PUT_OK."""
    offset = decode_msg_id(msg_id)[1]
    return acked_at is not None and bool(observed.nodes) and all(
        any(n == node and at >= acked_at and low <= offset < high for at, n, low, high in observed.power_struck)
        for node in observed.nodes)


def _kept_only_while_off(msg_id: str, observed: Observed) -> bool:
    """ASYNC_FLUSH: a power loss of the whole group took the record's offset from a node
    that was elected next, while every node that had kept it was powered off again. No copy
    was promised durable (the group's unflushed window); the election prefers the longest
    live log, and waits a bounded time for a longer one to come back (docs/auto-failover.md,
    the two-lease deferral): what only an absent node held is cut when it rejoins, and the
    cut reports it (storage seed 7528; RocketMQ 5's controller elects the live member of the
    SyncStateSet at once). A holder that was up at the election keeps the promise judged."""
    offset = decode_msg_id(msg_id)[1]
    for struck_at in observed.group_power_losses:
        lost_on = {n for at, n, low, high in observed.power_struck if at == struck_at and low <= offset < high}
        kept_by = observed.nodes - lost_on
        if not lost_on or not kept_by:
            continue
        for elected_at, node, role, _epoch in observed.terms:
            if elected_at > struck_at and node in lost_on and role != "SLAVE" and all(
                    any(n == holder and off <= elected_at < back for n, off, back in observed.powered_off)
                    for holder in kept_by):
                return True
    return False


UNCLEAN_LOOKBACK_S = 40.0
"""An --unclean promotion asked this long before a takeover may be the one it is (the
operator cuts the slave off for the in-sync hold, 15 s, before it forces the promotion)."""


def _commits_lost(observed: Observed) -> list[str]:
    """A commit a SYNC_MASTER answered OK is on every in-sync slave (the offsets ride the HA
    stream), so the node a promotion or an election makes master next holds it: each
    takeover's table must reach every commit answered before the run last saw the group
    without it (and after the last --unclean promotion, which sets offsets back)."""
    out = []
    for before, node, offsets in observed.takeovers:
        if any(n == node and before - UNCLEAN_LOOKBACK_S <= asked for asked, n, _start in observed.unclean):
            continue  # an --unclean promotion sets committed offsets back to its log's end
        since = max((asked for asked, _n, _start in observed.unclean if asked < before), default=-math.inf)
        # a power loss of the whole group: every node's table is its file's (the limit a
        # killed and re-elected master has too)
        since = max([since, *(cut for cut in observed.group_power_losses if cut < before)])
        # a cut of a power loss's window (a master restarted in a new epoch at its recovered
        # end, its slaves cutting their tails there): the queue offsets committed before it
        # named records now gone, and the consumer moves back (seed 212 with --storage)
        since = max([since, *(cut for cut, ids in observed.cuts if cut < before and _window_cut(ids, observed))])
        needed: dict[int, int] = {}
        for at, queue, offset in observed.commits:
            if since <= at < before:  # (one at the very instant may have come after the look)
                needed[queue] = max(offset, needed.get(queue, 0))
        out += [f"{node} took over with {queue}@{offsets.get(queue)} after a commit of {queue}@{offset}"
                for queue, offset in sorted(needed.items()) if offsets.get(queue, -1) < offset]
    return out


def _window_cut(msg_ids: frozenset[str], observed: Observed) -> bool:
    """Did a cut that dropped `msg_ids` drop records in the window a power loss took?"""
    return any(low <= decode_msg_id(m)[1] < high for m in msg_ids for _n, low, high in observed.power_windows)


def _unclean_drop(msg_id: str, cut_at: float, observed: Observed) -> bool:
    """Was the record `msg_id` names, cut at `cut_at`, one an unclean promotion asked for
    before then dropped (stored at or past where its epoch starts)? Such a record may have
    been acknowledged and read: the promoted slave never had it (the consumer moves back and
    reads what replaced it; the skip rule still holds)."""
    offset = decode_msg_id(msg_id)[1]
    return any(asked <= cut_at and offset >= start for asked, _node, start in observed.unclean)


def _dropped_retry(key: str, history: History, observed: Observed, replication: str) -> bool:
    """A retried send whose acknowledged copy a rejoining node dropped (within the mode's
    promise) while a copy an earlier attempt of unknown outcome stored survives: stored, at
    another place than acknowledged, as its retries allow."""
    op = next((op for op in history.ops if op.key == key), None)
    return (op is not None and op.copies > 1 and op.msg_id in observed.truncated
            and not (replication == "SYNC_MASTER" and op.status == "PUT_OK"))


def _acked_by_the_old_master(history: History, observed: Observed) -> list[str]:
    """A write sent after a promotion returned must be acknowledged by the promoted node (or
    the one promoted next, which serves before its promotion returns): an old master that acknowledges it — paused across the promotion,
    restarted during it — is one the fencing missed, and the write is cut when that node
    rejoins. A master cut off from the name server cannot learn of a promotion in manual
    mode (the documented limit): its acknowledgements then, and within an epoch check's
    timeout after the heal, are allowed."""
    out = []
    for op in history.ops:
        if op.outcome != OK or not op.msg_id:
            continue
        serving, coming = observed.first_master, None  # the master, and the one being promoted
        for returned, node, _epoch in observed.promotions:
            if returned <= op.invoked_at:
                serving = node
            elif coming is None:
                coming = node  # it serves before the promotion returns: a client may reach it first
        acked_by = observed.addresses.get(decode_msg_id(op.msg_id)[0])
        cut_off = any(node == acked_by and start <= op.invoked_at <= end + ASK_TIMEOUT_S
                      for node, start, end in observed.cut_off)
        if acked_by is not None and acked_by not in (serving, coming) and not cut_off:
            out.append(f"{op.key} ({op.status}) by {acked_by}, sent after {serving}'s promotion")
    return out


def _reused(history: History, observed: Observed) -> list[str]:
    places: dict[tuple[int, int], list[str]] = defaultdict(list)
    for op in history.ops:
        if (op.outcome == OK and op.msg_id not in observed.truncated and op.key not in observed.power_lost
                and op.queue_id is not None):
            places[(op.queue_id, op.queue_offset or 0)].append(op.key)
    return [f"{q}@{o}: {keys}" for (q, o), keys in sorted(places.items()) if len(keys) > 1]


def _epoch_findings(observed: Observed) -> list[str]:
    out = []
    masters: dict[int, set[str]] = defaultdict(set)  # (a node's epoch may go back: a cut drops a term)
    for _at, node, role, epoch in observed.terms:
        if epoch is not None and role != "SLAVE":
            masters[epoch].add(node)
    out += [f"epoch {e} had {len(nodes)} masters: {sorted(nodes)}" for e, nodes in sorted(masters.items())
            if len(nodes) > 1]
    starts: dict[int, set[int]] = defaultdict(set)
    for node, entries in observed.epochs.items():
        for (e1, s1), (e2, s2) in zip(entries, entries[1:], strict=False):
            if e2 <= e1 or s2 < s1:
                out.append(f"{node}'s epoch file does not ascend: {entries}")
                break
        for epoch, start in entries:
            starts[epoch].add(start)
    out += [f"epoch {e} starts at different offsets on different nodes: {sorted(s)}"
            for e, s in sorted(starts.items()) if len(s) > 1]
    seen = [e for _at, _node, e in observed.promotions]
    if seen != sorted(set(seen)):
        out.append(f"promotions did not take ascending epochs: {seen}")
    return out


def _skipped(report: CheckReport, history: History, observed: Observed,
             consumed: dict[str, int]) -> list[tuple[str, int]]:
    """Acknowledged messages below their queue's committed offset the consumer never read,
    with their CommitLog offsets."""
    lost = set(report.acked_missing)
    moved = {m.split(":", 1)[0] for m in report.acked_moved}
    out = []
    for op in history.ops:
        if op.outcome != OK or op.key in lost or op.key in moved or op.key in consumed or op.queue_id is None:
            continue
        committed = observed.committed.get(op.queue_id)
        if committed is not None and (op.queue_offset or 0) < committed and parse_key(op.key) is not None:
            out.append((f"{op.key} at {op.queue_id}@{op.queue_offset} (committed {committed})",
                        op.commitlog_offset or 0))
    return out
