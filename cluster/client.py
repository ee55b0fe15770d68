"""The tidemq client library (trio): Producer, PullConsumer, Admin.

Each is an async context manager that owns a nursery (for the connections' reader tasks)
and finds brokers either through name servers (`namesrv="host:port[;host:port]"`) or from
a fixed list of broker addresses (`brokers=[...]`, no name server needed):

    async with Producer(namesrv="127.0.0.1:9876") as producer:
        result = await producer.send("Orders", b"...", keys=["order-42"])

    async with PullConsumer(namesrv="127.0.0.1:9876", group="G", topic="Orders") as consumer:
        async for msg in consumer.messages(idle_timeout_ms=2000):
            ...

Failures raise the typed errors of `node.client` (re-exported here): `TidemqError(status,
message)` and its subclasses `BadRequest`, `NotFound`, `ServiceUnavailable`, `PutFailed`,
`InternalError`, `ConnectionLost`, `RequestTimeout`.

Delivery is at least once: a send that times out or loses its connection is retried on
another queue (preferring another broker group), and may then be stored twice. The send
statuses FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE are *returned*,
not raised: the message is stored on the master, only the requested durability (disk
flush, slave copy) was not confirmed in time. Retrying such a send would duplicate it.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal

import attrs
import trio

from node.client import (
    BadRequest,
    Connection,
    ConnectionLost,
    InternalError,
    NotFound,
    PutFailed,
    RequestTimeout,
    ServiceUnavailable,
    TidemqError,
    connect,
)
from node.protocol import Status
from store.message import decode_msg_id

from .routing import (
    UNREACHABLE,
    BrokerInfo,
    ConnectionPool,
    Discovery,
    GroupRoute,
    MessageQueue,
    NameServerDiscovery,
    QueueData,
    StaticDiscovery,
    TopicRoute,
    parse_addresses,
)

log = logging.getLogger("tidemq.client")

__all__ = [
    "Admin",
    "BadRequest",
    "BrokerInfo",
    "BrokerStatus",
    "Connection",
    "ConnectionLost",
    "GroupRoute",
    "InternalError",
    "Message",
    "MessageQueue",
    "NotFound",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PutFailed",
    "QueueData",
    "ReceivedMessage",
    "RequestTimeout",
    "SendResult",
    "ServiceUnavailable",
    "Status",
    "TidemqError",
    "TopicInfo",
    "TopicRoute",
    "connect",
]

ROUTE_TTL_S = 30.0
"""How long a route is used before it is fetched again (RocketMQ polls every 30 s)."""
FAULT_BACKOFF_S = 5.0
"""A master that refused a connection is avoided this long by the producer."""
STORED = {Status.PUT_OK, Status.FLUSH_DISK_TIMEOUT, Status.FLUSH_SLAVE_TIMEOUT, Status.SLAVE_NOT_AVAILABLE}
"""Send statuses meaning the message is stored on the master."""


# ---------------------------------------------------------------- data


@attrs.frozen
class Message:
    """A message to send in a batch (for single sends, pass the fields to `send`)."""

    body: bytes | str
    tags: str | None = None
    keys: Sequence[str] = ()
    properties: Mapping[str, str] | None = None
    flag: int = 0

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"body": _body(self.body)}
        if self.tags is not None:
            out["tags"] = self.tags
        if self.keys:
            out["keys"] = list(self.keys)
        if self.properties:
            out["properties"] = dict(self.properties)
        if self.flag:
            out["flag"] = self.flag
        return out


@attrs.frozen
class SendResult:
    """Where a message was stored. `status` is one of STORED: PUT_OK, or a status saying the
    message is on the master but the flush / slave copy was not confirmed in time.
    For a batch, `msg_id` is the first message's and `msg_ids` has them all."""

    status: Status
    msg_id: str
    broker_name: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    msg_ids: tuple[str, ...] = ()
    address: str = ""

    @property
    def ok(self) -> bool:
        return self.status is Status.PUT_OK

    def to_json(self) -> dict[str, Any]:
        out = attrs.asdict(self)
        out["status"] = self.status.value
        out["msg_ids"] = list(self.msg_ids)
        return out


@attrs.frozen
class ReceivedMessage:
    """A stored message as a pull or a query returns it."""

    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    msg_id: str
    body: bytes
    tags: str | None
    keys: tuple[str, ...]
    properties: Mapping[str, str]
    born_timestamp: int
    store_timestamp: int
    flag: int = 0
    reconsume_times: int = 0
    broker_name: str | None = None

    @property
    def queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name or "", self.queue_id)

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any], broker_name: str | None) -> ReceivedMessage:
        return cls(
            topic=raw["topic"],
            queue_id=raw["queue_id"],
            queue_offset=raw["queue_offset"],
            commitlog_offset=raw["commitlog_offset"],
            msg_id=raw["msg_id"],
            body=raw["body"],
            tags=raw.get("tags"),
            keys=tuple(raw.get("keys") or ()),
            properties=dict(raw.get("properties") or {}),
            born_timestamp=raw.get("born_timestamp", 0),
            store_timestamp=raw.get("store_timestamp", 0),
            flag=raw.get("flag", 0),
            reconsume_times=raw.get("reconsume_times", 0),
            broker_name=broker_name,
        )


@attrs.frozen
class PullResult:
    """One pull: `next_begin_offset` is where the consumer continues (already applied to
    its position); `address` the node that answered, `from_slave` whether it was a slave."""

    status: Status
    messages: list[ReceivedMessage]
    next_begin_offset: int
    min_offset: int = 0
    max_offset: int = 0
    address: str = ""
    from_slave: bool = False


@attrs.frozen
class TopicInfo:
    topic: str
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int


@attrs.frozen
class BrokerStatus:
    """A broker's answer to `status` (`status`, the node's fields) or why it gave none."""

    address: str
    broker_name: str | None
    broker_id: int | None
    role: str | None
    status: Mapping[str, Any] | None = None
    error: str | None = None
    registration: BrokerInfo | None = None

    @property
    def reachable(self) -> bool:
        return self.status is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "broker_name": self.broker_name,
            "broker_id": self.broker_id,
            "role": self.role,
            "reachable": self.reachable,
            "status": dict(self.status) if self.status is not None else None,
            "error": self.error,
            "registration": (
                {k: v for k, v in self.registration.to_json().items() if k != "topics"}
                if self.registration is not None else None
            ),
        }


def _body(body: bytes | bytearray | memoryview | str) -> bytes:
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    raise TypeError(f"a message body is bytes or str, got {type(body).__name__}")


def _with_message(error: TidemqError, message: str) -> TidemqError:
    """The same error (type, status, last address) with a message summing up several
    attempts (which name their addresses themselves)."""
    new = type(error).__new__(type(error))  # not copy.copy: it would call cls(*args)
    new.__dict__.update(error.__dict__)
    new.message = message
    new.args = (message,)
    new.__cause__ = error
    return new


# ---------------------------------------------------------------- shared base


class _Client:
    """What Producer, PullConsumer and Admin share: a nursery, a connection pool, a
    discovery (name servers or a broker list) and a route cache."""

    def __init__(
        self,
        namesrv: str | Sequence[str] | None,
        brokers: Sequence[str] | str | None,
        *,
        connect_timeout: float,
        request_timeout: float,
        route_ttl_s: float,
    ) -> None:
        self._namesrv = parse_addresses(namesrv, "a name server address")
        self._brokers = parse_addresses(brokers, "a broker address")
        if bool(self._namesrv) == bool(self._brokers):
            raise ValueError("give either namesrv (name server addresses) or brokers (broker addresses)")
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.route_ttl_s = route_ttl_s
        self._routes: dict[str, tuple[float, TopicRoute]] = {}
        self._nursery_cm: Any = None
        self._pool: ConnectionPool | None = None
        self._discovery: Discovery | None = None

    async def __aenter__(self) -> Any:
        self._nursery_cm = trio.open_nursery()
        nursery = await self._nursery_cm.__aenter__()
        self._pool = ConnectionPool(nursery, connect_timeout=self.connect_timeout,
                                    request_timeout=self.request_timeout)
        if self._namesrv:
            self._discovery = NameServerDiscovery(self._namesrv, self._pool)
        else:
            self._discovery = StaticDiscovery(self._brokers, self._pool)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        cm, self._nursery_cm = self._nursery_cm, None
        with trio.CancelScope(shield=True):  # flush and close even when the block was cancelled
            try:
                await self._before_close()
            except TidemqError as e:
                log.warning("%s: closing: %s", type(self).__name__, e)
            await self.pool.aclose()
        self._pool = self._discovery = None
        try:
            return await cm.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            # trio wraps the body's exception in a group; hand it back as it was raised so
            # `except ConnectionLost:` around the `async with` works
            if exc is not None and len(group.exceptions) == 1 and group.exceptions[0] is exc:
                return False
            raise

    async def _before_close(self) -> None:
        """Subclasses flush what they must before the connections close."""

    @property
    def pool(self) -> ConnectionPool:
        if self._pool is None:
            raise RuntimeError(f"use `async with {type(self).__name__}(...)` before calling it")
        return self._pool

    @property
    def discovery(self) -> Discovery:
        if self._discovery is None:
            raise RuntimeError(f"use `async with {type(self).__name__}(...)` before calling it")
        return self._discovery

    async def route(self, topic: str, *, refresh: bool = False) -> TopicRoute:
        """The topic's route, cached for `route_ttl_s`. When the discovery cannot be reached,
        a cached route (however old) is used rather than failing."""
        cached = self._routes.get(topic)
        now = trio.current_time()
        if cached is not None and not refresh and now - cached[0] < self.route_ttl_s:
            return cached[1]
        try:
            route = await self.discovery.route(topic)
        except UNREACHABLE as e:
            if cached is None:
                raise
            log.warning("cannot refresh the route of %s (%s); using the one from %.0f s ago",
                        topic, e, now - cached[0])
            return cached[1]
        self._routes[topic] = (now, route)
        return route

    def invalidate(self, topic: str) -> None:
        """Fetch the topic's route again at its next use (after an error)."""
        self._routes.pop(topic, None)

    async def cluster_info(self) -> list[BrokerInfo]:
        """Every broker the discovery knows, with its last registration (or probe) data."""
        return await self.discovery.cluster_info()

    async def _read_group(self, group: GroupRoute, op: str, *, timeout: float | None = None,
                          **fields: Any) -> tuple[dict[str, Any], str]:
        """A read on the group's master, else on its slaves (reads work on both)."""
        candidates = [b.address for b in ([group.master] if group.master else []) + list(group.slaves)]
        errors: list[TidemqError] = []
        for address in candidates:
            try:
                return await self.pool.request(address, op, timeout=timeout, **fields), address
            except (*UNREACHABLE, ServiceUnavailable) as e:
                errors.append(e)
        if not errors:
            raise ConnectionLost(f"group {group.broker_name} has no broker in its route")
        raise _with_message(errors[-1], f"no broker of group {group.broker_name} answered {op}: "
                            + "; ".join(str(e) for e in errors))


# ---------------------------------------------------------------- Producer


@attrs.define
class _Target:
    broker_name: str | None
    address: str
    queue_id: int | None


class Producer(_Client):
    """Sends messages to the masters of the groups serving a topic.

    Queue selection is round robin over the writable queues of every group whose master
    the route lists (RocketMQ's default), skipping a master that just refused a
    connection (for FAULT_BACKOFF_S) or that the name server saw go away. A send that
    fails with ConnectionLost, RequestTimeout, SERVICE_NOT_AVAILABLE or OS_PAGECACHE_BUSY
    is retried up to `retries` times on another queue, preferring another group; other
    errors (BAD_REQUEST, NOT_FOUND, MESSAGE_ILLEGAL, ...) are raised at once.

    `send_timeout` bounds each attempt. With `wait=True` on a SYNC_MASTER the node may
    take up to its slaveTimeout (3 s) before answering FLUSH_SLAVE_TIMEOUT; give a larger
    send_timeout if that answer matters more than a retry (a retried send may be stored
    twice). A topic no route knows yet is sent, for one route period (`route_ttl_s`),
    round robin to every master with no queue id: each node picks the queue and creates
    the topic (autoCreateTopicEnable), so the topic ends up on every group as with
    RocketMQ's default-topic route; then the topic's own route is used.
    """

    def __init__(
        self,
        namesrv: str | Sequence[str] | None = None,
        brokers: Sequence[str] | str | None = None,
        *,
        send_timeout: float = 3.0,
        retries: int = 2,
        connect_timeout: float = 3.0,
        route_ttl_s: float = ROUTE_TTL_S,
    ) -> None:
        super().__init__(namesrv, brokers, connect_timeout=connect_timeout,
                         request_timeout=send_timeout, route_ttl_s=route_ttl_s)
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.send_timeout = send_timeout
        self.retries = retries
        self._counters: dict[str, itertools.count] = {}
        self._down_until: dict[str, float] = {}
        self._creating: dict[str, float] = {}  # topic → until when it is sent without a route
        self._masters: tuple[float, list[BrokerInfo]] | None = None

    async def __aenter__(self) -> Producer:
        return await super().__aenter__()

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
    ) -> SendResult:
        """Store one message; see the class docstring for selection, retries and statuses.
        `queue_id` (optionally with `broker_name`) pins the queue."""
        fields = Message(body, tags, tuple(keys), properties).to_wire()
        return await self._send("send", topic, fields, queue_id, broker_name, wait)

    async def send_batch(
        self,
        topic: str,
        messages: Iterable[Message | bytes | str],
        *,
        queue_id: int | None = None,
        broker_name: str | None = None,
        wait: bool = True,
    ) -> SendResult:
        """Store several messages atomically in one queue (one put); bodies or Messages."""
        wire = [(m if isinstance(m, Message) else Message(m)).to_wire() for m in messages]
        if not wire:
            raise ValueError("send_batch needs at least one message")
        return await self._send("send_batch", topic, {"messages": wire}, queue_id, broker_name, wait)

    # ---- internals ----------------------------------------------------------------------

    async def _send(
        self, op: str, topic: str, fields: dict[str, Any], queue_id: int | None,
        broker_name: str | None, wait: bool,
    ) -> SendResult:
        attempts = 1 + self.retries
        failed_groups: set[str] = set()
        errors: list[TidemqError] = []
        for attempt in range(attempts):
            target = await self._select(topic, queue_id, broker_name, failed_groups)
            request = dict(fields, topic=topic, wait=wait)
            if target.queue_id is not None:
                request["queue_id"] = target.queue_id
            try:
                response = await self.pool.request(target.address, op, timeout=self.send_timeout, **request)
            except (ConnectionLost, RequestTimeout, ServiceUnavailable, PutFailed) as e:
                if isinstance(e, PutFailed) and e.status != Status.OS_PAGECACHE_BUSY.value:
                    raise
                if isinstance(e, ConnectionLost):
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
            return self._result(op, response, target)
        assert errors
        raise _with_message(errors[-1], f"{op} to topic {topic!r} failed after {attempts} attempt(s): "
                            + "; ".join(str(e) for e in errors))

    def _result(self, op: str, response: Mapping[str, Any], target: _Target) -> SendResult:
        ids = tuple(response["msg_ids"]) if op == "send_batch" else (response["msg_id"],)
        return SendResult(
            status=Status(response["status"]),
            msg_id=ids[0],
            broker_name=target.broker_name or "",
            queue_id=response["queue_id"],
            queue_offset=response["queue_offset"],
            commitlog_offset=response["commitlog_offset"],
            msg_ids=ids,
            address=target.address,
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
        candidates = self._candidates(route, queue_id, broker_name)
        if not candidates:
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
            group = c[0]
            master = group.master
            assert master is not None
            down = not master.alive or self._down_until.get(master.address, 0) > now
            return (group.broker_name in failed, down)

        # round robin over the best class: queues of groups that neither failed this send
        # nor look down, else the next best
        best = min(rank(c) for c in candidates)
        usable = [c for c in candidates if rank(c) == best]
        group, qid = usable[next(self._counters.setdefault(topic, itertools.count())) % len(usable)]
        assert group.master is not None
        return _Target(group.broker_name, group.master.address, qid)

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
            return (b.broker_name in failed, not b.alive or self._down_until.get(b.address, 0) > now)

        top = min(rank(b) for b in masters)
        usable = sorted((b for b in masters if rank(b) == top), key=lambda b: b.broker_name)
        chosen = usable[next(self._counters.setdefault(topic, itertools.count())) % len(usable)]
        return _Target(chosen.broker_name, chosen.address, queue_id)


# ---------------------------------------------------------------- PullConsumer


@attrs.define
class _GroupState:
    """Which node of a broker group the consumer reads from."""

    broker_name: str
    master: str | None = None  # last known master address (kept when the route drops it)
    slaves: list[str] = attrs.field(factory=list)
    on_slave: bool = False
    retry_at: float = 0.0
    backoff: float = 0.0


class PullConsumer(_Client):
    """Pulls one topic for one consumer group, queue by queue, with committed offsets.

    Position: each queue starts at the group's committed offset (`fetch_offset`), or, for
    a queue the group never committed, at the queue's first offset (`start="first"`) or
    its end (`start="last"`); every pull moves it to the result's `next_begin_offset`.

    Reads go to the group's master. When the master is unreachable (connection refused or
    lost, timeout, SERVICE_NOT_AVAILABLE) they go to a slave of the same group, which
    holds everything the master acknowledged as replicated; the master is tried again
    after a back-off (`master_retry_s`, doubling up to `master_retry_max_s`) and reads
    return to it as soon as it answers.

    Commits go to the master only (a slave refuses them). While only a slave is
    reachable, `commit` keeps the offset in this consumer and returns False; pending
    offsets are committed when the master answers again (or by `flush_commits`, or on
    leaving the `async with`). If the process ends first they are lost and the group
    re-reads from its last committed offset: at-least-once, never a skip.
    """

    def __init__(
        self,
        namesrv: str | Sequence[str] | None = None,
        brokers: Sequence[str] | str | None = None,
        *,
        group: str,
        topic: str,
        tag_filter: str | None = None,
        start: Literal["first", "last"] = "first",
        request_timeout: float = 5.0,
        connect_timeout: float = 3.0,
        master_retry_s: float = 1.0,
        master_retry_max_s: float = 30.0,
        route_ttl_s: float = ROUTE_TTL_S,
    ) -> None:
        super().__init__(namesrv, brokers, connect_timeout=connect_timeout,
                         request_timeout=request_timeout, route_ttl_s=route_ttl_s)
        if start not in ("first", "last"):
            raise ValueError(f"start must be 'first' or 'last', got {start!r}")
        self.group = group
        self.topic = topic
        self.tag_filter = tag_filter or "*"
        self.start = start
        self.master_retry_s = master_retry_s
        self.master_retry_max_s = master_retry_max_s
        self._groups: dict[str, _GroupState] = {}
        self._positions: dict[MessageQueue, int] = {}
        self._pending_commits: dict[MessageQueue, int] = {}

    async def __aenter__(self) -> PullConsumer:
        return await super().__aenter__()

    # ---- queues and positions -----------------------------------------------------------

    async def queues(self, *, refresh: bool = False) -> list[MessageQueue]:
        """The topic's readable queues on every group serving it. Groups the latest route
        no longer lists (their brokers expired) are kept: their slaves may still serve."""
        try:
            route = await self.route(self.topic, refresh=refresh)
        except NotFound:
            route = TopicRoute(self.topic, ())
        self._learn(route)
        out = set()
        for group in route.groups:
            qd = group.queue_data
            if qd is not None and qd.readable:
                out.update(MessageQueue(self.topic, group.broker_name, q) for q in range(qd.read_queue_nums))
        out.update(self._positions)  # queues seen before stay readable
        return sorted(out)

    def position(self, queue: MessageQueue) -> int | None:
        """The next offset `pull(queue)` reads, or None before the first pull."""
        return self._positions.get(queue)

    def seek(self, queue: MessageQueue, offset: int) -> None:
        """Continue `queue` from `offset` (does not commit)."""
        self._positions[queue] = offset

    @property
    def pending_commits(self) -> dict[MessageQueue, int]:
        """Offsets committed while the master was unreachable, not yet on the master."""
        return dict(self._pending_commits)

    def reading_from_slave(self, broker_name: str) -> bool:
        state = self._groups.get(broker_name)
        return bool(state and state.on_slave)

    # ---- pull ---------------------------------------------------------------------------

    async def pull(
        self,
        queue: MessageQueue,
        max_msgs: int = 32,
        *,
        timeout_ms: int = 3000,
        offset: int | None = None,
    ) -> PullResult:
        """Up to `max_msgs` messages from the queue's position (or from `offset`). With
        `timeout_ms` > 0 the node holds the pull until a message arrives or the time is up
        (long polling), so an empty result after the wait is normal."""
        begin = offset if offset is not None else await self._position(queue)
        response, address, from_slave = await self._read(
            queue.broker_name, "pull", timeout=timeout_ms / 1000 + self.request_timeout,
            topic=queue.topic, queue_id=queue.queue_id, offset=begin, max_msgs=max_msgs,
            tag_filter=self.tag_filter, timeout_ms=timeout_ms, group=self.group,
        )
        status = Status(response["status"])
        messages = [ReceivedMessage.from_wire(m, queue.broker_name) for m in response.get("messages") or ()]
        following = self._advance(queue, begin, status, response.get("next_begin_offset", begin), from_slave)
        self._positions[queue] = following
        return PullResult(status, messages, following, response.get("min_offset", 0),
                          response.get("max_offset", 0), address, from_slave)

    @staticmethod
    def _advance(queue: MessageQueue, begin: int, status: Status, reported: int, from_slave: bool) -> int:
        """Where to pull next. Never backwards on a no-message answer: a slave that lags
        (or lacks the queue) answers with its own end, which would re-read."""
        if status in (Status.NO_MESSAGE_IN_QUEUE, Status.OFFSET_OVERFLOW_ONE, Status.NO_MATCHED_LOGIC_QUEUE):
            return begin
        if status is Status.OFFSET_OVERFLOW_BADLY:
            if from_slave:
                return begin  # the slave has not caught up yet
            log.warning("%s: offset %d is beyond the queue's end %d; continuing from the end",
                        queue, begin, reported)
            return reported
        if status is Status.OFFSET_TOO_SMALL:
            log.warning("%s: offset %d was removed; continuing from %d", queue, begin, reported)
            return reported
        return max(begin, reported)

    async def messages(
        self,
        *,
        idle_timeout_ms: int | None = None,
        poll_ms: int = 1000,
        max_msgs: int = 32,
        auto_commit: bool = False,
    ) -> AsyncIterator[ReceivedMessage]:
        """Every message of the topic, walking all queues from their positions (committed
        offsets at first). Waits (long polling on all queues at once) when caught up; ends
        after `idle_timeout_ms` without a message (never, when None). With `auto_commit`,
        a queue's offset is committed once all messages of a pull were consumed.

        Use `async with contextlib.aclosing(consumer.messages()) as it:` when breaking out."""
        idle_since = trio.current_time()
        while True:
            queues = await self.queues()
            got = False
            for queue in queues:
                result = await self.pull(queue, max_msgs, timeout_ms=0)
                for msg in result.messages:
                    got = True
                    yield msg
                if auto_commit and result.messages:
                    await self.commit(queue, result.next_begin_offset)
            now = trio.current_time()
            if got:
                idle_since = now
                continue
            wait_ms = poll_ms
            if idle_timeout_ms is not None:
                left_ms = int((idle_since + idle_timeout_ms / 1000 - now) * 1000)
                if left_ms <= 0:
                    return
                wait_ms = min(wait_ms, left_ms)
            await self._wait_any(queues, wait_ms)

    async def _wait_any(self, queues: Sequence[MessageQueue], timeout_ms: int) -> None:
        """Long-poll every queue at once; return when one has a message or time is up.
        Nothing is consumed here (positions are not moved); the caller pulls again."""
        if not queues:
            await trio.sleep(timeout_ms / 1000)
            return
        async with trio.open_nursery() as nursery:
            async def one(queue: MessageQueue) -> None:
                begin = await self._position(queue)
                try:
                    response, _, _ = await self._read(
                        queue.broker_name, "pull", timeout=timeout_ms / 1000 + self.request_timeout,
                        topic=queue.topic, queue_id=queue.queue_id, offset=begin, max_msgs=1,
                        tag_filter=self.tag_filter, timeout_ms=timeout_ms, group=self.group,
                    )
                except TidemqError as e:
                    log.debug("long poll on %s failed: %s", queue, e)
                    await trio.sleep(min(timeout_ms / 1000, 1.0))  # do not spin on a dead group
                    return
                if response.get("messages") or response.get("next_begin_offset", begin) > begin:
                    nursery.cancel_scope.cancel()

            for queue in queues:
                nursery.start_soon(one, queue)

    async def _position(self, queue: MessageQueue) -> int:
        if queue not in self._positions:
            committed = await self.fetch_offset(queue)
            if committed is None:
                committed = await (self.min_offset(queue) if self.start == "first" else self.max_offset(queue))
            self._positions.setdefault(queue, committed)
        return self._positions[queue]

    # ---- offsets ------------------------------------------------------------------------

    async def commit(self, queue: MessageQueue, offset: int) -> bool:
        """Commit the group's next offset for `queue` on the master: True when the master
        has it, False when it is kept here until the master is reachable again."""
        state = await self._state(queue.broker_name)
        self._pending_commits[queue] = offset
        now = trio.current_time()
        if state.master is None or (state.on_slave and now < state.retry_at):
            return False
        try:
            await self.pool.request(state.master, "commit_offset", group=self.group, topic=queue.topic,
                                    queue_id=queue.queue_id, offset=offset)
        except (*UNREACHABLE, ServiceUnavailable) as e:
            self._master_failed(state, e)
            return False
        if self._pending_commits.get(queue) == offset:
            del self._pending_commits[queue]
        if state.on_slave:
            await self._master_back(state)
        return True

    async def flush_commits(self) -> dict[MessageQueue, int]:
        """Try to commit every pending offset now; returns those still pending."""
        for queue, offset in list(self._pending_commits.items()):
            state = await self._state(queue.broker_name)
            if state.master is None:
                continue
            try:
                await self.pool.request(state.master, "commit_offset", group=self.group, topic=queue.topic,
                                        queue_id=queue.queue_id, offset=offset)
            except (*UNREACHABLE, ServiceUnavailable) as e:
                log.debug("pending commit of %s=%d still waits: %s", queue, offset, e)
                continue
            if self._pending_commits.get(queue) == offset:
                del self._pending_commits[queue]
        return dict(self._pending_commits)

    async def fetch_offset(self, queue: MessageQueue) -> int | None:
        """The group's committed offset for `queue` (a pending local commit wins), from the
        master, or from a slave's synced copy while the master is unreachable; None when
        the group never committed one."""
        if queue in self._pending_commits:
            return self._pending_commits[queue]
        try:
            response, _, _ = await self._read(queue.broker_name, "fetch_offset", group=self.group,
                                              topic=queue.topic, queue_id=queue.queue_id)
        except NotFound:
            return None
        return int(response["offset"])

    async def min_offset(self, queue: MessageQueue) -> int:
        response, _, _ = await self._read(queue.broker_name, "min_offset", topic=queue.topic, queue_id=queue.queue_id)
        return int(response["offset"])

    async def max_offset(self, queue: MessageQueue) -> int:
        response, _, _ = await self._read(queue.broker_name, "max_offset", topic=queue.topic, queue_id=queue.queue_id)
        return int(response["offset"])

    # ---- master / slave selection -------------------------------------------------------

    def _learn(self, route: TopicRoute) -> None:
        for group in route.groups:
            state = self._groups.setdefault(group.broker_name, _GroupState(group.broker_name))
            if group.master is not None:
                state.master = group.master.address
            slaves = [b.address for b in group.slaves]
            if slaves:
                state.slaves = slaves

    async def _state(self, broker_name: str) -> _GroupState:
        if broker_name not in self._groups:
            with contextlib.suppress(NotFound):
                self._learn(await self.route(self.topic))
        if broker_name not in self._groups:
            with contextlib.suppress(NotFound):
                self._learn(await self.route(self.topic, refresh=True))
        if broker_name not in self._groups:
            raise NotFound(Status.NOT_FOUND.value, f"no group {broker_name!r} serves topic {self.topic!r}")
        return self._groups[broker_name]

    def _master_failed(self, state: _GroupState, error: TidemqError) -> None:
        now = trio.current_time()
        if state.on_slave and state.retry_at > now:
            return  # a concurrent request already recorded this failure
        state.backoff = self.master_retry_s if not state.on_slave else min(
            max(state.backoff * 2, self.master_retry_s), self.master_retry_max_s)
        if not state.on_slave:
            log.warning("master %s of %s is unreachable (%s); reading from its slaves, retrying the "
                        "master in %.1f s", state.master, state.broker_name, error, state.backoff)
        state.on_slave = True
        state.retry_at = now + state.backoff
        self.invalidate(self.topic)

    async def _master_back(self, state: _GroupState) -> None:
        log.info("master %s of %s answers again; reading from it", state.master, state.broker_name)
        state.on_slave = False
        state.backoff = 0.0
        if any(q.broker_name == state.broker_name for q in self._pending_commits):
            await self.flush_commits()

    async def _read(self, broker_name: str, op: str, *, timeout: float | None = None,
                    **fields: Any) -> tuple[dict[str, Any], str, bool]:
        """`op` on the group's master when it is (or may again be) reachable, else on a
        slave; returns (response, address, answered_by_slave)."""
        state = await self._state(broker_name)
        if state.on_slave and trio.current_time() >= state.retry_at:
            self._learn_quietly(await self._route_or_none())
        try_master = state.master is not None and (not state.on_slave or trio.current_time() >= state.retry_at)
        order = ([state.master] if try_master else []) + [s for s in state.slaves if s != state.master]
        if not order and state.master is not None:
            order = [state.master]
        errors: list[TidemqError] = []
        for address in order:
            assert address is not None
            try:
                response = await self.pool.request(address, op, timeout=timeout, **fields)
            except (*UNREACHABLE, ServiceUnavailable) as e:
                errors.append(e)
                if address == state.master:
                    self._master_failed(state, e)
                continue
            is_master = address == state.master
            if is_master and state.on_slave:
                await self._master_back(state)
            return response, address, not is_master
        self.invalidate(self.topic)
        if not errors:
            raise ConnectionLost(f"group {broker_name} has no known broker")
        raise _with_message(errors[-1], f"no broker of group {broker_name} answered {op}: "
                            + "; ".join(str(e) for e in errors))

    async def _route_or_none(self) -> TopicRoute | None:
        try:
            return await self.route(self.topic)
        except TidemqError:
            return None

    def _learn_quietly(self, route: TopicRoute | None) -> None:
        if route is not None:
            self._learn(route)

    async def _before_close(self) -> None:
        if self._pending_commits:
            with trio.move_on_after(self.connect_timeout + self.request_timeout):
                await self.flush_commits()
            if self._pending_commits:
                log.warning("%d offset commit(s) of group %s could not reach the master and are lost; "
                            "the group will re-read from its last committed offsets",
                            len(self._pending_commits), self.group)


# ---------------------------------------------------------------- Admin


class Admin(_Client):
    """Cluster-wide inspection and operations."""

    def __init__(
        self,
        namesrv: str | Sequence[str] | None = None,
        brokers: Sequence[str] | str | None = None,
        *,
        request_timeout: float = 5.0,
        connect_timeout: float = 3.0,
    ) -> None:
        super().__init__(namesrv, brokers, connect_timeout=connect_timeout,
                         request_timeout=request_timeout, route_ttl_s=0.0)

    async def __aenter__(self) -> Admin:
        return await super().__aenter__()

    async def status(self) -> list[BrokerStatus]:
        """Every known broker's `status` answer (concurrently), or the reason it gave none."""
        infos = await self.cluster_info()
        out: list[BrokerStatus | None] = [None] * len(infos)

        async def one(i: int, info: BrokerInfo) -> None:
            try:
                answer = await self.pool.request(info.address, "status")
            except TidemqError as e:
                out[i] = BrokerStatus(info.address, info.broker_name, info.broker_id, info.role,
                                      error=str(e), registration=info)
                return
            fields = {k: v for k, v in answer.items() if k not in ("id", "status")}
            out[i] = BrokerStatus(info.address, fields.get("broker_name", info.broker_name),
                                  fields.get("broker_id", info.broker_id), fields.get("role", info.role),
                                  status=fields, registration=info)

        async with trio.open_nursery() as nursery:
            for i, info in enumerate(infos):
                nursery.start_soon(one, i, info)
        return [s for s in out if s is not None]

    async def topics(self) -> list[TopicInfo]:
        """Every topic per group, from the masters' registrations (a slave's when its master
        is gone)."""
        by_group: dict[str, BrokerInfo] = {}
        for info in sorted(await self.cluster_info(), key=lambda b: b.broker_id, reverse=True):
            by_group[info.broker_name] = info  # the lowest id (master) wins
        return sorted(
            (TopicInfo(t, name, q.read_queue_nums, q.write_queue_nums, q.perm)
             for name, info in by_group.items() for t, q in info.topics.items()),
            key=lambda t: (t.topic, t.broker_name),
        )

    async def create_topic(
        self,
        topic: str,
        *,
        read_queue_nums: int = 4,
        write_queue_nums: int = 4,
        perm: int = 6,
        broker_names: Iterable[str] | None = None,
    ) -> list[TopicInfo]:
        """Create (or update) the topic on every master (or those of `broker_names`)."""
        wanted = set(broker_names) if broker_names is not None else None
        masters = [b for b in await self.cluster_info()
                   if b.is_master and (wanted is None or b.broker_name in wanted)]
        if not masters:
            raise NotFound(Status.NOT_FOUND.value, "no master to create the topic on")
        out = []
        for master in masters:
            answer = await self.pool.request(master.address, "topic_create", topic=topic,
                                             read_queue_nums=read_queue_nums,
                                             write_queue_nums=write_queue_nums, perm=perm)
            t = answer["topic"]
            out.append(TopicInfo(t["topic"], master.broker_name, t["read_queue_nums"],
                                 t["write_queue_nums"], t["perm"]))
        self.invalidate(topic)
        return out

    async def query_by_key(
        self, topic: str, key: str, *, max_num: int = 32, begin_ts: int = 0, end_ts: int | None = None
    ) -> list[ReceivedMessage]:
        """Messages whose KEYS include `key`, from every group serving the topic (master,
        else a slave), newest first."""
        route = await self.route(topic)
        found: dict[str, ReceivedMessage] = {}
        fields: dict[str, Any] = {"topic": topic, "key": key, "max_num": max_num, "begin_ts": begin_ts}
        if end_ts is not None:
            fields["end_ts"] = end_ts
        for group in route.groups:
            response, _ = await self._read_group(group, "query_by_key", **fields)
            for raw in response.get("messages") or ():
                msg = ReceivedMessage.from_wire(raw, group.broker_name)
                found.setdefault(msg.msg_id, msg)
        messages = sorted(found.values(), key=lambda m: (m.store_timestamp, m.commitlog_offset), reverse=True)
        return messages[:max_num]

    async def get_by_msg_id(self, msg_id: str) -> ReceivedMessage:
        """The message with this offset msgId. The msgId names the broker that stored it,
        which is asked directly; when it does not answer, the other brokers of its group
        (a slave finds its master's msgIds), or every known broker when its group is
        unknown: a node answers only for the exact msgId, so asking others is safe."""
        try:
            address, _ = decode_msg_id(msg_id)
        except ValueError as e:
            raise BadRequest(Status.BAD_REQUEST.value, str(e)) from None
        try:
            infos = await self.cluster_info()
        except TidemqError as e:  # the name server is down: the msgId still names the broker
            log.info("no cluster info (%s); asking %s only", e, address)
            infos = []
        names = {b.address: b.broker_name for b in infos}
        home = names.get(address)
        others = sorted((b for b in infos if b.address != address and home in (None, b.broker_name)),
                        key=lambda b: (b.broker_name != home, b.broker_id))
        errors: list[TidemqError] = []
        for candidate in [address, *(b.address for b in others)]:
            try:
                response = await self.pool.request(candidate, "get_by_msg_id", msg_id=msg_id)
            except NotFound as e:
                if candidate == address:
                    raise  # the broker that stored it no longer has it
                errors.append(e)
                continue
            except (*UNREACHABLE, ServiceUnavailable) as e:
                errors.append(e)
                continue
            return ReceivedMessage.from_wire(response["message"], names.get(candidate, home))
        not_found = [e for e in errors if isinstance(e, NotFound)]
        last = not_found[-1] if not_found else errors[-1]
        raise _with_message(last, f"message {msg_id} not found: "
                            + "; ".join(str(e) for e in errors))

    async def _queue_read(self, queue: MessageQueue, op: str, **fields: Any) -> dict[str, Any]:
        route = await self.route(queue.topic)
        group = route.group(queue.broker_name)
        if group is None:
            raise NotFound(Status.NOT_FOUND.value, f"group {queue.broker_name!r} does not serve {queue.topic!r}")
        response, _ = await self._read_group(group, op, topic=queue.topic, queue_id=queue.queue_id, **fields)
        return response

    async def offset_by_time(self, queue: MessageQueue, timestamp_ms: int) -> int:
        """The first logical offset stored at or after `timestamp_ms`."""
        return int((await self._queue_read(queue, "offset_by_time", timestamp=timestamp_ms))["offset"])

    async def min_offset(self, queue: MessageQueue) -> int:
        return int((await self._queue_read(queue, "min_offset"))["offset"])

    async def max_offset(self, queue: MessageQueue) -> int:
        return int((await self._queue_read(queue, "max_offset"))["offset"])

    async def delete_expired_files(self, broker: str) -> int:
        """Run the expired-file cleanup now on `broker` (an address, or a brokerName for its
        master); returns the number of CommitLog files removed."""
        address = broker
        if ":" not in broker:
            master = next((b for b in await self.cluster_info() if b.broker_name == broker and b.is_master), None)
            if master is None:
                raise NotFound(Status.NOT_FOUND.value, f"no master of {broker!r} is known")
            address = master.address
        return int((await self.pool.request(address, "admin.delete_expired_files"))["deleted_files"])

