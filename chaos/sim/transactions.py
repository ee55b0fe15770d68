"""The simulation's transactional producer (issue 43 item 5) and its promises.

One `cluster.client.TransactionProducer` on the client host sends a few transactions over the
first PACE of the run (TX_PER_GROUP per group, on TX_TOPIC, queues of every group through the
name server's routes). Each has an intent drawn from the seed:

- COMMIT / ROLLBACK: the local transaction answers it at once;
- UNKNOWN: the END says UNKNOWN; the checker answers UNKNOWN to the first check or not, then
  the outcome drawn for it;
- CRASH: the producer drops the transaction between the prepared send and the END (no END
  at all); the checker answers later;
- SLOW: the local transaction commits but stalls past transactionTimeOut before its END, so
  a check (answered COMMIT) usually ends it first and the producer's own COMMIT is a
  duplicate (RocketMQ #8158's race).

The checker answers from what the producer knows: a half message of a transaction whose
prepared send returned is answered by its intent; another half message of the same key (an
attempt of a retried prepared send, or one whose send failed) is rolled back; one whose
send has not returned yet is UNKNOWN. Every check is recorded with its time.

The promises (`judge`, on each group's final master before the nodes stop):
- a committed transaction is stored on the real topic exactly once, unless its half
  message was lost within the mode's promise (an ASYNC master's unreplicated tail, a
  SYNC_MASTER's half not acknowledged PUT_OK); a COMMIT a SYNC_MASTER acknowledged PUT_OK
  is kept where it was acknowledged (not lost and committed again by a check);
- a rolled-back one (or one whose prepared send failed) is never stored there;
- no transaction of the group is left open or discarded: every UNKNOWN and crashed one was
  resolved by a check during the run and its drain, each check counted at most
  transactionCheckMax;
- no check round picks an ended transaction: a check copy (a half record with
  TRANSACTION_CHECK_TIMES > 0) in the final log after its transaction's op record is a
  broken promise (docs/transactions.md, "The check service").
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

import attrs
import trio

from cluster.client.transaction_producer import (
    COMMIT,
    ROLLBACK,
    UNKNOWN,
    TransactionCheck,
    TransactionProducer,
)
from store.transaction import HALF_TOPIC, PROPERTY_PRODUCER_GROUP, Outcome, check_times, half_origin
from wire.client import TidemqError, connect
from wire.protocol import Status, TopicCreate

from .cluster import CLIENT_HOST, NAMESRV_ADDRESS, SimCluster, SimGroup
from .events import EventLog
from .network import SimNetwork
from .schedule import Schedule
from .verdict import SHOWN, Observed

__all__ = ["CHECK_INTERVAL_MS", "CHECK_TIMEOUT_MS", "INTENTS", "TX_GROUP", "TX_PER_GROUP", "TX_TOPIC",
           "SimTransactions"]

TX_TOPIC = "SimTxTopic"
TX_QUEUES = 2
TX_GROUP = "sim-tx-producer"
TX_PER_GROUP = 12
CHECK_INTERVAL_MS = 1000  # the nodes' transactionCheckInterval in the simulation (simulated time is cheap)
CHECK_TIMEOUT_MS = 2000  # and transactionTimeOut
SLOW_S = 3.5  # a SLOW local transaction's stall: past transactionTimeOut plus a round
PACE = 0.6  # the transactions start within this share of the schedule's span: their checks are over with the load
DRAIN_S = 60.0  # after the load: how long the run waits for the checks to resolve what is open
INTENTS = ("COMMIT", "COMMIT", "COMMIT", "ROLLBACK", "ROLLBACK", "UNKNOWN", "UNKNOWN", "CRASH", "CRASH", "SLOW")


@attrs.define
class Tx:
    """One transaction: what the seed drew, and what the producer was told."""

    key: str
    intent: str  # one of INTENTS
    decided: str  # the outcome the application means: COMMIT or ROLLBACK
    unknown_checks: int  # UNKNOWN: how many checks the checker answers UNKNOWN first
    group: str | None = None  # the broker group its prepared send landed on
    origin: int | None = None  # its half message's CommitLog offset there
    prepared_status: str | None = None
    preparing: bool = False
    failed: bool = False  # the prepared send raised: every half of it is rolled back
    end_status: str | None = None  # the producer's END reply (or its error)
    acked_commit: int | None = None  # the committed record's CommitLog offset, when an END COMMIT wrote it PUT_OK
    checks: int = 0


@attrs.frozen
class Check:
    at: float
    key: str
    group: str
    origin: int
    copy_offset: int  # the check copy's CommitLog offset (what the check names)
    check_times: int
    answer: str


class SimTransactions:
    """The transactional producer of one run, its checker, and its judge."""

    def __init__(self, cluster: SimCluster, network: SimNetwork, schedule: Schedule, log: EventLog) -> None:
        self.cluster = cluster
        self.network = network
        self.schedule = schedule
        self.log = log
        rng = random.Random(f"tidemq-sim-tx-{schedule.seed}")  # its own stream: the rest of the draw stays
        count = TX_PER_GROUP * len(cluster.groups)
        self.txs = [Tx(f"sim-tx-{i}", intent := rng.choice(INTENTS),
                       COMMIT if intent in ("COMMIT", "SLOW") else ROLLBACK if intent == "ROLLBACK"
                       else rng.choice((COMMIT, ROLLBACK)), rng.randint(0, 1) if intent == "UNKNOWN" else 0)
                    for i in range(count)]
        self.by_key = {t.key: t for t in self.txs}
        self.checks: list[Check] = []
        self.group_of = {n.address: n.group for n in cluster.nodes}
        self.done = trio.Event()  # the producer's sends are over

    async def create_topic(self) -> None:
        for group in self.cluster.groups:
            async with connect(group.master.address, net=self.network.host(CLIENT_HOST)) as conn:
                await conn.request(TopicCreate(topic=TX_TOPIC, read_queue_nums=TX_QUEUES, write_queue_nums=TX_QUEUES))

    async def run(self, stop: trio.Event) -> None:
        """Start each transaction in its own task, evenly over PACE of the schedule's span (a
        stalled or retried one delays no other, and the run ends when it did without them),
        then answer checks until `stop`."""
        interval = PACE * self.schedule.span / len(self.txs)
        began = trio.current_time()
        async with TransactionProducer(NAMESRV_ADDRESS, group=TX_GROUP, checker=self._check,
                                       request_timeout=3.0, connect_timeout=2.0, check_poll_s=5.0,
                                       masters_recheck_s=5.0, net=self.network.host(CLIENT_HOST)) as producer:
            async with trio.open_nursery() as nursery:  # each on its own time: a stalled one delays no other
                for i, tx in enumerate(self.txs):
                    await trio.sleep_until(began + i * interval)  # poll: simulated time (the pacing of the schedule)
                    nursery.start_soon(self._one, producer, tx)
            self.done.set()
            await stop.wait()

    async def _one(self, producer: TransactionProducer, tx: Tx) -> None:
        body = tx.key.encode().ljust(100, b".")
        tx.preparing = True
        self.log.add(f"tx {tx.key} {tx.intent} begins")  # its half messages are stored after this
        try:
            if tx.intent == "CRASH":  # the producer drops it between the prepared send and the END
                prepared = await producer.send_prepared(TX_TOPIC, body, TX_GROUP, keys=[tx.key])
                self._prepared(tx, prepared.broker_name, prepared.commitlog_offset, prepared.status.value)
                self.log.add(f"tx {tx.key} {tx.intent}: prepared on {tx.group} at {tx.origin}; dropped")
                return

            async def local(prepared: Any) -> str:
                self._prepared(tx, prepared.broker_name, prepared.commitlog_offset, prepared.status.value)
                if tx.intent == "SLOW":
                    await trio.sleep(SLOW_S)  # virtual: the stall a check races (simulated time)
                return tx.decided if tx.intent != "UNKNOWN" else UNKNOWN

            result = await producer.send_in_transaction(TX_TOPIC, body, local, keys=[tx.key])
            if result.end is not None:
                tx.end_status = f"{result.end.status.value}{' duplicate' if result.end.duplicate else ''}"
                if result.end.status is Status.PUT_OK and not result.end.duplicate:
                    tx.acked_commit = result.end.commitlog_offset
            else:
                tx.end_status = f"unanswered {getattr(result.end_error, 'status', result.end_error)}"
        except TidemqError as e:
            if tx.origin is None:
                tx.failed = True
            tx.end_status = f"error {e.status}"
        finally:
            tx.preparing = False
        self.log.add(f"tx {tx.key} {tx.intent}: prepared on {tx.group} at {tx.origin} "
                     f"({tx.prepared_status}); end {tx.end_status}")

    def _prepared(self, tx: Tx, group: str, origin: int, status: str) -> None:
        tx.group, tx.origin, tx.prepared_status = group, origin, status

    def _check(self, check: TransactionCheck) -> str:
        """The application's checker: what it knows of the transaction (module docstring)."""
        key = check.body.rstrip(b".").decode()
        tx = self.by_key.get(key)
        group = self.group_of.get(check.address, "?")
        if tx is None:
            answer = ROLLBACK
        elif tx.origin is None or (tx.group, tx.origin) != (group, check.origin_offset):
            answer = UNKNOWN if tx.preparing and tx.origin is None else ROLLBACK  # another attempt's half
        else:
            tx.checks += 1
            answer = UNKNOWN if tx.intent == "UNKNOWN" and tx.checks <= tx.unknown_checks else tx.decided
        self.checks.append(Check(trio.current_time(), key, group, check.origin_offset, check.commitlog_offset,
                                 check.check_times, answer))
        self.log.add(f"tx check {key} #{check.check_times} from {group} of {check.origin_offset} at "
                     f"{check.commitlog_offset}: {answer}")
        return answer

    async def drain(self) -> None:
        """Wait (bounded) until the sends are over and no master holds an open transaction of the group."""
        def settled() -> bool:
            return self.done.is_set() and not any(self._open(g) for g in self.cluster.groups)

        with trio.move_on_after(DRAIN_S):
            while not settled():
                await trio.sleep(0.2)  # poll: simulated time (the nodes' state)

    def _open(self, group: SimGroup) -> list[int]:
        services = group.master.broker.services if group.master.broker is not None else None
        if services is None:
            return [-1]  # not serving yet
        table = services.transactions
        table.ensure_loaded(services.store)
        return [o for o, h in table.open.items() if h.producer_group == TX_GROUP]

    # ---------------------------------------------------------------- the promises

    def judge(self, observed: dict[str, Observed], *, replication: str, flush: str = "SYNC_FLUSH") -> list[str]:
        """The broken promises (module docstring), read off each group's final master; call
        it before the nodes stop. `flush`: with ASYNC_FLUSH a half message in a power loss's
        window is the unflushed window's loss, for a SYNC_MASTER when a cut reported dropping
        it or the whole group lost power (verdict.py)."""
        found: dict[str, list[str]] = {}

        def finding(label: str, item: str) -> None:
            found.setdefault(label, []).append(item)

        stored: dict[str, list[tuple[str, int]]] = {}  # key → (group, CommitLog offset) of each committed copy
        serving = [(g, g.master.broker.services) for g in self.cluster.groups
                   if g.master.broker is not None and g.master.broker.services is not None]
        for group in self.cluster.groups:
            if group not in [g for g, _s in serving]:
                finding("group(s) whose master was not serving at the end", group.name)
        for group, services in serving:
            for q in range(TX_QUEUES):
                for msg in _records(services.store, q):
                    stored.setdefault(msg.body.rstrip(b".").decode(), []).append((group.name, msg.commitlog_offset))
        for group, services in serving:
            store, table, cfg = services.store, services.transactions, services.cfg
            table.ensure_loaded(store)
            for origin, half in sorted(table.open.items()):
                if half.producer_group == TX_GROUP:
                    finding("transaction(s) still open at the end (no check resolved them)",
                            f"{group.name}@{origin} ({half.check_times} checks)")
            for origin, gone in sorted(table.discarded.items()):
                if gone.half.producer_group == TX_GROUP:
                    finding("transaction(s) discarded after transactionCheckMax checks", f"{group.name}@{origin}")
            for c in self.checks:
                if c.group == group.name and c.check_times > cfg.transaction_check_max:
                    finding("check(s) past transactionCheckMax", f"{c.key} #{c.check_times}")
            for copy in _records(store, 0, HALF_TOPIC):  # every check copy a round wrote, in log order
                origin = half_origin(copy)
                ended = table.ended.get(origin)
                if (check_times(copy) > 0 and ended is not None and ended.op_offset is not None
                        and copy.commitlog_offset > ended.op_offset
                        and copy.properties.get(PROPERTY_PRODUCER_GROUP) == TX_GROUP):
                    finding("check(s) of a transaction already ended (a check copy after its op record)",
                            f"{group.name}@{origin}: copy {copy.commitlog_offset} after op {ended.op_offset}")
            for tx in self.txs:
                if tx.group != group.name or tx.origin is None or tx.decided != COMMIT:
                    continue
                if stored.get(tx.key):
                    continue
                record = store.look_message_by_offset(tx.origin)
                held = (record is not None and record.topic == HALF_TOPIC
                        and record.body.rstrip(b".") == tx.key.encode())
                ended = table.ended.get(tx.origin) if held else None
                truncated = any(lo <= tx.origin < hi for lo, hi in observed[group.name].truncated_ranges)
                # its half message lay in a power loss's window: ASYNC_FLUSH had not made it durable
                unflushed = flush == "ASYNC_FLUSH" and any(
                    lo <= tx.origin < hi for _n, lo, hi in observed[group.name].power_windows)
                sync = replication == "SYNC_MASTER"
                acked_put_ok = (tx.end_status or "").startswith(Status.PUT_OK.value)
                if held and ended is not None and ended.outcome is Outcome.ROLLBACK:
                    finding("committed transaction(s) rolled back", tx.key)
                elif held:
                    finding("committed transaction(s) not delivered", f"{tx.key} ({tx.end_status})")
                elif sync and (tx.prepared_status == Status.PUT_OK.value or acked_put_ok) and not (
                        unflushed and (truncated or observed[group.name].group_power_losses)):
                    finding("committed transaction(s) a SYNC_MASTER lost", f"{tx.key} ({tx.end_status})")
                elif not truncated and not unflushed:
                    finding("committed transaction(s) whose half message vanished", tx.key)
        for key, copies in sorted(stored.items()):
            mine = self.by_key.get(key)
            if mine is None or mine.decided != COMMIT or mine.failed:
                finding("rolled-back transaction(s) delivered", f"{key} {copies}")
            elif len(copies) > 1:
                finding("committed transaction(s) stored more than once", f"{key} {copies}")
            elif (replication == "SYNC_MASTER" and mine.acked_commit is not None
                  and copies[0] != (mine.group, mine.acked_commit)
                  and not (mine.group in observed
                           and _window_lost(mine.acked_commit, observed[mine.group], flush))):
                finding("COMMIT(s) a SYNC_MASTER acknowledged PUT_OK not kept where acknowledged",
                        f"{key} at {mine.acked_commit}, stored {copies}")
        return [f"{len(items)} {label}: {items[:SHOWN]}" for label, items in found.items()]

    def summary(self) -> str:
        ended = sum(1 for t in self.txs if t.end_status is not None)
        return (f"transactions {len(self.txs)} ({ended} with an END answer or error), "
                f"checks {len(self.checks)}")


def _records(store: Any, queue_id: int, topic: str = TX_TOPIC) -> Iterable[Any]:
    """Every record of the topic's queue on this store, in queue order."""
    offset = store.get_min_offset_in_queue(topic, queue_id)
    end = store.get_max_offset_in_queue(topic, queue_id)
    while offset < end:
        got = store.get_message("sim-tx-judge", topic, queue_id, offset, 32)
        if not got.messages:
            return
        yield from got.messages
        offset = got.next_begin_offset


def _window_lost(offset: int, observed: Observed, flush: str) -> bool:
    """An acknowledged record at `offset` that ASYNC_FLUSH left in a power loss's window and
    that a cut reported dropping (or a power loss of the whole group took): lost within the
    mode's promise, as a SYNC_MASTER's PUT_OK there is (verdict._power_lost). A COMMIT lost
    so is committed again by a check, at another offset (seed 80 with --storage)."""
    unflushed = flush == "ASYNC_FLUSH" and any(low <= offset < high for _n, low, high in observed.power_windows)
    truncated = any(low <= offset < high for low, high in observed.truncated_ranges)
    return unflushed and (truncated or bool(observed.group_power_losses))
