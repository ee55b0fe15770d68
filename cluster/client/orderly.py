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
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Literal, Unpack

import attrs
import trio

from wire.client import ConnectionLost, ServiceUnavailable, TidemqError, block_nursery
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

from .base import CLIENT_OPTIONS, ROUTE_TTL_S, ReceivedMessage, _LifeCycle
from .consumer import PullConsumer
from .push_consumer import MAX_RECONSUME_TIMES, ConsumerStats, run_until_done
from .rebalance import HEARTBEAT_INTERVAL_S, REBALANCE_INTERVAL_S, RebalanceService
from .routing import UNREACHABLE, MessageQueue

log = logging.getLogger("tidemq.client")

__all__ = ["LOCK_INTERVAL_S", "SUSPEND_S", "OrderlyConsumer", "consume_orderly"]

Handler = Callable[[ReceivedMessage], Awaitable[Any] | Any]
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


@attrs.define(eq=False)
class _QueueTask:
    consumer: PullConsumer
    queue: MessageQueue
    stopping: bool = False
    scope: trio.CancelScope | None = None
    committed: int | None = None
    done: trio.Event = attrs.field(factory=trio.Event)


class OrderlyConsumer(_LifeCycle):
    """See the module docstring. `brokers` instead of `namesrv` works too (no name server)."""

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
        if max_messages is not None and max_messages < 1:
            raise ValueError(f"max_messages must be >= 1, got {max_messages}")
        if max_reconsume_times < 0:
            raise ValueError(f"max_reconsume_times must be >= 0, got {max_reconsume_times}")
        if not 0 < lock_interval_s < CLIENT_LOCK_LIFE_S:
            raise ValueError(f"lock_interval_s must be > 0 and < {CLIENT_LOCK_LIFE_S} (the lease), got "
                             f"{lock_interval_s}")
        self.group = group
        self.topic = topic
        self.handler = handler
        self.max_reconsume_times = max_reconsume_times
        self.suspend_s = suspend_s
        self.lock_interval_s = lock_interval_s
        self.batch = batch
        self.poll_ms = poll_ms
        self.stats = ConsumerStats()
        self.max_messages = max_messages
        self.finished = trio.Event()
        """Set once `max_messages` messages were consumed (never without a limit)."""
        self.last_message_at = 0.0
        self._taken = 0
        self.options = ConnectOptions.of(options, connection, CLIENT_OPTIONS)
        self._main = PullConsumer(namesrv, brokers, group=group, topic=topic, tag_filter=tag_filter, start=start,
                                  route_ttl_s=route_ttl_s, options=self.options)
        self.rebalance = LeasedRebalance(
            group, [self._main], acquire=self._acquire, release=self._release, client_id=client_id,
            heartbeat_interval_s=heartbeat_interval_s, rebalance_interval_s=rebalance_interval_s,
        )
        self._tasks: dict[MessageQueue, _QueueTask] = {}
        self._nursery: trio.Nursery | None = None

    @property
    def client_id(self) -> str:
        return self.rebalance.client_id

    @property
    def owned(self) -> set[MessageQueue]:
        """The queues this member holds (each under a lease it may be renewing)."""
        return self.rebalance.owned

    async def check_topic(self) -> None:
        """Raise NotFound (no route) or ConnectionLost (no name server) for the topic."""
        await self._main.route(self.topic)

    @contextlib.asynccontextmanager
    async def _running(self) -> AsyncIterator[None]:
        """The topic's client, then the queue tasks' nursery with the rebalance service and
        the lease renewal; on the way out every queue is committed and unlocked."""
        async with self._main, block_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self.rebalance.run)
            nursery.start_soon(self._renew_loop)
            try:
                yield
            finally:
                with trio.CancelScope(shield=True):
                    await self.rebalance.close()
                nursery.cancel_scope.cancel()
                self._nursery = None

    async def _renew_loop(self) -> None:
        while True:
            await trio.sleep(self.lock_interval_s)
            await self.rebalance.renew()

    async def _acquire(self, consumer: PullConsumer, queue: MessageQueue) -> None:
        consumer.forget(queue)  # start from the offset the previous owner committed
        task = _QueueTask(consumer, queue)
        self._tasks[queue] = task
        assert self._nursery is not None
        self._nursery.start_soon(self._consume_queue, task)

    async def _release(self, consumer: PullConsumer, queue: MessageQueue) -> None:
        task = self._tasks.pop(queue, None)
        if task is None:
            return
        task.stopping = True
        if task.scope is not None:
            task.scope.cancel()
        await task.done.wait()  # the task commits before it ends
        consumer.forget(queue)

    # ---- consuming ----------------------------------------------------------------------

    async def _consume_queue(self, task: _QueueTask) -> None:
        """The queue's only consumer in this member: pull, handle in order, commit."""
        consumer, queue = task.consumer, task.queue
        try:
            while not task.stopping:
                if not self.rebalance.leased(queue):  # renewal failing: wait for it (or the release)
                    await self._pause(task, self.suspend_s)
                    continue
                try:
                    with trio.CancelScope() as scope:
                        task.scope = scope
                        result = await consumer.pull(queue, self.batch, timeout_ms=self.poll_ms)
                    task.scope = None
                    if scope.cancelled_caught:
                        break
                except TidemqError as e:
                    task.scope = None
                    log.info("pull of %s failed: %s", queue, e)
                    await self._pause(task, self.suspend_s)
                    continue
                for msg in result.messages:
                    if not await self._consume(task, msg):
                        consumer.seek(queue, msg.queue_offset)  # not consumed: read it again
                        break
                await self._commit(task)
        finally:
            with trio.CancelScope(shield=True):
                await self._commit(task)
            task.done.set()

    async def _commit(self, task: _QueueTask) -> None:
        position = task.consumer.position(task.queue)
        if position is None or position == task.committed:
            return
        try:
            if await task.consumer.commit(task.queue, position):
                task.committed = position
        except TidemqError as e:
            log.warning("commit of %s=%d failed: %s", task.queue, position, e)

    async def _pause(self, task: _QueueTask, seconds: float) -> None:
        with trio.CancelScope() as scope:
            task.scope = scope
            await trio.sleep(seconds)
        task.scope = None

    def _may_consume(self, task: _QueueTask) -> bool:
        return not task.stopping and self.rebalance.leased(task.queue)

    async def _consume(self, task: _QueueTask, msg: ReceivedMessage) -> bool:
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
            if await self._call_handler(attrs.evolve(msg, reconsume_times=attempts)):
                self.stats.consumed += 1
                if self.max_messages is not None and self.stats.consumed >= self.max_messages:
                    self.finished.set()
                return True
            self.stats.failed += 1
            if attempts - msg.reconsume_times >= self.max_reconsume_times:
                return await self._dead_letter(task, msg)
            attempts += 1
            self.stats.retried += 1
            await self._pause(task, self.suspend_s)  # SUSPEND_CURRENT_QUEUE_A_MOMENT

    async def _dead_letter(self, task: _QueueTask, msg: ReceivedMessage) -> bool:
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

    async def _call_handler(self, msg: ReceivedMessage) -> bool:
        try:
            result = self.handler(msg)
            if inspect.isawaitable(result):
                result = await result
        except Exception:
            log.warning("handler failed on %s (%s:%d, reconsume %d)", msg.msg_id, msg.topic, msg.queue_offset,
                        msg.reconsume_times, exc_info=True)
            return False
        return result is not False


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
