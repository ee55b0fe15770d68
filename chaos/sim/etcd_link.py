"""One node's etcd client in the simulation: the in-memory etcd (chaos/sim/etcd_model.py)
behind the simulated network, where node/failover/controller.py takes an `EtcdClient`.

A call behaves as an HTTP call to an etcd server on the host ETCD_HOST would: a paused node
sends nothing until it resumes; the request takes the link's delay to arrive and is applied
then, unless the link is cut (or cut one way from the node), so it is lost; the answer takes
the delay back and is lost when the link is cut (or cut one way towards the node) — applied,
but the client cannot know — and a node paused meanwhile reads it when it resumes. A call not
answered within the client's timeout raises `EtcdError`, as `EtcdClient` does. A watch breaks
(EtcdError) when the link is cut either way; its events reach the node at once (the link's
delay is not applied to them), or when it resumes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from node.failover.etcd import EtcdClient, EtcdError, KeyValue, TxnResult, WatchEvent

from .etcd_model import EtcdModel
from .network import SimNetwork

__all__ = ["ETCD_ADDRESS", "ETCD_HOST", "SimEtcd"]

ETCD_HOST = "10.0.0.8"
ETCD_ADDRESS = f"{ETCD_HOST}:2379"

T = TypeVar("T")


class SimEtcd(EtcdClient):
    """`EtcdClient`'s calls, answered by `model` across the link from `host` to ETCD_HOST. A
    subclass, so the Broker's seam takes it and mypy holds every call to the client's
    signature; it overrides each one, so no HTTP client is made (no `super().__init__`)."""

    def __init__(self, model: EtcdModel, network: SimNetwork, host: str, timeout_s: float) -> None:
        self.endpoints = [ETCD_ADDRESS]
        self.model = model
        self.network = network
        self.host = host
        self.timeout_s = timeout_s

    async def __aenter__(self) -> SimEtcd:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()

    async def _trip(self) -> None:
        delay = self.network.delays.get(frozenset((self.host, ETCD_HOST)))
        if delay:
            await trio.sleep(delay)  # poll: simulated time (the link's delay)

    async def _over_link(self, apply: Callable[[], Awaitable[T]]) -> T:
        net = self.network
        await net.wait_running(self.host)
        answered = False
        with trio.move_on_after(self.timeout_s):
            await self._trip()
            if net.cut_from(self.host, ETCD_HOST):
                await trio.sleep_forever()  # the request is lost: the client times out
            result = await apply()
            await self._trip()
            if net.cut_from(ETCD_HOST, self.host):
                await trio.sleep_forever()  # applied, the answer lost
            answered = True
        if answered:
            await net.wait_running(self.host)  # a paused node reads the answer when it resumes
            return result
        raise EtcdError(f"no etcd endpoint answered: {ETCD_ADDRESS}: timed out after {self.timeout_s} s (simulated)")

    async def grant(self, ttl_s: int) -> int:
        return await self._over_link(lambda: self.model.grant(ttl_s))

    async def keepalive(self, lease: int) -> int:
        return await self._over_link(lambda: self.model.keepalive(lease))

    async def revoke(self, lease: int) -> None:
        await self._over_link(lambda: self.model.revoke(lease))

    async def get(self, key: str) -> KeyValue | None:
        return await self._over_link(lambda: self.model.get(key))

    async def put(self, key: str, value: str | bytes, *, lease: int = 0) -> int:
        return await self._over_link(lambda: self.model.put(key, value, lease=lease))

    async def txn(self, compare: list[dict[str, Any]], success: list[dict[str, Any]],
                  failure: list[dict[str, Any]]) -> TxnResult:
        return await self._over_link(lambda: self.model.txn(compare, success, failure))

    async def watch(self, prefix: str, on_events: Callable[[list[WatchEvent]], None],
                    *, on_created: Callable[[], None] | None = None) -> None:
        """Until cancelled, or EtcdError once the link is cut either way."""
        net = self.network
        await self._over_link(trio.lowlevel.checkpoint)  # the watch's creation is a round trip
        send, receive = trio.open_memory_channel[list[WatchEvent]](float("inf"))
        async with trio.open_nursery() as nursery:
            async def until_cut() -> None:
                while not (net.cut_from(self.host, ETCD_HOST) or net.cut_from(ETCD_HOST, self.host)):
                    await net.changed()
                nursery.cancel_scope.cancel()

            async def deliver() -> None:
                async for events in receive:
                    await net.wait_running(self.host)
                    on_events(events)

            nursery.start_soon(until_cut)
            nursery.start_soon(deliver)
            await self.model.watch(prefix, send.send_nowait, on_created=on_created)
        raise EtcdError(f"{ETCD_ADDRESS}/v3/watch: the stream broke (simulated cut)")
