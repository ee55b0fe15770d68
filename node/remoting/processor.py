"""The node's remoting processor table (RocketMQ's SendMessageProcessor,
PullMessageProcessor, ClientManageProcessor, ...): each request code is read into the CBOR
op that does the same thing, checked by the same schema and run by the same handler
(node/ops/), and the answer is written back in RocketMQ's terms. So both protocols share the
topics, groups, offsets, rebalancing and retry state, and a message sent through one is
consumed through the other.

The processors live by concern: sends.py, pulls.py (reads, offsets, lookups), clients.py
(heartbeats, group members, locks, send-back), transactions.py (END_TRANSACTION, checks).
docs/remoting.md lists the codes answered and refused.
"""

from __future__ import annotations

import logging
import os
from functools import partial
from typing import Any

from wire.protocol import NODE_REQUESTS, InvalidRequest, Request, parse_with
from wire.remoting.bodies import BodyError
from wire.remoting.codes import ResponseCode
from wire.remoting.command import RemotingCommand
from wire.remoting.headers import HeaderError
from wire.remoting.plain_send import RemotingSend

from ..ops.puts import PendingPut, prepare_remoting_sends
from ..ops.services import NodeServices
from ..security.guard import Guard
from .acl import CURRENT, Refused, guarded, screened
from .channel import Finish, Processor, RemotingChannel
from .clients import CLIENT_PROCESSORS, channel_closed
from .fastsend import reply_frame
from .pulls import PULL_PROCESSORS
from .sends import SEND_PROCESSORS, send_answer
from .transactions import TRANSACTION_PROCESSORS

log = logging.getLogger("tidemq.remoting")

__all__ = ["NodeRemoting"]


class NodeRemoting:
    """The node's RemotingService (node/remoting/channel.py)."""

    def __init__(self, services: NodeServices, checked_topics: set[str], guard: Guard | None = None) -> None:
        self.services = services
        self.checked_topics = checked_topics
        self.guard = guard
        """With aclEnable: every request is signed, and `request` screens what it builds (acl.py)."""
        self._processors: dict[int, Processor] = {**SEND_PROCESSORS, **PULL_PROCESSORS, **CLIENT_PROCESSORS,
                                                      **TRANSACTION_PROCESSORS}
        self.fast_sends = guard is None and os.environ.get("TIDEMQ_REMOTING_FAST_SENDS", "1") != "0"
        """Sends may take the fast path (node/remoting/fastsend.py); with aclEnable every one
        is screened on the reference path, and TIDEMQ_REMOTING_FAST_SENDS=0 turns it off."""
        self.ordered = frozenset(SEND_PROCESSORS)
        """Sends start in the reader, in arrival order: a queue's order holds."""

    @property
    def plain_topics(self) -> set[str] | None:
        """The server's decoder reads sends to these compiled (wire/remoting/plain_send.py)."""
        return self.checked_topics if self.fast_sends else None

    async def plain_sends(self, sends: list[RemotingSend], channel: RemotingChannel) -> list[PendingPut | None]:
        return await prepare_remoting_sends(self.services, sends, channel.peer, reply_frame)

    def plain_answer(self, send: RemotingSend, response: dict[str, Any]) -> RemotingCommand:
        answer = send_answer(send.command(), response)
        assert isinstance(answer, RemotingCommand)  # a map's answer
        return answer

    def closed(self, channel: RemotingChannel) -> None:
        channel_closed(self.services, channel)

    async def start(self, cmd: RemotingCommand, channel: RemotingChannel) -> RemotingCommand | Finish | None:
        processor = self._processors.get(cmd.code)
        if processor is None:
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported")
        if self.guard is not None:  # aclEnable: signed, screened, its messages checked (acl.py)
            return await guarded(self.guard, cmd, channel.peer, partial(self._run, processor, cmd, channel))
        return await self._run(processor, cmd, channel)

    async def _run(self, processor: Processor, cmd: RemotingCommand, channel: RemotingChannel,
                   ) -> RemotingCommand | Finish | None:
        try:
            return await processor(self, cmd, channel)
        except (HeaderError, BodyError, InvalidRequest) as e:
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(e))
        except Refused as e:
            return cmd.response(e.code, e.remark)

    def request(self, frame: dict[str, Any]) -> Request:
        """A CBOR op's map (its fields, "op" and "id"; the envelope's "v" is added) as the
        node's schema reads it: the same checks as a CBOR client gets (InvalidRequest), and
        with aclEnable the same permissions, for the account that signed the request
        (Refused)."""
        request = parse_with({"v": 1, **frame}, NODE_REQUESTS, self.checked_topics)
        if self.guard is None:
            return request
        return screened(self.guard, CURRENT.get(), request)
