"""TransactionProducer: RocketMQ's TransactionMQProducer over tidemq's protocol.

`send_in_transaction` stores the half message (`send_prepared`), runs the caller's local
transaction with it, and ends the transaction with the answer: COMMIT, ROLLBACK or UNKNOWN.
The producer belongs to a producer group (heartbeats, cluster/client/producer_group.py) and,
beside its sends, keeps one `transaction_check_watch` long poll open on every master: a
master's check service asks a live member of the group about each half message left open
for transactionTimeOut (an UNKNOWN, a lost END, a producer that died in between), and the
`checker` answers it; its answer goes back as an END marked `from_transaction_check`.
docs/transactions.md and docs/client.md say what to expect.

An END is idempotent on the node (a transaction has exactly one outcome), so one refused by a
slave or a fenced master (SERVICE_NOT_AVAILABLE), or whose outcome is unknown (a timeout, a
lost connection), is sent again with the same outcome to the group's current master, found
afresh (the half message has the same CommitLog offset on every replica). When every attempt
failed the result says so (`end_error`) and nothing is raised: the half message stays open
and the check service asks the group, so the checker decides it.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Unpack

import attrs
import trio

from wire.client import (
    ConnectionLost,
    OutcomeUnknown,
    ServiceUnavailable,
    TidemqError,
    block_nursery,
)
from wire.options import ConnectKeywords, ConnectOptions
from wire.protocol import (
    EndTransaction,
    EndTransactionReply,
    TransactionChecksReply,
    TransactionCheckWatch,
)

from .base import SendResult
from .producer import Producer
from .producer_group import HEARTBEAT_INTERVAL_S
from .trace import end_transaction_trace

log = logging.getLogger("tidemq.client")

__all__ = ["COMMIT", "ROLLBACK", "UNKNOWN", "TransactionCheck", "TransactionProducer", "TransactionResult"]

COMMIT, ROLLBACK, UNKNOWN = "COMMIT", "ROLLBACK", "UNKNOWN"
_OUTCOMES = (COMMIT, ROLLBACK, UNKNOWN)
CHECK_POLL_S = 20.0
"""How long one `transaction_check_watch` waits on a master before it is asked again."""
MASTERS_RECHECK_S = 5.0
"""How often the producer looks for masters it has no watch on (a promotion, a new group)."""
END_RETRY_S = 0.5
"""Pause before an END is sent again to the group's (possibly new) master."""


@attrs.frozen
class TransactionCheck:
    """What a master asks the checker about (RocketMQ's checkLocalTransaction argument): the
    half message, where it is (`commitlog_offset`, `tran_state_table_offset`: what the END
    names), the transaction's identity (`origin_offset`: the first half record's CommitLog
    offset, what `send_in_transaction`'s `prepared.commitlog_offset` was) and how often
    it was checked so far, counting this one."""

    producer_group: str
    topic: str
    queue_id: int
    body: bytes
    properties: Mapping[str, str]
    msg_id: str | None
    transaction_id: str | None
    commitlog_offset: int
    tran_state_table_offset: int
    origin_offset: int
    check_times: int
    address: str
    """The master that asked."""

    @classmethod
    def of(cls, raw: Mapping[str, Any], address: str) -> TransactionCheck:
        return cls(producer_group=raw["producer_group"], topic=raw["topic"], queue_id=raw["queue_id"],
                   body=raw["body"], properties=dict(raw["properties"]), msg_id=raw.get("msg_id"),
                   transaction_id=raw.get("transaction_id"), commitlog_offset=raw["commitlog_offset"],
                   tran_state_table_offset=raw["tran_state_table_offset"], origin_offset=raw["origin_offset"],
                   check_times=raw["check_times"], address=address)


@attrs.frozen
class TransactionResult:
    """How `send_in_transaction` went: the half message's place (`prepared`), the local
    transaction's answer (`outcome`), and the END's reply, or `end_error` when no master took
    the END (the check service resolves the transaction then)."""

    prepared: SendResult
    outcome: str
    end: EndTransactionReply | None
    end_error: TidemqError | None = None


LocalTransaction = Callable[[SendResult], "str | Awaitable[str]"]
Checker = Callable[[TransactionCheck], "str | Awaitable[str]"]


async def _call(fn: Callable[[Any], Any], arg: Any) -> str:
    answer = fn(arg)
    if inspect.isawaitable(answer):
        answer = await answer
    text = str(getattr(answer, "value", answer)).upper()
    if text not in _OUTCOMES:
        raise ValueError(f"a local transaction or checker must answer COMMIT, ROLLBACK or UNKNOWN, got {answer!r}")
    return text


class TransactionProducer(Producer):
    """A Producer of producer group `group` that sends transactional messages and answers
    the masters' checks with `checker` (module docstring). Everything else is Producer's.

    `checker(check)` (sync or async) gets a TransactionCheck and answers "COMMIT",
    "ROLLBACK" or "UNKNOWN" (or an enum whose value is one); an UNKNOWN or an exception
    leaves the transaction open for the next check, up to the master's
    transactionCheckMax. Checks are answered one at a time per master.
    """

    def __init__(
        self,
        namesrv: str | Sequence[str] | None = None,
        brokers: Sequence[str] | str | None = None,
        *,
        group: str,
        checker: Checker,
        check_poll_s: float = CHECK_POLL_S,
        masters_recheck_s: float = MASTERS_RECHECK_S,
        heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S,
        enable_msg_trace: bool = False,
        trace_topic: str | None = None,
        options: ConnectOptions | None = None,
        **connection: Unpack[ConnectKeywords],
    ) -> None:
        if not group:
            raise ValueError("a TransactionProducer needs its producer group")
        if check_poll_s <= 0 or masters_recheck_s <= 0:
            raise ValueError("check_poll_s and masters_recheck_s must be > 0")
        super().__init__(namesrv, brokers, group=group, heartbeat_interval_s=heartbeat_interval_s,
                         enable_msg_trace=enable_msg_trace, trace_topic=trace_topic, options=options, **connection)
        self.group: str = group
        self.checker = checker
        self.check_poll_s = check_poll_s
        self.masters_recheck_s = masters_recheck_s
        self.checks_answered = 0
        self._watched: set[str] = set()

    @property
    def client_id(self) -> str:
        assert self.heartbeats is not None
        return self.heartbeats.client_id

    @contextlib.asynccontextmanager
    async def _running(self) -> AsyncIterator[None]:
        """Producer's life (heartbeats), and within it the check watches."""
        async with super()._running(), block_nursery() as nursery:
            nursery.start_soon(self._watch_masters, nursery)
            try:
                yield
            finally:
                nursery.cancel_scope.cancel()

    async def send_in_transaction(
        self,
        topic: str,
        body: bytes | str,
        local_transaction: LocalTransaction,
        *,
        tags: str | None = None,
        keys: Iterable[str] = (),
        properties: Mapping[str, str] | None = None,
        queue_id: int | None = None,
    ) -> TransactionResult:
        """Store the half message, run `local_transaction(prepared)` (sync or async; it
        answers COMMIT, ROLLBACK or UNKNOWN), then END with its answer. A local transaction
        that raises is ended UNKNOWN (the check decides) and its exception is raised. A
        TransactionEnded (the check already ended it the other way) is raised."""
        prepared = await self.send_prepared(topic, body, self.group, tags=tags, keys=keys,
                                            properties=properties, queue_id=queue_id)
        try:
            outcome = await _call(local_transaction, prepared)
        except BaseException:  # (cancelled too) UNKNOWN, bounded: the check decides anyway
            with trio.CancelScope(shield=True), trio.move_on_after(self.send_timeout):
                await self.end_prepared(prepared, UNKNOWN)
            raise
        end, error = await self.end_prepared(prepared, outcome)
        return TransactionResult(prepared, outcome, end, error)

    async def end_prepared(self, prepared: SendResult, outcome: str, *, from_transaction_check: bool = False,
                           ) -> tuple[EndTransactionReply | None, TidemqError | None]:
        """END `prepared`'s transaction, on the master that stored it, else on its group's
        current master (module docstring): (reply, None), or (None, the last error) when no
        attempt was answered. Errors that say the END itself is wrong are raised."""
        request = EndTransaction(producer_group=self.group, tran_state_table_offset=prepared.queue_offset,
                                 commitlog_offset=prepared.commitlog_offset, outcome=outcome,
                                 from_transaction_check=from_transaction_check, transaction_id=prepared.transaction_id)
        address, error = prepared.address, None
        for attempt in range(self.retries + 1):
            if attempt:
                await trio.sleep(END_RETRY_S)
                address = await self._master_of(prepared.broker_name) or address
            try:
                reply: EndTransactionReply = await self.pool.call(address, request, timeout=self.send_timeout)
                if self.tracer is not None:
                    self.tracer.record(end_transaction_trace(self.group, prepared.msg_id, address,
                                                             prepared.transaction_id, outcome, from_transaction_check))
                return reply, None
            except (ServiceUnavailable, ConnectionLost, OutcomeUnknown) as e:
                log.info("END %s of the half message at %s/%d: %s", outcome, address, prepared.commitlog_offset, e)
                error = e
        log.warning("END %s of the half message at %s offset %d was not answered (%s); its transaction stays "
                    "open until a check resolves it", outcome, prepared.broker_name, prepared.commitlog_offset, error)
        return None, error

    async def _master_of(self, broker_name: str) -> str | None:
        try:
            infos = await self.cluster_info()
        except TidemqError as e:
            log.info("no cluster info to find the master of %s: %s", broker_name, e)
            return None
        return next((b.address for b in infos if b.broker_name == broker_name and b.is_master), None)

    # ---- checks --------------------------------------------------------------------------
    async def _watch_masters(self, nursery: trio.Nursery) -> None:
        """A watch on every master, started as masters appear; each ends when its master
        stops being one."""
        while True:
            try:
                masters = {b.address for b in await self.cluster_info() if b.is_master}
            except TidemqError as e:
                log.info("producer %s: no cluster info for its check watches: %s", self.client_id, e)
                masters = set()
            for address in sorted(masters - self._watched):
                self._watched.add(address)
                nursery.start_soon(self._watch, address)
            await trio.sleep(self.masters_recheck_s)

    async def _watch(self, address: str) -> None:
        request = TransactionCheckWatch(group=self.group, client_id=self.client_id,
                                        timeout_ms=int(self.check_poll_s * 1000))
        failures = 0
        try:
            while True:
                try:
                    reply: TransactionChecksReply = await self.pool.call(
                        address, request, timeout=self.check_poll_s + self.send_timeout)
                    failures = 0
                except TidemqError as e:
                    failures += 1
                    log.info("producer %s: check watch on %s: %s", self.client_id, address, e)
                    if failures >= 3:  # not a master any more, or gone: _watch_masters starts it again
                        return
                    await trio.sleep(END_RETRY_S * failures)
                    continue
                for raw in reply.checks:
                    await self._answer(TransactionCheck.of(raw, address))
        finally:
            self._watched.discard(address)

    async def _answer(self, check: TransactionCheck) -> None:
        """The checker's answer as an END to the master that asked; UNKNOWN writes nothing,
        so it is not sent."""
        try:
            outcome = await _call(self.checker, check)
        except Exception:
            log.exception("producer %s: checker failed on the half message at %s offset %d; it stays open",
                          self.client_id, check.address, check.commitlog_offset)
            return
        self.checks_answered += 1
        if outcome == UNKNOWN:
            return
        request = EndTransaction(producer_group=self.group, tran_state_table_offset=check.tran_state_table_offset,
                                 commitlog_offset=check.commitlog_offset, outcome=outcome,
                                 from_transaction_check=True, msg_id=check.msg_id,
                                 transaction_id=check.transaction_id)
        try:
            await self.pool.call(check.address, request, timeout=self.send_timeout)
            if self.tracer is not None and check.msg_id:
                self.tracer.record(end_transaction_trace(self.group, check.msg_id, check.address,
                                                         check.transaction_id, outcome, True, check.topic))
        except TidemqError as e:  # TransactionEnded included: it had ended another way meanwhile
            log.info("producer %s: END %s for a check of %s offset %d: %s", self.client_id, outcome,
                     check.address, check.commitlog_offset, e)
