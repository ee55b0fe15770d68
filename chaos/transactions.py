"""The transactional side of the `tx-kill-master` scenario (issue 43): a TransactionProducer
whose transactions are decided by key, a consumer of their real topic, and the judge that
holds what was delivered and what the serving master's half and op topics hold against
what the producer decided.

Decided by key (`<run>-tx<n>`, the body is the key): n % 3 == 0 COMMIT, 1 ROLLBACK, 2
UNKNOWN; the checker answers an UNKNOWN one COMMIT when n // 3 is even, else ROLLBACK, so
the judge knows every transaction's one right outcome without asking the cluster. The
checker answers as an application would: a transaction whose local transaction is still
running is UNKNOWN (ask again), one whose prepared send failed never ran, so ROLLBACK (an
attempt whose outcome was unknown may have stored a half message anyway).

"Held" transactions stop in their local transaction until the scenario releases them: the
scenario kills the master while they are between their prepared send and their END,
deterministically, and releases them after the kill. chaos/transaction_judge.py judges.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import attrs
import trio

from cluster.client import SendResult, TransactionCheck, TransactionProducer
from cluster.client.consumer import PullConsumer
from cluster.client.transaction_producer import COMMIT, ROLLBACK, UNKNOWN
from wire.client import TidemqError, connect
from wire.protocol import TopicCreate

from .workload import consume, node_status

TX_TOPIC = "ChaosTxTopic"
TX_PRODUCER_GROUP = "chaos-tx-producer"
TX_CONSUMER_GROUP = "chaos-tx-consumer"
CHECK_INTERVAL_MS = 300
CHECK_TIMEOUT_MS = 1000
TX_NODE_CONFIG: dict[str, Any] = {"transactionCheckInterval": CHECK_INTERVAL_MS,
                                  "transactionTimeOut": CHECK_TIMEOUT_MS}
"""The check service's keys in the scenario: a round every 0.3 s, a half message due 1 s
after its newest half record."""
CHECK_SLACK_S = 5.0
"""Beyond transactionTimeOut + transactionCheckInterval, what a resolving check may take:
the producer's watch finding the promoted master (name server, masters_recheck_s) and
a busy 2-core machine."""


def decision_of(n: int) -> str:
    """What transaction n's local transaction answers."""
    return (COMMIT, ROLLBACK, UNKNOWN)[n % 3]


def check_answer_of(n: int) -> str:
    """What the checker answers for transaction n when its local transaction said UNKNOWN."""
    return COMMIT if (n // 3) % 2 == 0 else ROLLBACK


@attrs.define
class CheckSeen:
    """One check as the producer's checker saw it."""

    at: float
    check_times: int
    copy_offset: int  # the check copy's CommitLog offset (what the END names)
    origin_offset: int  # the transaction's first half record
    answer: str


@attrs.define
class Tx:
    """One transaction as the producer knows it."""

    key: str
    n: int
    held: bool = False
    end_retried: bool = True  # its producer sends a failed END again to the group's new master
    prepared: SendResult | None = None
    prepared_at: float | None = None
    prepare_error: str | None = None
    decided_at: float | None = None  # the local transaction returned its decision
    end_outcome: str | None = None  # the producer's own END's reply
    end_duplicate: bool = False
    end_at: float | None = None
    end_error: str | None = None
    checks: list[CheckSeen] = attrs.field(factory=list)

    @property
    def decision(self) -> str:
        return decision_of(self.n)

    @property
    def expected(self) -> str:
        """The one right outcome: COMMIT (delivered at least once) or ROLLBACK (never)."""
        if self.prepared is None:
            return ROLLBACK
        return check_answer_of(self.n) if self.decision == UNKNOWN else self.decision

    def answer(self) -> str:
        """The checker's answer now (module docstring)."""
        if self.prepared is None:
            return ROLLBACK if self.prepare_error is not None else UNKNOWN
        if self.decided_at is None:
            return UNKNOWN
        return self.expected


class TransactionLoad:
    """`workers` loops of transactions at `rate` per second each, plus held ones on demand,
    through the name server; a consumer of TX_TOPIC records what is delivered."""

    def __init__(self, namesrv: str, run_id: str, *, workers: int = 2, rate: float = 8.0) -> None:
        self.namesrv = namesrv
        self.run_id = run_id
        self.workers = workers
        self.rate = rate
        self.txs: dict[str, Tx] = {}
        self.consumed: dict[str, int] = {}
        self.in_local: set[str] = set()  # held transactions waiting in their local transaction
        self.in_flight = 0
        self._next = 0
        self._release = trio.Event()
        self._stop_sending = trio.Event()
        self._done = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._producers: dict[bool, TransactionProducer] = {}  # by whether it retries an END

    # ---- the run

    async def create_topic(self, address: str, queues: int = 2) -> None:
        async with connect(address, connect_timeout=5.0, request_timeout=10.0) as conn:
            await conn.request(TopicCreate(topic=TX_TOPIC, read_queue_nums=queues, write_queue_nums=queues))

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Until `close()`: the producers (answering checks to the end), the workers until
        `stop_sending()`, the consumer. Two producers of the group: the workers' one retries
        an END on the group's new master; the other never retries (`retries` 0), so an END
        of its held transactions sent to the killed master is lost and only a check can
        resolve them."""
        def producer() -> TransactionProducer:
            return TransactionProducer(self.namesrv, group=TX_PRODUCER_GROUP, checker=self._checker,
                                       check_poll_s=2.0, masters_recheck_s=0.3)

        async with producer() as retrying, producer() as no_retry, trio.open_nursery() as nursery:
            no_retry.retries = 0
            self._nursery, self._producers = nursery, {True: retrying, False: no_retry}
            nursery.start_soon(self._consume)
            for _ in range(self.workers):
                nursery.start_soon(self._worker, retrying)
            task_status.started()
            await self._done.wait()
            nursery.cancel_scope.cancel()

    def hold(self, decisions: Iterable[str] = (COMMIT, ROLLBACK, UNKNOWN), *, end_retried: bool = True) -> list[Tx]:
        """Start one held transaction per decision, on the producer that retries ENDs or on
        the one that does not; `in_local` names them once prepared."""
        assert self._nursery is not None and self._producers, "run() first"
        held = []
        for decision in decisions:
            tx = self._new(decision)
            tx.held, tx.end_retried = True, end_retried
            held.append(tx)
            self._nursery.start_soon(self._transaction, self._producers[end_retried], tx)
        return held

    def release(self) -> None:
        self._release.set()

    def stop_sending(self) -> None:
        self._stop_sending.set()

    def close(self) -> None:
        self._release.set()
        self._stop_sending.set()
        self._done.set()

    @property
    def ended(self) -> int:
        return sum(1 for tx in self.txs.values() if tx.end_at is not None)

    def _new(self, decision: str | None = None) -> Tx:
        while decision is not None and decision_of(self._next) != decision:
            self._next += 1
        n, self._next = self._next, self._next + 1
        tx = Tx(key=f"{self.run_id}-tx{n}", n=n)
        self.txs[tx.key] = tx
        return tx

    async def _worker(self, producer: TransactionProducer) -> None:
        interval = 1.0 / self.rate
        while not self._stop_sending.is_set():
            await self._transaction(producer, self._new())
            with trio.move_on_after(interval):
                await self._stop_sending.wait()  # pace; wakes at once on stop

    async def _transaction(self, producer: TransactionProducer, tx: Tx) -> None:
        async def local_transaction(prepared: SendResult) -> str:
            tx.prepared, tx.prepared_at = prepared, time.time()
            if tx.held:
                self.in_local.add(tx.key)
                await self._release.wait()  # the scenario kills the master, then releases
                self.in_local.discard(tx.key)
            tx.decided_at = time.time()
            return tx.decision

        self.in_flight += 1
        try:
            result = await producer.send_in_transaction(TX_TOPIC, tx.key.encode(), local_transaction, keys=[tx.key])
        except TidemqError as e:
            if tx.prepared is None:
                tx.prepare_error = f"{e.status}: {str(e)[:160]}"
            else:
                tx.end_error, tx.end_at = f"{e.status}: {str(e)[:160]}", time.time()
        else:
            tx.end_at = time.time()
            if result.end is not None:
                tx.end_outcome, tx.end_duplicate = result.end.outcome, result.end.duplicate
            else:
                tx.end_error = str(result.end_error)[:200]
        finally:
            self.in_flight -= 1

    def _checker(self, check: TransactionCheck) -> str:
        tx = self.txs.get(check.body.decode(errors="replace"))
        answer = tx.answer() if tx is not None else ROLLBACK  # not ours: no transaction ran
        if tx is not None:
            tx.checks.append(CheckSeen(time.time(), check.check_times, check.commitlog_offset, check.origin_offset,
                                       answer))
        return answer

    async def _consume(self) -> None:
        await consume(self._done, self.consumed, lambda: PullConsumer(
            self.namesrv, group=TX_CONSUMER_GROUP, topic=TX_TOPIC, request_timeout=3.0, master_retry_s=0.5),
            poll_ms=300)

    # ---- waiting and judging

    def undelivered(self, lost: set[str]) -> list[Tx]:
        """Transactions that must end COMMIT, were prepared, are not delivered yet and whose
        half message is not among `lost` (msgIds a failover dropped)."""
        return [tx for tx in self.txs.values() if tx.expected == COMMIT and tx.prepared is not None
                and tx.key not in self.consumed and tx.prepared.msg_id not in lost]

    async def settled(self, address: str, lost: set[str]) -> bool:
        """No half message open on the master at `address` and every COMMIT delivered."""
        status = await node_status(address)
        if status is None or not status.transactions:
            return False
        return status.transactions.get("open") == 0 and not self.undelivered(lost)
