"""A TCP forwarder between a slave and the master whose directions can be paused (tests of
ha/ in one process and with node processes)."""

from __future__ import annotations

import trio


class Gate:
    def __init__(self) -> None:
        self._open = trio.Event()
        self._open.set()

    def close(self) -> None:
        if self._open.is_set():
            self._open = trio.Event()

    def open(self) -> None:
        self._open.set()

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    async def wait_open(self) -> None:
        while not self._open.is_set():
            await self._open.wait()


class PausableProxy:
    """Holds a slave's acks (or the master's frames) back while the connection stays open.

    `hold_to_slave_after(n)`: the master's bytes flow until n have been forwarded (kept in
    `to_slave_forwarded`), then the to_slave gate closes by itself; `to_slave.open()` lets
    everything through again.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.to_master = Gate()
        self.to_slave = Gate()
        self.to_slave_limit: int | None = None
        self.to_slave_forwarded = bytearray()

    def hold_to_slave_after(self, limit: int) -> None:
        self.to_slave_limit = limit

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, self._handle, listeners)
            task_status.started(self.port)

    async def _handle(self, down: trio.SocketStream) -> None:
        try:
            up = await trio.open_tcp_stream("127.0.0.1", self.target_port)
        except OSError:
            await down.aclose()
            return
        async with up, down, trio.open_nursery() as nursery:
            nursery.start_soon(self._pump, down, up, self.to_master, nursery.cancel_scope)
            nursery.start_soon(self._pump, up, down, self.to_slave, nursery.cancel_scope)

    def _room(self, gate: Gate) -> int:
        """Bytes the next read may take: the to_slave budget's rest while one is set."""
        if gate is not self.to_slave or self.to_slave_limit is None:
            return 65536
        room = self.to_slave_limit - len(self.to_slave_forwarded)
        if room <= 0:
            self.to_slave_limit = None  # spent: hold from here until the gate is opened
            gate.close()
            return 65536
        return min(room, 65536)

    async def _pump(self, src: trio.SocketStream, dst: trio.SocketStream, gate: Gate, scope: trio.CancelScope) -> None:
        try:
            while True:
                room = self._room(gate)
                await gate.wait_open()
                data = await src.receive_some(room)
                if not data:
                    return
                await gate.wait_open()
                await dst.send_all(data)
                if gate is self.to_slave and self.to_slave_limit is not None:
                    self.to_slave_forwarded += data
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            scope.cancel()
