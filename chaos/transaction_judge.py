"""The judge of the `tx-kill-master` scenario: what the transaction producer decided and
was asked (chaos/transactions.py), what the consumer of the real topic received, and what
the serving master's half and op topics hold (pulled like any topic), against the promises
of docs/transactions.md through a failover."""

from __future__ import annotations

from typing import Any

import attrs

from cluster.client.transaction_producer import COMMIT, ROLLBACK, UNKNOWN
from store.transaction import (
    HALF_TOPIC,
    OP_HALF_TOPIC,
    PROPERTY_TRAN_END,
    PROPERTY_TRAN_HALF_OFFSET,
)
from wire.client import connect
from wire.protocol import Pull, WireMessage

from .transactions import CHECK_INTERVAL_MS, CHECK_SLACK_S, CHECK_TIMEOUT_MS, TransactionLoad, Tx

RESOLVE_BOUND_S = (CHECK_TIMEOUT_MS + CHECK_INTERVAL_MS) / 1000 + CHECK_SLACK_S
"""How long an UNKNOWN may stay open while a master serves before a check resolves it."""


async def pull_all(address: str, topic: str) -> list[WireMessage]:
    """Every message of `topic` queue 0 on the node at `address`."""
    out: list[WireMessage] = []
    async with connect(address, connect_timeout=2.0, request_timeout=5.0) as conn:
        offset = 0
        while True:
            reply = await conn.call(Pull(topic=topic, queue_id=0, offset=offset, max_msgs=256))
            out.extend(reply.messages)
            if not reply.messages or reply.next_begin_offset >= reply.max_offset:
                return out
            offset = reply.next_begin_offset


def _origin(m: WireMessage) -> int | None:
    text = m.properties.get(PROPERTY_TRAN_HALF_OFFSET)
    return int(text) if text is not None and text.isdigit() else None


@attrs.frozen
class TxLog:
    """A master's transaction records: first half records (by key), check copies (by
    CommitLog offset) and the op records (by the transaction's origin offset)."""

    firsts: dict[str, list[WireMessage]]
    copies: dict[int, WireMessage]
    ops: dict[int, WireMessage]

    @classmethod
    def of(cls, halves: list[WireMessage], ops: list[WireMessage]) -> TxLog:
        firsts: dict[str, list[WireMessage]] = {}
        copies: dict[int, WireMessage] = {}
        for m in halves:
            if _origin(m) is None:
                firsts.setdefault(m.keys[0] if m.keys else m.body.decode(errors="replace"), []).append(m)
            else:
                copies[m.commitlog_offset] = m
        by_origin: dict[int, WireMessage] = {}
        for op in ops:
            if (origin := _origin(op)) is not None:
                by_origin.setdefault(origin, op)
        return cls(firsts, copies, by_origin)

    @classmethod
    async def read(cls, address: str) -> TxLog:
        return cls.of(await pull_all(address, HALF_TOPIC), await pull_all(address, OP_HALF_TOPIC))


@attrs.frozen
class TxVerdict:
    findings: list[str]
    summary: dict[str, Any]


def judge(load: TransactionLoad, log: TxLog, *, lossless: bool, lost: set[str], killed_at: float,
          promoted_at: float) -> TxVerdict:
    """Each broken promise as a sentence (the functions below), and a summary for the report.
    `lossless`: a half message acknowledged PUT_OK survives the failover (SYNC_MASTER);
    `lost`: the msgIds the old master reported dropping when it rejoined."""
    missing, lost_apart = _undelivered(load, lossless, lost)
    waits, unresolved, slow = _resolutions(load.txs, lost, killed_at, promoted_at)
    asked_after, in_flight = _checks_after_end(load.txs, log)
    held = [tx for tx in load.txs.values() if tx.held]
    open_at_kill = [tx.key for tx in held if (tx.prepared_at or killed_at) < killed_at < (tx.decided_at or 0)]
    findings = [f"{len(items)} {what}: {items[:3]}" for what, items in (
        ("transaction(s) decided COMMIT never delivered", missing),
        ("transaction(s) decided ROLLBACK (or unknown to the producer) delivered", _wrongly_delivered(load)),
        ("half message(s) never ended on the master", _still_open(load.txs, log)),
        ("transaction(s) ended otherwise than decided", _ended_otherwise(load.txs, log)),
        ("transaction(s) left to a check (UNKNOWN, or held with its END lost) never resolved by one", unresolved),
        (f"transaction(s) left to a check resolved later than {RESOLVE_BOUND_S:g} s", slow),
        ("check(s) written after their transaction's op record", _copies_after_end(log)),
        ("transaction(s) the producer was asked about after their end", asked_after),
    ) if items]
    if not open_at_kill:
        findings.append("no transaction was between its prepared send and its END when the master was killed")
    txs = load.txs.values()
    prepared = [tx for tx in txs if tx.prepared is not None]
    summary = {
        "transactions": len(load.txs), "prepared": len(prepared),
        "prepare_failed": sum(1 for tx in txs if tx.prepare_error is not None),
        "decided": {d: sum(1 for tx in prepared if tx.decision == d) for d in (COMMIT, ROLLBACK, UNKNOWN)},
        "delivered": sum(1 for tx in txs if tx.key in load.consumed),
        "end_errors": sum(1 for tx in txs if tx.end_error is not None),
        "checks": sum(len(tx.checks) for tx in txs),
        "checks_in_flight_after_end": in_flight,
        "open_at_kill": open_at_kill,
        "held": {tx.key: {"decision": tx.decision, "end_retried": tx.end_retried, "end": tx.end_outcome,
                          "end_error": tx.end_error, "checks": [c.answer for c in tx.checks]} for tx in held},
        "lost_with_unreplicated_tail": lost_apart,
        "longest_check_resolution_s": round(max(waits), 3) if waits else None,
    }
    return TxVerdict(findings, summary)


def _undelivered(load: TransactionLoad, lossless: bool, lost: set[str]) -> tuple[list[str], list[str]]:
    """Prepared transactions that must end COMMIT and were not delivered: (broken promises,
    those a failover may lose: not PUT_OK in a lossless mode, and reported dropped)."""
    missing: list[str] = []
    lost_apart: list[str] = []
    for tx in load.txs.values():
        if tx.expected != COMMIT or tx.prepared is None or tx.key in load.consumed:
            continue
        promised = lossless and tx.prepared.ok
        (lost_apart if not promised and tx.prepared.msg_id in lost else missing).append(tx.key)
    return missing, lost_apart


def _wrongly_delivered(load: TransactionLoad) -> list[str]:
    return sorted(k for k in load.consumed if k not in load.txs or load.txs[k].expected != COMMIT)


def _still_open(txs: dict[str, Tx], log: TxLog) -> list[str]:
    return [key for key, firsts in log.firsts.items() if key in txs
            for m in firsts if m.commitlog_offset not in log.ops]


def _ended_otherwise(txs: dict[str, Tx], log: TxLog) -> list[str]:
    out = []
    for key, firsts in log.firsts.items():
        for m in firsts:
            op = log.ops.get(m.commitlog_offset)
            if key in txs and op is not None and op.properties.get(PROPERTY_TRAN_END) != txs[key].expected:
                out.append(f"{key} ended {op.properties.get(PROPERTY_TRAN_END)}, decided {txs[key].expected}")
    return out


def _resolutions(txs: dict[str, Tx], lost: set[str], killed_at: float, promoted_at: float,
                 ) -> tuple[list[float], list[str], list[str]]:
    """For each prepared transaction left to a check (an UNKNOWN, or a held one whose END
    found no master: its producer does not retry, and the master was dead before it was
    sent): the first check the checker answered COMMIT or ROLLBACK, and how long after its
    END it came (after the promotion, for one still open when the master was killed):
    (the waits, never resolved, resolved later than RESOLVE_BOUND_S)."""
    waits: list[float] = []
    unresolved, slow = [], []
    for tx in txs.values():
        left_to_check = tx.decision == UNKNOWN or (tx.held and tx.end_error is not None)
        if not left_to_check or tx.prepared is None:
            continue
        resolving = next((c for c in tx.checks if c.answer != UNKNOWN), None)
        if resolving is None:
            if tx.prepared.msg_id not in lost:
                unresolved.append(tx.key)
            continue
        since = tx.end_at or tx.decided_at or tx.prepared_at or resolving.at
        if since < promoted_at and resolving.at > killed_at:  # the killed master's: the new one checks it
            since = promoted_at
        waits.append(resolving.at - since)
        if resolving.at - since > RESOLVE_BOUND_S:
            slow.append(f"{tx.key} after {resolving.at - since:.1f} s")
    return waits, unresolved, slow


def _copies_after_end(log: TxLog) -> list[str]:
    """Check copies the master wrote after the transaction's op record: a round that saw
    an ended transaction open."""
    return [f"copy at {offset} of {origin}" for offset, m in log.copies.items()
            if (origin := _origin(m)) is not None and (op := log.ops.get(origin)) is not None
            and offset > op.commitlog_offset]


def _checks_after_end(txs: dict[str, Tx], log: TxLog) -> tuple[list[str], int]:
    """Checks the producer got through a copy written after the op record (broken), and
    the count of checks that arrived after the producer's own END was answered but were
    written before it landed (in flight: taken from the mailbox before the END)."""
    asked_after, in_flight = [], 0
    for tx in txs.values():
        for c in tx.checks:
            op, copy = log.ops.get(c.origin_offset), log.copies.get(c.copy_offset)
            if op is not None and copy is not None and _origin(copy) == c.origin_offset \
                    and c.copy_offset > op.commitlog_offset:
                asked_after.append(tx.key)
            elif tx.end_outcome in (COMMIT, ROLLBACK) and tx.end_at is not None and c.at > tx.end_at:
                in_flight += 1
    return asked_after, in_flight
