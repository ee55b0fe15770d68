"""The tx-kill-master judge finds what it must: producer records, deliveries and a master's
half and op records, each run good, then with one promise broken. No processes: the
scenario's real run is in test_scenarios.py."""

from __future__ import annotations

from chaos.transaction_judge import RESOLVE_BOUND_S, TxLog, judge
from chaos.transactions import CheckSeen, TransactionLoad, Tx, check_answer_of, decision_of
from cluster.client import SendResult
from cluster.client.transaction_producer import COMMIT, ROLLBACK, UNKNOWN
from store.transaction import (
    HALF_TOPIC,
    OP_HALF_TOPIC,
    PROPERTY_TRAN_END,
    PROPERTY_TRAN_HALF_OFFSET,
)
from wire.protocol import Status, WireMessage

KILLED, PROMOTED = 100.0, 102.0
HALF_SIZE = 1000


def half_offset(n: int) -> int:
    return n * HALF_SIZE


def prepared(n: int, status: Status = Status.PUT_OK) -> SendResult:
    return SendResult(status=status, msg_id=f"M{n}", broker_name="broker-a", queue_id=0, queue_offset=n,
                      commitlog_offset=half_offset(n))


def half(n: int) -> WireMessage:
    key = f"r-tx{n}"
    return WireMessage(topic=HALF_TOPIC, queue_id=0, queue_offset=n, commitlog_offset=half_offset(n),
                       msg_id=f"M{n}", body=key.encode(), keys=[key])


def copy(n: int, at: int) -> WireMessage:
    return WireMessage(topic=HALF_TOPIC, queue_id=0, queue_offset=100 + n, commitlog_offset=at, msg_id=f"C{at}",
                       body=f"r-tx{n}".encode(), keys=[f"r-tx{n}"],
                       properties={PROPERTY_TRAN_HALF_OFFSET: str(half_offset(n))})


def op(n: int, outcome: str, at: int) -> WireMessage:
    return WireMessage(topic=OP_HALF_TOPIC, queue_id=0, queue_offset=n, commitlog_offset=at, msg_id=f"O{at}",
                       body=str(n).encode(), properties={PROPERTY_TRAN_END: outcome,
                                                         PROPERTY_TRAN_HALF_OFFSET: str(half_offset(n))})


def good_run() -> tuple[TransactionLoad, list[WireMessage], list[WireMessage]]:
    """Six transactions (two of each decision), ended before the kill but for tx5, an
    UNKNOWN held across it whose END found no master, resolved by the new master's check;
    tx2's check came from the old master."""
    load = TransactionLoad("127.0.0.1:1", "r")
    halves, ops = [], []
    for n in range(6):
        tx = load._new()
        assert tx.n == n
        tx.prepared, tx.prepared_at = prepared(n), 90.0 + n
        if n == 5:
            tx.held, tx.decided_at, tx.end_at, tx.end_error = True, KILLED + 0.1, KILLED + 0.2, "CONNECTION_LOST"
        else:
            tx.decided_at = tx.end_at = 90.0 + n + 0.1
            tx.end_outcome = decision_of(n)
        halves.append(half(n))
        outcome = tx.expected
        if tx.decision == UNKNOWN:
            check_at = 50_000 + n
            halves.append(copy(n, check_at))
            tx.checks.append(CheckSeen(PROMOTED + 1.0 if n == 5 else 93.0, 1, check_at, half_offset(n),
                                       check_answer_of(n)))
            ops.append(op(n, outcome, check_at + 500))
        else:
            ops.append(op(n, outcome, 60_000 + n))
        if outcome == COMMIT:
            load.consumed[tx.key] = 70_000 + n
    return load, halves, ops


def verdict(load: TransactionLoad, halves: list[WireMessage], ops: list[WireMessage], *, lossless: bool = True,
            lost: frozenset[str] = frozenset()) -> list[str]:
    return judge(load, TxLog.of(halves, ops), lossless=lossless, lost=set(lost), killed_at=KILLED,
                 promoted_at=PROMOTED).findings


def test_decisions_by_key_cover_every_outcome():
    assert [decision_of(n) for n in range(3)] == [COMMIT, ROLLBACK, UNKNOWN]
    assert {check_answer_of(n) for n in (2, 5)} == {COMMIT, ROLLBACK}


def test_the_checker_answers_as_an_application_would():
    tx = Tx(key="r-tx0", n=0)
    assert tx.answer() == UNKNOWN  # prepared send still under way
    tx.prepare_error = "SERVICE_NOT_AVAILABLE: down"
    assert (tx.answer(), tx.expected) == (ROLLBACK, ROLLBACK)  # the local transaction never ran
    tx = Tx(key="r-tx2", n=2, prepared=prepared(2))
    assert tx.answer() == UNKNOWN  # the local transaction is still running
    tx.decided_at = 1.0
    assert tx.answer() == check_answer_of(2) == tx.expected


def test_a_good_run_has_no_findings_and_a_summary():
    load, halves, ops = good_run()
    result = judge(load, TxLog.of(halves, ops), lossless=True, lost=set(), killed_at=KILLED, promoted_at=PROMOTED)
    assert result.findings == []
    s = result.summary
    assert (s["transactions"], s["delivered"], s["checks"], s["open_at_kill"]) == (6, 3, 2, ["r-tx5"])
    assert s["longest_check_resolution_s"] == 1.0  # tx5: from the promotion, not from its END before it


def test_a_commit_not_delivered_is_a_finding_unless_a_failover_may_lose_it():
    load, halves, ops = good_run()
    del load.consumed["r-tx0"]
    assert any("decided COMMIT never delivered" in f for f in verdict(load, halves, ops))
    # ASYNC_MASTER: allowed when the old master reported dropping its half message
    assert not any("never delivered" in f for f in verdict(load, halves, ops, lossless=False, lost=frozenset({"M0"})))
    assert any("never delivered" in f for f in verdict(load, halves, ops, lossless=False))
    # SYNC_MASTER: a half message acknowledged PUT_OK must survive, whatever was dropped
    assert any("never delivered" in f for f in verdict(load, halves, ops, lost=frozenset({"M0"})))


def test_a_rollback_delivered_is_a_finding():
    load, halves, ops = good_run()
    load.consumed["r-tx1"] = 1
    assert any("decided ROLLBACK" in f and "r-tx1" in f for f in verdict(load, halves, ops))


def test_an_open_or_wrongly_ended_half_message_is_a_finding():
    load, halves, ops = good_run()
    assert any("never ended" in f and "r-tx1" in f for f in verdict(load, halves, [o for o in ops if o.body != b"1"]))
    flipped = [op(1, COMMIT, o.commitlog_offset) if o.body == b"1" else o for o in ops]
    assert any("ended otherwise than decided" in f for f in verdict(load, halves, flipped))


def test_an_unknown_must_be_resolved_by_a_check_in_time():
    load, halves, ops = good_run()
    load.txs["r-tx2"].checks[0].at = 90.0 + 2 + 0.1 + RESOLVE_BOUND_S + 1
    assert any("resolved later than" in f and "r-tx2" in f for f in verdict(load, halves, ops))
    load.txs["r-tx2"].checks[0].answer = UNKNOWN
    assert any("never resolved by one" in f and "r-tx2" in f for f in verdict(load, halves, ops))


def test_a_check_after_the_end_is_a_finding_and_one_in_flight_is_not():
    load, halves, ops = good_run()
    tx0 = load.txs["r-tx0"]
    tx0.checks.append(CheckSeen(tx0.end_at + 0.01, 1, 59_000, half_offset(0), COMMIT))  # written before the op
    halves.append(copy(0, 59_000))
    result = judge(load, TxLog.of(halves, ops), lossless=True, lost=set(), killed_at=KILLED, promoted_at=PROMOTED)
    assert result.findings == [] and result.summary["checks_in_flight_after_end"] == 1
    tx0.checks.append(CheckSeen(tx0.end_at + 1, 2, 61_000, half_offset(0), COMMIT))  # written after the op
    halves.append(copy(0, 61_000))
    findings = verdict(load, halves, ops)
    assert any("written after their transaction's op record" in f for f in findings)
    assert any("asked about after their end" in f and "r-tx0" in f for f in findings)


def test_a_held_transaction_whose_end_was_lost_must_be_resolved_by_a_check():
    load, halves, ops = good_run()
    tx = load._new(COMMIT)
    tx.held, tx.end_retried, tx.prepared, tx.prepared_at = True, False, prepared(tx.n), KILLED - 0.5
    tx.decided_at, tx.end_at, tx.end_error = KILLED + 0.1, KILLED + 0.1, "connection lost"
    halves.append(half(tx.n))
    ops.append(op(tx.n, COMMIT, 80_000))
    load.consumed[tx.key] = 80_001
    assert any("never resolved by one" in f and tx.key in f for f in verdict(load, halves, ops))
    tx.checks.append(CheckSeen(PROMOTED + 2, 1, 79_000, half_offset(tx.n), COMMIT))
    halves.append(copy(tx.n, 79_000))
    assert verdict(load, halves, ops) == []


def test_no_transaction_open_at_the_kill_is_a_finding():
    load, halves, ops = good_run()
    load.txs["r-tx5"].decided_at = KILLED - 1
    assert any("between its prepared send and its END" in f for f in verdict(load, halves, ops))
