"""What the master's and the slave's HA connections share: each runs as two tasks (a read
and a write side) under one cancel scope. `guarded` runs a side so that its end, by EOF, a
connection error or a bug, closes that connection only (the service goes on; a slave
reconnects); `read_until_closed` is a read side's loop, which also closes a connection
from which nothing was read for `haHousekeepingInterval`."""

from __future__ import annotations

import enum
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


class ReadEnd(enum.Enum):
    """Why `read_until_closed` returned."""

    EOF = "eof"
    REFUSED = "refused"
    SILENT = "silent"


async def read_until_closed(
    stream: trio.abc.ReceiveStream,
    receive_size: int,
    silence_s: float,
    handle: Callable[[bytes | bytearray], Awaitable[bool]],
) -> ReadEnd:
    """Feed every chunk read to `handle` until the peer closes (EOF), `handle` returns False
    (REFUSED), or nothing arrived for `silence_s` seconds (SILENT)."""
    with trio.CancelScope(deadline=trio.current_time() + silence_s) as silence:
        while True:
            data = await stream.receive_some(receive_size)
            if not data:
                return ReadEnd.EOF
            silence.deadline = trio.current_time() + silence_s
            if not await handle(data):
                return ReadEnd.REFUSED
    return ReadEnd.SILENT
