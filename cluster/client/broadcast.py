"""BroadcastConsumer: every member of the group gets every message (RocketMQ's
MessageModel.BROADCASTING).

    async with BroadcastConsumer("cache-refresh", "Prices", handle, namesrv="127.0.0.1:9876",
                                 client_id="web-1") as consumer:
        await trio.sleep_forever()

A member reads every readable queue of the topic (the route is asked again every
`route_interval_s` for queues that came or went), pulls each with long polling and calls the
handler once per message. It joins no rebalance: members come and go without moving
anything. It heartbeats to the topic's masters saying BROADCASTING (every
`heartbeat_interval_s`, and unregisters on leaving), so they list it with the group
(`tidemq admin consumer-connection`) but never count it when clustering members allocate
queues. Its positions are its own, kept in a local file per client
id and group (cluster/client/local_offsets.py: `~/.tidemq_offsets/<client id>/<group>/offsets.json`,
`offsets_dir` to put it elsewhere); it never commits to a broker, so the group's committed
offsets there (and a clustering group on the same topic) are untouched.

The file is written every `persist_interval_s` (5 s, RocketMQ's persistConsumerOffsetInterval)
and when the member leaves. A member started again with the same client id continues from
the file: after a clean stop with nothing read twice; after a crash, what was handled since
the last write comes again (at least once, never a skip). A new client id starts at the
queues' first offsets (`start="first"`) or their ends (`start="last"`).

As in RocketMQ, a message the handler fails on (raises or returns False) is not retried:
there is no retry topic per member. It is logged and counted in `stats.failed`.

With `enable_msg_trace` each handler call is traced (SubBefore, SubAfter) as the Consumer's
are (cluster/client/trace.py, docs/trace.md).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import socket
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal, Unpack

import trio

from wire.client import NoPermission, TidemqError, block_nursery
from wire.options import ConnectKeywords, ConnectOptions
from wire.protocol import ConsumerHeartbeat, ConsumerUnregister
from wire.protocol.checks import check_client_id
from wire.protocol.trace import ConsumeReturn

from .base import CLIENT_OPTIONS, ROUTE_TTL_S, ReceivedMessage, _LifeCycle
from .consumer import PullConsumer
from .local_offsets import LocalOffsetStore, OffsetFileError
from .push_consumer import ConsumerStats, Handler, run_until_done
from .rebalance import HEARTBEAT_INTERVAL_S
from .routing import MessageQueue
from .trace import consume_begins, trace_dispatcher, tracing

log = logging.getLogger("tidemq.client")

__all__ = ["BroadcastConsumer", "consume_broadcast", "default_broadcast_client_id"]

PERSIST_INTERVAL_S = 5.0
ROUTE_INTERVAL_S = 20.0


def default_broadcast_client_id() -> str:
    """`ip@DEFAULT` (RocketMQ's default instance name): the same after a restart, so the
    member finds its file again. Two members on one host need their own `client_id`."""
    try:
        ip = socket.gethostbyname(socket.gethostname())
    except OSError:
        ip = "127.0.0.1"
    return f"{ip}@DEFAULT"


class _LocalPullConsumer(PullConsumer):
    """A PullConsumer whose positions come from and go to a LocalOffsetStore: nothing is
    fetched from or committed to a broker."""

    def __init__(self, *args: Any, store: LocalOffsetStore, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.store = store

    async def commit(self, queue: MessageQueue, offset: int) -> bool:
        self.store.update(queue, offset)
        return True

    async def flush_commits(self) -> dict[MessageQueue, int]:
        return {}

    async def _fetch_committed(self, queue: MessageQueue) -> tuple[int | None, str | None, bool]:
        """The member's own position (`fetch_offset` and the first pull read it): no node
        gave it, so no node's committed offset is checked against it."""
        return self.store.get(queue), None, False


class BroadcastConsumer(_LifeCycle):
    """See the module docstring. `brokers` instead of `namesrv` works too (no name server)."""

    def __init__(
        self,
        group: str,
        topic: str,
        handler: Handler,
        *,
        namesrv: str | Sequence[str] | None = None,
        brokers: Sequence[str] | str | None = None,
        client_id: str | None = None,
        offsets_dir: str | os.PathLike[str] | None = None,
        tag_filter: str | None = None,
        start: Literal["first", "last"] = "first",
        batch: int = 32,
        poll_ms: int = 1000,
        persist_interval_s: float = PERSIST_INTERVAL_S,
        route_interval_s: float = ROUTE_INTERVAL_S,
        heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S,
        max_messages: int | None = None,
        route_ttl_s: float = ROUTE_TTL_S,
        master_retry_max_s: float = 30.0,
        enable_msg_trace: bool = False,
        trace_topic: str | None = None,
        options: ConnectOptions | None = None,
        **connection: Unpack[ConnectKeywords],
    ) -> None:
        if max_messages is not None and max_messages < 1:
            raise ValueError(f"max_messages must be >= 1, got {max_messages}")
        if min(persist_interval_s, route_interval_s, heartbeat_interval_s) <= 0:
            raise ValueError("persist_interval_s, route_interval_s and heartbeat_interval_s must be > 0")
        self.group = group
        self.topic = topic
        self.handler = handler
        self.client_id = client_id if client_id is not None else default_broadcast_client_id()
        if (problem := check_client_id(self.client_id)) is not None:
            raise ValueError(f"client id {self.client_id!r}: {problem}")
        self.offsets = LocalOffsetStore(self.client_id, group, offsets_dir)
        self.batch = batch
        self.poll_ms = poll_ms
        self.persist_interval_s = persist_interval_s
        self.route_interval_s = route_interval_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self._masters: set[str] = set()  # every master told of this member, to unregister from
        self.max_messages = max_messages
        self.stats = ConsumerStats()
        self.finished = trio.Event()
        """Set once `max_messages` messages were consumed (never without a limit)."""
        self.last_message_at = 0.0  # trio clock of the last message handed to the handler
        self._taken = 0
        self._queues: set[MessageQueue] = set()
        self._pull = _LocalPullConsumer(namesrv, brokers, group=group, topic=topic, tag_filter=tag_filter,
                                        start=start, route_ttl_s=route_ttl_s, master_retry_max_s=master_retry_max_s,
                                        options=ConnectOptions.of(options, connection, CLIENT_OPTIONS),
                                        store=self.offsets)
        # enable_msg_trace: each handler call traced as the Consumer's are (docs/trace.md)
        self.tracer = (trace_dispatcher(namesrv, brokers, self._pull.options, trace_topic)
                       if enable_msg_trace else None)

    @property
    def queues(self) -> set[MessageQueue]:
        """The queues this member reads now: all of the topic's."""
        return set(self._queues)

    async def check_topic(self) -> None:
        """Raise NotFound (no route) or ConnectionLost (no name server) for the topic."""
        await self._pull.route(self.topic)

    @contextlib.asynccontextmanager
    async def _running(self) -> AsyncIterator[None]:
        """The offsets file (locked while the member lives), the client, then the queue
        tasks; on the way out the tasks stop first and the file is written last."""
        await trio.to_thread.run_sync(self.offsets.open)
        try:
            async with tracing(self.tracer), self._pull, block_nursery() as nursery:
                await nursery.start(self._follow_route, nursery)
                nursery.start_soon(self._persist_loop)
                nursery.start_soon(self._heartbeat_loop)
                try:
                    yield
                finally:
                    nursery.cancel_scope.cancel()
                    with trio.CancelScope(shield=True):
                        await self._unregister()
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self.offsets.close)

    async def _follow_route(self, nursery: trio.Nursery, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Start a task per queue of the topic, now and whenever the route shows a new one."""
        started = False
        while True:
            try:
                queues = await self._pull.queues(refresh=started)
            except TidemqError as e:
                log.info("broadcast %s/%s: no route for %s yet: %s", self.group, self.client_id, self.topic, e)
                queues = []
            for queue in queues:
                if queue not in self._queues:
                    self._queues.add(queue)
                    nursery.start_soon(self._consume_queue, queue)
            if not started:
                started = True
                task_status.started()
            await trio.sleep(self.route_interval_s)  # poll: RocketMQ's rebalance interval follows routes so

    async def _heartbeat_loop(self) -> None:
        """Tell the topic's masters this member lives, as a BROADCASTING one: listed, never
        allocated queues. A master that does not answer hears again next time."""
        while True:
            try:
                route = await self._pull.route(self.topic)
                self._masters |= {g.master.address for g in route.groups if g.master is not None}
            except TidemqError as e:
                log.debug("broadcast %s/%s: no route for the heartbeat: %s", self.group, self.client_id, e)
            beat = ConsumerHeartbeat(group=self.group, client_id=self.client_id, topics=[self.topic],
                                     heartbeat_interval_ms=int(self.heartbeat_interval_s * 1000),
                                     message_model="BROADCASTING")
            for address in sorted(self._masters):
                try:
                    await self._pull.pool.call(address, beat)
                except TidemqError as e:
                    log.debug("broadcast heartbeat to %s failed: %s", address, e)
            await trio.sleep(self.heartbeat_interval_s)  # poll: RocketMQ's heartbeatBrokerInterval

    async def _unregister(self) -> None:
        options = self._pull.options
        with trio.move_on_after(options.connect_timeout + options.request_timeout):
            for address in sorted(self._masters):
                try:
                    await self._pull.pool.request(address, ConsumerUnregister(group=self.group,
                                                                              client_id=self.client_id))
                except TidemqError as e:
                    log.debug("broadcast unregister at %s failed: %s", address, e)

    async def _persist_loop(self) -> None:
        while True:
            await trio.sleep(self.persist_interval_s)  # poll: RocketMQ's persistConsumerOffsetInterval
            try:
                await trio.to_thread.run_sync(self.offsets.save)
            except OffsetFileError as e:
                log.warning("broadcast %s/%s: %s (kept in memory; tried again)", self.group, self.client_id, e)

    async def _consume_queue(self, queue: MessageQueue) -> None:
        consumer = self._pull
        while True:
            try:
                result = await consumer.pull(queue, self.batch, timeout_ms=self.poll_ms)
            except TidemqError as e:
                (log.warning if isinstance(e, NoPermission) else log.info)("pull of %s failed: %s", queue, e)
                await trio.sleep(1.0)  # poll: a master down or a refusal; try again
                continue
            for msg in result.messages:
                if not await self._consume(msg):
                    consumer.seek(queue, msg.queue_offset)  # over the limit: left unread
                    self.offsets.update(queue, msg.queue_offset)
                    return
                self.offsets.update(queue, msg.queue_offset + 1)  # a stop in mid-batch keeps what was handled
            position = consumer.position(queue)
            if position is not None:
                self.offsets.update(queue, position)

    async def _consume(self, msg: ReceivedMessage) -> bool:
        """Hand one message to the handler; False when `max_messages` were already taken."""
        if self.max_messages is not None:
            if self._taken >= self.max_messages:
                return False
            self._taken += 1
        self.last_message_at = trio.current_time()
        ended = consume_begins(self.tracer, self.group, msg)
        how = ConsumeReturn.SUCCESS
        try:
            result = self.handler(msg)
            if inspect.isawaitable(result):
                result = await result
            if result is False:
                how = ConsumeReturn.FAILED
        except Exception:
            result = False
            how = ConsumeReturn.EXCEPTION
            log.warning("broadcast handler failed on %s (%s:%d); not retried (broadcasting)", msg.msg_id,
                        msg.topic, msg.queue_offset, exc_info=True)
        ended(how)
        if result is False:
            self.stats.failed += 1
        else:
            self.stats.consumed += 1
        if self.max_messages is not None and self._taken >= self.max_messages:
            self.finished.set()
        return True


async def consume_broadcast(
    handler: Handler,
    *,
    group: str,
    topic: str,
    max_messages: int | None = None,
    idle_timeout_ms: int | None = 2000,
    stop: trio.Event | None = None,
    **options: Any,
) -> ConsumerStats:
    """Run a BroadcastConsumer until `max_messages` were handled, no message came for
    `idle_timeout_ms` (never, when None) or `stop` is set; what `tidemq consume --broadcast`
    runs. Each way out writes the member's offsets file. `options` go to BroadcastConsumer."""
    async with BroadcastConsumer(group, topic, handler, max_messages=max_messages, **options) as consumer:
        await run_until_done(consumer, idle_timeout_ms, stop)
    return consumer.stats
