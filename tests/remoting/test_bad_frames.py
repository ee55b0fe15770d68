"""A node's remoting port under bad input: fuzzed headers in well-framed frames, lengths
that lie, unknown codes, oneway requests. RocketMQ's NettyRemotingAbstract is the model:
an unknown code is answered REQUEST_CODE_NOT_SUPPORTED (3) with " request type <c> not
supported", even to a oneway request; a oneway request of a known code gets no answer; a
frame whose header cannot be read is answered (SYSTEM_ERROR with its opaque) and the
connection goes on; a frame whose length cannot be trusted is answered once and the
connection closes. After each, the node still serves both protocols on fresh connections.

One node process (an ASYNC_MASTER without a name server) serves the whole module."""

from __future__ import annotations

import random
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.node.nodeproc import Nodes, master_conf
from tests.remoting.client import RemotingClient
from wire.client import connect
from wire.protocol import QueryByKey, Send, Status
from wire.remoting.codes import RequestCode, ResponseCode
from wire.remoting.command import RPC_ONEWAY, RemotingCommand, encode_command

pytestmark = pytest.mark.slow

MAX_FRAME = 6 * 1024 * 1024
UNKNOWN = 9999
TOPIC = "RmqBadFrames"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory: Path = tmp_path_factory.mktemp("badframes")
    nodes = Nodes()
    try:
        yield nodes.start(master_conf(directory, "m", "ASYNC_MASTER", maxFrameSize=MAX_FRAME)).address
    finally:
        nodes.cleanup()


def _frame(header: bytes, body: bytes = b"", serialize_type: int = 0, header_len: int | None = None) -> bytes:
    n = len(header) if header_len is None else header_len
    return struct.pack(">II", 4 + len(header) + len(body), serialize_type << 24 | n) + header + body


def _ping(client: RemotingClient, opaque: int = -7) -> None:
    """A request the node answers without side effects: an unknown code (also checks the
    answer's shape against RocketMQ's)."""
    answer = client.receive(client.send(RemotingCommand(code=UNKNOWN, opaque=opaque)))
    assert (answer.code, answer.opaque, answer.is_response) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, opaque, True)
    assert answer.remark == f" request type {UNKNOWN} not supported"


def _serves_both_protocols(address: str) -> None:
    with RemotingClient(address) as fresh:
        _ping(fresh)

    async def cbor() -> None:
        async with connect(address) as conn:
            assert (await conn.call(Send(topic=TOPIC, body=b"cbor"))).status is Status.PUT_OK

    trio.run(cbor)


def _answers_until(client: RemotingClient, opaque: int) -> list[RemotingCommand]:
    """Every answer the connection gets up to and including the one to `opaque`."""
    seen: list[RemotingCommand] = []
    while True:
        client.sock.settimeout(client.timeout)
        data = client.sock.recv(65536)
        assert data, "the node closed the connection"
        for cmd in client.decoder.feed(data):
            assert isinstance(cmd, RemotingCommand), cmd
            seen.append(cmd)
            if cmd.opaque == opaque:
                return seen


def _closed(client: RemotingClient) -> bool:
    client.sock.settimeout(client.timeout)
    try:
        while client.sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


@pytest.mark.parametrize("code", [UNKNOWN, 0, -1, 32767, 2**31 - 1])
@pytest.mark.parametrize("flag", [0, RPC_ONEWAY])
def test_an_unknown_code_gets_request_code_not_supported_even_oneway(node: str, code: int, flag: int) -> None:
    with RemotingClient(node) as client:
        answer = client.receive(client.send(RemotingCommand(code=code, opaque=42, flag=flag, language="CPP")))
        assert (answer.code, answer.opaque, answer.flag & 1) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, 42, 1)
        assert answer.remark == f" request type {code} not supported"
        _ping(client)


def _send_ext(key: str) -> dict[str, str]:
    return {"producerGroup": "bad-frames", "topic": TOPIC, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
            "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0",
            "properties": f"KEYS\x01{key}\x02", "reconsumeTimes": "0", "unitMode": "0", "batch": "0"}


def test_a_oneway_send_is_stored_and_gets_no_answer(node: str) -> None:
    with RemotingClient(node) as client:
        oneway = client.send(RemotingCommand(code=RequestCode.SEND_MESSAGE, opaque=100, flag=RPC_ONEWAY,
                                             ext_fields=_send_ext("oneway-1"), body=b"oneway body"))
        # a send of the same queue after it: answered after the oneway one would have been
        sync = client.send(RemotingCommand(code=RequestCode.SEND_MESSAGE, opaque=101, ext_fields=_send_ext("sync-1"),
                                           body=b"sync body"))
        answers = _answers_until(client, sync)
        assert oneway not in [a.opaque for a in answers]
        assert answers[-1].code == ResponseCode.SUCCESS
        _ping(client)
        assert oneway not in [a.opaque for a in client.pushed]

    async def stored() -> None:
        async with connect(node) as conn:
            found = (await conn.call(QueryByKey(topic=TOPIC, key="oneway-1"))).messages
            assert [m.body for m in found] == [b"oneway body"]

    trio.run(stored)


def _mutated(rng: random.Random, header: bytes) -> bytes:
    raw = bytearray(header)
    for _ in range(rng.randint(1, 4)):
        raw[rng.randrange(len(raw))] = rng.randrange(256)
    return bytes(raw)


def test_fuzzed_headers_are_answered_and_the_connection_goes_on(node: str) -> None:
    """400 frames with random or mutated headers, sent back to back on one connection, then
    a ping: the ping is answered, no frame got two answers, and the node serves on."""
    rng = random.Random(20261127)
    valid = encode_command(RemotingCommand(code=RequestCode.SEND_MESSAGE, opaque=5, ext_fields=_send_ext("fz"),
                                           language="CPP"))[8:]
    frames = []
    for i in range(400):
        kind = i % 4
        if kind == 0:
            header = rng.randbytes(rng.randint(0, 120))
        elif kind == 1:
            header = _mutated(rng, valid)
        elif kind == 2:
            header = b'{"code":' + rng.randbytes(rng.randint(0, 30))
        else:
            header = b'{"code":10,"x":' + b"[" * rng.randint(1, 50_000)  # deeper than a JSON parser goes
        frames.append(_frame(header, rng.randbytes(rng.randint(0, 40)), serialize_type=rng.choice([0, 0, 1, 2, 255])))
    with RemotingClient(node, timeout=30) as client:
        client.sock.sendall(b"".join(frames))
        answers = _answers_until(client, client.send(RemotingCommand(code=UNKNOWN, opaque=-99)))
        assert answers[-1].code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert len(answers) <= len(frames) + 1
        assert any(a.code == ResponseCode.SYSTEM_ERROR for a in answers)
        _ping(client)
    _serves_both_protocols(node)


@pytest.mark.parametrize("header, serialize_type, opaque", [
    (b'{"code":10,"opaque":31,"extFields":[]}', 0, 31),
    (b'{"code":"x","opaque":32}', 0, 32),
    (b"not json at all", 0, 0),
    (b'{"code":10,"opaque":33}', 2, 33),  # an unknown serialize type
    (struct.pack(">hbhii", 10, 1, 63, 34, 0) + b"\x00\x00\x00\x09hi", 1, 34),  # a remark past the end
], ids=["ext-not-object", "code-not-int", "not-json", "serialize-type-2", "binary-past-end"])
def test_a_bad_header_is_answered_with_its_opaque_and_the_connection_stays_usable(
        node: str, header: bytes, serialize_type: int, opaque: int) -> None:
    with RemotingClient(node) as client:
        _ping(client, 1)
        client.sock.sendall(_frame(header, b"body", serialize_type))
        answer = client.receive(opaque)
        assert answer.code == ResponseCode.SYSTEM_ERROR and answer.remark
        assert answer.serialize_type == (1 if serialize_type == 1 else 0)  # answered in its own serialization
        _ping(client, 2)  # the next good request on the same connection is answered
    _serves_both_protocols(node)


@pytest.mark.parametrize("first", [True, False], ids=["first-frame", "after-a-request"])
@pytest.mark.parametrize("raw, reason", [
    (_frame(b'{"code":1,"opaque":3}', header_len=200), "exceeds the frame"),
    (struct.pack(">II", MAX_FRAME + 1, 0), "exceeds the limit"),  # refused from its prefix: no body sent
    (struct.pack(">I", 2) + b"\x00\x00", "shorter"),
], ids=["header-past-frame", "over-limit", "no-type-word"])
def test_a_lying_length_is_answered_once_then_the_connection_closes(node: str, raw: bytes, reason: str,
                                                                    first: bool) -> None:
    with RemotingClient(node) as client:
        if not first:
            _ping(client)
        client.sock.sendall(raw)
        answer = client.receive(0)
        assert answer.code == ResponseCode.SYSTEM_ERROR and reason in (answer.remark or "")
        assert _closed(client)
    _serves_both_protocols(node)


def test_a_client_that_hangs_up_mid_frame_costs_nothing(node: str) -> None:
    frame = encode_command(RemotingCommand(code=UNKNOWN, opaque=1, body=b"x" * 100))
    host, port = node.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as s:
        s.sendall(frame[:50])
    _serves_both_protocols(node)
