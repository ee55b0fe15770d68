"""Every client context manager cancelled mid-request leaves cleanly (issue 24): Producer,
PullConsumer, Admin and the bare connection, each against a peer that accepts and never
answers, cancelled three times over so trio's cancel-scope stack is shown sound. The push
Consumer's cases are tests/cluster/test_consumer_cancel.py's."""

from __future__ import annotations

from functools import partial

import pytest
import trio

from cluster.client import Admin, Producer, PullConsumer
from wire.client import ConnectionPool, connect
from wire.protocol import GetStatus


async def _silent(stream: trio.SocketStream) -> None:
    await trio.sleep_forever()


async def _route(client) -> None:
    await client.route("T")


async def _send(producer: Producer) -> None:
    await producer.send("T", b"x")


@pytest.mark.parametrize(("make", "use"), [
    (lambda address: Producer(namesrv=address), _send),
    (lambda address: PullConsumer(namesrv=address, group="G", topic="T"), _route),
    (lambda address: Admin(namesrv=address), _route),
], ids=["Producer", "PullConsumer", "Admin"])
async def test_a_client_cancelled_mid_request_leaves_cleanly(make, use) -> None:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, _silent, 0, host="127.0.0.1"))
        silent = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        for _ in range(3):
            with trio.move_on_after(0.2) as scope:
                async with make(silent) as client:
                    await use(client)
                    pytest.fail("a silent name server cannot answer")
            assert scope.cancelled_caught
        nursery.cancel_scope.cancel()


async def test_a_connection_and_a_pool_cancelled_mid_request_leave_cleanly() -> None:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, _silent, 0, host="127.0.0.1"))
        silent = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        for _ in range(3):
            with trio.move_on_after(0.2) as scope:
                async with connect(silent) as conn:
                    await conn.call(GetStatus())
            assert scope.cancelled_caught
            with trio.move_on_after(0.2) as scope:
                async with trio.open_nursery() as inner:
                    pool = ConnectionPool(inner, connect_timeout=5.0, request_timeout=5.0)
                    try:
                        await pool.call(silent, GetStatus())
                    finally:
                        with trio.CancelScope(shield=True):
                            await pool.aclose()
            assert scope.cancelled_caught
        nursery.cancel_scope.cancel()

