"""Transactional messages on the node (RocketMQ's SendMessageProcessor half path and
EndTransactionProcessor): a prepared send is stored as a half message, `end_transaction`
commits, rolls back or leaves it open. docs/transactions.md is the contract.

Exactly one outcome: ENDs run one at a time (the table's lock), and each looks up how the
transaction ended before writing anything. A second END with the same outcome writes nothing
and answers what the first did; one with the other outcome is refused (TRANSACTION_ENDED).
The state is the log's (node/tables/transactions.py): under the lock, a COMMIT appends the
committed record, then the op record naming it, with no await between the two, and notes the
outcome before it waits for the flush; a crash between the two records is found when the
table is built again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from store.message import Message, StoredMessage
from store.properties import PROPERTY_DELAY, PROPERTY_REAL_TOPIC, PROPERTY_UNIQ_KEY
from store.puts import Appended
from store.status import (
    AppendMessageResult,
    AppendMessageStatus,
    PutMessageResult,
    PutMessageStatus,
)
from store.transaction import (
    HALF_TOPIC,
    NOT_SENDABLE_TOPICS,
    OP_HALF_TOPIC,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_TRANSACTION_ID,
    Outcome,
    committed_message,
    half_message,
    half_origin,
    op_message,
)
from store.transaction import immunity_ms as immunity_of
from wire.protocol import (
    EndTransaction,
    EndTransactionReply,
    Request,
    Status,
    TransactionCheckWatch,
    TransactionList,
    TransactionResume,
    WireRequest,
)

from ..tables.topics import DEFAULT_PERM
from ..tables.transactions import Ended, OpenHalf, TransactionTable
from .services import NodeServices, OpError, check_writeable, confirm_write, refuse_on_slave
from .transaction_checks import transaction_check_watch, transaction_list, transaction_resume

__all__ = ["TRANSACTION_HANDLERS", "check_sendable", "half_of", "note_prepared"]


def check_sendable(topic: str) -> None:
    """Clients may not send to the transaction system topics (RocketMQ TopicValidator)."""
    if topic in NOT_SENDABLE_TOPICS:
        raise OpError(Status.NO_PERMISSION, f"sending to topic {topic!r} is forbidden: only the broker writes it")


async def half_of(s: NodeServices, msg: Message) -> Message:
    """The half message to store for a prepared send (checked: allowed here, a producer
    group, no delay), creating the half topic when it is missing."""
    if s.cfg.reject_transaction_message:
        raise OpError(Status.NO_PERMISSION, f"{s.cfg.broker_name} refuses transactional messages "
                                            "(rejectTransactionMessage)")
    if not msg.properties.get(PROPERTY_PRODUCER_GROUP):
        raise OpError(Status.BAD_REQUEST, "a transactional message (TRAN_MSG=true) needs the property PGROUP, "
                                          "its producer group")
    if msg.properties.get(PROPERTY_DELAY, "0") not in ("", "0"):
        raise OpError(Status.BAD_REQUEST, "a transactional message cannot be delayed (DELAY); send it without")
    if s.topics.get(HALF_TOPIC) is None:
        await s.topics.create(HALF_TOPIC, 1, 1, DEFAULT_PERM)
    s.transactions.ensure_loaded(s.store)
    return half_message(msg)


def note_prepared(table: TransactionTable, half: Message, appended: Appended) -> None:
    """The table learns a half message as soon as it is appended."""
    if not isinstance(appended, AppendMessageResult) or appended.status is not AppendMessageStatus.PUT_OK:
        return
    props = half.properties
    table.open.setdefault(appended.wrote_offset, OpenHalf(
        offset=appended.wrote_offset, queue_offset=appended.queue_offset, real_topic=props[PROPERTY_REAL_TOPIC],
        producer_group=props[PROPERTY_PRODUCER_GROUP], transaction_id=props.get(PROPERTY_TRANSACTION_ID),
        store_timestamp=appended.store_timestamp, immunity_ms=immunity_of(props)))


def _checked_half(s: NodeServices, f: EndTransaction) -> StoredMessage:
    """The half message the END names (EndTransactionProcessor checkPrepareMessage)."""
    half = s.store.look_message_by_offset(f.commitlog_offset)
    where = f"CommitLog offset {f.commitlog_offset} on {s.cfg.broker_name}"
    if half is None or half.topic != HALF_TOPIC:
        raise OpError(Status.NOT_FOUND, f"end_transaction: no half message at {where}")
    if half.properties.get(PROPERTY_PRODUCER_GROUP) != f.producer_group:
        raise OpError(Status.BAD_REQUEST, f"end_transaction: the half message at {where} belongs to producer group "
                                          f"{half.properties.get(PROPERTY_PRODUCER_GROUP)!r}, not {f.producer_group!r}")
    if half.queue_offset != f.tran_state_table_offset:
        raise OpError(Status.BAD_REQUEST, f"end_transaction: the half message at {where} has half queue offset "
                                          f"{half.queue_offset}, not {f.tran_state_table_offset}")
    named = half.properties.get(PROPERTY_TRANSACTION_ID)
    if f.transaction_id is not None and named is not None and f.transaction_id != named:
        # after an unclean failover the offset may hold another transaction's half message:
        # the one the END names is not here (a retried END stops, the check resolves it)
        raise OpError(Status.NOT_FOUND, f"end_transaction: no half message of transaction {f.transaction_id!r} "
                                        f"at {where} (it holds {named!r})")
    uniq = half.properties.get(PROPERTY_UNIQ_KEY)
    if f.msg_id is not None and uniq is not None and f.msg_id != uniq:
        raise OpError(Status.BAD_REQUEST, f"end_transaction: the half message at {where} has msgId (UNIQ_KEY) "
                                          f"{uniq!r}, not {f.msg_id!r}")
    return half


def _answer(s: NodeServices, r: Request, ended: Ended, *, duplicate: bool,
            status: Status = Status.OK) -> dict[str, Any]:
    """The reply for a transaction that ended as `ended` (the committed record read back)."""
    committed = (s.store.look_message_by_offset(ended.commit_offset)
                 if ended.outcome is Outcome.COMMIT and ended.commit_offset is not None else None)
    return EndTransactionReply(
        status=status, outcome=ended.outcome.value, duplicate=duplicate,
        msg_id=committed.msg_id if committed is not None else None,
        topic=committed.topic if committed is not None else ended.real_topic,
        queue_id=committed.queue_id if committed is not None else None,
        queue_offset=committed.queue_offset if committed is not None else None,
        commitlog_offset=committed.commitlog_offset if committed is not None else None,
    ).to_wire(r.id)


async def _end_transaction(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    refuse_on_slave(s, "end_transaction")
    f = cast(EndTransaction, r.fields)
    asked = Outcome(f.outcome)
    table = s.transactions
    async with table.lock:
        table.ensure_loaded(s.store)
        half = _checked_half(s, f)
        real_topic = half.properties.get(PROPERTY_REAL_TOPIC, "")
        lacking = r.publisher(real_topic) if r.publisher is not None else None
        if lacking is not None:  # an END writes to the real topic (or ends its transaction): PUB on it
            raise OpError(Status.NO_PERMISSION, f"end_transaction: {lacking} (the half message at CommitLog offset "
                                                f"{f.commitlog_offset} is for topic {real_topic!r})")
        origin = half_origin(half)
        known = table.ended.get(origin)
        if known is not None:
            if asked is Outcome.UNKNOWN or known.outcome in (asked, Outcome.UNKNOWN):
                if known.op_missing:  # committed before a crash cut its op record: write it now
                    await _append(s, half, None, table, known)
                return _answer(s, r, known, duplicate=asked is not Outcome.UNKNOWN)
            raise OpError(Status.TRANSACTION_ENDED,
                          f"end_transaction {asked.value}: the transaction of the half message at CommitLog offset "
                          f"{f.commitlog_offset} was already ended with {known.outcome.value}; nothing was written")
        if asked is Outcome.UNKNOWN:  # nothing to write: it stays open for the check
            return EndTransactionReply(status=Status.OK, outcome=Outcome.UNKNOWN.value,
                                       topic=half.properties.get(PROPERTY_REAL_TOPIC)).to_wire(r.id)
        ended = Ended(asked, None, real_topic=half.properties.get(PROPERTY_REAL_TOPIC))
        committed = None
        if asked is Outcome.COMMIT:
            committed = committed_message(half)
            check_sendable(committed.topic)
            if s.topics.get(committed.topic) is None:
                raise OpError(Status.NOT_FOUND, f"end_transaction COMMIT: topic {committed.topic!r} no longer exists "
                                                f"on {s.cfg.broker_name}")
        result = await _append(s, half, committed, table, ended)
        return _answer(s, r, ended, duplicate=False, status=Status(result.status.value))


async def _append(s: NodeServices, half: StoredMessage, committed: Message | None, table: TransactionTable,
                  ended: Ended) -> PutMessageResult:
    """Append the committed record (when `committed`), then the op record naming its offset,
    with no await between the two (nothing else lands between them: a crash leaves at most the
    first, at the log's end); note the outcome in the table at once; then wait for the flush / slaves the
    node's config asks for. Refused by the store: OpError with its status, and nothing noted
    unless the outcome's first record was written (a COMMIT whose op record failed is
    `op_missing`)."""
    if s.topics.get(OP_HALF_TOPIC) is None:
        await s.topics.create(OP_HALF_TOPIC, 1, 1, DEFAULT_PERM)
    checked = await check_writeable(s)
    puts = s.store.puts
    appended: list[Appended] = []
    if committed is not None and ended.commit_offset is None:
        first = puts.append_message(committed)
        appended.append(first)
        if not _written(first):
            raise OpError(_status_of(first), f"end_transaction COMMIT: the committed record was not written: "
                                             f"{first.error}")
        ended.commit_offset = cast(AppendMessageResult, first).wrote_offset
        table.end(half_origin(half), ended)
    op = puts.append_message(op_message(half, ended.outcome, ended.commit_offset))
    appended.append(op)
    if _written(op):
        ended.op_offset = cast(AppendMessageResult, op).wrote_offset
        table.end(half_origin(half), ended)
    else:
        raise OpError(_status_of(op), f"end_transaction {ended.outcome.value}: the op record was not written: "
                                      f"{op.error}")
    results = await puts.finish_puts([(a, True) for a in appended])
    worst = next((res for res in results if res.status is not PutMessageStatus.PUT_OK), results[0])
    await confirm_write(s, checked, unreplicated=worst.status is PutMessageStatus.SLAVE_NOT_AVAILABLE)
    return worst


def _written(appended: Appended) -> bool:
    return isinstance(appended, AppendMessageResult) and appended.status is AppendMessageStatus.PUT_OK


def _status_of(appended: Appended) -> Status:
    if isinstance(appended, PutMessageResult):
        return Status(appended.status.value)
    return Status.SERVICE_NOT_AVAILABLE


TRANSACTION_HANDLERS: dict[type[WireRequest], Callable[[NodeServices, Request, str | None], Awaitable[dict[str, Any]]]] = {
    EndTransaction: _end_transaction,
    TransactionCheckWatch: transaction_check_watch,
    TransactionList: transaction_list,
    TransactionResume: transaction_resume,
}
