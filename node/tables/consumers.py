"""ConsumerManager: the live members of each consumer group (RocketMQ's ConsumerManager).

Members heartbeat (`consumer_heartbeat`) with the interval they use; a member not heard
from for `channelExpiredTimeout` (120 s, as RocketMQ drops a silent channel) is dropped,
though never before 2 of its own heartbeats + 10 s. A paused member (SIGSTOP, its
connection open) is dropped then, and members waiting on a change are woken at that moment.
A clean close unregisters at once, and so does the close of the connection a member last
heartbeated on (`disconnected`: RocketMQ's channel close). The
table lives in memory only: after a node restart the members' next heartbeats rebuild it.

Every change of a group (a member joins or leaves, a queue lock is let go) bumps its
version; `wait_changed` returns when the version passes the one a member saw, which is how
members hear of a change at once (`consumer_watch`, RocketMQ's NOTIFY_CONSUMER_IDS_CHANGED)
instead of at their next rebalance. `listeners` hear of membership changes (a join, a
leave, a drop) synchronously, as they are recorded: the remoting layer pushes RocketMQ's
NOTIFY_CONSUMER_IDS_CHANGED from there. A silent member's drop is recorded on the next access
to its group (the members' heartbeats, their rebalances' member lists, a watch's wake-up).
A BROADCASTING member (it reads every queue itself) is listed but is no membership change:
its join or leave moves no queue, so it bumps nothing and tells no one.

Queue locks (RocketMQ's RebalanceLockManager) make "one owner per queue" hold while a
queue changes hands: a member locks a queue here before it consumes it and unlocks it
after it has committed its offset. A lock belongs to its member while that member is
live; it goes with the member's unregistration or expiry. A lock may also be given a life
(`life_s`: RocketMQ's 60 s REBALANCE_LOCK_MAX_LIVE_TIME, for orderly members, which re-lock
every 20 s): once that passes without a re-lock, another member may take the queue. Such a
lock is a lease: it outlives its holder's connection and its expiry from the group (a
member whose connection broke, or that was paused, may still consume within its lease;
RocketMQ's RebalanceLockManager ignores connections too) and goes early only with the
holder's clean unregistration.

Locks live in memory on the master only: a promoted slave (or a master restarted over its
data) starts with an empty table while members may still consume under leases the old
table granted. Orderly members trust a lease for `CLIENT_LOCK_LIFE_S` (30 s) from the moment
they asked for it, so a new table is fenced that long (`fence_s`): a leased lock is granted
only to a member that says it held the queue (`renew`); a member that never held it waits
for the fence to end. The old table gave a queue to one member at a time, so at most one
member can claim it, and no two members hold one queue across the change
(docs/consumer-groups.md, "Orderly consumption").
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

import attrs
import trio

from wire.protocol import CLIENT_LOCK_LIFE_MS, LOCK_LIFE_MS

log = logging.getLogger("tidemq.node")

__all__ = ["CHANNEL_EXPIRED_S", "CLIENT_LOCK_LIFE_S", "EXPIRE_EXTRA_S", "LOCK_FENCE_S", "LOCK_LIFE_S",
           "ConsumerManager", "MemberInfo"]

CHANNEL_EXPIRED_S = 120.0
"""RocketMQ's channelExpiredTimeout: a member silent this long is dropped (the node's
`channelExpiredTimeout` key sets it)."""
EXPIRE_EXTRA_S = 10.0
"""Slack added to two of a member's heartbeat intervals: it is never dropped before that."""
LOCK_LIFE_S = LOCK_LIFE_MS / 1000
"""RocketMQ's REBALANCE_LOCK_MAX_LIVE_TIME (broker side): a leased lock not renewed lapses."""
CLIENT_LOCK_LIFE_S = CLIENT_LOCK_LIFE_MS / 1000
"""How long an orderly member trusts a granted lock, counted from when it asked (RocketMQ's
client-side 30 s: shorter than the broker's, so it stops first)."""
LOCK_FENCE_S = CLIENT_LOCK_LIFE_S
"""A new master's lock table grants leases only to their claimed holders this long."""


@attrs.define
class MemberInfo:
    """One member of a group as its last heartbeat described it."""

    client_id: str
    topics: tuple[str, ...]
    heartbeat_interval_ms: int
    last_seen: float  # monotonic seconds
    peer: str | None = None
    """The client address of the connection it last heartbeated on."""
    broadcasting: bool = False
    """A BROADCASTING member reads every queue itself: listed, never in an allocation."""

    def expires_at(self, expire_s: float) -> float:
        """When it is dropped unless it heartbeats again (the manager's clock)."""
        return self.last_seen + max(expire_s, 2 * self.heartbeat_interval_ms / 1000 + EXPIRE_EXTRA_S)

    def to_wire(self, now: float) -> dict[str, object]:
        return {
            "client_id": self.client_id,
            "topics": list(self.topics),
            "heartbeat_interval_ms": self.heartbeat_interval_ms,
            "silent_ms": int((now - self.last_seen) * 1000),
            "address": self.peer,
            "message_model": "BROADCASTING" if self.broadcasting else "CLUSTERING",
        }


class ConsumerManager:
    """group → client id → MemberInfo; expired members are dropped on every access."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, expire_s: float = CHANNEL_EXPIRED_S,
                 fence_s: float = 0.0) -> None:
        self.clock = clock
        self.expire_s = expire_s
        self.fenced_until = clock() + fence_s
        """Until then a leased lock goes only to a member that renews it (module docstring)."""
        self._groups: dict[str, dict[str, MemberInfo]] = {}
        self._locks: dict[tuple[str, str, int], str] = {}  # (group, topic, queue id) → client id
        self._versions: dict[str, int] = {}
        self._changed: dict[str, trio.Event] = {}
        self._lock_until: dict[tuple[str, str, int], float] = {}  # locks with a life: when it ends
        self.listeners: list[Callable[[str], None]] = []
        """Called with the group on each membership change, after the version bump; they
        must not call back into the table (it may be mid-update)."""

    # ---- change notices -----------------------------------------------------------------

    def version(self, group: str) -> int:
        """Bumped on every change of the group's members or locks."""
        self._expire(group)
        return self._versions.get(group, 0)

    def _bump(self, group: str) -> None:
        self._versions[group] = self._versions.get(group, 0) + 1
        event = self._changed.pop(group, None)
        if event is not None:
            event.set()

    def _members_changed(self, group: str) -> None:
        self._bump(group)
        for listener in self.listeners:
            try:
                listener(group)
            except Exception:
                log.exception("consumer group %s: a membership listener failed", group)

    async def wait_changed(self, group: str, since: int) -> int:
        """Return the group's version once it is not `since` (at once when it already is
        not); the caller bounds the wait (a long poll's deadline)."""
        while (current := self.version(group)) == since:
            # a silent member's expiry is a change too: wake then, not at the next access
            expiry = min((m.expires_at(self.expire_s) for m in self._groups.get(group, {}).values()),
                         default=math.inf)
            with trio.move_on_at(trio.current_time() + (expiry - self.clock())):
                await self._changed.setdefault(group, trio.Event()).wait()
        return current

    def disconnected(self, peer: str | None) -> None:
        """A client connection closed: drop the members that heartbeated on it (a member
        that still lives joins again with its next heartbeat)."""
        gone = [(g, c) for g, members in self._groups.items() for c, m in members.items()
                if peer is not None and m.peer == peer]
        for group, client_id in gone:
            log.info("consumer group %s: member %s's connection %s closed", group, client_id, peer)
            self.unregister(group, client_id, keep_leases=True)

    def heartbeat(self, group: str, client_id: str, topics: list[str], heartbeat_interval_ms: int,
                  peer: str | None = None, *, broadcasting: bool = False) -> list[str]:
        """Register or refresh a member; returns the group's live clustering members, sorted."""
        now = self.clock()
        self._expire(group)
        members = self._groups.setdefault(group, {})
        before = members.get(client_id)
        members[client_id] = MemberInfo(client_id, tuple(topics), heartbeat_interval_ms, now, peer, broadcasting)
        if before is None:
            log.info("consumer group %s: member %s joined (topics %s%s)", group, client_id, ", ".join(topics),
                     "; broadcasting" if broadcasting else "")
        if (before is None and not broadcasting) or (before is not None and before.broadcasting != broadcasting):
            self._members_changed(group)
        return self.members(group)

    def unregister(self, group: str, client_id: str, *, keep_leases: bool = False) -> bool:
        """Drop a member at once (its clean close); False when it was not registered.
        `keep_leases`: its leased locks stay until they lapse (its connection broke, it
        may still be consuming)."""
        members = self._groups.get(group, {})
        info = members.pop(client_id, None)
        if info is None:
            return False
        log.info("consumer group %s: member %s left", group, client_id)
        self._drop_locks(group, client_id, keep_leases=keep_leases)
        if not members:
            self._groups.pop(group, None)
        if not info.broadcasting:
            self._members_changed(group)
        return True

    def _expire(self, group: str) -> dict[str, MemberInfo]:
        members = self._groups.get(group, {})
        now = self.clock()
        for client_id, info in list(members.items()):
            if now >= info.expires_at(self.expire_s):
                log.warning("consumer group %s: member %s silent for %.1f s; dropped",
                            group, client_id, now - info.last_seen)
                del members[client_id]
                self._drop_locks(group, client_id, keep_leases=True)  # a paused member may wake within its lease
                if not info.broadcasting:
                    self._members_changed(group)
        if not members:
            self._groups.pop(group, None)
        return members

    def members(self, group: str) -> list[str]:
        """The group's live clustering members' client ids, sorted (the order allocation
        uses): a broadcasting member reads every queue itself, so it takes no share."""
        return sorted(c for c, m in self._expire(group).items() if not m.broadcasting)

    def subscribes(self, group: str, topic: str) -> bool:
        """Whether a live member of `group` subscribes to `topic` here."""
        return any(topic in m.topics for m in self._expire(group).values())

    def describe(self, group: str) -> list[dict[str, object]]:
        now = self.clock()
        members = self._expire(group)
        return [members[c].to_wire(now) for c in sorted(members)]

    def groups(self) -> list[str]:
        for group in list(self._groups):
            self._expire(group)
        return sorted(self._groups)

    # ---- queue locks ------------------------------------------------------------------

    def _drop_locks(self, group: str, client_id: str, *, keep_leases: bool = False) -> None:
        for key in [k for k, holder in self._locks.items() if k[0] == group and holder == client_id]:
            if keep_leases and key in self._lock_until:
                continue
            del self._locks[key]
            self._lock_until.pop(key, None)

    def _lock_lapsed(self, key: tuple[str, str, int], now: float) -> bool:
        until = self._lock_until.get(key)
        return until is not None and now >= until

    def lock(self, group: str, client_id: str, topic: str, queue_ids: list[int],
             life_s: float | None = None, *, renew: bool = False) -> list[int]:
        """Lock what is free (or already ours) for a live member; the queue ids it now holds.
        With `life_s` the lock is a lease that lapses that long after this call unless taken
        again; while the table is fenced a lease goes only to a member that `renew`s it."""
        live = self._expire(group)
        if client_id not in live:
            return []
        now = self.clock()
        fenced = life_s is not None and not renew and now < self.fenced_until
        held = []
        for qid in queue_ids:
            key = (group, topic, qid)
            holder = self._locks.get(key)
            if holder == client_id or (not fenced and (
                    holder is None or self._lock_lapsed(key, now)
                    or (holder not in live and key not in self._lock_until))):
                self._locks[key] = client_id
                if life_s is None:
                    self._lock_until.pop(key, None)
                else:
                    self._lock_until[key] = now + life_s
                held.append(qid)
        return held

    def unlock(self, group: str, client_id: str, topic: str, queue_ids: list[int]) -> None:
        freed = False
        for qid in queue_ids:
            key = (group, topic, qid)
            if self._locks.get(key) == client_id:
                del self._locks[key]
                self._lock_until.pop(key, None)
                freed = True
        if freed:  # a member waiting for one of them takes it now
            self._bump(group)

    def lock_holders(self, group: str) -> dict[str, str]:
        """"topic:queueId" → holder, for status and tests."""
        live = self._expire(group)
        now = self.clock()
        return {f"{t}:{q}": c for (g, t, q), c in sorted(self._locks.items())
                if g == group and (c in live or (g, t, q) in self._lock_until) and not self._lock_lapsed((g, t, q), now)}
