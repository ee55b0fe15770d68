"""ProducerManager: the live producers of each producer group (RocketMQ's ProducerManager).

A producer built with a group (cluster.client.Producer(group=...)) heartbeats every master
it may send to (`producer_heartbeat`, every 30 s by default) and unregisters when it closes
(`producer_unregister`); `producer_list` (mqadmin producerConnection) shows who is live.
Nothing is tracked per message: sends do not name a group. A producer not heard from for
`channelExpiredTimeout` (120 s, RocketMQ's), and never before 2 of its own heartbeats + 10 s,
is dropped, so a killed producer leaves the list within that time; one whose connection
closes leaves at once. The table lives in memory
only: after a node restart the producers' next heartbeats rebuild it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import attrs

log = logging.getLogger("tidemq.node")

__all__ = ["ProducerInfo", "ProducerManager"]

CHANNEL_EXPIRED_S = 120.0
EXPIRE_EXTRA_S = 10.0


@attrs.define
class ProducerInfo:
    """One producer as its last heartbeat described it."""

    client_id: str
    heartbeat_interval_ms: int
    last_seen: float  # the manager's clock
    peer: str | None = None  # the client address of the connection it last heartbeated on

    def expires_at(self, expire_s: float) -> float:
        return self.last_seen + max(expire_s, 2 * self.heartbeat_interval_ms / 1000 + EXPIRE_EXTRA_S)

    def to_wire(self, now: float) -> dict[str, object]:
        return {"client_id": self.client_id, "address": self.peer,
                "heartbeat_interval_ms": self.heartbeat_interval_ms, "silent_ms": int((now - self.last_seen) * 1000)}


class ProducerManager:
    """group → client id → ProducerInfo; expired producers are dropped on every access."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, expire_s: float = CHANNEL_EXPIRED_S) -> None:
        self.clock = clock
        self.expire_s = expire_s
        self._groups: dict[str, dict[str, ProducerInfo]] = {}

    def heartbeat(self, group: str, client_id: str, heartbeat_interval_ms: int, peer: str | None = None) -> None:
        members = self._groups.setdefault(group, {})
        if client_id not in members:
            log.info("producer group %s: producer %s (%s) is live", group, client_id, peer)
        members[client_id] = ProducerInfo(client_id, heartbeat_interval_ms, self.clock(), peer)

    def seen(self, group: str, client_id: str, peer: str | None, interval_ms: int) -> None:
        """A producer is live on `peer` without a heartbeat (its transaction_check_watch): a
        listed one is refreshed, keeping its own interval; another is listed with
        `interval_ms` (a new master hears of it before the producer's next heartbeat)."""
        known = self._groups.get(group, {}).get(client_id)
        if known is None:
            self.heartbeat(group, client_id, interval_ms, peer)
        else:
            known.last_seen, known.peer = self.clock(), peer

    def unregister(self, group: str, client_id: str) -> bool:
        members = self._groups.get(group, {})
        if members.pop(client_id, None) is None:
            return False
        log.info("producer group %s: producer %s left", group, client_id)
        if not members:
            self._groups.pop(group, None)
        return True

    def disconnected(self, peer: str | None) -> None:
        """A client connection closed: the producers that heartbeated on it leave now
        (RocketMQ's doChannelCloseEvent), so a killed producer is not picked for a
        transaction check; a live one's next heartbeat registers it again."""
        if peer is None:
            return
        for group, members in list(self._groups.items()):
            for client_id, info in list(members.items()):
                if info.peer == peer:
                    log.info("producer group %s: producer %s left (its connection closed)", group, client_id)
                    del members[client_id]
            if not members:
                self._groups.pop(group, None)

    def groups(self) -> list[str]:
        """The producer groups with a member heartbeating (some may have just expired)."""
        return sorted(self._groups)

    def members(self, group: str) -> list[dict[str, object]]:
        """The group's live producers as `producer_list` answers them, by client id."""
        members = self._groups.get(group, {})
        now = self.clock()
        for client_id, info in list(members.items()):
            if now >= info.expires_at(self.expire_s):
                log.info("producer group %s: producer %s expired (silent %.0f s)", group, client_id,
                         now - info.last_seen)
                del members[client_id]
        if not members:
            self._groups.pop(group, None)
        return [members[c].to_wire(now) for c in sorted(members)]
