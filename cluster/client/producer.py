"""Producer: round robin over writable queues, retry on another group (see cluster.client)."""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import random
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, Unpack

import attrs
import trio

from store.transaction import PROPERTY_TRANSACTION_ID
from wire.client import (
    BadRequest,
    ConnectionLost,
    NotFound,
    OutcomeUnknown,
    PutFailed,
    ServiceUnavailable,
    TidemqError,
    read_reply,
)
from wire.options import ConnectKeywords, ConnectOptions
from wire.protocol import (
    BatchMessage,
    EndTransaction,
    EndTransactionReply,
    Send,
    SendBatch,
    SendBatchReply,
    SendReply,
    Status,
)

from .base import (
    CLIENT_OPTIONS,
    FAULT_BACKOFF_S,
    ROUTE_TTL_S,
    OutgoingMessage,
    SendResult,
    _body,
    _Client,
    _with_message,
)
from .producer_group import HEARTBEAT_INTERVAL_S, ProducerHeartbeats
from .routing import (
    BrokerInfo,
    BrokerRoute,
    GroupRoute,
    MessageQueue,
    TopicRoute,
)
from .selectors import QueueSelector, select_by_hash, selectable_queues
from .trace import end_transaction_trace, now_ms, pub_trace, trace_dispatcher, tracing

log = logging.getLogger("tidemq.client")

PRODUCER_OPTIONS = CLIENT_OPTIONS.but(request_timeout=3.0)
"""What a Producer connects with unless told otherwise: `send_timeout` (its request timeout) 3 s."""
ROUTE_RECHECK_S = 0.5
"""While a group's master is avoided (it failed a send, or the name server saw it go), the
topic's route is fetched again at most this often, so a promoted or restarted master takes
sends as soon as it registered rather than when the cached route expires (RocketMQ's
latency fault tolerance, with the route refreshed)."""


# ---------------------------------------------------------------- Producer


@attrs.frozen
class _Target:
    broker_name: str | None
    address: str
    queue_id: int | None


@attrs.frozen
class _Plan:
    """A route's candidate queues for one (topic, queue_id, broker_name), worked out once
    per route fetched rather than on every send: `targets` are the candidates as sends go
    to them, `alive` whether the route lists every candidate's master alive."""

    route: TopicRoute
    candidates: list[tuple[GroupRoute, int]]
    targets: tuple[_Target, ...]
    alive: bool


class Producer(_Client):
    """Sends messages to the masters of the groups serving a topic.

    Queue selection is round robin over the writable queues of every group whose master
    the route lists (RocketMQ's default), starting, per topic, at a random index (as
    RocketMQ's sendWhichQueue does: one-shot producers in a loop spread over the queues
    rather than all landing on the first; `rng` draws it, default Python's `random`
    module, which a simulation seeds), skipping a master that just refused a
    connection (for FAULT_BACKOFF_S) or that the name server saw go away. A send that
    fails with ConnectionLost, an unknown outcome (RequestTimeout, ConnectionLostInFlight,
    INDETERMINATE), SERVICE_NOT_AVAILABLE or OS_PAGECACHE_BUSY is retried up to `retries`
    times on another queue, preferring another group, with the topic's route fetched again
    first; other errors (BAD_REQUEST, NOT_FOUND, MESSAGE_ILLEGAL, ...) are raised at once.
    When every attempt failed, the error raised is an OutcomeUnknown if any attempt's
    outcome was unknown (the message may be stored), else the last attempt's.

    With `group` (RocketMQ's producer group) it heartbeats every master with its group and
    client id every `heartbeat_interval_s`, and unregisters when it closes, so mqadmin
    producerConnection lists it (cluster/client/producer_group.py); nothing per message.

    Sends may run concurrently from several tasks: they share one connection per master,
    pipelined (answers pair by id); `send_many` does that for a list of messages.
    `send_timeout` (default 3 s; `options.request_timeout`, wire/options.py, as are the
    other connection settings: `connect_timeout`, `credentials`, `tls`, `net`, ...) bounds
    each attempt. With `wait=True` on a SYNC_MASTER the node may
    take up to its slaveTimeout (3 s) before answering FLUSH_SLAVE_TIMEOUT; give a larger
    send_timeout if that answer matters more than a retry (a retried send may be stored
    twice). A topic no route knows yet is sent, for one route period (`route_ttl_s`),
    round robin to every master with no queue id: each node picks the queue and creates
    the topic (autoCreateTopicEnable), so the topic ends up on every group as with
    RocketMQ's default-topic route; then the topic's own route is used.

    With `enable_msg_trace` every stored message of `send`, `send_batch` and `send_many`
    (and every `end_transaction`) is recorded in the trace topic (`trace_topic`, default
    RMQ_SYS_TRACE_TOPIC) in RocketMQ's format, in the background (cluster/client/trace.py):
    `self.tracer.stats` counts what was sent, dropped or failed.
    """

    def __init__(
        self,
        namesrv: str | Sequence[str] | None = None,
        brokers: Sequence[str] | str | None = None,
        *,
        send_timeout: float | None = None,
        retries: int = 2,
        route_ttl_s: float = ROUTE_TTL_S,
        group: str | None = None,
        heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S,
        rng: random.Random | None = None,
        queue_selector: QueueSelector = select_by_hash,
        enable_msg_trace: bool = False,
        trace_topic: str | None = None,
        options: ConnectOptions | None = None,
        **connection: Unpack[ConnectKeywords],
    ) -> None:
        if send_timeout is not None:  # the producer's name for its request timeout
            connection["request_timeout"] = send_timeout
        super().__init__(namesrv, brokers, options=ConnectOptions.of(options, connection, PRODUCER_OPTIONS),
                         route_ttl_s=route_ttl_s)
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.retries = retries
        self.group = group
        self.queue_selector = queue_selector
        """Picks the queue of a send with a `sharding_key` (cluster/client/selectors.py)."""
        self.heartbeats = ProducerHeartbeats(self, group, interval_s=heartbeat_interval_s) if group else None
        self._counters: dict[str, itertools.count] = {}
        self._rng = rng
        self._down_until: dict[str, float] = {}
        self._creating: dict[str, float] = {}  # topic → until when it is sent without a route
        self._masters: tuple[float, list[BrokerInfo]] | None = None
        self._plans: dict[tuple[str, int | None, str | None], _Plan] = {}
        self.tracer = trace_dispatcher(namesrv, brokers, self.options, trace_topic) if enable_msg_trace else None

    @contextlib.asynccontextmanager
    async def _running(self) -> AsyncIterator[None]:
        """The client's life, and within it the group's heartbeats (when it has a group):
        they end, and unregister, before the connections close."""
        async with super()._running(), tracing(self.tracer):
            if self.heartbeats is None:
                yield
            else:
                async with self.heartbeats.running():
                    yield

    @property
    def send_timeout(self) -> float:
        """Each attempt's timeout: the request timeout of its options."""
        return self.options.request_timeout

    async def send(
        self,
        topic: str,
        body: bytes | str,
        *,
        tags: str | None = None,
        keys: Iterable[str] = (),
        properties: Mapping[str, str] | None = None,
        queue_id: int | None = None,
        broker_name: str | None = None,
        wait: bool = True,
        sharding_key: str | None = None,
    ) -> SendResult:
        """Store one message; see the class docstring for selection, retries and statuses.
        `queue_id` (optionally with `broker_name`) pins the queue; `sharding_key` lets the
        `queue_selector` pick it, the same queue for every message of the key (ordered
        sends: retries stay on that queue, and the send fails while its group has no master)."""
        request = Send(topic=topic, body=_body(body), tags=tags, keys=list(keys), properties=dict(properties or {}),
                       wait=wait)
        if sharding_key is not None:
            if queue_id is not None or broker_name is not None:
                raise ValueError("sharding_key picks the queue: it goes without queue_id and broker_name")
            queue = await self.select_queue(topic, sharding_key)
            broker_name, queue_id = queue.broker_name, queue.queue_id
        started_ms, started = now_ms(), time.monotonic()
        result = await self._send(request, queue_id, broker_name)
        self._trace_pub(topic, [request], [result.msg_id], result, started_ms, started)
        return result

    async def select_queue(self, topic: str, sharding_key: str) -> MessageQueue:
        """The queue `queue_selector` picks for the key among the topic's writable queues.
        Ordered sends need the topic's queues: a topic the name servers do not route is
        asked for again for up to one send timeout (one just created is being registered),
        then NotFound (create it first: `admin updateTopic`)."""
        deadline = trio.current_time() + self.send_timeout
        while True:
            try:
                queues = selectable_queues(await self.route(topic), topic)
                if not queues:
                    queues = selectable_queues(await self.route(topic, refresh=True), topic)
                break
            except NotFound as e:
                if trio.current_time() >= deadline:
                    raise NotFound(e.status, f"topic {topic!r} has no route: ordered sends need its queues, "
                                             "create it first (admin updateTopic)") from e
                self.invalidate(topic)
                await trio.sleep(0.2)  # the name servers learn of a new topic at its master's next registration
        if not queues:
            raise ServiceUnavailable(Status.SERVICE_NOT_AVAILABLE.value, f"topic {topic!r} has no writable queue")
        return self.queue_selector(queues, sharding_key)

    async def send_prepared(
        self,
        topic: str,
        body: bytes | str,
        producer_group: str,
        *,
        tags: str | None = None,
        keys: Iterable[str] = (),
        properties: Mapping[str, str] | None = None,
        queue_id: int | None = None,
    ) -> SendResult:
        """Store a transaction's half message (TRAN_MSG=true, PGROUP=`producer_group`): no
        consumer sees it until `end_transaction` commits it (docs/transactions.md). The
        result's address, commitlog_offset and queue_offset name it to `end_transaction`.
        Retried as `send` retries: an attempt whose outcome was unknown may have stored a
        half message too, which stays open until a check ends it (docs/transactions.md)."""
        props = {PROPERTY_TRANSACTION_ID: uuid.uuid4().hex.upper(), **(properties or {}),
                 "TRAN_MSG": "true", "PGROUP": producer_group}
        result = await self.send(topic, body, tags=tags, keys=keys, properties=props, queue_id=queue_id)
        return attrs.evolve(result, transaction_id=props[PROPERTY_TRANSACTION_ID])

    async def end_transaction(self, prepared: SendResult, producer_group: str, outcome: str, *,
                              from_transaction_check: bool = False) -> EndTransactionReply:
        """End the transaction of a half message `send_prepared` stored: COMMIT, ROLLBACK or
        UNKNOWN, sent to the node that stored it. A repeated END answers what the first did
        (`duplicate`); the other outcome than the one it has raises TransactionEnded."""
        request = EndTransaction(producer_group=producer_group, tran_state_table_offset=prepared.queue_offset,
                                 commitlog_offset=prepared.commitlog_offset, outcome=outcome,
                                 from_transaction_check=from_transaction_check, transaction_id=prepared.transaction_id)
        reply: EndTransactionReply = await self.pool.call(prepared.address, request, timeout=self.send_timeout)
        if self.tracer is not None:
            self.tracer.record(end_transaction_trace(producer_group, prepared.msg_id, prepared.address,
                                                     prepared.transaction_id, outcome, from_transaction_check))
        return reply

    async def send_batch(
        self,
        topic: str,
        messages: Iterable[OutgoingMessage | bytes | str],
        *,
        queue_id: int | None = None,
        broker_name: str | None = None,
        wait: bool = True,
    ) -> SendResult:
        """Store several messages atomically in one queue (one put); bodies or Messages."""
        batch = _messages(messages)
        if not batch:
            raise ValueError("send_batch needs at least one message")
        started_ms, started = now_ms(), time.monotonic()
        result = await self._send(SendBatch(topic=topic, messages=batch, wait=wait), queue_id, broker_name)
        self._trace_pub(topic, batch, result.msg_ids, result, started_ms, started)
        return result

    async def send_many(
        self,
        topic: str,
        messages: Iterable[OutgoingMessage | bytes | str],
        *,
        batch_size: int = 32,
        in_flight: int = 8,
        queue_id: int | None = None,
        broker_name: str | None = None,
        wait: bool = True,
    ) -> list[SendResult]:
        """Store many messages fast: `send_batch`es of up to `batch_size` messages, chosen
        round robin as `send_batch` chooses, sent `in_flight` at a time pipelined in one
        write per master (answers pair by id). A batch whose attempt fails the way
        `send_batch` retries is retried the same way, on its own; any other error is raised
        once the batches in flight are answered. Returns one SendResult per batch, in the
        order of `messages`. With a pinned queue the batches are stored in order, unless a
        retry sends one again."""
        if batch_size < 1 or in_flight < 1:
            raise ValueError(f"batch_size and in_flight must be >= 1, got {batch_size} and {in_flight}")
        batch = _messages(messages)
        chunks = [batch[i:i + batch_size] for i in range(0, len(batch), batch_size)]
        results: list[SendResult] = []
        started_ms, started = now_ms(), time.monotonic()
        for start in range(0, len(chunks), in_flight):
            window = chunks[start:start + in_flight]
            targets = [await self._select(topic, queue_id, broker_name, set()) for _ in window]
            answers: list[dict[str, Any] | TidemqError] = [None] * len(window)  # type: ignore[list-item]
            by_address: dict[str, list[int]] = {}
            for i, target in enumerate(targets):
                by_address.setdefault(target.address, []).append(i)

            async def send_to(indexes: list[int], answers=answers, targets=targets, window=window) -> None:
                requests = [SendBatch(topic=topic, messages=window[i], queue_id=targets[i].queue_id, wait=wait)
                            for i in indexes]
                got = await self._request_many(targets[indexes[0]].address, requests)
                for i, answer in zip(indexes, got, strict=True):
                    answers[i] = answer

            async with trio.open_nursery() as nursery:
                for indexes in by_address.values():
                    nursery.start_soon(send_to, indexes)
            errors = []
            for i, answer in enumerate(answers):
                if not isinstance(answer, TidemqError):
                    self._down_until.pop(targets[i].address, None)
                    results.append(self._result(read_reply(SendBatch, answer, targets[i].address), targets[i]))
                elif _retried(answer) and self.retries:
                    log.info("send_many to %s on %s failed: %s; retrying the batch", topic, targets[i].address,
                             answer)
                    self.invalidate(topic)
                    results.append(await self._send(SendBatch(topic=topic, messages=window[i], wait=wait),
                                                    queue_id, broker_name, prior=[answer]))
                else:
                    errors.append(answer)
            if errors:
                if any(isinstance(e, NotFound) for e in errors):
                    self.invalidate(topic)
                    self._creating.pop(topic, None)
                raise errors[0]
        for chunk, result in zip(chunks, results, strict=True):
            self._trace_pub(topic, chunk, result.msg_ids, result, started_ms, started)
        return results

    def _trace_pub(self, topic: str, messages: Sequence[BatchMessage | Send], msg_ids: Sequence[str], result: SendResult,
                   started_ms: int, started: float) -> None:
        """Pub records of a send's stored messages (with msg_trace on), the cost shared
        among them as RocketMQ shares a batch's."""
        if self.tracer is None or not self.tracer.traced(topic):
            return
        cost = int((time.monotonic() - started) * 1000) // max(1, len(messages))
        for m, msg_id in zip(messages, msg_ids, strict=False):
            self.tracer.record(pub_trace(self.group, topic, msg_id, result, started_ms=started_ms, cost_ms=cost,
                                         tags=m.tags, keys=m.keys, body_length=len(m.body), properties=m.properties))

    # ---- internals ----------------------------------------------------------------------

    async def _request_many(self, address: str, requests: list[SendBatch]) -> list[dict[str, Any] | TidemqError]:
        """Pipeline `requests` on `address`'s connection; each one's answer or error."""
        try:
            conn = await self.pool.get(address)
        except TidemqError as error:
            self._down_until[address] = trio.current_time() + FAULT_BACKOFF_S
            return [error] * len(requests)
        return await conn.request_many(SendBatch.OP, [r.wire_fields() for r in requests], timeout=self.send_timeout)

    async def _send(
        self, request: Send | SendBatch, queue_id: int | None, broker_name: str | None, *,
        prior: Sequence[TidemqError] = (),
    ) -> SendResult:
        """Send with retries; `prior`: errors of attempts made before (send_many's batch),
        counted when deciding whether a final failure is one or an unknown outcome."""
        topic, op = request.topic, request.OP
        attempts = 1 + self.retries
        failed_groups: set[str] = set()
        errors: list[TidemqError] = list(prior)
        try:
            for attempt in range(attempts):
                target = await self._select(topic, queue_id, broker_name, failed_groups)
                request.queue_id = target.queue_id
                try:
                    response = await self.pool.call(target.address, request, timeout=self.send_timeout)
                except (ConnectionLost, OutcomeUnknown, ServiceUnavailable, PutFailed) as e:
                    if not _retried(e):
                        raise
                    if isinstance(e, ConnectionLost | ServiceUnavailable):  # refused or gone: avoid it a while
                        self._down_until[target.address] = trio.current_time() + FAULT_BACKOFF_S
                    errors.append(e)
                    failed_groups.add(target.broker_name or target.address)
                    self.invalidate(topic)
                    log.info("send to %s on %s failed (attempt %d of %d): %s", topic, target.address,
                             attempt + 1, attempts, e)
                    continue
                except NotFound:
                    self.invalidate(topic)
                    self._creating.pop(topic, None)
                    raise
                self._down_until.pop(target.address, None)
                return self._result(response, target, sum(isinstance(e, OutcomeUnknown) for e in errors))
        except TidemqError as e:  # a retry that ended early (no route left, a refusal) after an unknown attempt
            if isinstance(e, OutcomeUnknown) or not any(isinstance(x, OutcomeUnknown) for x in errors):
                raise
            errors.append(e)
        assert errors
        unknown = [e for e in errors if isinstance(e, OutcomeUnknown)]
        if unknown:  # an attempt may have stored it: never report that as failed
            raise _with_message(unknown[-1], f"{op} to topic {topic!r}: outcome unknown after {len(errors)} "
                                "attempt(s), the message may be stored: " + "; ".join(str(e) for e in errors))
        raise _with_message(errors[-1], f"{op} to topic {topic!r} failed after {len(errors)} attempt(s): "
                            + "; ".join(str(e) for e in errors))

    def _result(self, response: SendReply | SendBatchReply, target: _Target, unknown_attempts: int = 0) -> SendResult:
        ids = tuple(response.msg_ids) if isinstance(response, SendBatchReply) else (response.msg_id,)
        return SendResult(
            status=response.status,
            msg_id=ids[0],
            broker_name=target.broker_name or "",
            queue_id=response.queue_id,
            queue_offset=response.queue_offset,
            commitlog_offset=response.commitlog_offset,
            msg_ids=ids,
            address=target.address,
            unknown_attempts=unknown_attempts,
        )

    async def _select(
        self, topic: str, queue_id: int | None, broker_name: str | None, failed: set[str]
    ) -> _Target:
        now = trio.current_time()
        if self._creating.get(topic, -math.inf) > now:
            return await self._select_without_route(topic, queue_id, broker_name, failed)
        try:
            route = await self.route(topic)
        except NotFound:
            # RocketMQ's TBW102: until the next route poll, send to every master, each of
            # which creates the topic, so a new topic ends up on every group
            self._creating[topic] = now + self.route_ttl_s
            return await self._select_without_route(topic, queue_id, broker_name, failed)
        plan = self._plan(topic, route, queue_id, broker_name)
        if plan.targets and plan.alive and not failed and not (
                self._down_until and any(self._down_until.get(t.address, 0) > now for t in plan.targets)):
            # no master is avoided and none failed this send: every candidate ranks best
            # (what the ranking below would find, without the work per send)
            return plan.targets[next(self._counter(topic)) % len(plan.targets)]
        candidates = plan.candidates
        if not candidates or (self.route_age(topic) >= ROUTE_RECHECK_S
                              and any(self._avoided(g.master, now) for g, _ in candidates)):
            route = await self.route(topic, refresh=True)
            candidates = self._candidates(route, queue_id, broker_name)
        if not candidates:
            if queue_id is not None and self._candidates(route, None, broker_name):
                most = max(g.queue_data.write_queue_nums for g, _ in self._candidates(route, None, broker_name)
                           if g.queue_data is not None)
                raise BadRequest(Status.BAD_REQUEST.value,
                                 f"queue_id {queue_id} is out of range: topic {topic!r} has {most} write queues")
            raise ServiceUnavailable(Status.SERVICE_NOT_AVAILABLE.value,
                                     f"no writable master serves topic {topic!r}")
        now = trio.current_time()

        def rank(c: tuple[GroupRoute, int]) -> tuple[bool, bool]:
            return (c[0].broker_name in failed, self._avoided(c[0].master, now))

        # round robin over the best class: queues of groups that neither failed this send
        # nor look down, else the next best
        best = min(rank(c) for c in candidates)
        usable = [c for c in candidates if rank(c) == best]
        group, qid = usable[next(self._counter(topic)) % len(usable)]
        assert group.master is not None
        return _Target(group.broker_name, group.master.address, qid)

    def _plan(self, topic: str, route: TopicRoute, queue_id: int | None, broker_name: str | None) -> _Plan:
        """The candidates of `route` for a send, cached until the topic's route changes."""
        key = (topic, queue_id, broker_name)
        plan = self._plans.get(key)
        if plan is None or plan.route is not route:
            candidates = self._candidates(route, queue_id, broker_name)
            targets = tuple(_Target(g.broker_name, g.master.address, q) for g, q in candidates if g.master)
            plan = self._plans[key] = _Plan(route, candidates, targets,
                                            all(g.master is not None and g.master.alive for g, _ in candidates))
        return plan

    def _counter(self, topic: str) -> itertools.count:
        """The topic's round-robin position, first drawn at random (RocketMQ's
        ThreadLocalIndex starts at a random int)."""
        counter = self._counters.get(topic)
        if counter is None:
            start = (self._rng or random).randrange(1 << 31)  # (the module: what a simulation seeds)
            counter = self._counters[topic] = itertools.count(start)
        return counter

    def _avoided(self, master: BrokerRoute | None, now: float) -> bool:
        """The name server saw this master go, or it failed a send within FAULT_BACKOFF_S."""
        return master is None or not master.alive or self._down_until.get(master.address, 0) > now

    @staticmethod
    def _candidates(route: TopicRoute, queue_id: int | None, broker_name: str | None) -> list[tuple[GroupRoute, int]]:
        out = []
        for group in route.groups:
            qd = group.queue_data
            if group.master is None or qd is None or not qd.writable:
                continue
            if broker_name is not None and group.broker_name != broker_name:
                continue
            if queue_id is not None:
                if queue_id < qd.write_queue_nums:
                    out.append((group, queue_id))
            else:
                out.extend((group, q) for q in range(qd.write_queue_nums))
        return out

    async def _select_without_route(
        self, topic: str, queue_id: int | None, broker_name: str | None, failed: set[str]
    ) -> _Target:
        """No route for the topic yet: round robin over every master, which creates the
        topic (autoCreateTopicEnable) and picks the queue."""
        now = trio.current_time()
        if self._masters is None or now - self._masters[0] >= self.route_ttl_s or failed:
            self._masters = (now, [b for b in await self.cluster_info() if b.is_master])
        masters = [b for b in self._masters[1] if broker_name is None or b.broker_name == broker_name]
        if not masters:
            raise NotFound(Status.NOT_FOUND.value,
                           f"topic {topic!r} has no route and no master is known to create it")
        now = trio.current_time()

        def rank(b: BrokerInfo) -> tuple[bool, bool]:
            return (b.broker_name in failed, self._avoided(b, now))

        top = min(rank(b) for b in masters)
        usable = sorted((b for b in masters if rank(b) == top), key=lambda b: b.broker_name)
        chosen = usable[next(self._counter(topic)) % len(usable)]
        return _Target(chosen.broker_name, chosen.address, queue_id)


def _retried(error: TidemqError) -> bool:
    """Whether a send that failed this way is tried again (on another queue, preferring
    another group): the connection or the master failed, not the request."""
    if isinstance(error, PutFailed):
        return error.status == Status.OS_PAGECACHE_BUSY.value
    return isinstance(error, ConnectionLost | OutcomeUnknown | ServiceUnavailable)


def _messages(messages: Iterable[OutgoingMessage | bytes | str]) -> list[BatchMessage]:
    return [(m if isinstance(m, OutgoingMessage) else OutgoingMessage(m)).to_request() for m in messages]
