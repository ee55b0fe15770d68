"""Consumer: a handler-style consumer-group member on top of PullConsumer (RocketMQ's
DefaultMQPushConsumer, concurrent mode).

    async def handle(msg: ReceivedMessage) -> None: ...   # or a plain function

    async with Consumer("billing", "Orders", handle, namesrv="127.0.0.1:9876") as consumer:
        await trio.sleep_forever()

It subscribes to the topic and to the group's retry topic `%RETRY%<group>`, shares their
queues with the group's other members (cluster/client/rebalance.py), pulls each queue it owns,
calls the handler once per message and commits a queue's offset after the handler has
returned for every message of a pull. A handler that raises (or returns False) has its
message sent back (`consumer_send_back`): it comes again after the retry ladder's delay
(level 3 + reconsume times: 10 s, 30 s, 1 m, ...) with `reconsume_times` + 1, and after
`max_reconsume_times` (16) retries it goes to `%DLQ%<group>`. With `max_messages` the
member consumes exactly that many messages (`finished` is set) and leaves the rest for
the group: a message over the limit is neither handled nor committed. A retried message reaches
the handler with its original topic. When the message's master cannot take the send-back
(it is down: the queue is read from its slave), the handler is called again locally
after `local_retry_s` and the queue's offset does not move past it.

With `enable_msg_trace` each handler call is recorded in the trace topic (`trace_topic`,
default RMQ_SYS_TRACE_TOPIC): SubBefore (group, retry count) and SubAfter (cost, status),
in RocketMQ's format, in the background (cluster/client/trace.py, docs/trace.md).

Delivery is at least once: a member that crashes re-delivers what it consumed since its
last commit, and a queue moving between members may deliver a few messages twice.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal, Protocol, Unpack

import attrs
import trio

from store.properties import PROPERTY_RETRY_TOPIC
from wire.client import ServiceUnavailable, TidemqError
from wire.options import ConnectKeywords, ConnectOptions
from wire.protocol import ConsumerSendBack, SendBackReply
from wire.protocol.trace import ConsumeReturn

from .base import CLIENT_OPTIONS, ROUTE_TTL_S, ReceivedMessage
from .consumer import PullConsumer
from .queue_member import ConsumerStats, Handler, QueueMember, QueueTask, call_handler, check_limits
from .rebalance import HEARTBEAT_INTERVAL_S, REBALANCE_INTERVAL_S, RebalanceService
from .routing import UNREACHABLE
from .trace import consume_begins, trace_dispatcher, tracing

log = logging.getLogger("tidemq.client")

__all__ = ["Consumer", "ConsumerStats", "Handler", "consume_as_member"]

MAX_RECONSUME_TIMES = 16
RETRY_PREFIX = "%RETRY%"


class Consumer(QueueMember):
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
        sql_filter: str | None = None,
        start: Literal["first", "last"] = "first",
        max_reconsume_times: int = MAX_RECONSUME_TIMES,
        heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S,
        rebalance_interval_s: float = REBALANCE_INTERVAL_S,
        batch: int = 32,
        poll_ms: int = 1000,
        local_retry_s: float = 1.0,
        client_id: str | None = None,
        route_ttl_s: float = ROUTE_TTL_S,
        max_messages: int | None = None,
        master_retry_max_s: float = 30.0,
        enable_msg_trace: bool = False,
        trace_topic: str | None = None,
        options: ConnectOptions | None = None,
        **connection: Unpack[ConnectKeywords],
    ) -> None:
        check_limits(max_messages, max_reconsume_times)
        super().__init__(group, topic, handler, max_messages)
        self.max_reconsume_times = max_reconsume_times
        self.batch = batch
        self.poll_ms = poll_ms
        self.local_retry_s = local_retry_s
        self.retry_pause_s = local_retry_s
        self.options = ConnectOptions.of(options, connection, CLIENT_OPTIONS)
        pull_consumer = functools.partial(PullConsumer, namesrv, brokers, group=group, start=start,
                                          route_ttl_s=route_ttl_s, master_retry_max_s=master_retry_max_s,
                                          options=self.options)
        self._main = pull_consumer(topic=topic, tag_filter=tag_filter, sql_filter=sql_filter)
        self._retry = pull_consumer(topic=RETRY_PREFIX + group)
        self.rebalance = RebalanceService(
            group, [self._main, self._retry], acquire=self._acquire, release=self._release,
            client_id=client_id, heartbeat_interval_s=heartbeat_interval_s,
            rebalance_interval_s=rebalance_interval_s,
        )
        self.tracer = trace_dispatcher(namesrv, brokers, self.options, trace_topic) if enable_msg_trace else None

    def reading_from_slave(self, broker_name: str) -> bool:
        """Whether the topic's queues of `broker_name` are read from a slave right now."""
        return self._main.reading_from_slave(broker_name)

    @contextlib.asynccontextmanager
    async def _running(self) -> AsyncIterator[None]:
        """The topic's client, the retry topic's, then the queue tasks (left in the reverse order)."""
        async with tracing(self.tracer), self._main, self._retry, self._queue_tasks():
            yield

    # ---- consuming (QueueMember runs the queue tasks) -------------------------------------

    async def _consume(self, task: QueueTask, msg: ReceivedMessage) -> bool:
        """Handle one message until it is consumed or sent back; False when the queue is
        being released first (the message stays unconsumed)."""
        shown = msg
        original = msg.properties.get(PROPERTY_RETRY_TOPIC)
        if original and msg.topic.startswith(RETRY_PREFIX):
            shown = attrs.evolve(msg, topic=original)
        if self.max_messages is not None:
            if self._taken >= self.max_messages:
                task.stopping = True  # over the limit: left unconsumed (and uncommitted)
                return False
            self._taken += 1
        self.last_message_at = trio.current_time()
        while True:
            ended = consume_begins(self.tracer, self.group, msg)
            how = await call_handler(self.handler, shown)
            ended(how)
            if how is ConsumeReturn.SUCCESS:
                self._consumed()
                return True
            self.stats.failed += 1
            if await self._send_back(task.consumer, msg):
                return True
            if task.stopping:
                return False
            await self._pause(task, self.local_retry_s)
            if task.stopping:
                return False

    async def _send_back(self, consumer: PullConsumer, msg: ReceivedMessage) -> bool:
        """Store the failed message again for a later retry (or the DLQ) on its master."""
        assert msg.broker_name is not None
        try:
            master = await consumer.master_address(msg.broker_name)
            if master is None:
                return False
            response: SendBackReply = await consumer.pool.call(master, ConsumerSendBack(
                group=self.group, commitlog_offset=msg.commitlog_offset,
                max_reconsume_times=self.max_reconsume_times,
                origin_msg_id=msg.properties.get("ORIGIN_MESSAGE_ID") or msg.properties.get("UNIQ_KEY")
                or msg.msg_id,
            ))
        except (*UNREACHABLE, ServiceUnavailable) as e:
            log.info("send-back of %s to %s failed (%s); retrying it here", msg.msg_id, msg.broker_name, e)
            return False
        except TidemqError as e:
            log.warning("send-back of %s failed: %s; retrying it here", msg.msg_id, e)
            return False
        if (response.topic or "").startswith("%DLQ%"):
            self.stats.dead += 1
            log.warning("%s gave up after %d retries: moved to %s", msg.msg_id, msg.reconsume_times,
                        response.topic)
        else:
            self.stats.retried += 1
        return True


async def consume_as_member(
    handler: Handler,
    *,
    group: str,
    topic: str,
    max_messages: int | None = None,
    idle_timeout_ms: int | None = 2000,
    stop: trio.Event | None = None,
    **options: Any,
) -> ConsumerStats:
    """Run a Consumer until `max_messages` were consumed, no message came for
    `idle_timeout_ms` (never, when None) or `stop` is set; what `tidemq consume` runs. Each
    way out leaves cleanly: the member commits what it consumed and leaves its group.
    `options` go to Consumer (namesrv or brokers, tag_filter or sql_filter, start, intervals, ...)."""
    async with Consumer(group, topic, handler, max_messages=max_messages, **options) as consumer:
        await run_until_done(consumer, idle_timeout_ms, stop)
    return consumer.stats


class Finishing(Protocol):
    """A running member `run_until_done` watches (Consumer, BroadcastConsumer)."""

    finished: trio.Event
    last_message_at: float

    async def check_topic(self) -> None: ...


async def run_until_done(consumer: Finishing, idle_timeout_ms: int | None, stop: trio.Event | None) -> None:
    """Until the member `finished`, no message came for `idle_timeout_ms` (never, when None)
    or `stop` is set; first it checks the topic exists (say so rather than wait for nothing)."""
    await consumer.check_topic()
    consumer.last_message_at = trio.current_time()
    async with trio.open_nursery() as nursery:
        if stop is not None:
            async def stopped() -> None:
                await stop.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(stopped)
        await _until_finished_or_idle(consumer, idle_timeout_ms)
        nursery.cancel_scope.cancel()


async def _until_finished_or_idle(consumer: Finishing, idle_timeout_ms: int | None) -> None:
    while not consumer.finished.is_set():
        idle_left = (None if idle_timeout_ms is None
                     else consumer.last_message_at + idle_timeout_ms / 1000 - trio.current_time())
        if idle_left is not None and idle_left <= 0:
            return
        with trio.move_on_after(min(idle_left or 1.0, 1.0)):
            await consumer.finished.wait()
