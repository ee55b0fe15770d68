"""The request router: each client-protocol op to its handler (RocketMQ's processor table).

The handlers live by concept — `ops.py` the core ops (send, pull, offsets, topics, status,
failover), `consumer_ops.py` the consumer-group ops (heartbeats, locks, send-back) — and
this module is the one place that joins them, so neither imports the other's table.
"""

from __future__ import annotations

import logging
from typing import Any

from store.message_store import StoreUnavailableError

from .consumer_ops import CONSUMER_HANDLERS
from .ops import CORE_HANDLERS, Handler, NodeServices, OpError
from .protocol import Request, Status, error_response

__all__ = ["HANDLERS", "handle_request"]

log = logging.getLogger("tidemq.node")

HANDLERS: dict[str, Handler] = {**CORE_HANDLERS, **CONSUMER_HANDLERS}


async def handle_request(services: NodeServices, request: Request, peer: str | None) -> dict[str, Any]:
    """Run one request; never raises (except Cancelled): every failure is a response.

    `peer` is the client's "ip:port", stored as the born host of the messages it sends.
    """
    try:
        return await HANDLERS[request.op](services, request, peer)
    except OpError as e:
        return error_response(request.id, e.status, e.message)
    except StoreUnavailableError as e:
        return error_response(request.id, Status.SERVICE_NOT_AVAILABLE, str(e))
    except Exception as e:
        log.exception("op %s (id %s) failed", request.op, request.id)
        return error_response(request.id, Status.INTERNAL_ERROR, f"{request.op} failed: {type(e).__name__}: {e}")
