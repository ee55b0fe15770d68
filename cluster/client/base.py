"""What the client library's Producer, PullConsumer and Admin share: the data they return,
constants, and `_Client` (discovery, the connection pool, the nursery)."""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

import attrs
import trio

from wire.client import (
    ConnectionLost,
    ConnectionPool,
    ServiceUnavailable,
    TidemqError,
    block_nursery,
)
from wire.options import ConnectOptions
from wire.protocol import BatchMessage, Status, StatusReply, WireMessage, WireRequest

from .routing import (
    UNREACHABLE,
    BrokerInfo,
    Discovery,
    GroupRoute,
    MessageQueue,
    NameServerDiscovery,
    StaticDiscovery,
    TopicRoute,
    parse_addresses,
)

log = logging.getLogger("tidemq.client")


ROUTE_TTL_S = 30.0
"""How long a route is used before it is fetched again (RocketMQ polls every 30 s)."""
CLIENT_OPTIONS = ConnectOptions(connect_timeout=3.0, request_timeout=5.0)
"""What PullConsumer, Admin and the push Consumer connect with unless told otherwise (the
Producer's requests, its sends, time out after 3 s)."""
FAULT_BACKOFF_S = 5.0
"""A master that refused a connection or a write (SERVICE_NOT_AVAILABLE) is avoided this long by
the producer (its route is fetched again meanwhile: producer.ROUTE_RECHECK_S)."""
STORED = {Status.PUT_OK, Status.FLUSH_DISK_TIMEOUT, Status.FLUSH_SLAVE_TIMEOUT, Status.SLAVE_NOT_AVAILABLE}
"""Send statuses meaning the message is stored on the master."""


# ---------------------------------------------------------------- data


@attrs.frozen
class OutgoingMessage:
    """A message a client sends, in a batch (for single sends, pass the fields to `send`);
    not store.message.Message, the store's record of it. ReceivedMessage is the other way."""

    body: bytes | str
    tags: str | None = None
    keys: Sequence[str] = ()
    properties: Mapping[str, str] | None = None
    flag: int = 0

    def to_request(self) -> BatchMessage:
        """The protocol's message (a `send_batch` entry; `send` takes the same fields)."""
        return BatchMessage(body=_body(self.body), tags=self.tags, keys=list(self.keys),
                            properties=dict(self.properties or {}), flag=self.flag)


@attrs.frozen
class SendResult:
    """Where a message was stored. `status` is one of STORED: PUT_OK, or a status saying the
    message is on the master but the flush / slave copy was not confirmed in time.
    For a batch, `msg_id` is the first message's and `msg_ids` has them all.
    `unknown_attempts`: earlier attempts of this send whose outcome was unknown (a timeout, a
    connection lost in flight, INDETERMINATE): each may have stored the message too, so it
    may be stored up to that many more times (at least once, as with RocketMQ's retries)."""

    status: Status
    msg_id: str
    broker_name: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    msg_ids: tuple[str, ...] = ()
    address: str = ""
    unknown_attempts: int = 0
    transaction_id: str | None = None  # a prepared send's `__transactionId__`, which its END names

    @property
    def ok(self) -> bool:
        return self.status is Status.PUT_OK

    def to_json(self) -> dict[str, Any]:
        out = attrs.asdict(self)
        out["status"] = self.status.value
        out["msg_ids"] = list(self.msg_ids)
        if self.transaction_id is None:  # a prepared send's only
            del out["transaction_id"]
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
    size: int | None = None  # the CommitLog record's total size
    sys_flag: int | None = None
    born_host: str | None = None
    body_crc: int | None = None  # the CRC the store holds for the body (a reader may recheck it)

    @property
    def queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name or "", self.queue_id)

    @classmethod
    def from_wire(cls, m: WireMessage, broker_name: str | None) -> ReceivedMessage:
        """The protocol's message (wire/protocol/values.py) as the group `broker_name` served it."""
        return cls(topic=m.topic, queue_id=m.queue_id, queue_offset=m.queue_offset,
                   commitlog_offset=m.commitlog_offset, msg_id=m.msg_id, body=m.body, tags=m.tags,
                   keys=tuple(m.keys or ()), properties=dict(m.properties or {}), born_timestamp=m.born_timestamp,
                   store_timestamp=m.store_timestamp, flag=m.flag, reconsume_times=m.reconsume_times,
                   broker_name=broker_name, size=m.size, sys_flag=m.sys_flag, born_host=m.born_host,
                   body_crc=m.body_crc)


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
    """A broker's answer to `status` or why it gave none."""

    address: str
    broker_name: str | None
    broker_id: int | None
    role: str | None
    status: StatusReply | None = None
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
            "status": self.status.to_json() if self.status is not None else None,
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


class _LifeCycle:
    """An async context manager whose life is one `_running()` context (an
    asynccontextmanager that subclasses extend): entering enters it, leaving leaves it,
    so a class keeps trio's nurseries properly nested without entering them by hand."""

    _stack: contextlib.AsyncExitStack | None = None

    def _running(self) -> contextlib.AbstractAsyncContextManager[None]:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        if self._stack is not None:
            raise RuntimeError(f"{type(self).__name__} is already in use: enter it once")
        stack = contextlib.AsyncExitStack()
        await stack.enter_async_context(self._running())
        self._stack = stack
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        stack, self._stack = self._stack, None
        if stack is None:
            raise RuntimeError(f"{type(self).__name__}: leaving a context that was not entered")
        return await stack.__aexit__(exc_type, exc, tb)


class _Client(_LifeCycle):
    """What Producer, PullConsumer and Admin share: a nursery, a connection pool, a
    discovery (name servers or a broker list) and a route cache."""

    def __init__(
        self,
        namesrv: str | Sequence[str] | None,
        brokers: Sequence[str] | str | None,
        *,
        options: ConnectOptions,
        route_ttl_s: float,
    ) -> None:
        self.options = options  # timeouts, login, TLS and network of every connection (wire/options.py)
        self._namesrv = parse_addresses(namesrv, "a name server address")
        self._brokers = parse_addresses(brokers, "a broker address")
        if bool(self._namesrv) == bool(self._brokers):
            raise ValueError("give either namesrv (name server addresses) or brokers (broker addresses)")
        self.route_ttl_s = route_ttl_s
        self._routes: dict[str, tuple[float, TopicRoute]] = {}
        self._pool: ConnectionPool | None = None
        self._discovery: Discovery | None = None

    @contextlib.asynccontextmanager
    async def _running(self) -> AsyncIterator[None]:
        """The client's life: its pool and discovery in a nursery of its own around the
        caller's block (subclasses wrap it with what they run beside). The block's exception
        comes back as it was raised, not in trio's group, so `except ConnectionLost:` around
        the `async with` works (wire.client.block_nursery)."""
        async with block_nursery() as nursery:
            pool = self._pool = ConnectionPool(nursery, self.options)
            if self._namesrv:
                self._discovery = NameServerDiscovery(self._namesrv, pool)
            else:
                self._discovery = StaticDiscovery(self._brokers, pool)
            try:
                yield
            finally:
                with trio.CancelScope(shield=True):  # flush and close even when the block was cancelled
                    try:
                        await self._before_close()
                    except TidemqError as e:
                        log.warning("%s: closing: %s", type(self).__name__, e)
                    await pool.aclose()
                self._pool = self._discovery = None

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

    def route_age(self, topic: str) -> float:
        """Seconds since the topic's cached route was fetched (inf: none cached)."""
        cached = self._routes.get(topic)
        return math.inf if cached is None else trio.current_time() - cached[0]

    def invalidate(self, topic: str) -> None:
        """Fetch the topic's route again at its next use (after an error)."""
        self._routes.pop(topic, None)

    async def cluster_info(self) -> list[BrokerInfo]:
        """Every broker the discovery knows, with its last registration (or probe) data."""
        return await self.discovery.cluster_info()

    async def _read_group(self, group: GroupRoute, request: WireRequest, /, *,
                          timeout: float | None = None) -> tuple[Any, str]:
        """A read on the group's master, else on its slaves (reads work on both)."""
        candidates = [b.address for b in ([group.master] if group.master else []) + list(group.slaves)]
        errors: list[TidemqError] = []
        for address in candidates:
            try:
                return await self.pool.call(address, request, timeout=timeout), address
            except (*UNREACHABLE, ServiceUnavailable) as e:
                errors.append(e)
        if not errors:
            raise ConnectionLost(f"group {group.broker_name} has no broker in its route")
        raise _with_message(errors[-1], f"no broker of group {group.broker_name} answered {request.OP}: "
                            + "; ".join(str(e) for e in errors))
