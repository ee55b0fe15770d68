"""OrderlyConsumer: a consumer-group member that consumes each queue in queue order, one
member and one task at a time per queue (RocketMQ's MessageListenerOrderly and
ConsumeMessageOrderlyService).

    async def handle(msg: ReceivedMessage) -> None: ...   # or a plain function

    async with OrderlyConsumer("billing", "Orders", handle, namesrv="127.0.0.1:9876"):
        await trio.sleep_forever()

Queues are shared out as the push Consumer shares them (cluster/client/rebalance.py), but a
member consumes a queue only under a lease: a lock on the queue's master that lapses after
`LOCK_LIFE_MS` (60 s) unless renewed, renewed every `lock_interval_s` (20 s). The member
trusts a lease `CLIENT_LOCK_LIFE_S` (30 s) from the moment it asked for it, and checks
that before each handler call: a member cut off from the master (its lease cannot be
renewed) stops consuming that queue before the master would give it to anyone else. A
master that cannot be reached grants nothing, so a group whose master is down waits for
its promoted slave; a new master fences its empty lock table for 30 s, granting a queue
only to the member that says it held it (`renew`), so no queue has two consumers across
a failover (node/tables/consumers.py).

A handler that raises (or returns False) sees the same message again after
`suspend_s` (SUSPEND_CURRENT_QUEUE_A_MOMENT, 1 s), with `reconsume_times` + 1, and nothing
behind it in the queue is consumed meanwhile; after `max_reconsume_times` failed retries it
goes to `%DLQ%<group>` (`consumer_send_back` with delay level -1) and the queue moves on.
The retry topic is not used.

Delivery is at least once, in order: a queue that changes owner is read again from its
last committed offset, so the new owner may see a few messages again, in the same order.
Producers keep a key's messages in one queue with `sharding_key` (cluster/client/producer.py).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal, Unpack

import attrs
import trio

from wire.client import ConnectionLost, ServiceUnavailable, TidemqError
from wire.options import ConnectKeywords, ConnectOptions
from wire.protocol import (
    CLIENT_LOCK_LIFE_MS,
    LOCK_LIFE_MS,
    ConsumerLock,
    ConsumerSendBack,
    ConsumerUnlock,
    LockReply,
    SendBackReply,
)
from wire.protocol.trace import ConsumeReturn

from .base import CLIENT_OPTIONS, ROUTE_TTL_S, ReceivedMessage
from .consumer import PullConsumer
from .push_consumer import MAX_RECONSUME_TIMES, run_until_done
from .queue_member import ConsumerStats, Handler, QueueMember, QueueTask, call_handler, check_limits
from .rebalance import HEARTBEAT_INTERVAL_S, REBALANCE_INTERVAL_S, RebalanceService
from .routing import UNREACHABLE, MessageQueue

log = logging.getLogger("tidemq.client")

__all__ = ["LOCK_INTERVAL_S", "SUSPEND_S", "OrderlyConsumer", "consume_orderly"]

LOCK_INTERVAL_S = 20.0
"""RocketMQ's rocketmq.client.rebalance.lockInterval: leases are renewed this often."""
CLIENT_LOCK_LIFE_S = CLIENT_LOCK_LIFE_MS / 1000
"""How long a granted lease is trusted, from the ask (RocketMQ's client lockMaxLiveTime)."""
SUSPEND_S = 1.0
"""RocketMQ's suspendCurrentQueueTimeMillis: a failed message is retried this much later."""


class LeasedRebalance(RebalanceService):
    """RebalanceService whose locks are leases (module docstring): each granted queue's
    lease is remembered, a queue it already owns is renewed (`renew`), and a master that
    cannot be reached grants nothing."""

    def __init__(self, *args: Any, client_lock_life_s: float = CLIENT_LOCK_LIFE_S, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.client_lock_life_s = client_lock_life_s
        self.leases: dict[MessageQueue, float] = {}
        """queue → trio time until which this member trusts its lock."""

    def leased(self, queue: MessageQueue) -> bool:
        return trio.current_time() < self.leases.get(queue, -1.0)

    async def _lock_call(self, consumer: PullConsumer, queues: set[MessageQueue],
                         op: type[ConsumerLock | ConsumerUnlock]) -> set[MessageQueue]:
        granted: set[MessageQueue] = set()
        # one call per master and kind: queues whose leases still run are claimed (`renew`)
        batches: dict[tuple[str, bool], list[MessageQueue]] = {}
        for q in sorted(queues):
            batches.setdefault((q.broker_name, self.leased(q)), []).append(q)
        for (broker_name, renew), mine in sorted(batches.items()):
            asked = trio.current_time()  # the lease counts from the ask, so it ends before the master's
            try:
                master = await consumer.master_address(broker_name)
                if master is None:
                    raise ConnectionLost(f"no master of {broker_name} is known")
                if op is ConsumerUnlock:
                    for q in mine:
                        self.leases.pop(q, None)
                    await consumer.pool.call(master, ConsumerUnlock(
                        group=self.group, client_id=self.client_id, topic=consumer.topic,
                        queue_ids=[q.queue_id for q in mine]))
                    continue
                # a claim a fenced new master trusts: the old table gave us these queues and
                # their leases still run (whether or not we consume them right now)
                reply: LockReply = await consumer.pool.call(master, ConsumerLock(
                    group=self.group, client_id=self.client_id, topic=consumer.topic,
                    queue_ids=[q.queue_id for q in mine], life_ms=LOCK_LIFE_MS, renew=renew))
            except (*UNREACHABLE, ServiceUnavailable) as e:
                log.info("group %s: %s on %s not possible (%s); no lease", self.group, op.OP, broker_name, e)
                continue
            except TidemqError as e:
                log.warning("group %s: %s on %s failed: %s", self.group, op.OP, broker_name, e)
                continue
            for q in mine:
                if q.queue_id in reply.locked:
                    granted.add(q)
                    self.leases[q] = asked + self.client_lock_life_s
                else:
                    self.leases.pop(q, None)
        return granted

    async def renew(self) -> None:
        """Renew every owned queue's lease; let go of those refused (taken again once free)."""
        async with self._lock:
            if self._closed:
                return
            for consumer in self.consumers:
                current = self.assigned[consumer.topic]
                kept = await self._lock_call(consumer, set(current), ConsumerLock)
                for queue in sorted(current - kept):
                    await self.release(consumer, queue)
                    current.discard(queue)
                    self.pending.setdefault(consumer.topic, set()).add(queue)
        if any(self.pending.values()):
            self.trigger()


class OrderlyConsumer(QueueMember):
    """See the module docstring. `brokers` instead of `namesrv` works too (no name server)."""

    rebalance: LeasedRebalance

    def __init__(
        self,
        group: str,
        topic: str,
        handler: Handler,
        *,
        namesrv: str | Sequence[str] | None = None,
        brokers: Sequence[str] | str | None = None,
        tag_filter: str | None = None,
        start: Literal["first", "last"] = "first",
        max_reconsume_times: int = MAX_RECONSUME_TIMES,
        suspend_s: float = SUSPEND_S,
        lock_interval_s: float = LOCK_INTERVAL_S,
        heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S,
        rebalance_interval_s: float = REBALANCE_INTERVAL_S,
        batch: int = 32,
        poll_ms: int = 1000,
        client_id: str | None = None,
        route_ttl_s: float = ROUTE_TTL_S,
        max_messages: int | None = None,
        options: ConnectOptions | None = None,
        **connection: Unpack[ConnectKeywords],
    ) -> None:
        check_limits(max_messages, max_reconsume_times)
        if not 0 < lock_interval_s < CLIENT_LOCK_LIFE_S:
            raise ValueError(f"lock_interval_s must be > 0 and < {CLIENT_LOCK_LIFE_S} (the lease), got "
                             f"{lock_interval_s}")
        super().__init__(group, topic, handler, max_messages)
        self.max_reconsume_times = max_reconsume_times
        self.suspend_s = suspend_s
        self.retry_pause_s = suspend_s
        self.lock_interval_s = lock_interval_s
        self.batch = batch
        self.poll_ms = poll_ms
        self.options = ConnectOptions.of(options, connection, CLIENT_OPTIONS)
        self._main = PullConsumer(namesrv, brokers, group=group, topic=topic, tag_filter=tag_filter, start=start,
                                  route_ttl_s=route_ttl_s, options=self.options)
        self.rebalance = LeasedRebalance(
            group, [self._main], acquire=self._acquire, release=self._release, client_id=client_id,
            heartbeat_interval_s=heartbeat_interval_s, rebalance_interval_s=rebalance_interval_s,
        )

    @contextlib.asynccontextmanager
    async def _running(self) -> AsyncIterator[None]:
        """The topic's client, then the queue tasks with the lease renewal beside them; on
        the way out every queue is committed and unlocked."""
        async with self._main, self._queue_tasks() as nursery:
            nursery.start_soon(self._renew_loop)
            yield

    async def _renew_loop(self) -> None:
        while True:
            await trio.sleep(self.lock_interval_s)
            await self.rebalance.renew()

    # ---- consuming (QueueMember runs the queue tasks) -------------------------------------

    def _may_pull(self, task: QueueTask) -> bool:
        return self.rebalance.leased(task.queue)  # renewal failing: wait for it (or the release)

    def _may_consume(self, task: QueueTask) -> bool:
        return not task.stopping and self.rebalance.leased(task.queue)

    async def _consume(self, task: QueueTask, msg: ReceivedMessage) -> bool:
        """Handle one message until it is consumed or dead-lettered, retrying in place;
        False when the queue must stop first (released, or its lease not renewed)."""
        if self.max_messages is not None and self._taken >= self.max_messages:
            task.stopping = True  # over the limit: left unconsumed (and uncommitted)
            return False
        if not self._may_consume(task):
            return False
        self._taken += 1
        attempts = msg.reconsume_times
        while True:
            if not self._may_consume(task):
                self._taken -= 1  # it comes again
                return False
            self.last_message_at = trio.current_time()
            if await call_handler(self.handler, attrs.evolve(msg, reconsume_times=attempts)) is ConsumeReturn.SUCCESS:
                self._consumed()
                return True
            self.stats.failed += 1
            if attempts - msg.reconsume_times >= self.max_reconsume_times:
                return await self._dead_letter(task, msg)
            attempts += 1
            self.stats.retried += 1
            await self._pause(task, self.suspend_s)  # SUSPEND_CURRENT_QUEUE_A_MOMENT

    async def _dead_letter(self, task: QueueTask, msg: ReceivedMessage) -> bool:
        """Move a message that failed every retry to the DLQ; until its master takes it the
        queue waits (False when the queue must stop meanwhile)."""
        assert msg.broker_name is not None
        while True:
            try:
                master = await task.consumer.master_address(msg.broker_name)
                if master is None:
                    raise ConnectionLost(f"no master of {msg.broker_name} is known")
                reply: SendBackReply = await task.consumer.pool.call(master, ConsumerSendBack(
                    group=self.group, commitlog_offset=msg.commitlog_offset, delay_level=-1,
                    max_reconsume_times=self.max_reconsume_times,
                    origin_msg_id=msg.properties.get("UNIQ_KEY") or msg.msg_id))
            except TidemqError as e:
                log.warning("moving %s to the DLQ failed (%s); trying again", msg.msg_id, e)
                await self._pause(task, self.suspend_s)
                if not self._may_consume(task):
                    return False
                continue
            self.stats.dead += 1
            log.warning("%s gave up after %d retries: moved to %s", msg.msg_id, self.max_reconsume_times, reply.topic)
            return True


async def consume_orderly(
    handler: Handler,
    *,
    group: str,
    topic: str,
    max_messages: int | None = None,
    idle_timeout_ms: int | None = 2000,
    stop: trio.Event | None = None,
    **options: Any,
) -> ConsumerStats:
    """Run an OrderlyConsumer until `max_messages` were consumed, no message came for
    `idle_timeout_ms` (never, when None) or `stop` is set; what `tidemq consume --orderly`
    runs. It leaves cleanly: commits, unlocks its queues and leaves its group."""
    async with OrderlyConsumer(group, topic, handler, max_messages=max_messages, **options) as consumer:
        await run_until_done(consumer, idle_timeout_ms, stop)
    return consumer.stats
