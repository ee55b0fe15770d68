"""The transaction check service (RocketMQ's TransactionalMessageCheckService and
TransactionalMessageServiceImpl.check), run by the serving master only; the
`transaction_check_watch` op that carries its checks to producers; `transaction_resume`.
docs/transactions.md is the contract.

Every `transactionCheckInterval` a round looks at the table's `open` half messages (never an
ended one: the END path closes it under the same lock). One is due when its newest half
record is `transactionTimeOut` old (the first check waits its CHECK_IMMUNITY_TIME_IN_SECONDS
instead, when the producer set one). For each due one, oldest first and at most
CHECKS_PER_ROUND a round (no check storm after an outage):
- checked `transactionCheckMax` times already: a discard record goes to
  TRANS_CHECK_MAX_TIME_TOPIC and it is checked no more (`transaction_resume` writes it back);
- else the half message is written again with TRANSACTION_CHECK_TIMES + 1 (RocketMQ's
  putBackHalfMsgQueue), so the count is a replicated record a restart or a promotion keeps,
  and a check goes to a live producer of its group (node/tables/transaction_checks.py).
The count goes up whether or not a producer is live, as in RocketMQ: a group gone for good
ends on TRANS_CHECK_MAX_TIME_TOPIC rather than being checked for ever.
"""

from __future__ import annotations

import logging
from typing import Any, cast

import trio

from store import runtime
from store.message import StoredMessage
from store.properties import PROPERTY_REAL_QID, PROPERTY_REAL_TOPIC, PROPERTY_UNIQ_KEY
from store.puts import Appended
from store.status import AppendMessageResult, AppendMessageStatus, PutMessageStatus
from store.transaction import (
    CHECK_MAX_TIME_TOPIC,
    HALF_TOPIC,
    check_copy,
    discarded_message,
    half_origin,
    resumed_half,
)
from wire.protocol import (
    Request,
    Status,
    TransactionChecksReply,
    TransactionCheckWatch,
    TransactionList,
    TransactionListReply,
    TransactionResume,
    TransactionResumeReply,
)

from ..config import BrokerConfig
from ..tables.topics import DEFAULT_PERM
from ..tables.transactions import OpenHalf
from .services import NodeServices, OpError, check_writeable, confirm_write, refuse_on_slave

log = logging.getLogger("tidemq.node")

__all__ = ["CHECKS_PER_ROUND", "check_round", "run_checks", "transaction_check_watch", "transaction_list",
           "transaction_resume"]

CHECKS_PER_ROUND = 256
"""At most this many half messages are checked (or discarded) per round; the rest wait for
the next one, oldest first."""


def _due_after_ms(cfg: BrokerConfig, half: OpenHalf) -> int:
    if half.check_times == 0 and half.immunity_ms is not None:
        return half.immunity_ms
    return cfg.transaction_time_out


async def run_checks(s: NodeServices, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """A round every transactionCheckInterval until cancelled (the term ends)."""
    task_status.started()
    while True:
        await runtime.sleep(s.cfg.transaction_check_interval / 1000)  # (a paused node's rounds wait too)
        try:
            await check_round(s)
        except OpError as e:  # fenced, wiped, a store that refused: the next round tries again
            log.info("transaction check round skipped: %s", e.message)
        except Exception:
            log.exception("transaction check round failed")


async def check_round(s: NodeServices) -> int:
    """One round (module docstring); returns how many checks it posted."""
    if not s.is_master or s.stopping or not s.store.running:
        return 0
    if s.topics.get(HALF_TOPIC) is None:
        if s.store.get_max_offset_in_queue(HALF_TOPIC, 0) <= 0:
            return 0  # no half message here: nothing to build
        # a promoted slave holds the half records its master replicated, but its topic
        # table (synced every 10 s) may lack the topic: the log decides (seed 114)
        await s.topics.create(HALF_TOPIC, 1, 1, DEFAULT_PERM)
    table = s.transactions
    now_ms = int(runtime.wall_clock() * 1000)  # the store's clock: its timestamps are what a due check compares
    checks: list[OpenHalf] = []
    appended: list[Appended] = []
    async with table.lock:
        table.ensure_loaded(s.store)
        due = sorted((h for h in table.open.values() if now_ms - h.last_touch >= _due_after_ms(s.cfg, h)),
                     key=lambda h: h.last_touch)[:CHECKS_PER_ROUND]
        if not due:
            return 0
        await check_writeable(s)
        if (any(h.check_times >= s.cfg.transaction_check_max for h in due)
                and s.topics.get(CHECK_MAX_TIME_TOPIC) is None):
            await s.topics.create(CHECK_MAX_TIME_TOPIC, 1, 1, DEFAULT_PERM)
        puts = s.store.puts
        for half in due:
            record = s.store.look_message_by_offset(half.latest_offset)
            if record is None or record.topic != HALF_TOPIC:
                log.warning("transaction at CommitLog offset %d: its half record at %d is gone from the log; "
                            "it is checked no more", half.offset, half.latest_offset)
                table.open.pop(half.offset, None)
                continue
            discard = half.check_times >= s.cfg.transaction_check_max
            result = puts.append_message(discarded_message(record) if discard
                                         else check_copy(record, half.check_times + 1))
            written = _read_back(s, result)
            if written is None:
                log.warning("transaction at CommitLog offset %d: not written (%s); the next round tries again",
                            half.offset, getattr(result, "error", result))
                continue
            appended.append(result)
            if discard:
                table.note_discard(written)
                log.warning("transaction at CommitLog offset %d (producer group %s, topic %s): checked %d times, "
                            "discarded to %s", half.offset, half.producer_group, half.real_topic,
                            half.check_times, CHECK_MAX_TIME_TOPIC)
            else:
                table.note_half(written)
                checks.append(half)
    if appended:  # the counts are replicated records before the checks go out
        results = await s.store.puts.finish_puts([(a, True) for a in appended])
        late = [r for r in results if r.status is not PutMessageStatus.PUT_OK]
        if late:
            log.info("transaction check round: %d check records not yet flushed or replicated (%s)",
                     len(late), late[0].status.name)
    return _post(s, checks)


def _post(s: NodeServices, checks: list[OpenHalf]) -> int:
    """Post the round's checks, each to a live producer of its group; a transaction ended
    meanwhile is not checked (no await between this test and the post)."""
    posted = 0
    for half in checks:
        if s.transactions.open.get(half.offset) is not half:
            continue
        live = [str(p["client_id"]) for p in s.producers.members(half.producer_group)]
        target = s.checks.pick(half.producer_group, live)
        if target is None:
            log.info("transaction at CommitLog offset %d: no live producer of group %s to check it "
                     "(check %d counted)", half.offset, half.producer_group, half.check_times)
            continue
        record = s.store.look_message_by_offset(half.latest_offset)
        if record is not None:
            s.checks.post(half.producer_group, target, _check_of(record, half))
            posted += 1
    return posted


def _check_of(record: StoredMessage, half: OpenHalf) -> dict[str, Any]:
    props = record.properties
    return {"producer_group": half.producer_group, "commitlog_offset": record.commitlog_offset,
            "tran_state_table_offset": record.queue_offset, "origin_offset": half_origin(record),
            "msg_id": props.get(PROPERTY_UNIQ_KEY), "transaction_id": half.transaction_id,
            "topic": props.get(PROPERTY_REAL_TOPIC), "queue_id": int(props.get(PROPERTY_REAL_QID, "0")),
            "body": record.body, "properties": dict(props), "check_times": half.check_times}


def _read_back(s: NodeServices, result: Appended) -> StoredMessage | None:
    if not isinstance(result, AppendMessageResult) or result.status is not AppendMessageStatus.PUT_OK:
        return None
    return s.store.look_message_by_offset(result.wrote_offset)


async def transaction_check_watch(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    """A producer's long poll for its checks (module docstring); a check whose transaction
    ended while it waited in the mailbox is left out. The poll says the producer is live
    (a promoted master lists it at once, not at its next heartbeat)."""
    refuse_on_slave(s, "transaction_check_watch (checks come from the master)")
    f = cast(TransactionCheckWatch, r.fields)
    s.producers.seen(f.group, f.client_id, peer, max(f.timeout_ms, 1000))
    with s.long_poll(trio.current_time() + f.timeout_ms / 1000):
        if not await s.checks.wait(f.group, f.client_id, peer):
            return TransactionChecksReply(checks=[]).to_wire(r.id)
    taken = s.checks.take(f.group, f.client_id, f.max_checks)
    still_open = [c for c in taken if c["origin_offset"] in s.transactions.open]
    if r.publisher is not None:  # aclEnable: a check shows the half message, for its producers only
        refused = [c for c in still_open if r.publisher(c["topic"] or "") is not None]
        if refused:
            s.checks.refused += len(refused)
            log.warning("transaction_check_watch of %s/%s: %d check(s) withheld, the account may not publish to "
                        "their topic (%s)", f.group, f.client_id, len(refused),
                        ", ".join(sorted({str(c["topic"]) for c in refused})))
            still_open = [c for c in still_open if c not in refused]
    return TransactionChecksReply(checks=still_open).to_wire(r.id)


async def transaction_list(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    """The open half messages, oldest first (TransactionList): what the check service asks
    about, with its count and when it asks next."""
    refuse_on_slave(s, "transaction_list (the master keeps the transactions' state)")
    f = cast(TransactionList, r.fields)
    table = s.transactions
    async with table.lock:
        table.ensure_loaded(s.store)
        now_ms = int(runtime.wall_clock() * 1000)
        halves = sorted((h for h in table.open.values() if f.topic is None or h.real_topic == f.topic),
                        key=lambda h: h.offset)
        rows = [{"offset": h.offset, "topic": h.real_topic, "queue_id": _real_queue_id(s, h),
                 "producer_group": h.producer_group, "transaction_id": h.transaction_id,
                 "check_times": h.check_times, "age_ms": max(0, now_ms - h.store_timestamp),
                 "next_check_in_ms": max(0, h.last_touch + _due_after_ms(s.cfg, h) - now_ms)}
                for h in halves[:f.limit]]
        return TransactionListReply(transactions=rows, open=len(halves),
                                    discarded=len(table.discarded)).to_wire(r.id)


def _real_queue_id(s: NodeServices, half: OpenHalf) -> int | None:
    record = s.store.look_message_by_offset(half.offset)
    qid = record.properties.get(PROPERTY_REAL_QID) if record is not None else None
    return int(qid) if qid is not None and qid.isdigit() else None


async def transaction_resume(s: NodeServices, r: Request, peer: str | None) -> dict[str, Any]:
    """Write discarded half messages back as open ones, count 0 (TransactionResume)."""
    refuse_on_slave(s, "transaction_resume")
    wanted = cast(TransactionResume, r.fields).offsets
    table = s.transactions
    resumed: list[int] = []
    async with table.lock:
        table.ensure_loaded(s.store)
        chosen = sorted(table.discarded) if wanted is None else [o for o in wanted if o in table.discarded]
        not_resumed = [] if wanted is None else [o for o in wanted if o not in table.discarded]
        if not chosen:
            return TransactionResumeReply(resumed=[], not_resumed=not_resumed).to_wire(r.id)
        checked = await check_writeable(s)
        appended: list[Appended] = []
        for origin in chosen:
            record = s.store.look_message_by_offset(table.discarded[origin].offset)
            result = s.store.puts.append_message(resumed_half(record)) if record is not None else None
            written = _read_back(s, result) if result is not None else None
            if written is None:
                not_resumed.append(origin)
                continue
            table.note_half(written)
            appended.append(cast(Appended, result))
            resumed.append(origin)
    if not appended:
        raise OpError(Status.SERVICE_NOT_AVAILABLE, f"transaction_resume: nothing was written on "
                                                    f"{s.cfg.broker_name} (the discard records are gone from the log, "
                                                    "or the store refused)")
    results = await s.store.puts.finish_puts([(a, True) for a in appended])
    await confirm_write(s, checked, unreplicated=any(x.status is PutMessageStatus.SLAVE_NOT_AVAILABLE
                                                     for x in results))
    return TransactionResumeReply(resumed=resumed, not_resumed=not_resumed).to_wire(r.id)
