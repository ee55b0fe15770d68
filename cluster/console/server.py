"""The console's process: one trio loop running hypercorn's trio worker with the app, and
the clients the requests use: the process's own Admin and Producer, or with `login` each
user's (sessions.py), opened in this nursery."""

from __future__ import annotations

import contextlib
import secrets
import signal
from collections.abc import Callable
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve

from ..client import Admin, Producer
from .app import Console, build_app
from .sessions import DEFAULT_LIFETIME_S, Sessions

EXPIRE_EVERY_S = 60.0
"""How often sessions past their lifetime that nobody came back to are closed."""


async def run_console(namesrv: str, *, host: str = "127.0.0.1", port: int = 8080, login: bool = False,
                      secret: str | None = None, on_ready: Callable[[str], None] | None = None,
                      tls: tuple[str, str] | None = None, session_lifetime_s: float = DEFAULT_LIFETIME_S) -> None:
    """Serve the console for the cluster of `namesrv` until SIGINT/SIGTERM; `on_ready` gets
    its URL once it listens. `login`: every user logs in with their own account, for
    `session_lifetime_s` at most. `tls`: (certificate file, key file) to serve HTTPS with."""
    async with contextlib.AsyncExitStack() as stack:
        admin = producer = None
        if not login:  # opened before the nursery below, closed after it: trio's nesting
            admin = await stack.enter_async_context(Admin(namesrv))
            producer = await stack.enter_async_context(Producer(namesrv, group="TIDEMQ_CONSOLE"))
        async with trio.open_nursery() as nursery:
            await _serve(Console(namesrv, admin=admin, producer=producer,
                                 sessions=Sessions(namesrv, nursery, session_lifetime_s) if login else None),
                         nursery, host, port, secret, on_ready, tls)


async def _serve(console: Console, nursery: trio.Nursery, host: str, port: int, secret: str | None,
                 on_ready: Callable[[str], None] | None, tls: tuple[str, str] | None) -> None:
    """hypercorn in `nursery` until SIGINT/SIGTERM, then the users' clients are closed."""
    # Any: Starlette's ASGI types and hypercorn's name the same protocol differently
    app: Any = build_app(console, secret=secret or secrets.token_urlsafe(32), https=tls is not None)
    config = Config()
    config.bind = [f"{host}:{port}"]
    if tls is not None:
        config.certfile, config.keyfile = tls
    config.accesslog = None
    config.errorlog = "-"
    stop = trio.Event()

    async def stopped() -> None:
        await stop.wait()

    binds = await nursery.start(lambda task_status: hypercorn_serve(
        app, config, shutdown_trigger=stopped, task_status=task_status))
    if on_ready is not None:
        on_ready(binds[0] + "/")
    reaper = trio.CancelScope()
    if console.sessions is not None:
        nursery.start_soon(_expire_sessions, console.sessions, reaper)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            stop.set()
            break
    reaper.cancel()
    if console.sessions is not None:
        for sid in list(console.sessions.by_id):
            console.sessions.logout(sid)  # their clients close; the nursery can end


async def _expire_sessions(sessions: Sessions, scope: trio.CancelScope) -> None:
    """Close the clients of sessions past their lifetime, every minute, until `scope` ends."""
    with scope:
        while True:
            await trio.sleep(min(EXPIRE_EVERY_S, sessions.lifetime_s))
            sessions.expire()
