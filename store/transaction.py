"""Transactional messages on disk (RocketMQ 4.x's half-message design): the system topics,
the property names, and the three records a transaction writes, built from what the store
holds. Kept in store/ beside schedule.py because, like a delayed message, a half message is
an ordinary record of a system topic: `tidemq store verify`, dump and the Spark reader see
the half and op topics as topics, and the node (node/ops/transactions.py) writes them.

- the **half** record: the prepared message on `RMQ_SYS_TRANS_HALF_TOPIC` queue 0, with
  `REAL_TOPIC`/`REAL_QID` naming where it goes on commit, the transaction bits of its sysflag
  reset to NOT (so it takes a ConsumeQueue slot on the half topic, never on the real one);
- the **committed** record: the half's body and properties back on the real topic and queue,
  sysflag COMMIT, PREPAREDTRANSACTIONOFFSET = the half's CommitLog offset;
- the **op** record on `RMQ_SYS_TRANS_OP_HALF_TOPIC` queue 0: tag `d`, body the half's queue
  offset in decimal (RocketMQ's), plus tidemq's `TRAN_END` (COMMIT or ROLLBACK),
  `TRAN_HALF_OFFSET` (the half's CommitLog offset) and, for a COMMIT, `TRAN_COMMIT_OFFSET`
  (the committed record's), so the outcome itself is replicated and a
  restarted or promoted node knows what was done, not only that something was.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from .message import Message, StoredMessage
from .properties import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TRAN_MSG,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT,
)
from .sysflag import TRANSACTION_MASK, SysFlag

__all__ = [
    "CHECK_MAX_TIME_TOPIC", "HALF_TOPIC", "NOT_SENDABLE_TOPICS", "OP_HALF_TOPIC", "PROPERTY_PRODUCER_GROUP",
    "PROPERTY_TRANSACTION_ID", "PROPERTY_TRAN_COMMIT_OFFSET", "PROPERTY_TRAN_END", "PROPERTY_TRAN_HALF_OFFSET", "REMOVE_TAG", "Outcome",
    "check_copy", "check_times", "committed_message", "discarded_message", "half_message", "half_origin",
    "immunity_ms", "is_prepared", "op_half_offset", "op_message", "resumed_half",
]

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
"""Where the check service discards a half message checked `transactionCheckMax` times
(node/ops/transaction_checks.py); an admin action resumes it."""
NOT_SENDABLE_TOPICS = frozenset({HALF_TOPIC, OP_HALF_TOPIC, CHECK_MAX_TIME_TOPIC})
"""Topics only the broker writes (RocketMQ TopicValidator's not-allowed-send set, for transactions)."""
REMOVE_TAG = "d"
"""The op record's tag (TransactionalMessageUtil.REMOVETAG)."""

PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_TRANSACTION_ID = "__transactionId__"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_TRAN_END = "TRAN_END"
"""tidemq, on the op record: COMMIT or ROLLBACK."""
PROPERTY_TRAN_COMMIT_OFFSET = "TRAN_COMMIT_OFFSET"
"""tidemq, on a COMMIT's op record: the committed record's CommitLog offset."""
PROPERTY_TRAN_HALF_OFFSET = "TRAN_HALF_OFFSET"
"""tidemq, on the op record: the half's CommitLog offset (the transaction's identity). A
check-service copy of a half message carries the original's too (as does a discarded or a
resumed copy), so an END naming the copy and one naming the original end the same transaction."""


class Outcome(enum.Enum):
    """What an END_TRANSACTION asks (RocketMQ's commitOrRollback 8, 12, 0)."""

    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    UNKNOWN = "UNKNOWN"


def is_prepared(properties: Mapping[str, str]) -> bool:
    """Whether a send is a transaction's prepared (half) message: TRAN_MSG parses as true."""
    return properties.get(PROPERTY_TRAN_MSG, "").strip().lower() == "true"


def half_message(msg: Message) -> Message:
    """The half record of a prepared send (TransactionalMessageBridge parseHalfMessageInner):
    the real topic and queue kept as properties, stored on the half topic's queue 0 with the
    transaction bits of the sysflag cleared."""
    props = dict(msg.properties)
    props[PROPERTY_REAL_TOPIC] = msg.topic
    props[PROPERTY_REAL_QID] = str(msg.queue_id)
    return Message(
        topic=HALF_TOPIC, body=msg.body, queue_id=0, tags=msg.tags, keys=msg.keys, properties=props,
        flag=msg.flag, born_timestamp=msg.born_timestamp, born_host=msg.born_host,
        sys_flag=msg.sys_flag & ~TRANSACTION_MASK, reconsume_times=msg.reconsume_times,
    )


def half_origin(half: StoredMessage) -> int:
    """The transaction's identity: the CommitLog offset of its first half record."""
    origin = half.properties.get(PROPERTY_TRAN_HALF_OFFSET)
    return int(origin) if origin is not None and origin.isdigit() else half.commitlog_offset


def committed_message(half: StoredMessage) -> Message:
    """The committed record (EndTransactionProcessor endMessageTransaction): back on REAL_TOPIC
    and REAL_QID with the COMMIT sysflag. REAL_TOPIC and REAL_QID are dropped from the stored
    properties (RocketMQ 4.9.8 keeps them by accident); TRAN_MSG and PGROUP stay, as there."""
    props = {k: v for k, v in half.properties.items()
             if k not in (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QID, PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_DELAY,
                           PROPERTY_TRAN_HALF_OFFSET)}
    props[PROPERTY_WAIT] = "true"
    return Message(
        topic=half.properties[PROPERTY_REAL_TOPIC], body=half.body,
        queue_id=int(half.properties.get(PROPERTY_REAL_QID, "0")), tags=half.tags, keys=half.keys,
        properties=props, flag=half.flag, born_timestamp=half.born_timestamp, born_host=half.born_host,
        sys_flag=(half.sys_flag & ~TRANSACTION_MASK) | SysFlag.TRANSACTION_COMMIT,
        reconsume_times=half.reconsume_times, prepared_transaction_offset=half_origin(half),
    )


def op_message(half: StoredMessage, outcome: Outcome, commit_offset: int | None = None) -> Message:
    """The op record that ends `half` (TransactionalMessageBridge addRemoveTagInTransactionOp),
    with tidemq's outcome properties (`commit_offset`: where a COMMIT's committed record is).
    Its UNIQ_KEY is the half's, so `query` by key finds both."""
    if outcome is Outcome.UNKNOWN:
        raise ValueError("an UNKNOWN end writes no op record")
    props = {PROPERTY_TRAN_END: outcome.value, PROPERTY_TRAN_HALF_OFFSET: str(half_origin(half)),
             PROPERTY_WAIT: "true"}
    if commit_offset is not None:
        props[PROPERTY_TRAN_COMMIT_OFFSET] = str(commit_offset)
    uniq = half.properties.get(PROPERTY_UNIQ_KEY)
    if uniq:
        props[PROPERTY_UNIQ_KEY] = uniq
    return Message(topic=OP_HALF_TOPIC, body=str(half.queue_offset).encode(), queue_id=half.queue_id,
                   tags=REMOVE_TAG, properties=props)


def op_half_offset(op: StoredMessage) -> int | None:
    """The half queue offset an op record names (its body), or None when it names none."""
    text = op.body.decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


def is_commit_record(msg: StoredMessage) -> bool:
    return msg.sys_flag & TRANSACTION_MASK == SysFlag.TRANSACTION_COMMIT


def check_times(half: StoredMessage) -> int:
    """How often the check service has checked this half message (TRANSACTION_CHECK_TIMES)."""
    text = half.properties.get(PROPERTY_TRANSACTION_CHECK_TIMES, "0")
    return int(text) if text.isdigit() else 0


def immunity_ms(properties: Mapping[str, str]) -> int | None:
    """The producer's CHECK_IMMUNITY_TIME_IN_SECONDS, in ms: no first check before it."""
    text = properties.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS, "").strip()
    return int(text) * 1000 if text.isdigit() else None


def _copy(half: StoredMessage, topic: str, times: int) -> Message:
    props = dict(half.properties)
    props[PROPERTY_TRAN_HALF_OFFSET] = str(half_origin(half))
    props[PROPERTY_TRANSACTION_CHECK_TIMES] = str(times)
    return Message(
        topic=topic, body=half.body, queue_id=0, tags=half.tags, keys=half.keys, properties=props,
        flag=half.flag, born_timestamp=half.born_timestamp, born_host=half.born_host,
        sys_flag=half.sys_flag & ~TRANSACTION_MASK, reconsume_times=half.reconsume_times,
    )


def check_copy(half: StoredMessage, times: int) -> Message:
    """The half message written again before its `times`-th check (RocketMQ's
    putBackHalfMsgQueue): the count is a replicated record, so a restart or a promotion
    keeps it. TRAN_HALF_OFFSET names the original, so the transaction stays one."""
    return _copy(half, HALF_TOPIC, times)


def discarded_message(half: StoredMessage) -> Message:
    """The record that discards a half message checked too often: a copy on
    TRANS_CHECK_MAX_TIME_TOPIC (RocketMQ's resolveDiscardMsg), count kept."""
    return _copy(half, CHECK_MAX_TIME_TOPIC, check_times(half))


def resumed_half(discarded: StoredMessage) -> Message:
    """A discarded half message written back as an open one, its check count at 0."""
    return _copy(discarded, HALF_TOPIC, 0)
