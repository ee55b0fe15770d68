"""Consumer-group membership and queue allocation (RocketMQ's RebalanceImpl, RebalanceService
and the client's heartbeat).

`allocate_averagely` is AllocateMessageQueueAveragely: queues and members sorted, each
member a contiguous slice, the first `n % m` members one queue more. `RebalanceService`
keeps one member of a group alive on every master serving its topics (heartbeat each
`heartbeat_interval_s`), learns the group's members from the answers (the union of what
the masters that answered report), and re-allocates each topic's queues at once when the
members change, and every `rebalance_interval_s` anyway (a route change: a group of
brokers gone or back). Queues it loses are released first (the owner commits its offset
before letting go) and unlocked on their masters; the ones it gains are locked on their
masters (RocketMQ's RebalanceLockManager) and acquired once granted, so a queue never has
two owners while its master is up; one still locked by its previous owner is tried again
after a heartbeat interval. `close()` releases everything
and unregisters from every master.

Members do not wait for those intervals to hear of a change: each keeps a `consumer_watch`
long poll on every master (RocketMQ's NOTIFY_CONSUMER_IDS_CHANGED, as a parked request on
the member's own connection). A master answers it when the group changes (a member joined,
left, or its connection closed; a queue lock was let go), and the member heartbeats and
rebalances at once; the intervals stay as the safety net, and a master without the op
(an older node) is simply not watched.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Sequence

import trio

from wire.client import BadRequest, ConnectionLost, ServiceUnavailable, TidemqError
from wire.protocol import (
    ConsumerHeartbeat,
    ConsumerLock,
    ConsumerUnlock,
    ConsumerUnregister,
    ConsumerWatch,
    LockReply,
    MembersReply,
)

from .consumer import PullConsumer
from .routing import UNREACHABLE, MessageQueue

log = logging.getLogger("tidemq.client")

__all__ = ["HEARTBEAT_INTERVAL_S", "REBALANCE_INTERVAL_S", "RebalanceService", "allocate_averagely",
           "new_client_id"]

HEARTBEAT_INTERVAL_S = 30.0
"""RocketMQ's heartbeatBrokerInterval."""
REBALANCE_INTERVAL_S = 20.0
"""RocketMQ's rocketmq.client.rebalance.waitInterval."""
WATCH_MS = 30_000
"""How long one `consumer_watch` long poll waits on a master before it is asked again."""
WATCH_RETRY_S = 1.0
"""After a failed watch (the master is down or restarting) it is asked again this soon."""

QueueCallback = Callable[[PullConsumer, MessageQueue], Awaitable[None]]


def allocate_averagely(queues: Sequence[MessageQueue], members: Sequence[str], me: str) -> list[MessageQueue]:
    """The queues `me` owns among `members` (AllocateMessageQueueAveragely); none when
    `me` is not a member."""
    all_queues = sorted(queues)
    ids = sorted(members)
    if me not in ids or not all_queues:
        return []
    n, m, i = len(all_queues), len(ids), ids.index(me)
    mod = n % m
    size = 1 if n <= m else (n // m + 1 if i < mod else n // m)
    start = i * size if i < mod else i * size + mod
    return all_queues[start:start + min(size, n - start)] if start < n else []


def new_client_id() -> str:
    """`ip@pid@token`: unique per member even with several in one process."""
    try:
        ip = socket.gethostbyname(socket.gethostname())
    except OSError:
        ip = "127.0.0.1"
    return f"{ip}@{os.getpid()}@{uuid.uuid4().hex[:8]}"


class RebalanceService:
    """One member's heartbeats and allocation over the topics of `consumers` (one
    PullConsumer per subscribed topic, all of `group`); see the module docstring."""

    def __init__(
        self,
        group: str,
        consumers: Sequence[PullConsumer],
        *,
        acquire: QueueCallback,
        release: QueueCallback,
        client_id: str | None = None,
        heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S,
        rebalance_interval_s: float = REBALANCE_INTERVAL_S,
    ) -> None:
        if heartbeat_interval_s <= 0 or rebalance_interval_s <= 0:
            raise ValueError("heartbeat and rebalance intervals must be > 0")
        self.group = group
        self.consumers = list(consumers)
        self.acquire = acquire
        self.release = release
        self.client_id = client_id or new_client_id()
        self.heartbeat_interval_s = heartbeat_interval_s
        self.rebalance_interval_s = rebalance_interval_s
        self.members: list[str] = []
        self.assigned: dict[str, set[MessageQueue]] = {c.topic: set() for c in self.consumers}
        self.pending: dict[str, set[MessageQueue]] = {}  # allocated, but locked by another member
        self.rebalances = 0
        self._masters: set[str] = set()
        self._watched: set[str] = set()
        self._nursery: trio.Nursery | None = None
        self._wake = trio.Event()
        self._lock = trio.Lock()
        self._closed = False

    @property
    def owned(self) -> set[MessageQueue]:
        return set().union(*self.assigned.values())

    def trigger(self) -> None:
        """Rebalance now rather than at the next interval."""
        self._wake.set()

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Heartbeat and rebalance until cancelled; `started` after the first allocation."""
        await self.heartbeat()
        await self.rebalance()
        task_status.started()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._watch_masters()
            nursery.start_soon(self._heartbeat_loop)
            while True:
                waiting = any(self.pending.values())  # the previous owner lets go at its next heartbeat
                with trio.move_on_after(self.heartbeat_interval_s if waiting else self.rebalance_interval_s):
                    await self._wake.wait()
                self._wake = trio.Event()
                await self.rebalance()

    async def _heartbeat_loop(self) -> None:
        while True:
            await trio.sleep(self.heartbeat_interval_s)
            await self.heartbeat()

    def _watch_masters(self) -> None:
        """A `consumer_watch` long poll on every master heartbeated to (once each)."""
        if self._nursery is None:
            return
        for address in sorted(self._masters - self._watched):
            self._watched.add(address)
            self._nursery.start_soon(self._watch, address)

    async def _watch(self, address: str) -> None:
        """Rebalance as soon as `address` says the group changed (see the module docstring)."""
        pool = self.consumers[0].pool
        timeout = WATCH_MS / 1000 + self.consumers[0].options.request_timeout
        version, failures = -1, 0
        while not self._closed:
            try:
                answer: MembersReply = await pool.call(address, ConsumerWatch(group=self.group, since=version, timeout_ms=WATCH_MS),
                                            timeout=timeout)
            except BadRequest:  # a node without the op: the intervals alone
                log.info("group %s: %s cannot notify changes; rebalancing on the intervals", self.group, address)
                return
            except (*UNREACHABLE, ServiceUnavailable) as e:
                # the connection broke (the master dropped this member with it): ask again at
                # once on a new one, whose answer re-registers it; then back off
                log.debug("consumer_watch on %s failed: %s", address, e)
                failures += 1
                if failures > 1:
                    await trio.sleep(WATCH_RETRY_S)
                continue
            failures = 0
            changed = version != -1 and answer.version != version
            version = answer.version
            if changed and not self._closed:
                await self.heartbeat()  # the members as every master sees them now
                self.trigger()

    async def _master_addresses(self) -> set[str]:
        masters: set[str] = set()
        for consumer in self.consumers:
            try:
                route = await consumer.route(consumer.topic)
            except TidemqError as e:
                log.debug("no route for %s: %s", consumer.topic, e)
                continue
            masters.update(g.master.address for g in route.groups if g.master is not None)
        self._masters |= masters  # a master the route dropped may come back: keep telling it
        self._watch_masters()
        return masters or set(self._masters)

    async def heartbeat(self) -> None:
        """Tell every master of the topics this member is alive; learn the members."""
        topics = [c.topic for c in self.consumers]
        pool = self.consumers[0].pool
        answers: list[list[str]] = []

        async def one(address: str) -> None:
            try:
                response: MembersReply = await pool.call(address, ConsumerHeartbeat(
                    group=self.group, client_id=self.client_id, topics=topics,
                    heartbeat_interval_ms=int(self.heartbeat_interval_s * 1000)))
            except (*UNREACHABLE, ServiceUnavailable) as e:
                log.debug("heartbeat to %s failed: %s", address, e)
                return
            answers.append(list(response.members))

        async with trio.open_nursery() as nursery:
            for address in await self._master_addresses():
                nursery.start_soon(one, address)
        if not answers:
            log.warning("group %s: no master answered the heartbeat; keeping %d member(s) and the "
                        "current queues", self.group, len(self.members))
            return
        members = sorted(set().union(*answers))
        if members != self.members:
            log.info("group %s: members %s", self.group, members)
            self.members = members
            self.trigger()

    async def rebalance(self) -> None:
        """Allocate every topic's queues over the current members: release, then acquire."""
        async with self._lock:
            if self._closed or not self.members:
                return
            self.rebalances += 1
            for consumer in self.consumers:
                try:
                    queues = await consumer.queues(refresh=True)
                except TidemqError as e:
                    log.warning("group %s: cannot list the queues of %s (%s); keeping them",
                                self.group, consumer.topic, e)
                    continue
                mine = set(allocate_averagely(queues, self.members, self.client_id))
                await self._apply(consumer, mine)

    async def _apply(self, consumer: PullConsumer, mine: set[MessageQueue]) -> None:
        current = self.assigned[consumer.topic]
        lost, gained = current - mine, mine - current
        for queue in sorted(lost):
            await self.release(consumer, queue)  # committed before the lock goes
            current.discard(queue)
        await self._lock_call(consumer, lost, ConsumerUnlock)
        kept = await self._lock_call(consumer, current, ConsumerLock)  # keep ours (a master restarted)
        for queue in sorted(current - kept):  # another member holds it now (this one was dropped
            await self.release(consumer, queue)  # meanwhile, e.g. its connection broke): let go,
            current.discard(queue)  # and take it back only once it is free again
            gained.add(queue)
        granted = await self._lock_call(consumer, gained, ConsumerLock)
        self.pending[consumer.topic] = gained - granted
        for queue in sorted(granted):
            await self.acquire(consumer, queue)
            current.add(queue)
        if lost or granted:
            log.info("group %s member %s: %s now owns %s", self.group, self.client_id, consumer.topic,
                     ", ".join(str(q) for q in sorted(current)) or "nothing")

    async def _lock_call(self, consumer: PullConsumer, queues: set[MessageQueue],
                         op: type[ConsumerLock | ConsumerUnlock]) -> set[MessageQueue]:
        """Lock (or unlock) queues on their masters; the queues granted. A master that
        cannot be reached grants nothing and refuses nothing: its queues are taken on
        the allocation alone (the group's master is down; its slave serves reads)."""
        granted: set[MessageQueue] = set()
        for broker_name in sorted({q.broker_name for q in queues}):
            mine = sorted(q for q in queues if q.broker_name == broker_name)
            try:
                master = await consumer.master_address(broker_name)
                if master is None:
                    raise ConnectionLost(f"no master of {broker_name} is known")
                reply = await consumer.pool.call(master, op(
                    group=self.group, client_id=self.client_id, topic=consumer.topic,
                    queue_ids=[q.queue_id for q in mine]))
            except (*UNREACHABLE, ServiceUnavailable) as e:
                log.info("group %s: %s on %s not possible (%s); going by the allocation",
                         self.group, op.OP, broker_name, e)
                granted.update(mine)
                continue
            locked = set(reply.locked) if isinstance(reply, LockReply) else {q.queue_id for q in mine}
            granted.update(q for q in mine if q.queue_id in locked)
        return granted

    async def close(self) -> None:
        """Release every queue (committing), then unregister from every master."""
        async with self._lock:
            self._closed = True
            for consumer in self.consumers:
                await self._apply(consumer, set())
        pool = self.consumers[0].pool

        async def one(address: str) -> None:
            try:
                await pool.request(address, ConsumerUnregister(group=self.group, client_id=self.client_id))
            except (*UNREACHABLE, ServiceUnavailable) as e:
                log.debug("unregister at %s failed: %s", address, e)

        with trio.move_on_after(self.consumers[0].options.connect_timeout + self.consumers[0].options.request_timeout):
            async with trio.open_nursery() as nursery:
                for address in self._masters:
                    nursery.start_soon(one, address)
