"""The request router: each request class to its handler (RocketMQ's processor table).

The handlers live by concern — `puts` (send, send_batch), `pulls` (reads and consumer
offsets), `admin` (topics, groups, status, failover, config), `consumers` (heartbeats, locks,
send-back), `transactions` (end_transaction) — and this module is the one place that joins their tables.

Sends answer in steps: `handle_now` checks and encodes one into a PendingPut,
`append_requests` appends a batch of them as one CommitLog group, and `finish_requests`
answers a group after one wait for its flush / slave (node/server.py groups what a
connection has ready); `handle_request` does all three for one request. `handle_plain_sends`
is `handle_now` for the plain sends the compiled codec decoded (wire/send_codec.py).
"""

from __future__ import annotations

import logging
from typing import Any

from store.message_store import StoreUnavailableError
from store.status import PutMessageResult, PutMessageStatus
from wire.protocol import Request, Send, SendBatch, Status, WireRequest, error_response
from wire.send_codec import PlainBatch, PlainSend, request_of

from .admin import ADMIN_HANDLERS
from .consumers import CONSUMER_HANDLERS
from .pulls import PULL_HANDLERS
from .puts import PUT_HANDLERS, Handler, PendingPut, append_sends, finish_sends, prepare_plain_sends
from .services import NodeServices, OpError
from .transactions import TRANSACTION_HANDLERS

__all__ = ["BATCHED", "BATCHED_OPS", "HANDLERS", "append_requests", "finish_requests", "handle_now", "handle_plain_sends",
           "handle_request"]

log = logging.getLogger("tidemq.node")

HANDLERS: dict[type[WireRequest], Handler] = {**PUT_HANDLERS, **PULL_HANDLERS, **ADMIN_HANDLERS, **CONSUMER_HANDLERS,
                                              **TRANSACTION_HANDLERS}
"""Each request class's handler: the parsed request's own class picks it, so an op's name
is spelled once, by its request class (wire/protocol/requests.py)."""
BATCHED: tuple[type[WireRequest], ...] = (Send, SendBatch)
"""Requests whose handler never waits long before answering with a PendingPut: the server
runs them inline, in arrival order, and finishes them as a group."""
BATCHED_OPS = frozenset(cls.OP for cls in BATCHED)
"""Their op names, which the server reads off a frame before it parses it."""


async def handle_now(services: NodeServices, request: Request, peer: str | None) -> dict[str, Any] | PendingPut:
    """Run one request up to its answer, or up to the wait a send asks for (a PendingPut
    for `finish_requests`); never raises (except Cancelled): every failure is a response.

    `peer` is the client's "ip:port", stored as the born host of the messages it sends.
    """
    try:
        return await HANDLERS[type(request.fields)](services, request, peer)
    except OpError as e:
        return error_response(request.id, e.status, e.message)
    except StoreUnavailableError as e:
        return error_response(request.id, Status.SERVICE_NOT_AVAILABLE, str(e))
    except Exception as e:
        log.exception("op %s (id %s) failed", request.op, request.id)
        return error_response(request.id, Status.INTERNAL_ERROR, f"{request.op} failed: {type(e).__name__}: {e}")


async def handle_plain_sends(services: NodeServices, sends: list[PlainSend | PlainBatch], peer: str | None,
                             ) -> list[dict[str, Any] | PendingPut]:
    """`handle_now` for a run of plain sends and batches the compiled codec decoded
    (wire/send_codec.py): the compiled path's PendingPuts, and for each one off that path
    the reference's answer (its request is what `parse_with` makes of the same frame)."""
    out: list[dict[str, Any] | PendingPut] = []
    for p, pending in zip(sends, await prepare_plain_sends(services, sends, peer), strict=True):
        if pending is None:
            out.append(await handle_now(services, request_of(p), peer))
        else:
            out.append(pending)
    return out


def append_requests(services: NodeServices, pending: list[PendingPut]) -> None:
    """Append a batch's sends in arrival order as one group (a failure fails them all)."""
    try:
        append_sends(services, pending)
    except Exception as e:
        log.exception("appending %d send(s) failed", len(pending))
        for p in pending:
            if p.appended is None:
                p.prepared = p.appended = PutMessageResult(
                    PutMessageStatus.UNKNOWN_ERROR, error=f"append failed: {type(e).__name__}: {e}")


async def finish_requests(services: NodeServices, pending: list[PendingPut]) -> list[dict[str, Any] | bytes]:
    """The responses to appended sends, in order, after one wait for the whole group."""
    try:
        return await finish_sends(services, pending)
    except Exception as e:
        log.exception("finishing %d send(s) failed", len(pending))
        return [error_response(p.request_id, Status.INTERNAL_ERROR, f"send failed: {type(e).__name__}: {e}")
                for p in pending]


async def handle_request(services: NodeServices, request: Request, peer: str | None) -> dict[str, Any] | bytes:
    """Run one request to its response (both steps)."""
    result = await handle_now(services, request, peer)
    if isinstance(result, PendingPut):
        return (await finish_requests(services, [result]))[0]
    return result
