"""Message trace in the client (RocketMQ's `enableMsgTrace`, AsyncTraceDispatcher).

A Producer or Consumer made with `enable_msg_trace=True` records each send (Pub) and each
hand-over to the handler (SubBefore, then SubAfter with cost, status and retry count) in
RocketMQ's trace format (wire/protocol/trace.py). `record` only queues the record: a
background task packs up to `batch_size` records (or what came within
`flush_interval_s`) into trace messages of at most `max_message_size` bytes and sends them
to the trace topic with a client of its own (TraceSender), keyed by each record's msgId and keys, so
`tidemq admin queryMsgTraceById` finds them by index. The user's send or handler never
waits for a trace and never fails because of one: a full queue drops the record, a trace
message that cannot be stored is logged; both are counted in `stats`. Leaving the client
sends what is queued, for at most `close_timeout_s`. docs/trace.md.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any, Protocol

import attrs
import trio

from wire.client import NotFound, ServiceUnavailable, TidemqError
from wire.options import ConnectOptions
from wire.protocol import Send, SendReply, Status
from wire.protocol.trace import (
    DEFAULT_REGION,
    TRACE_TOPIC,
    ConsumeReturn,
    EndTransactionTrace,
    MessageType,
    PubTrace,
    SubAfterTrace,
    SubBeforeTrace,
    TraceRecord,
    encode_trace,
    trace_keys,
)

from .base import ROUTE_TTL_S, ReceivedMessage, SendResult, _Client

log = logging.getLogger("tidemq.client.trace")

__all__ = ["TRACE_TOPIC", "TraceDispatcher", "TraceSender", "trace_dispatcher", "TraceStats", "consume_begins", "end_transaction_trace", "tracing", "message_type", "pub_trace",
           "trace_msg_id"]

BATCH_SIZE = 20
"""Records per dispatch at most (RocketMQ caps its batchNum at 20)."""
MAX_MESSAGE_SIZE = 128_000
"""A trace message's body at most (RocketMQ's trace producer's maxMessageSize)."""


class Sender(Protocol):
    """What sends trace messages (TraceSender, or anything with its `send`)."""

    async def __aenter__(self) -> Any: ...

    async def __aexit__(self, *exc: Any) -> Any: ...

    async def send(self, topic: str, body: bytes, *, keys: Iterable[str] = ()) -> Any: ...


class TraceSender(_Client):
    """The trace producer (RocketMQ's inner trace producer instance): a client of its own,
    connected as the traced client is. Round robin over the trace topic's writable master
    queues; while no route knows the topic, each master in turn with no queue (a node with
    autoCreateTopicEnable creates it). One try per trace message: a failure is the
    dispatcher's to count, the route is fetched again for the next one. Not the Producer:
    the pull consumer, which the Producer's module reaches through the rebalance service,
    uses it too, and a trace needs none of the Producer's retries."""

    def __init__(self, namesrv: str | Sequence[str] | None, brokers: Sequence[str] | str | None,
                 options: ConnectOptions) -> None:
        super().__init__(namesrv, brokers, options=options, route_ttl_s=ROUTE_TTL_S)
        self._next = itertools.count()

    async def send(self, topic: str, body: bytes, *, keys: Iterable[str] = ()) -> SendReply:
        try:
            route = await self.route(topic)
            targets: list[tuple[str, int | None]] = [
                (g.master.address, q) for g in route.groups
                if g.master is not None and g.queue_data is not None and g.queue_data.writable
                for q in range(g.queue_data.write_queue_nums)]
        except NotFound:
            targets = [(b.address, None) for b in sorted(await self.cluster_info(), key=lambda b: b.broker_name)
                       if b.is_master]
        if not targets:
            raise ServiceUnavailable(Status.SERVICE_NOT_AVAILABLE.value, f"no writable master serves topic {topic!r}")
        address, queue_id = targets[next(self._next) % len(targets)]
        try:
            reply: SendReply = await self.pool.call(address, Send(topic=topic, body=body, keys=list(keys),
                                                                  queue_id=queue_id))
        except TidemqError:
            self.invalidate(topic)
            raise
        return reply


@attrs.define
class TraceStats:
    recorded: int = 0
    """Records queued for the trace topic."""
    sent: int = 0
    """Records stored in the trace topic."""
    dropped: int = 0
    """Records dropped because the queue was full or the client was closing."""
    failed: int = 0
    """Records whose trace message could not be stored (each failure is logged)."""


class TraceDispatcher:
    """See the module docstring. `sender` makes the producer that sends the trace messages."""

    def __init__(
        self,
        sender: Callable[[], Sender],
        topic: str | None = None,
        *,
        batch_size: int = BATCH_SIZE,
        flush_interval_s: float = 1.0,
        max_queued: int = 10_000,
        max_message_size: int = MAX_MESSAGE_SIZE,
        close_timeout_s: float = 5.0,
    ) -> None:
        if not 1 <= batch_size <= BATCH_SIZE:
            raise ValueError(f"batch_size must be 1..{BATCH_SIZE}, got {batch_size}")
        self.topic = topic or TRACE_TOPIC
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self.max_message_size = max_message_size
        self.close_timeout_s = close_timeout_s
        self.stats = TraceStats()
        self._make_sender = sender
        self._send_side, self._receive_side = trio.open_memory_channel[TraceRecord](max_queued)
        self._open = False

    def traced(self, topic: str) -> bool:
        """Sends to the trace topic are not traced themselves (as RocketMQ's hook skips them)."""
        return not topic.startswith(self.topic)

    def record(self, record: TraceRecord) -> None:
        """Queue one record; never waits, never raises (a full queue drops it, counted)."""
        if not self._open:
            self.stats.dropped += 1
            return
        try:
            self._send_side.send_nowait(record)
        except trio.WouldBlock:
            self.stats.dropped += 1
            if self.stats.dropped == 1 or self.stats.dropped % 1000 == 0:
                log.warning("trace queue full: %d trace record(s) dropped so far", self.stats.dropped)
            return
        self.stats.recorded += 1

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The trace producer and the dispatch task, around the client's life; on the way
        out what is queued is sent (bounded by `close_timeout_s`)."""
        async with self._make_sender() as sender, trio.open_nursery() as nursery:
            done = trio.Event()
            nursery.start_soon(self._dispatch, sender, done)
            self._open = True
            try:
                yield
            finally:
                self._open = False
                self._send_side.close()
                with trio.CancelScope(shield=True), trio.move_on_after(self.close_timeout_s):
                    await done.wait()
                left = self._receive_side.statistics().current_buffer_used
                if left:
                    self.stats.dropped += left
                    log.warning("closing: %d trace record(s) not sent in %.1f s", left, self.close_timeout_s)
                nursery.cancel_scope.cancel()

    async def _dispatch(self, sender: Sender, done: trio.Event) -> None:
        try:
            async for first in self._receive_side:
                batch = [first]
                with trio.move_on_after(self.flush_interval_s):
                    while len(batch) < self.batch_size:
                        try:
                            batch.append(await self._receive_side.receive())
                        except trio.EndOfChannel:
                            break
                await self._send(sender, batch)
        finally:
            done.set()

    async def _send(self, sender: Sender, batch: list[TraceRecord]) -> None:
        """Pack the batch into trace messages of at most max_message_size and send each."""
        parts: list[str] = []
        keys: dict[str, None] = {}
        size = 0
        for record in batch:
            try:
                text = encode_trace(record)
            except ValueError as e:
                self.stats.failed += 1
                log.warning("trace record not written: %s", e)
                continue
            length = len(text.encode("utf-8"))
            if parts and size + length > self.max_message_size:
                await self._send_one(sender, parts, keys)
                parts, keys, size = [], {}, 0
            parts.append(text)
            keys.update(dict.fromkeys(k for k in trace_keys(record) if k))
            size += length
        if parts:
            await self._send_one(sender, parts, keys)

    async def _send_one(self, sender: Sender, parts: list[str], keys: dict[str, None]) -> None:
        try:
            await sender.send(self.topic, "".join(parts).encode("utf-8"), keys=list(keys))
        except TidemqError as e:
            self.stats.failed += len(parts)
            log.warning("%d trace record(s) not stored in %s: %s", len(parts), self.topic, e)
        else:
            self.stats.sent += len(parts)


def trace_dispatcher(namesrv: str | Sequence[str] | None, brokers: Sequence[str] | str | None,
                     options: ConnectOptions, topic: str | None) -> TraceDispatcher:
    """A traced client's dispatcher, sending with a TraceSender connected as the client is."""
    return TraceDispatcher(lambda: TraceSender(namesrv, brokers, options), topic)


def tracing(dispatcher: TraceDispatcher | None) -> contextlib.AbstractAsyncContextManager[None]:
    """A client's dispatcher running (entered before what it traces, left after), or nothing."""
    return dispatcher.running() if dispatcher is not None else contextlib.nullcontext()


def now_ms() -> int:
    return int(time.time() * 1000)


def message_type(properties: dict[str, str] | None) -> MessageType:
    """A sent message's kind as RocketMQ's trace names it."""
    props = properties or {}
    if props.get("TRAN_MSG") == "true":
        return MessageType.TRANS_HALF
    if props.get("DELAY"):
        return MessageType.DELAY
    return MessageType.NORMAL


def pub_trace(group: str | None, topic: str, msg_id: str, result: SendResult, *, started_ms: int, cost_ms: int,
              tags: str | None, keys: Iterable[str], body_length: int,
              properties: dict[str, str] | None) -> PubTrace:
    """The Pub record of one message of a send that returned `result`."""
    return PubTrace(timestamp=started_ms, region_id=DEFAULT_REGION, group=group or "", topic=topic, msg_id=msg_id,
                    tags=tags or "", keys=" ".join(keys), store_host=result.address, body_length=body_length,
                    cost_ms=cost_ms, msg_type=message_type(properties), offset_msg_id=msg_id,
                    success=result.ok)


_STATES = {"COMMIT": "COMMIT_MESSAGE", "ROLLBACK": "ROLLBACK_MESSAGE", "UNKNOWN": "UNKNOW"}
"""An END's outcome as RocketMQ's LocalTransactionState names it."""


def end_transaction_trace(group: str, msg_id: str, store_host: str, transaction_id: str | None, outcome: str,
                          from_check: bool, topic: str = "") -> EndTransactionTrace:
    """The EndTransaction record of an END of the half message `msg_id` (an END after
    `send_prepared` knows no topic: a SendResult has none)."""
    return EndTransactionTrace(timestamp=now_ms(), region_id=DEFAULT_REGION, group=group, topic=topic,
                               msg_id=msg_id, tags="", keys="", store_host=store_host,
                               msg_type=MessageType.TRANS_HALF, transaction_id=transaction_id or "",
                               transaction_state=_STATES.get(str(outcome).upper(), str(outcome)),
                               from_transaction_check=from_check)


def trace_msg_id(msg: ReceivedMessage) -> str:
    """The id a trace names a consumed message by: the client's UNIQ_KEY (RocketMQ's
    clients), else, for a retry, the original's id (ORIGIN_MESSAGE_ID), else its msgId:
    the id its sender's Pub record holds, whichever try this is."""
    p = msg.properties
    return p.get("UNIQ_KEY") or p.get("ORIGIN_MESSAGE_ID") or msg.msg_id


def consume_begins(dispatcher: TraceDispatcher | None, group: str,
                   msg: ReceivedMessage) -> Callable[[ConsumeReturn], None]:
    """Record SubBefore for a handler call about to start; the callable returned records
    its SubAfter with how the handler returned (nothing at all without a dispatcher)."""
    if dispatcher is None:
        return lambda _how: None
    request_id = uuid.uuid4().hex.upper()
    msg_id, keys, started = trace_msg_id(msg), " ".join(msg.keys), time.monotonic()
    dispatcher.record(SubBeforeTrace(timestamp=now_ms(), region_id=DEFAULT_REGION, group=group,
                                     request_id=request_id, msg_id=msg_id, retry_times=msg.reconsume_times,
                                     keys=keys))

    def ended(how: ConsumeReturn) -> None:
        dispatcher.record(SubAfterTrace(request_id=request_id, msg_id=msg_id,
                                        cost_ms=int((time.monotonic() - started) * 1000),
                                        success=how is ConsumeReturn.SUCCESS, keys=keys, context_code=int(how),
                                        timestamp=now_ms(), group=group))

    return ended
