"""One side of an HA connection, guarded: master and slave both run a connection as two
tasks (a read and a write side) under one cancel scope, and either side ending, by EOF,
a connection error or a bug, closes that connection only (the service goes on; a slave
reconnects)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from .protocol import ProtocolError

CONNECTION_ERRORS = (OSError, trio.BrokenResourceError, trio.ClosedResourceError, ProtocolError)
"""What a broken or misbehaving peer raises: logged as a warning, not as a bug."""

T = TypeVar("T")


async def guarded(
    side: Callable[[T], Awaitable[None]],
    connection: T,
    scope: trio.CancelScope,
    *,
    peer: str,
    log: logging.Logger,
    expected: tuple[type[Exception], ...] = (),
    expected_note: str = "",
) -> None:
    """Run `side(connection)`; whatever ends it cancels `scope` (the whole connection).

    `peer` names the other end in the log ("slave 1.2.3.4:5"); `expected` errors are logged
    as "<peer>: <error>; <expected_note>".
    """
    try:
        await side(connection)
    except expected as e:
        log.warning("%s: %s; %s", peer, e, expected_note)
    except CONNECTION_ERRORS as e:
        log.warning("%s: closing the connection: %s", peer, e)
    except Exception:
        log.exception("%s: unexpected error; closing the connection", peer)
    finally:
        scope.cancel()
