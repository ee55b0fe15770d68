"""What a node asks the name servers and its group's peers: the I/O of failover.

Epochs travel over the client protocol (`epoch` op, `cluster_info`), never on the HA wire,
so every question is one request on a fresh connection with the node's account and TLS,
through the network seam (ha/net.py: TCP, or the simulation's network). An answer that
does not come is None: the callers decide what silence means (node/failover/fencing.py
for a master's check, node/failover/epochs.py for a slave's admission).
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import trio

from ha.net import TCP, Network
from store.config import BrokerRole
from wire.client import TidemqError, connect
from wire.protocol import Epoch, EpochReply, WireRequest
from wire.protocol.namesrv import ClusterInfo, ClusterInfoReply

from .epochs import EpochView
from .term import TermState

log = logging.getLogger("tidemq.node")

__all__ = ["ASK_TIMEOUT_S", "EpochAsker"]

ASK_TIMEOUT_S = 2.0
"""Upper bound for one round of asking the name servers and peers for epochs."""


@attrs.frozen
class EpochAsker:
    """Asks with the settings of the role the node serves now (`term.cfg`, read at each
    question: a promotion or rejoin changes it between terms)."""

    term: TermState
    net: Network = TCP

    async def ask(self, address: str, request: WireRequest) -> Any:
        """One request on a fresh connection (with the node's account and TLS): its reply,
        None when it fails."""
        cfg = self.term.cfg
        try:
            async with connect(address, connect_timeout=ASK_TIMEOUT_S, request_timeout=ASK_TIMEOUT_S,
                               credentials=cfg.credentials, tls=cfg.client_tls, net=self.net) as conn:
                return await conn.call(request)
        except (TidemqError, OSError) as e:
            log.debug("%s %s: %s", address, request.OP, e)
            return None

    async def group_epochs(self, used_ids: set[int]) -> tuple[list[EpochView], int]:
        """(epoch, address, source) from every name server and every peer of the group that
        answers within ASK_TIMEOUT_S, and how many of them answered. The group's master as
        last known is asked at once, beside the name servers: a name server that answers
        late must not hide the epoch that master began (storage seed 965: a slave promoted
        while its name servers were slow took its master's restart epoch again). The
        brokerIds the name servers list for the group are added to `used_ids` as their
        answers arrive (a fenced master rejoins under one that is free)."""
        cfg = self.term.cfg
        views: list[EpochView] = []
        answered = 0
        own = cfg.own_addresses()
        asked = {a for a in (self.term.master.address, cfg.master_addr) if a and a not in own}

        async def ask_namesrv(address: str) -> None:
            nonlocal answered
            answer: ClusterInfoReply | None = await self.ask(address, ClusterInfo())
            answered += answer is not None
            for b in answer.brokers if answer else []:
                if b.get("broker_name") != cfg.broker_name or b.get("address") in own:
                    continue
                used_ids.add(b.get("broker_id", 0))
                if type(b.get("epoch")) is int:
                    views.append(EpochView(b["epoch"], b["address"], f"name server {address}",
                                           master=b.get("broker_id", 0) == 0))
                if b["address"] not in asked:
                    asked.add(b["address"])
                    peers.start_soon(ask_peer, b["address"])

        async def ask_peer(address: str) -> None:
            nonlocal answered
            answer: EpochReply | None = await self.ask(address, Epoch())
            answered += answer is not None
            if answer and not answer.fenced:
                views.append(EpochView(answer.epoch, address, f"peer {address}",
                                       master=answer.role != BrokerRole.SLAVE.value and not answer.pending))

        with trio.move_on_after(ASK_TIMEOUT_S):
            async with trio.open_nursery() as peers:
                for address in sorted(asked):
                    peers.start_soon(ask_peer, address)
                for address in cfg.namesrv_addresses:
                    peers.start_soon(ask_namesrv, address)
        return views, answered

    async def master_topics(self) -> list[dict[str, Any]]:
        """The topic tables the name servers hold for the group's master (brokerId 0), one
        per name server that answered within ASK_TIMEOUT_S."""
        tables: list[dict[str, Any]] = []
        with trio.move_on_after(ASK_TIMEOUT_S):
            for address in self.term.cfg.namesrv_addresses:
                answer: ClusterInfoReply | None = await self.ask(address, ClusterInfo())
                for b in answer.brokers if answer else []:
                    if b.get("broker_name") == self.term.cfg.broker_name and b.get("broker_id") == 0:
                        tables.append(b.get("topics") or {})
        return tables
