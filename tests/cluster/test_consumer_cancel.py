"""A push Consumer cancelled or failing while it enters leaves its nurseries in order
(issue 24: `with trio.move_on_after(3): async with Consumer(...)` corrupted trio's cancel
scope stack). In one process: a name server that never answers, and a real one."""

from __future__ import annotations

from functools import partial

import pytest
import trio

from cluster.client import Consumer
from cluster.namesrv import NameServer, NamesrvConfig


async def _nothing(msg) -> None:
    """A handler that is never called here."""


async def _silent(stream: trio.SocketStream) -> None:
    await trio.sleep_forever()


async def test_cancelled_while_entering_it_unwinds_cleanly() -> None:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, _silent, 0, host="127.0.0.1"))
        silent = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        for _ in range(3):  # trio's scope stack is still sound: it works again and again
            with trio.move_on_after(0.2) as scope:
                async with Consumer("G", "T", _nothing, namesrv=silent):
                    pytest.fail("the first rebalance cannot finish against a silent name server")
            assert scope.cancelled_caught
        await trio.sleep(0)  # poll-exempt: a checkpoint after the scopes
        nursery.cancel_scope.cancel()


async def test_cancelled_in_its_block_it_leaves_cleanly() -> None:
    async with trio.open_nursery() as nursery:
        namesrv = await nursery.start(NameServer(NamesrvConfig(listen_port=0), handle_signals=False).run)
        for _ in range(3):
            with trio.move_on_after(0.2) as scope:
                async with Consumer("G", "NoBrokerYet", _nothing, namesrv=namesrv, request_timeout=1.0):
                    await trio.sleep_forever()  # entered (no master to ask yet): cancelled here
            assert scope.cancelled_caught
        nursery.cancel_scope.cancel()
