"""A remoting client's connection as the processors see it, and what a server that speaks
remoting must provide (`RemotingService`). node/server.py reads the frames and calls the
service; a processor may keep a channel to push requests to its client later
(NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE)."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import attrs

from wire.protocol import Request
from wire.remoting.command import RPC_ONEWAY, RemotingCommand, encode_command
from wire.remoting.plain_send import RemotingSend

from ..ops.dispatch import append_requests, finish_requests
from ..ops.puts import PendingPut
from ..ops.services import NodeServices

__all__ = ["Finish", "GroupedSend", "Processor", "ProcessorContext", "RemotingChannel", "RemotingService"]

Finish = Callable[[], Awaitable["RemotingCommand | bytes | None"]]
"""The rest of a request that `start` began in arrival order (a send's wait for its flush
or slave), run as its own task; its answer, or the answer's frame already encoded."""


@attrs.define(eq=False)
class GroupedSend:
    """A Finish for a send that is checked and encoded, not yet appended: a server with a
    turn (node/server.py) appends it with every send its connections read in that turn as
    one CommitLog group, finishes the group with one wait and writes `answer(response)`;
    called as a plain Finish, it appends and finishes alone."""

    pending: PendingPut
    answer: Callable[[dict[str, Any] | bytes], RemotingCommand | bytes]
    """The remoting answer to the send's CBOR response (node/ops/dispatch.py finish_requests),
    or its frame already encoded (the fast path's, node/remoting/fastsend.py)."""
    services: NodeServices

    async def __call__(self) -> RemotingCommand | bytes:
        append_requests(self.services, [self.pending])
        (response,) = await finish_requests(self.services, [self.pending])
        return self.answer(response)

_opaques = itertools.count(1)


@attrs.define(eq=False)
class RemotingChannel:
    """One remoting connection: its peer and a way to push a command to it. `client_id` is
    the RocketMQ client id its heartbeats named (None before the first)."""

    peer: str | None
    deliver: Callable[[bytes], None]
    client_id: str | None = None
    closed: bool = False

    def push(self, code: int, ext_fields: dict[str, str] | None = None, body: bytes = b"") -> None:
        """Send a oneway request to the client (no answer is awaited); dropped once closed."""
        if self.closed:
            return
        opaque = next(_opaques) & 0x7FFFFFFF
        self.deliver(encode_command(RemotingCommand(code=code, opaque=opaque, flag=RPC_ONEWAY,
                                                    ext_fields=ext_fields, body=body)))


class RemotingService(Protocol):
    """What a server hands remoting requests to (the node's processor, the name server's)."""

    ordered: frozenset[int]
    """Request codes whose `start` runs in the reader, in arrival order (sends: per-queue
    order holds); the reader starts a task for every other request."""

    @property
    def plain_topics(self) -> set[str] | None:
        """Topics whose plain sends the server's decoder reads compiled and hands to
        `plain_sends` (wire/remoting/plain_send.py); None: none."""

    async def plain_sends(self, sends: list[RemotingSend], channel: RemotingChannel) -> list[PendingPut | None]:
        """A receive's run of compiled-read sends, each checked and encoded for the server's
        turn, or None where the request must go to `start` (decoded by
        `RemotingSend.command`). A stored one's answer is its frame (PendingPut.reply)."""

    def plain_answer(self, send: RemotingSend, response: dict[str, Any]) -> RemotingCommand:
        """The answer to a send `plain_sends` began whose CBOR response is not a stored
        send's frame (a refusal after the append)."""

    async def start(self, cmd: RemotingCommand, channel: RemotingChannel) -> RemotingCommand | Finish | None:
        """Answer a request (None: no answer, as for a oneway one), or begin it and return
        the rest to run as a task. Never raises, except Cancelled."""

    def closed(self, channel: RemotingChannel) -> None:
        """The connection ended: forget what it registered."""


class ProcessorContext(Protocol):
    """What a node's processor reads and runs requests with (processor.py's NodeRemoting)."""

    services: NodeServices
    checked_topics: set[str]
    """Topics the server's schema found valid (the fast path takes sends to these only)."""
    fast_sends: bool
    """Whether sends may take the fast path (node/remoting/fastsend.py): not when every
    request is screened (aclEnable), nor when turned off to test against the reference."""

    def request(self, frame: dict[str, Any]) -> Request:
        """A CBOR op's map as the node's schema reads it (InvalidRequest)."""


Processor = Callable[[ProcessorContext, RemotingCommand, RemotingChannel], Awaitable["RemotingCommand | Finish | None"]]
"""One request code's processor: the answer, or a Finish to run as a task (None: no answer)."""
