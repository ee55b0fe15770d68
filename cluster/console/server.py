"""The console's process: one trio loop running hypercorn's trio worker with the app, and
the Admin and Producer every request shares (their connection pools stay open)."""

from __future__ import annotations

import secrets
import signal
from collections.abc import Callable
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve

from ..client import Admin, Producer
from .app import Console, build_app


async def run_console(namesrv: str, *, host: str = "127.0.0.1", port: int = 8080,
                      secret: str | None = None, on_ready: Callable[[str], None] | None = None) -> None:
    """Serve the console for the cluster of `namesrv` until SIGINT/SIGTERM; `on_ready` gets
    its URL once it listens."""
    async with Admin(namesrv) as admin, Producer(namesrv, group="TIDEMQ_CONSOLE") as producer:
        # Any: Starlette's ASGI types and hypercorn's name the same protocol differently
        app: Any = build_app(Console(admin, producer, namesrv), secret=secret or secrets.token_urlsafe(32))
        config = Config()
        config.bind = [f"{host}:{port}"]
        config.accesslog = None
        config.errorlog = "-"
        stop = trio.Event()

        async def stopped() -> None:
            await stop.wait()

        async with trio.open_nursery() as nursery:
            binds = await nursery.start(lambda task_status: hypercorn_serve(
                app, config, shutdown_trigger=stopped, task_status=task_status))
            if on_ready is not None:
                on_ready(binds[0] + "/")
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    stop.set()
                    break
