"""The trio floor: what trio and cbor2 alone cost for the client protocol.

Reads the node's frames (4-byte big-endian length + one CBOR map), decodes each map and
answers a small CBOR map with the request's id, one `send_all` per receive. No store, no
validation: a tidemq node cannot be faster than this on the same machine, so its figures
are read as a fraction of the floor's. Run as `python -m bench.floor [--port P]`; it prints
`READY <port>` once listening.
"""

from __future__ import annotations

import argparse
import contextlib
import struct
import sys

import cbor2
import trio

HEADER = struct.Struct(">I")


async def serve_connection(stream: trio.SocketStream) -> None:
    # the client may go away mid-send: its business, not the server's
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await _answer(stream)


async def _answer(stream: trio.SocketStream) -> None:
    buf = bytearray()
    offset = 0
    while data := await stream.receive_some(256 * 1024):
        buf += data
        out = []
        while len(buf) >= 4:
            (size,) = HEADER.unpack_from(buf)
            if len(buf) < 4 + size:
                break
            request = cbor2.loads(bytes(buf[4:4 + size]))
            del buf[:4 + size]
            offset += 1
            body = cbor2.dumps({"id": request.get("id"), "status": "PUT_OK", "queue_offset": offset})
            out.append(HEADER.pack(len(body)) + body)
        if out:
            await stream.send_all(b"".join(out))


async def serve(port: int = 0, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Listen on 127.0.0.1:`port` until cancelled; `task_status.started(port)` once bound."""
    listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, serve_connection, listeners)
        task_status.started(listeners[0].socket.getsockname()[1])


async def _main(port: int) -> None:
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(serve, port)
        print(f"READY {bound}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.floor", description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        trio.run(_main, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
