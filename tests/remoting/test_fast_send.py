"""The remoting send fast path (node/remoting/fastsend.py) against the reference path it
skips (sends.py through the CBOR send's schema and handler): two nodes in this process, each
its own store behind a real ClientServer with the node's remoting table, one with the fast
path and one without (the same store host, so their msgIds agree), get the same SEND frames
over real sockets. Every answer must be the same bytes, and so must every stored record but
for what differs by nature (the born host's port: each client its own connection; the store
timestamp). The templated answer is checked against `encode_command` on its own."""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import node.remoting.fastsend as fastsend_module
import node.remoting.processor as processor_module
from node.ops.services import NodeServices
from node.remoting.processor import NodeRemoting
from store import record_codec
from tests.node.nodeproc import master_conf
from tests.node.test_ops import node_services, ops_server
from wire.remoting.codes import RequestCode, ResponseCode
from wire.remoting.command import RemotingCommand, encode_command
from wire.remoting.plain_send import RemotingSend, reference_read_plain_send
from wire.remoting.send_reply import reference_send_reply_frame, send_reply_frame

TOPICS = ("FastA", "FastB_1", "Fast%C")
"""Warmed up on both nodes first (created from TBW102, then in the server's checked
topics), so later sends to them may take the fast path."""
BORN_PORT = slice(52, 56)  # an IPv4 born host's port
STORE_TIMESTAMP = slice(56, 64)
BORN_TIMESTAMP = slice(40, 48)
SENT_TIMESTAMPS = (1700000000123, 1)
"""The bornTimestamps the frames carry; a send without one is stamped with each node's clock."""
V2_KEYS = {"producerGroup": "a", "topic": "b", "defaultTopic": "c", "defaultTopicQueueNums": "d", "queueId": "e",
           "sysFlag": "f", "bornTimestamp": "g", "flag": "h", "properties": "i", "reconsumeTimes": "j",
           "unitMode": "k", "maxReconsumeTimes": "l", "batch": "m"}


@attrs.define
class Node:
    port: int
    root: Path
    services: NodeServices


@attrs.define
class Pair:
    fast: Node
    reference: Node
    fast_taken: list[int]
    """Opaques of the sends the fast path took (prepare_remoting_sends, observed where
    fastsend's fast_send and NodeRemoting.plain_sends call it)."""


async def _serve(conf: Path, fast: bool, ready: queue.Queue[Any], nursery: trio.Nursery) -> None:
    async with node_services(conf) as services:
        server = ops_server(services)
        remoting = NodeRemoting(services, server.checked_topics)
        remoting.fast_sends = fast
        server.remoting = remoting
        await nursery.start(server.run)
        ready.put(Node(server.port, Path(services.cfg.store.store_path_root_dir), services))
        await trio.sleep_forever()


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    directory = tmp_path_factory.mktemp("fastsend")
    same = {"listenPort": 10911, "autoCreateTopicEnable": True, "mappedFileSizeCommitLog": 8 * 1024 * 1024}
    confs = [master_conf(directory, name, role="ASYNC_MASTER", **same) for name in ("fast", "ref")]
    ready: queue.Queue[Any] = queue.Queue()
    scopes: list[tuple[trio.lowlevel.TrioToken, trio.CancelScope]] = []
    taken: list[int] = []
    original = fastsend_module.prepare_remoting_sends

    async def observed(s: Any, sends: list[RemotingSend], peer: Any, reply: Any) -> Any:
        got = await original(s, sends, peer, reply)
        taken.extend(f.opaque for f, p in zip(sends, got, strict=True) if p is not None)
        return got

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            scopes.append((trio.lowlevel.current_trio_token(), nursery.cancel_scope))
            nursery.start_soon(_serve, confs[0], True, ready, nursery)
            nursery.start_soon(_serve, confs[1], False, ready, nursery)

    def run() -> None:
        try:
            trio.run(main)
        except BaseException as e:  # noqa: BLE001 (told to the test thread)
            ready.put(e)

    fastsend_module.prepare_remoting_sends = observed  # type: ignore[assignment]
    processor_module.prepare_remoting_sends = observed  # type: ignore[assignment]
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        nodes = [ready.get(timeout=30) for _ in range(2)]
        for n in nodes:
            if isinstance(n, BaseException):
                raise n
        fast = next(n for n in nodes if n.root.name == "fast")
        ref = next(n for n in nodes if n.root.name == "ref")
        yield Pair(fast, ref, taken)
    finally:
        fastsend_module.prepare_remoting_sends = original  # type: ignore[assignment]
        processor_module.prepare_remoting_sends = original  # type: ignore[assignment]
        for token, scope in scopes:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(scope.cancel, trio_token=token)
        thread.join(timeout=30)


class Client:
    """One blocking connection; `call` sends a frame and returns its answer's bytes."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.buf = b""

    def call(self, frame: bytes) -> bytes:
        (answer,) = self.call_many([frame])
        return answer

    def call_many(self, frames: list[bytes]) -> list[bytes]:
        """The frames written at once (the node reads them in one receive, as a run), and
        their answers in the order they came."""
        self.sock.sendall(b"".join(frames))
        return [self._answer() for _ in frames]

    def _answer(self) -> bytes:
        while True:
            if len(self.buf) >= 4:
                n = int.from_bytes(self.buf[:4], "big") + 4
                if len(self.buf) >= n:
                    out, self.buf = self.buf[:n], self.buf[n:]
                    return out
            data = self.sock.recv(65536)
            assert data, "the node closed the connection"
            self.buf += data


@pytest.fixture(scope="module")
def clients(pair: Pair) -> Iterator[tuple[Client, Client]]:
    fast, ref = Client(pair.fast.port), Client(pair.reference.port)
    for i, topic in enumerate(TOPICS):  # create each topic and put it in the checked topics
        frame = _frame(RequestCode.SEND_MESSAGE, 9000 + i, _ext(topic, 0, "UNIQ_KEY\x01warm"), b"warm")
        assert _code(fast.call(frame)) == _code(ref.call(frame)) == ResponseCode.SUCCESS
    yield fast, ref
    fast.sock.close()
    ref.sock.close()


def _ext(topic: str, queue_id: int | str, properties: str, **more: str) -> dict[str, str]:
    return {"producerGroup": "fast-test", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
            "queueId": str(queue_id), "sysFlag": "0", "bornTimestamp": "1700000000123", "flag": "0",
            "properties": properties, "reconsumeTimes": "0", "unitMode": "0", "batch": "0", **more}


def _frame(code: int, opaque: int, ext: dict[str, str], body: bytes) -> bytes:
    if code == RequestCode.SEND_MESSAGE_V2:
        ext = {V2_KEYS.get(k, k): v for k, v in ext.items()}
    return encode_command(RemotingCommand(code=code, opaque=opaque, ext_fields=ext, body=body, language="CPP",
                                          version=63))


def _code(answer: bytes) -> int:
    header_len = int.from_bytes(answer[4:8], "big") & 0xFFFFFF
    return int(json.loads(answer[8:8 + header_len])["code"])


def _records(node: Node) -> list[bytes]:
    """Every record the node stored, its born port and store timestamp zeroed (and its born
    timestamp when the node's clock stamped it)."""
    end = node.services.store.get_max_phy_offset()
    data = (node.root / "commitlog" / f"{0:020d}").read_bytes()[:end]
    out, pos = [], 0
    while pos < end:
        got = record_codec.decode_record(data, pos, check_crc=False)
        assert got.kind is record_codec.RecordKind.MESSAGE, got.error
        rec = bytearray(data[pos:pos + got.size])
        rec[BORN_PORT] = bytes(4)
        rec[STORE_TIMESTAMP] = bytes(8)
        if int.from_bytes(rec[BORN_TIMESTAMP], "big") not in SENT_TIMESTAMPS:
            rec[BORN_TIMESTAMP] = bytes(8)
        out.append(bytes(rec))
        pos += got.size
    return out


NAMES = st.sampled_from(["UNIQ_KEY", "WAIT", "TAGS", "KEYS", "DELAY", "TRAN_MSG", "a", "b", ""]) | st.text(max_size=6)
VALUES = (st.sampled_from(["true", "false", "FALSE", "tag", "k1 k2", " k3\tk4 ", "1", "", "C0A8000100002A9F"])
          | st.text(max_size=8))
PROPERTIES = st.builds(
    lambda pairs, trailing: "\x02".join(f"{n}\x01{v}" for n, v in pairs) + ("\x02" if trailing else ""),
    st.lists(st.tuples(NAMES, VALUES), max_size=5), st.booleans())
SENDS = st.fixed_dictionaries({
    "code": st.sampled_from([RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2]),
    "topic": st.sampled_from(TOPICS),
    "queue_id": st.one_of(st.integers(0, 5), st.sampled_from(["-1", "x", "007"])),
    "properties": PROPERTIES,
    "body": st.binary(min_size=0, max_size=64),
    "more": st.fixed_dictionaries({}, optional={
        "flag": st.sampled_from(["0", "7", "2147483647", "2147483648", "-3", "x"]),
        "sysFlag": st.sampled_from(["0", "1", "4", ""]),
        "bornTimestamp": st.sampled_from(["0", "1", ""]),
        "batch": st.sampled_from(["0", "1", "false", "TRUE"]),
        "maxReconsumeTimes": st.sampled_from(["16", "", "x"]),
    }),
})


def _opaque(answer: bytes) -> int:
    header_len = int.from_bytes(answer[4:8], "big") & 0xFFFFFF
    return int(json.loads(answer[8:8 + header_len])["opaque"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sends=st.lists(SENDS, min_size=1, max_size=6), pipelined=st.booleans())
def test_the_fast_path_stores_and_answers_as_the_reference_does(pair: Pair, clients: tuple[Client, Client],
                                                                sends: list[dict[str, Any]], pipelined: bool) -> None:
    """One send at a time, or all written at once (a run the compiled reader reads, sends
    it leaves for the reference path among them, in order)."""
    fast, ref = clients
    frames = [_frame(s["code"], 100 + i, _ext(s["topic"], s["queue_id"], s["properties"], **s["more"]), s["body"])
              for i, s in enumerate(sends)]
    if pipelined:
        assert sorted(fast.call_many(frames), key=_opaque) == sorted(ref.call_many(frames), key=_opaque), sends
    else:
        for frame, s in zip(frames, sends, strict=True):
            assert fast.call(frame) == ref.call(frame), s
    assert _records(pair.fast) == _records(pair.reference)


def test_the_common_send_takes_the_fast_path(pair: Pair, clients: tuple[Client, Client]) -> None:
    """A C++ client's send (UNIQ_KEY, WAIT, TAGS, KEYS) and a Java client's V2 send take the
    fast path, and still answer and store as the reference does."""
    fast, ref = clients
    props = "UNIQ_KEY\x010A0B0C0D\x02WAIT\x01true\x02TAGS\x01tagA\x02KEYS\x01k1 k2\x02"
    before = len(pair.fast_taken)
    for opaque, code in ((777001, RequestCode.SEND_MESSAGE), (777002, RequestCode.SEND_MESSAGE_V2)):
        frame = _frame(code, opaque, _ext(TOPICS[0], 2, props), b"common body")
        answer = fast.call(frame)
        assert answer == ref.call(frame)
        assert _code(answer) == ResponseCode.SUCCESS
    assert pair.fast_taken[before:] == [777001, 777002]
    assert _records(pair.fast) == _records(pair.reference)
    last = _records(pair.fast)[-1]
    assert b"UNIQ_KEY\x010A0B0C0D\x02TAGS\x01tagA\x02KEYS\x01k1 k2" in last and b"WAIT" not in last


@given(code=st.sampled_from([0, 10, 11, 12]), opaque=st.integers(-(2**31), 2**31 - 1),
       msg_id=st.text(max_size=40) | st.text("0123456789ABCDEF", max_size=32), queue_id=st.integers(0, 2**31 - 1),
       queue_offset=st.integers(0, 2**63 - 1), region=st.text(max_size=12) | st.just("DefaultRegion"))
def test_the_templated_answer_is_what_encode_command_writes(code: int, opaque: int, msg_id: str, queue_id: int,
                                                            queue_offset: int, region: str) -> None:
    request = RemotingCommand(code=RequestCode.SEND_MESSAGE, opaque=opaque)
    expected = encode_command(request.response(code, ext_fields={
        "msgId": msg_id, "queueId": str(queue_id), "queueOffset": str(queue_offset), "MSG_REGION": region,
        "TRACE_ON": "true"}))
    assert send_reply_frame(ResponseCode(code), opaque, msg_id, queue_id, queue_offset, region) == expected
    assert reference_send_reply_frame(ResponseCode(code), opaque, msg_id, queue_id, queue_offset, region) == expected




def test_a_send_off_the_fast_path_takes_the_reference(pair: Pair, clients: tuple[Client, Client]) -> None:
    """A send the fast path leaves (a TRAN_MSG property, a JSON number it does not read as
    plain digits) is stored and answered by the reference, the same on both nodes."""
    fast, ref = clients
    before = len(pair.fast_taken)
    frames = [_frame(RequestCode.SEND_MESSAGE, 778001, _ext(TOPICS[1], 1, "TRAN_MSG\x01false\x02TAGS\x01t"), b"tx"),
              _frame(RequestCode.SEND_MESSAGE, 778002, _ext(TOPICS[1], "+1", "UNIQ_KEY\x01u"), b"plus"),
              _frame(RequestCode.SEND_MESSAGE, 778003, _ext(TOPICS[1], 1, "UNIQ_KEY\x01u"), b"fast")]
    for frame in frames:
        answer = fast.call(frame)
        assert answer == ref.call(frame) and _code(answer) == ResponseCode.SUCCESS
    assert pair.fast_taken[before:] == [778003]
    assert _records(pair.fast) == _records(pair.reference)


def test_a_refusal_after_the_append_is_answered_as_the_reference_answers_it(pair: Pair) -> None:
    """A send the fast path stored but may not acknowledge (a failover's INDETERMINATE,
    a map rather than its templated frame) gets the reference path's answer, its opaque."""
    frame = _frame(RequestCode.SEND_MESSAGE_V2, 779001, _ext(TOPICS[0], 1, "UNIQ_KEY\x01u"), b"late")
    send = reference_read_plain_send(frame[4:], set(TOPICS))
    assert send is not None
    answer = NodeRemoting(pair.fast.services, set(TOPICS)).plain_answer(
        send, {"id": 0, "status": "INDETERMINATE", "error": "the epoch moved on"})
    assert (answer.code, answer.opaque, answer.remark) == (ResponseCode.SYSTEM_ERROR, 779001, "the epoch moved on")
