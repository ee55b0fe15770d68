"""Remoting sends join the server's turn (node/server.py): a connection's pipelined sends
are appended as one group and answered together, yet each gets its own answer, a queue's
order holds, a oneway send is stored unanswered, and a client that stops writing still
gets every answer."""

from __future__ import annotations

import socket
import time

from wire.remoting.codes import RequestCode, ResponseCode
from wire.remoting.command import RPC_ONEWAY, CommandDecoder, RemotingCommand, encode_command


def _send(topic: str, opaque: int, body: bytes, queue_id: int = 0, flag: int = 0) -> bytes:
    ext = {"producerGroup": "turn-test", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
           "queueId": str(queue_id), "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
           "properties": f"UNIQ_KEY\x01U{opaque:031d}\x02WAIT\x01true\x02", "batch": "0"}
    return encode_command(RemotingCommand(code=RequestCode.SEND_MESSAGE, opaque=opaque, flag=flag, ext_fields=ext,
                                          body=body, language="CPP", version=63))


_DECODERS: dict[int, CommandDecoder] = {}


def _answers(sock: socket.socket, want: int, timeout: float = 20.0) -> dict[int, RemotingCommand]:
    """The next `want` answers on `sock` by opaque (one decoder per socket: a frame may
    straddle two calls)."""
    decoder = _DECODERS.setdefault(sock.fileno(), CommandDecoder())
    got: dict[int, RemotingCommand] = {}
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        data = sock.recv(65536)
        if not data:
            break
        for cmd in decoder.feed(data):
            assert isinstance(cmd, RemotingCommand)
            got[cmd.opaque] = cmd
    return got


def _connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    _DECODERS[sock.fileno()] = CommandDecoder()
    return sock


def test_pipelined_sends_are_each_answered_in_queue_order(rmq_cluster) -> None:
    with _connect(rmq_cluster.master) as sock:
        sock.sendall(_send("RmqTurn", 1, b"warm"))  # the topic is created from TBW102
        assert _answers(sock, 1)[1].code == ResponseCode.SUCCESS
        sock.sendall(b"".join(_send("RmqTurn", 100 + i, f"m{i}".encode()) for i in range(32)))
        got = _answers(sock, 32)
    assert sorted(got) == list(range(100, 132))
    assert {a.code for a in got.values()} == {ResponseCode.SUCCESS}
    offsets = [int(got[100 + i].field("queueOffset") or -1) for i in range(32)]
    assert offsets == list(range(offsets[0], offsets[0] + 32))  # one queue, in the order sent
    assert len({got[o].field("msgId") for o in got}) == 32


def test_a_oneway_send_is_stored_without_an_answer(rmq_cluster) -> None:
    with _connect(rmq_cluster.master) as sock:
        sock.sendall(_send("RmqTurnOneway", 1, b"first", queue_id=1))
        first = _answers(sock, 1)[1]
        sock.sendall(_send("RmqTurnOneway", 2, b"oneway", queue_id=1, flag=RPC_ONEWAY)
                     + _send("RmqTurnOneway", 3, b"last", queue_id=1))
        got = _answers(sock, 1)
        sock.sendall(_send("RmqTurnOneway", 4, b"after", queue_id=1))  # answered after anything for 2
        got |= _answers(sock, 1)
    assert sorted(got) == [3, 4]  # nothing for the oneway request
    assert int(got[3].field("queueOffset") or -1) == int(first.field("queueOffset") or -1) + 2


def test_a_client_that_stops_writing_gets_every_answer(rmq_cluster) -> None:
    with _connect(rmq_cluster.master) as sock:
        sock.sendall(b"".join(_send("RmqTurnEof", 10 + i, b"x" * 512) for i in range(16)))
        sock.shutdown(socket.SHUT_WR)  # EOF right after the burst
        got = _answers(sock, 16)
    assert sorted(got) == list(range(10, 26))
    assert {a.code for a in got.values()} == {ResponseCode.SUCCESS}
