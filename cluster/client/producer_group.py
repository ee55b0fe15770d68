"""A producer's group membership: what makes mqadmin producerConnection list it.

A Producer built with `group=` runs a `ProducerHeartbeats` beside its sends: at once and then
every `heartbeat_interval_s` (30 s, RocketMQ's heartbeatBrokerInterval) it tells every
registered master its group and client id (`producer_heartbeat`), and when it closes it
unregisters (`producer_unregister`), so the masters' tables (node/tables/producers.py) list who is
live. Sends themselves carry no group: nothing is added per message.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import trio

from wire.client import TidemqError, block_nursery
from wire.protocol import ProducerHeartbeat, ProducerUnregister

from .rebalance import new_client_id

log = logging.getLogger("tidemq.client")

__all__ = ["HEARTBEAT_INTERVAL_S", "ProducerHeartbeats"]

HEARTBEAT_INTERVAL_S = 30.0
UNREGISTER_TIMEOUT_S = 2.0


class ProducerHeartbeats:
    """Heartbeats of one producer (`client`: its _Client, for the masters and the pool)."""

    def __init__(self, client: Any, group: str, *, interval_s: float = HEARTBEAT_INTERVAL_S,
                 client_id: str | None = None) -> None:
        if interval_s <= 0:
            raise ValueError(f"heartbeat_interval_s must be > 0, got {interval_s}")
        self.client = client
        self.group = group
        self.interval_s = interval_s
        self.client_id = client_id or new_client_id()
        self.told: set[str] = set()  # masters that may list this producer

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Heartbeat now and then every interval, in a nursery of its own, while the
        producer's block runs; then unregister from every master told, best effort and
        bounded, even when cancelled."""
        try:
            async with block_nursery() as nursery:
                nursery.start_soon(self._run)
                try:
                    yield
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(UNREGISTER_TIMEOUT_S):
                for address in sorted(self.told):
                    try:
                        await self.client.pool.call(address, ProducerUnregister(group=self.group,
                                                                                client_id=self.client_id))
                    except TidemqError as e:
                        log.info("producer %s: unregistering from %s: %s", self.client_id, address, e)
            self.told.clear()

    async def _run(self) -> None:
        while True:
            try:
                await self.beat()
            except Exception:  # a heartbeat must never cancel the producer's sends
                log.exception("producer %s: heartbeat failed", self.client_id)
            await trio.sleep(self.interval_s)

    async def beat(self) -> None:
        """One heartbeat to every registered master (a failing one is logged, not raised)."""
        try:
            masters = [b.address for b in await self.client.cluster_info() if b.is_master]
        except TidemqError as e:
            log.info("producer %s: no cluster info for its heartbeat: %s", self.client_id, e)
            return
        request = ProducerHeartbeat(group=self.group, client_id=self.client_id,
                                    heartbeat_interval_ms=int(self.interval_s * 1000))
        for address in masters:
            try:
                await self.client.pool.call(address, request)
                self.told.add(address)
            except TidemqError as e:
                log.info("producer %s: heartbeat to %s: %s", self.client_id, address, e)
