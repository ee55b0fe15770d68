"""The node's batched request path with real node processes: what one receive holds is
served as one batch (sends appended in order as one CommitLog group, one wait for the
group's flush / slave, answers written together), so these tests send pipelined bursts
as one write and check that every answer pairs with its request, that order per queue
holds, that a bad frame mid-burst answers the good frames before it, and that SYNC
timeouts go to exactly the requests they concern."""

from __future__ import annotations

import os
import signal
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.node.nodeproc import NodeProcess, Nodes, master_conf, slave_conf
from tests.node.wire import Wire, call
from tests.waiting import wait_until
from wire.framing import encode_frame
from wire.protocol import PROTOCOL_VERSION

pytestmark = pytest.mark.slow


def frame(request_id: Any, op: str, **fields: Any) -> bytes:
    return encode_frame({"v": PROTOCOL_VERSION, "op": op, "id": request_id, **fields})


def send(request_id: int, topic: str, queue_id: int, body: bytes, **fields: Any) -> bytes:
    return frame(request_id, "send", topic=topic, queue_id=queue_id, body=body, **fields)


@pytest.fixture(scope="module", params=["ASYNC_MASTER", "SYNC_FLUSH"])
def node(request, tmp_path_factory) -> Iterator[NodeProcess]:
    """A master answering sends inline (async) or after a group flush (SYNC_FLUSH); topic
    auto-creation off, so a send to an unknown topic is NOT_FOUND."""
    d = tmp_path_factory.mktemp(request.param)
    flush = "SYNC_FLUSH" if request.param == "SYNC_FLUSH" else "ASYNC_FLUSH"
    nodes = Nodes()
    try:
        yield nodes.start(master_conf(d, role="ASYNC_MASTER", flushDiskType=flush, autoCreateTopicEnable=False))
    finally:
        nodes.cleanup()


async def create_topic(address: str, topic: str, queues: int) -> None:
    answer = await call(address, "topic_create", topic=topic, read_queue_nums=queues, write_queue_nums=queues)
    assert answer["status"] == "OK", answer


async def max_offset(address: str, topic: str, queue_id: int) -> int:
    return (await call(address, "max_offset", topic=topic, queue_id=queue_id))["offset"]


async def bodies(address: str, topic: str, queue_id: int) -> list[bytes]:
    """Every body in the queue, in queue order."""
    out: list[bytes] = []
    while True:
        pulled = await call(address, "pull", topic=topic, queue_id=queue_id, offset=len(out), max_msgs=32)
        if not pulled["messages"]:
            return out
        out += [m["body"] for m in pulled["messages"]]


async def test_a_mixed_burst_pairs_every_answer_with_its_request(node):
    await create_topic(node.address, "MixA", 2)
    await create_topic(node.address, "MixB", 1)
    burst = [
        (1, send(1, "MixA", 0, b"a0"), "PUT_OK"),
        (2, send(2, "MixB", 0, b"b0"), "PUT_OK"),
        (3, frame(3, "send_batch", topic="MixA", queue_id=1, messages=[{"body": b"x"}, {"body": b"y"}]), "PUT_OK"),
        (4, send(4, "MixA", 7, b"bad queue"), "BAD_REQUEST"),  # out of range: the node's check
        (5, frame(5, "sned", topic="MixA"), "BAD_REQUEST"),  # unknown op
        (6, send(6, "MixA", 0, "not bytes"), "BAD_REQUEST"),  # wrong wire type
        (7, send(7, "NoSuchTopic", 0, b"?"), "NOT_FOUND"),
        (8, frame(8, "max_offset", topic="MixA", queue_id=0), "OK"),  # not batched: its own task
        (9, send(9, "MixA", 0, b"a1", wait=False), "PUT_OK"),
        (10, frame(10, "send_batch", topic="MixA", queue_id=1, messages=[]), "BAD_REQUEST"),
        (11, send(11, "MixA", 1, b"a2", properties={"TAGS": "t"}), "BAD_REQUEST"),  # TAGS has its own field
        (12, send(12, "MixB", 0, b"b1"), "PUT_OK"),
    ]
    wire = await Wire.connect(node.address)
    try:
        await wire.send_raw(b"".join(data for _, data, _ in burst))
        answers = {}
        for _ in burst:
            answer = await wire.recv()
            assert answer is not None, "the node closed the connection"
            assert answer["id"] not in answers
            answers[answer["id"]] = answer
    finally:
        await wire.aclose()
    assert {i: a["status"] for i, a in answers.items()} == {i: status for i, _, status in burst}
    assert answers[3]["queue_id"] == 1 and len(answers[3]["msg_ids"]) == 2
    # each queue's offsets follow the burst's order; the refused requests took none
    assert (answers[1]["queue_offset"], answers[9]["queue_offset"]) == (0, 1)
    assert (answers[2]["queue_offset"], answers[12]["queue_offset"]) == (0, 1)
    assert answers[3]["queue_offset"] == 0
    assert await max_offset(node.address, "MixA", 0) == 2
    assert await max_offset(node.address, "MixA", 1) == 2
    assert answers[1]["commitlog_offset"] < answers[2]["commitlog_offset"] < answers[3]["commitlog_offset"]


async def test_order_per_queue_holds_across_pipelined_bursts(node):
    await create_topic(node.address, "Order", 3)
    n = 300
    wire = await Wire.connect(node.address)
    try:
        # two writes of 150 frames each, split mid-frame: batches need not align with frames
        data = b"".join(send(i + 1, "Order", i % 3, f"m{i}".encode()) for i in range(n))
        cut = len(data) // 2 + 7
        await wire.send_raw(data[:cut])
        await wire.send_raw(data[cut:])
        answers = {}
        while len(answers) < n:
            answer = await wire.recv()
            assert answer is not None and answer["status"] == "PUT_OK", answer
            answers[answer["id"]] = answer
    finally:
        await wire.aclose()
    for q in range(3):
        offsets = [answers[i + 1]["queue_offset"] for i in range(q, n, 3)]
        assert offsets == list(range(n // 3)), q
        assert await bodies(node.address, "Order", q) == [f"m{i}".encode() for i in range(q, n, 3)]


async def test_a_bad_frame_mid_burst_answers_the_frames_before_it(node):
    await create_topic(node.address, "Torn", 1)
    good = b"".join(send(i, "Torn", 0, f"g{i}".encode()) for i in range(1, 6))
    garbage = struct.pack(">I", 3) + b"\xff\xff\xff"  # a length and no CBOR map
    after = b"".join(send(i, "Torn", 0, f"late{i}".encode()) for i in range(6, 9))
    wire = await Wire.connect(node.address)
    try:
        await wire.send_raw(good + garbage + after)
        await wire.wait_closed()
    finally:
        await wire.aclose()
    frames = wire.received
    assert [(f["id"], f["status"]) for f in frames[:5]] == [(i, "PUT_OK") for i in range(1, 6)]
    assert len(frames) == 6 and frames[5]["id"] is None and frames[5]["status"] == "BAD_REQUEST"
    assert "not valid CBOR" in frames[5]["error"]
    assert await bodies(node.address, "Torn", 0) == [f"g{i}".encode() for i in range(1, 6)]


async def test_sync_master_timeouts_go_to_the_waiting_requests_only(tmp_path: Path):
    """A SYNC_MASTER whose slave stops acking (SIGSTOP): in one burst the sends with WAIT
    answer FLUSH_SLAVE_TIMEOUT after slaveTimeout, those without answer PUT_OK, and every
    one of them is stored, in order."""
    nodes = Nodes()
    slave = None
    try:
        m = master_conf(tmp_path, role="SYNC_MASTER", slaveTimeout=400)
        master = nodes.start(m)
        slave = nodes.start(slave_conf(tmp_path, m))
        await create_topic(master.address, "Sync", 1)

        async def replicated() -> bool:
            status = await call(master.address, "status")
            return bool(status["ha"]["slaves"])

        await wait_until(replicated, what="the slave connected")
        warm = await call(master.address, "send", topic="Sync", queue_id=0, body=b"warm")
        assert warm["status"] == "PUT_OK", warm
        os.kill(slave.proc.pid, signal.SIGSTOP)
        waits = [True, False, True, True, False, False, True, False]
        wire = await Wire.connect(master.address)
        try:
            t0 = trio.current_time()
            await wire.send_raw(b"".join(send(i + 1, "Sync", 0, b"s%d" % i, wait=w) for i, w in enumerate(waits)))
            answers = [await wire.recv_id(i + 1) for i in range(len(waits))]
            waited = trio.current_time() - t0
        finally:
            await wire.aclose()
        assert [a["status"] for a in answers] == ["FLUSH_SLAVE_TIMEOUT" if w else "PUT_OK" for w in waits]
        assert [a["queue_offset"] for a in answers] == list(range(1, len(waits) + 1))
        assert 0.3 <= waited < 3.0
    finally:
        if slave is not None and slave.proc.poll() is None:
            os.kill(slave.proc.pid, signal.SIGCONT)
        nodes.cleanup()


async def test_sends_of_many_connections_share_groups_and_keep_their_order(node):
    """16 connections with one send in flight each: the node appends what they send in the
    same turn as one CommitLog group (fewer groups than requests), every answer is PUT_OK
    and pairs with its request, and each connection's messages keep their order per queue."""
    await create_topic(node.address, "Fan", 4)
    before = (await call(node.address, "status"))["stats"]
    connections, each = 16, 25

    async def client(c: int, wires: list[Wire]) -> None:
        wire = await Wire.connect(node.address)
        wires.append(wire)
        for k in range(each):
            answer = await wire.call("send", topic="Fan", queue_id=c % 4, body=f"c{c}-{k}".encode())
            assert answer["status"] == "PUT_OK", answer

    wires: list[Wire] = []
    try:
        async with trio.open_nursery() as nursery:
            for c in range(connections):
                nursery.start_soon(client, c, wires)
    finally:
        for wire in wires:
            await wire.aclose()
    after = (await call(node.address, "status"))["stats"]
    requests = after["send_requests"] - before["send_requests"]
    groups = after["send_groups"] - before["send_groups"]
    assert requests == connections * each
    assert groups < requests, (groups, requests)
    for q in range(4):
        stored = await bodies(node.address, "Fan", q)
        assert len(stored) == each * connections // 4
        for c in range(q, connections, 4):
            mine = [b for b in stored if b.startswith(f"c{c}-".encode())]
            assert mine == [f"c{c}-{k}".encode() for k in range(each)], c


async def test_a_client_that_does_not_read_holds_back_only_itself(node):
    """A client with a tiny receive buffer sends a burst and reads nothing: the answers the
    socket does not take wait in its outbox, another connection is answered meanwhile, and
    the slow client later reads every answer, whole and paired by id."""
    await create_topic(node.address, "Slow", 1)
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    host, port = node.address.rsplit(":", 1)
    await sock.connect((host, int(port)))
    slow = Wire(trio.SocketStream(sock))
    n = 1000
    try:
        await slow.send_raw(b"".join(send(i, "Slow", 0, b"s" * 64) for i in range(1, n + 1)))

        async def stored_all() -> bool:
            return await max_offset(node.address, "Slow", 0) == n

        await wait_until(stored_all, what="the slow client's burst stored")
        fast = await Wire.connect(node.address)
        try:
            answer = await fast.call("send", topic="Slow", queue_id=0, body=b"fast", timeout=5.0)
            assert answer["status"] == "PUT_OK" and answer["queue_offset"] == n, answer
        finally:
            await fast.aclose()
        answers = {}
        while len(answers) < n:
            frame = await slow.recv()
            assert frame is not None and frame["status"] == "PUT_OK", frame
            answers[frame["id"]] = frame["queue_offset"]
    finally:
        await slow.aclose()
    assert answers == {i: i - 1 for i in range(1, n + 1)}
