"""A lean blocking remoting client for the tests: pre-built RemotingCommands over one
socket, answers matched by opaque. It is what a RocketMQ client puts on the wire, without
a client library's retries, so a test sees exactly what the server answers."""

from __future__ import annotations

import itertools
import socket
import time

from wire.remoting.command import CommandDecoder, RemotingCommand, encode_command

__all__ = ["RemotingClient"]


class RemotingClient:
    def __init__(self, address: str, timeout: float = 10.0) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.decoder = CommandDecoder()
        self.timeout = timeout
        self._opaques = itertools.count(1)
        self.pushed: list[RemotingCommand] = []  # requests the server sent (NOTIFY_CONSUMER_IDS_CHANGED, ...)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RemotingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, cmd: RemotingCommand) -> int:
        """Write a request (its opaque set if 0); returns the opaque."""
        if not cmd.opaque:
            cmd.opaque = next(self._opaques)
        self.sock.sendall(encode_command(cmd))
        return cmd.opaque

    def receive(self, opaque: int, timeout: float | None = None) -> RemotingCommand:
        """The response to `opaque` (server pushes met on the way go to `pushed`)."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no response to opaque {opaque}")
            self.sock.settimeout(left)
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the server closed the connection")
            for cmd in self.decoder.feed(data):
                assert isinstance(cmd, RemotingCommand), cmd
                if not cmd.is_response:
                    self.pushed.append(cmd)
                elif cmd.opaque == opaque:
                    return cmd

    def call(self, code: int, ext_fields: dict[str, str] | None = None, body: bytes = b"",
             timeout: float | None = None, **kw: object) -> RemotingCommand:
        cmd = RemotingCommand(code=code, ext_fields=ext_fields, body=body, **kw)  # type: ignore[arg-type]
        return self.receive(self.send(cmd), timeout)
