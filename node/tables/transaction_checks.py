"""Check requests on their way to producers: one mailbox per producer (group, client id).

The check service (node/ops/transaction_checks.py) picks a live producer of the half
message's group and posts a check here; the producer takes it with its
`transaction_check_watch` long poll on its own connection (the way `consumer_watch` carries
RocketMQ's NOTIFY_CONSUMER_IDS_CHANGED), so the node needs no connection of its own to the
client. Producers with a watch open are picked first, round robin, so a producer that died
(its watch cancelled when its connection closed) is passed over while another member of its
group waits. Memory only: a check lost here (a restart, a mailbox overflow, a connection that
closed with it) is sent again by a later round, as its half message stays open.

A RocketMQ producer (remoting) never polls: its heartbeat registers a `pusher` for its
(group, client id), which sends each check posted to it as CHECK_TRANSACTION_STATE on its
channel (node/remoting/transactions.py). It counts as watching, and gets its checks at once
instead of in a mailbox.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import attrs
import trio

log = logging.getLogger("tidemq.node")

__all__ = ["MAX_WAITING", "CheckRequests"]

MAX_WAITING = 1024
"""Checks kept per producer; past it the oldest is dropped (counted in `dropped`)."""

_Key = tuple[str, str]

CheckPusher = Callable[[dict[str, Any]], None]
"""Sends one check to a producer's connection (it may withhold it: the ACL rule)."""


@attrs.define(eq=False)
class _Pusher:
    push: CheckPusher
    owner: object
    """The connection it pushes to: `forget_owner` drops it when that closes."""


@attrs.define(eq=False)
class _Watch:
    peer: str | None
    scope: trio.CancelScope


class CheckRequests:
    """The mailboxes, the open watches, and counts for `status`."""

    def __init__(self) -> None:
        self._boxes: dict[_Key, list[dict[str, Any]]] = {}
        self._wakeups: dict[_Key, trio.Event] = {}
        self._watches: dict[_Key, list[_Watch]] = {}
        self._pushers: dict[_Key, _Pusher] = {}
        self._turn = 0
        self.posted = 0
        self.dropped = 0
        self.no_producer = 0
        self.refused = 0  # checks withheld from a watcher whose account may not publish to their topic

    def pick(self, group: str, live: list[str]) -> str | None:
        """Which of the group's `live` producers (by client id) gets the next check: one with
        a watch open when there is any, round robin; None when the group has none live."""
        watching = [c for c in live if self._watches.get((group, c)) or (group, c) in self._pushers]
        choices = watching or live
        if not choices:
            self.no_producer += 1
            return None
        self._turn += 1
        return choices[self._turn % len(choices)]

    def push_to(self, group: str, client_id: str, push: CheckPusher, owner: object) -> None:
        """The producer's checks go to `push` from now on (its heartbeat on `owner`)."""
        self._pushers[(group, client_id)] = _Pusher(push, owner)
        self._boxes.pop((group, client_id), None)

    def forget_pusher(self, group: str, client_id: str) -> None:
        self._pushers.pop((group, client_id), None)

    def forget_owner(self, owner: object) -> None:
        """`owner`'s connection closed: its producers get no more pushed checks."""
        for key in [k for k, p in self._pushers.items() if p.owner is owner]:
            del self._pushers[key]

    def post(self, group: str, client_id: str, check: dict[str, Any]) -> None:
        key = (group, client_id)
        pusher = self._pushers.get(key)
        if pusher is not None:
            self.posted += 1
            pusher.push(check)
            return
        box = self._boxes.setdefault(key, [])
        box.append(check)
        self.posted += 1
        if len(box) > MAX_WAITING:
            del box[0]
            self.dropped += 1
        wakeup = self._wakeups.pop(key, None)
        if wakeup is not None:
            wakeup.set()

    async def wait(self, group: str, client_id: str, peer: str | None) -> bool:
        """Until the producer's mailbox holds a check, or its connection (`peer`) closes
        (`disconnected`: False, so nothing is taken for a connection that is gone); the
        caller bounds it (a long poll's deadline)."""
        key = (group, client_id)
        watch = _Watch(peer, trio.CancelScope())
        self._watches.setdefault(key, []).append(watch)
        try:
            with watch.scope:
                while not self._boxes.get(key):
                    await self._wakeups.setdefault(key, trio.Event()).wait()
        finally:
            watches = self._watches.get(key, [])
            if watch in watches:
                watches.remove(watch)
            if not watches:
                self._watches.pop(key, None)
        return not watch.scope.cancel_called

    def take(self, group: str, client_id: str, at_most: int) -> list[dict[str, Any]]:
        box = self._boxes.get((group, client_id), [])
        taken, box[:at_most] = box[:at_most], []
        if not box:
            self._boxes.pop((group, client_id), None)
        return taken

    def disconnected(self, peer: str | None) -> None:
        """A client connection closed: its watches end now (the producer is no longer picked
        first), not when their long polls time out."""
        for watches in list(self._watches.values()):
            for watch in watches:
                if watch.peer == peer:
                    watch.scope.cancel()

    def status(self) -> dict[str, int]:
        return {"checks_posted": self.posted, "checks_dropped": self.dropped,
                "checks_without_producer": self.no_producer, "checks_refused": self.refused,
                "producers_watching": sum(1 for w in self._watches.values() if w) + len(self._pushers)}
