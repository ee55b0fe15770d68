"""Transaction state (the seeds' 事务状态服务): which half messages are open and how each
ended transaction ended, keyed by the transaction's identity (its half's CommitLog offset).

The replicated record is the log itself: half records on RMQ_SYS_TRANS_HALF_TOPIC, op
records (with their outcome) on RMQ_SYS_TRANS_OP_HALF_TOPIC, committed records on the real
topics. This table is an index over them, built from the store when a term starts (a
restart or a promotion: the slave's replicated log holds the same records) and kept up to
date by the END path as it appends. Nothing here is a separate file, so nothing here can
disagree with the log after a crash.

Building it reads the two queues' dispatched records through their ConsumeQueues, then
walks the CommitLog past what is dispatched and past the last op record: the first catches
records not yet in any queue (a master dispatches only what its in-sync slaves hold), the
second a COMMIT whose committed record was written but whose op record was not (the END
appends them back to back, so a crash between them leaves the committed record after the
last op record; a power loss, which keeps pages on their own, may leave it before later op
records: the halves still open are then looked up by UNIQ_KEY and KEYS in the index). Such a transaction is known as committed (`op_missing`), so a retried
COMMIT does not write it twice; the END path writes the missing op record then.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs
import trio

from store.message import StoredMessage
from store.message_store import MessageStore
from store.properties import PROPERTY_REAL_TOPIC
from store.transaction import (
    CHECK_MAX_TIME_TOPIC,
    HALF_TOPIC,
    OP_HALF_TOPIC,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRAN_COMMIT_OFFSET,
    PROPERTY_TRAN_END,
    PROPERTY_TRAN_HALF_OFFSET,
    PROPERTY_TRANSACTION_ID,
    Outcome,
    check_times,
    half_origin,
    immunity_ms,
    is_commit_record,
    op_half_offset,
)

__all__ = ["Discarded", "Ended", "OpenHalf", "TransactionTable"]

_BATCH = 256


@attrs.define
class OpenHalf:
    """A half message no END has ended yet."""

    offset: int
    """Its CommitLog offset (the transaction's identity)."""
    queue_offset: int
    real_topic: str
    producer_group: str
    transaction_id: str | None
    store_timestamp: int
    latest_offset: int = attrs.field(default=attrs.Factory(lambda h: h.offset, takes_self=True))
    """The CommitLog offset of its newest half record (the original, or the check service's
    latest copy): what a check names."""
    latest_queue_offset: int = attrs.field(default=attrs.Factory(lambda h: h.queue_offset, takes_self=True))
    last_touch: int = attrs.field(default=attrs.Factory(lambda h: h.store_timestamp, takes_self=True))
    """The store time (ms) of its newest half record: the next check waits transactionTimeOut from it."""
    check_times: int = 0
    """Checks sent so far (TRANSACTION_CHECK_TIMES of its newest half record)."""
    immunity_ms: int | None = None
    """CHECK_IMMUNITY_TIME_IN_SECONDS of the producer, in ms: the first check waits that long instead."""

    def seen_copy(self, msg: StoredMessage) -> None:
        """A newer half record of this transaction (a check copy or a resumed one)."""
        if msg.commitlog_offset > self.latest_offset:
            self.latest_offset, self.latest_queue_offset = msg.commitlog_offset, msg.queue_offset
            self.last_touch, self.check_times = msg.store_timestamp, check_times(msg)


@attrs.define
class Discarded:
    """A half message the check service gave up on (TRANS_CHECK_MAX_TIME_TOPIC)."""

    half: OpenHalf
    offset: int
    """The discard record's CommitLog offset: a half record after it resumes the transaction."""


@attrs.define
class Ended:
    """How a transaction ended, and where that is written."""

    outcome: Outcome
    op_offset: int | None
    """The op record's CommitLog offset; None while it is missing (`op_missing`)."""
    commit_offset: int | None = None
    """The committed record's CommitLog offset (COMMIT), when known."""
    real_topic: str | None = None

    @property
    def op_missing(self) -> bool:
        return self.op_offset is None


class TransactionTable:
    """The index over the transaction records of one node's log (module docstring). One END
    runs at a time (`lock`), so two ENDs of one transaction never both see it open."""

    def __init__(self) -> None:
        self.open: dict[int, OpenHalf] = {}
        self.ended: dict[int, Ended] = {}
        self.discarded: dict[int, Discarded] = {}
        """Transactions past transactionCheckMax: neither open (never checked) nor ended (an
        END still ends them; the admin action resumes them)."""
        self._by_queue_offset: dict[int, int] = {}
        """half queue offset → CommitLog offset, for op records that name only the former
        (RocketMQ's own, without TRAN_HALF_OFFSET)."""
        self.last_op_end = -1
        """Where the last op record `load` found ends (-1: none)."""
        self.loaded = False
        self.lock = trio.Lock()

    # ---- noting records ------------------------------------------------------------------
    def note_half(self, msg: StoredMessage) -> None:
        origin = half_origin(msg)
        self._by_queue_offset.setdefault(msg.queue_offset, origin)
        if origin in self.ended:
            return
        known = self.open.get(origin)
        if known is not None:
            known.seen_copy(msg)
            return
        gone = self.discarded.get(origin)
        if gone is not None:
            if msg.commitlog_offset > gone.offset:  # written back after its discard: resumed
                del self.discarded[origin]
                gone.half.seen_copy(msg)
                self.open[origin] = gone.half
            return
        half = OpenHalf(
            offset=origin, queue_offset=msg.queue_offset, real_topic=msg.properties.get(PROPERTY_REAL_TOPIC, "?"),
            producer_group=msg.properties.get(PROPERTY_PRODUCER_GROUP, ""),
            transaction_id=msg.properties.get(PROPERTY_TRANSACTION_ID), store_timestamp=msg.store_timestamp,
            immunity_ms=immunity_ms(msg.properties))
        half.seen_copy(msg)  # a copy read first (the original aged out of the log): its count
        self.open[origin] = half

    def note_discard(self, msg: StoredMessage) -> None:
        """A discard record (TRANS_CHECK_MAX_TIME_TOPIC): open no more, unless a half record
        after it resumed the transaction."""
        origin = half_origin(msg)
        half = self.open.get(origin)
        if half is None or half.latest_offset > msg.commitlog_offset:
            return
        del self.open[origin]
        self.discarded[origin] = Discarded(half, msg.commitlog_offset)

    def note_op(self, msg: StoredMessage) -> None:
        self.last_op_end = max(self.last_op_end, msg.commitlog_offset + msg.size)
        origin_text = msg.properties.get(PROPERTY_TRAN_HALF_OFFSET)
        if origin_text is not None and origin_text.isdigit():
            origin: int | None = int(origin_text)
        else:  # a RocketMQ op record: the half queue offset only
            queue_offset = op_half_offset(msg)
            origin = None if queue_offset is None else self._by_queue_offset.get(queue_offset)
        if origin is None:
            return
        try:
            outcome = Outcome(msg.properties.get(PROPERTY_TRAN_END, ""))
        except ValueError:
            outcome = Outcome.UNKNOWN  # ended, outcome not written (a RocketMQ broker's op record)
        commit_text = msg.properties.get(PROPERTY_TRAN_COMMIT_OFFSET, "")
        commit_offset = int(commit_text) if commit_text.isdigit() else None
        half = self._close(origin)
        known = self.ended.get(origin)
        if known is not None:
            if known.op_offset is None:
                known.op_offset = msg.commitlog_offset
            return
        self.ended[origin] = Ended(outcome, msg.commitlog_offset, commit_offset,
                                   real_topic=half.real_topic if half is not None else None)

    def note_commit(self, msg: StoredMessage) -> None:
        """A committed record (sysflag COMMIT, PREPAREDTRANSACTIONOFFSET = its half)."""
        origin = msg.prepared_transaction_offset
        known = self.ended.get(origin)
        if known is not None:
            if known.outcome is Outcome.COMMIT and known.commit_offset is None:
                known.commit_offset = msg.commitlog_offset
            return
        half = self._close(origin)
        if half is None:
            return  # not a half this log holds (a client's own COMMIT sysflag)
        self.ended[origin] = Ended(Outcome.COMMIT, None, msg.commitlog_offset, half.real_topic)

    def end(self, origin: int, ended: Ended) -> None:
        """The END path appended `ended`'s records."""
        self._close(origin)
        self.ended[origin] = ended

    def _close(self, origin: int) -> OpenHalf | None:
        """The transaction ended: neither open nor discarded any more."""
        half = self.open.pop(origin, None)
        gone = self.discarded.pop(origin, None)
        return half if half is not None else gone.half if gone is not None else None

    # ---- building ------------------------------------------------------------------------
    def load(self, store: MessageStore) -> None:
        """Build from the store (module docstring); runs once per table."""
        for msg in _queue_messages(store, HALF_TOPIC):
            self.note_half(msg)
        for msg in _queue_messages(store, CHECK_MAX_TIME_TOPIC):
            self.note_discard(msg)
        for msg in _queue_messages(store, OP_HALF_TOPIC):
            self.note_op(msg)
        starts = [store.dispatched_offset()]
        if self.last_op_end >= 0:
            starts.append(self.last_op_end)
        elif self.open:
            starts.append(min(self.open))
        for msg in store.iter_messages(min(starts)):
            if msg.topic == HALF_TOPIC:
                self.note_half(msg)
            elif msg.topic == OP_HALF_TOPIC:
                self.note_op(msg)
            elif msg.topic == CHECK_MAX_TIME_TOPIC:
                self.note_discard(msg)
            elif is_commit_record(msg):
                self.note_commit(msg)
        self._find_commits(store)
        self.loaded = True

    def _find_commits(self, store: MessageStore) -> None:
        """Committed records of halves still open, found by their UNIQ_KEY or KEYS in the index: a
        power loss keeps or drops each page on its own, so a COMMIT's committed record can
        survive while its op record, appended right after, is gone, and the op records of
        later transactions then lie past it, where the walk above starts (storage seed 5104:
        the promoted slave checked the half again and committed it a second time)."""
        for origin in list(self.open):
            half = store.look_message_by_offset(origin)
            open_half = self.open.get(origin)
            if half is None or open_half is None:
                continue
            # the committed record keeps the half's UNIQ_KEY and KEYS, both indexed
            keys = [k for k in (half.uniq_key, *half.keys) if k]
            for key in keys[:4]:
                if origin not in self.open:
                    break
                for msg in store.query_message(open_half.real_topic, key, 8):
                    if is_commit_record(msg) and msg.prepared_transaction_offset == origin:
                        self.note_commit(msg)

    def ensure_loaded(self, store: MessageStore) -> None:
        if not self.loaded:
            self.load(store)

    # ---- views ---------------------------------------------------------------------------
    def status(self) -> dict[str, object]:
        """`status`'s transaction section: open half messages per real topic, and counts."""
        per_topic: dict[str, int] = {}
        for half in self.open.values():
            per_topic[half.real_topic] = per_topic.get(half.real_topic, 0) + 1
        counts = {o.value: 0 for o in (Outcome.COMMIT, Outcome.ROLLBACK, Outcome.UNKNOWN)}
        for ended in self.ended.values():
            counts[ended.outcome.value] += 1
        return {"open": len(self.open), "open_by_topic": dict(sorted(per_topic.items())),
                "committed": counts[Outcome.COMMIT.value], "rolled_back": counts[Outcome.ROLLBACK.value],
                "ended_unrecorded": counts[Outcome.UNKNOWN.value],
                "op_missing": sum(1 for e in self.ended.values() if e.op_missing),
                "discarded": len(self.discarded), "checks": sum(h.check_times for h in self.open.values())}


def _queue_messages(store: MessageStore, topic: str) -> Iterator[StoredMessage]:
    """Every message of `topic` queue 0 its ConsumeQueue holds, in order."""
    offset = store.get_min_offset_in_queue(topic, 0)
    end = store.get_max_offset_in_queue(topic, 0)
    while offset < end:
        result = store.get_message("CID_RMQ_SYS_TRANS", topic, 0, offset, _BATCH)
        yield from result.messages
        if result.next_begin_offset <= offset:
            return
        offset = result.next_begin_offset
