"""QueueMember: what the clustering members share (the push Consumer, cluster/client/
push_consumer.py, and the OrderlyConsumer, cluster/client/orderly.py).

Both are RebalanceService members: the service hands a queue over (`_acquire`) or takes it
back (`_release`), and each queue owned gets one task that pulls, hands each message to the
member's `_consume` and commits the queue's position after every pull. A queue taken back
stops between messages and commits before it is given up, so the next owner starts where
this one stopped. What differs is `_consume` (retry through %RETRY% or in place) and whether
a queue may be pulled now (`_may_pull`: an orderly member needs its lease).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import attrs
import trio

from wire.client import NoPermission, TidemqError, block_nursery
from wire.protocol.trace import ConsumeReturn

from .base import ReceivedMessage, _LifeCycle
from .consumer import PullConsumer
from .rebalance import RebalanceService
from .routing import MessageQueue

log = logging.getLogger("tidemq.client")

__all__ = ["ConsumerStats", "Handler", "QueueMember", "QueueTask", "call_handler", "check_limits"]

Handler = Callable[[ReceivedMessage], Awaitable[Any] | Any]


@attrs.define
class ConsumerStats:
    consumed: int = 0
    """Handler calls that returned normally."""
    failed: int = 0
    """Handler calls that raised or returned False."""
    retried: int = 0
    """Messages sent back to the retry topic (orderly: handled again in place)."""
    dead: int = 0
    """Messages sent to the DLQ."""


def check_limits(max_messages: int | None, max_reconsume_times: int) -> None:
    """ValueError for a limit no member can keep."""
    if max_messages is not None and max_messages < 1:
        raise ValueError(f"max_messages must be >= 1, got {max_messages}")
    if max_reconsume_times < 0:
        raise ValueError(f"max_reconsume_times must be >= 0, got {max_reconsume_times}")


async def call_handler(handler: Handler, msg: ReceivedMessage) -> ConsumeReturn:
    """SUCCESS, FAILED (it returned False) or EXCEPTION (it raised: logged with the message)."""
    try:
        result = handler(msg)
        if inspect.isawaitable(result):
            result = await result
    except Exception:
        log.warning("handler failed on %s (%s:%d, reconsume %d)", msg.msg_id, msg.topic, msg.queue_offset,
                    msg.reconsume_times, exc_info=True)
        return ConsumeReturn.EXCEPTION
    return ConsumeReturn.FAILED if result is False else ConsumeReturn.SUCCESS


@attrs.define(eq=False)
class QueueTask:
    """One owned queue's consuming task: `stopping` asks it to end between messages, `scope`
    is the pull or pause it may be cancelled out of, `done` is set once it has committed."""

    consumer: PullConsumer
    queue: MessageQueue
    stopping: bool = False
    scope: trio.CancelScope | None = None
    committed: int | None = None
    done: trio.Event = attrs.field(factory=trio.Event)


class QueueMember(_LifeCycle):
    """The queue tasks of a rebalancing member. A subclass sets `rebalance`, `_main` (the
    topic's PullConsumer), `batch`, `poll_ms` and `retry_pause_s` (how long a failed pull
    waits), and implements `_consume`."""

    rebalance: RebalanceService
    _main: PullConsumer
    batch: int
    poll_ms: int
    retry_pause_s: float

    def __init__(self, group: str, topic: str, handler: Handler, max_messages: int | None) -> None:
        self.group = group
        self.topic = topic
        self.handler = handler
        self.max_messages = max_messages
        self.stats = ConsumerStats()
        self.finished = trio.Event()
        """Set once `max_messages` messages were consumed (never without a limit)."""
        self.last_message_at = 0.0  # trio clock of the last message handed to the handler
        self._taken = 0
        self._tasks: dict[MessageQueue, QueueTask] = {}
        self._nursery: trio.Nursery | None = None

    @property
    def client_id(self) -> str:
        return self.rebalance.client_id

    @property
    def owned(self) -> set[MessageQueue]:
        """The queues this member consumes now."""
        return self.rebalance.owned

    async def check_topic(self) -> None:
        """Raise NotFound (no route) or ConnectionLost (no name server) for the topic."""
        await self._main.route(self.topic)

    @contextlib.asynccontextmanager
    async def _queue_tasks(self) -> AsyncIterator[trio.Nursery]:
        """The queue tasks' nursery with the rebalance service running in it. On the way out
        every queue is released (committed) and the member unregistered before the tasks
        are cancelled."""
        async with block_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self.rebalance.run)
            try:
                yield nursery
            finally:
                with trio.CancelScope(shield=True):
                    await self.rebalance.close()
                nursery.cancel_scope.cancel()
                self._nursery = None

    # ---- queue ownership (RebalanceService callbacks) -----------------------------------

    async def _acquire(self, consumer: PullConsumer, queue: MessageQueue) -> None:
        consumer.forget(queue)  # start from the offset the previous owner committed
        task = QueueTask(consumer, queue)
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

    def _may_pull(self, task: QueueTask) -> bool:
        """Whether the queue may be pulled now (else the task waits `retry_pause_s`)."""
        return True

    async def _consume(self, task: QueueTask, msg: ReceivedMessage) -> bool:
        """Handle one message; False when the queue must stop before it (it stays unconsumed)."""
        raise NotImplementedError

    async def _consume_queue(self, task: QueueTask) -> None:
        """The queue's only consumer in this member: pull, handle in order, commit."""
        consumer, queue = task.consumer, task.queue
        try:
            while not task.stopping:
                if not self._may_pull(task):
                    await self._pause(task, self.retry_pause_s)
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
                    (log.warning if isinstance(e, NoPermission) else log.info)("pull of %s failed: %s", queue, e)
                    await self._pause(task, self.retry_pause_s)
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

    async def _commit(self, task: QueueTask) -> None:
        """Commit the queue's position when it moved since the last commit."""
        position = task.consumer.position(task.queue)
        if position is None or position == task.committed:
            return
        try:
            if await task.consumer.commit(task.queue, position):
                task.committed = position
        except TidemqError as e:
            log.warning("commit of %s=%d failed: %s", task.queue, position, e)

    async def _pause(self, task: QueueTask, seconds: float) -> None:
        with trio.CancelScope() as scope:
            task.scope = scope
            await trio.sleep(seconds)
        task.scope = None

    def _consumed(self) -> None:
        """Count a handled message; `finished` once `max_messages` were."""
        self.stats.consumed += 1
        if self.max_messages is not None and self.stats.consumed >= self.max_messages:
            self.finished.set()
