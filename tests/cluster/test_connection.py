"""wire.client.Connection against a real node: many requests in flight on one connection,
answered out of order; a request timeout leaves the connection usable; typed errors; a
node that goes away fails the requests in flight with ConnectionLost."""

from __future__ import annotations

import signal

import pytest
import trio
import trio.testing

from cluster.client import BadRequest, ConnectionLost, NotFound, RequestTimeout, connect
from tests.node.nodeproc import master_conf
from wire.client import ConnectionPool
from wire.protocol import GetStatus, TopicCreate

pytestmark = pytest.mark.slow  # every test here starts node processes


async def test_pipelining_timeouts_errors_and_loss(tmp_path, nodes):
    node = nodes.start(master_conf(tmp_path, role="ASYNC_MASTER"))
    async with connect(node.address) as conn:
        await conn.request("topic_create", topic="P", read_queue_nums=1, write_queue_nums=1)
        polled = {}
        async with trio.open_nursery() as nursery:
            async def poll() -> None:
                polled["r"] = await conn.request("pull", topic="P", queue_id=0, offset=0, timeout_ms=20_000,
                                                 timeout=30)

            nursery.start_soon(poll)
            await trio.testing.wait_all_tasks_blocked()
            assert conn.in_flight == 1
            # the parked pull does not hold back later requests on the same connection
            assert (await conn.request("status"))["role"] == "ASYNC_MASTER"
            sent = await conn.request("send", topic="P", body=b"wake", queue_id=0, wait=False)
            assert sent["status"] == "PUT_OK"
        assert polled["r"]["status"] == "FOUND" and polled["r"]["messages"][0]["body"] == b"wake"

        with pytest.raises(RequestTimeout, match="no answer to pull within 0.2 s") as info:
            await conn.request("pull", topic="P", queue_id=0, offset=1, timeout_ms=3000, timeout=0.2)
        assert info.value.status == "TIMEOUT" and info.value.address == node.address
        assert not conn.closed, "a timeout does not end the connection"
        assert (await conn.request("max_offset", topic="P", queue_id=0))["offset"] == 1

        with pytest.raises(NotFound) as info:
            await conn.request("fetch_offset", group="G", topic="P", queue_id=0)
        assert info.value.status == "NOT_FOUND" and "no committed offset" in info.value.message
        with pytest.raises(BadRequest, match="unknown field 'queueId'"):
            await conn.request("max_offset", topic="P", queueId=0)

        async with trio.open_nursery() as nursery:
            async def doomed() -> None:
                with pytest.raises(ConnectionLost, match="connection lost"):
                    await conn.request("pull", topic="P", queue_id=0, offset=1, timeout_ms=20_000, timeout=30)

            nursery.start_soon(doomed)
            await trio.testing.wait_all_tasks_blocked()
            node.kill()
        assert conn.closed
        with pytest.raises(ConnectionLost, match="connection is closed"):
            await conn.request("status")


async def test_frames_larger_than_the_socket_buffer_and_concurrent_senders_arrive_whole(tmp_path, nodes):
    """An uncontended frame is written straight to the socket (wire.client.Connection._write);
    what the socket does not take, and the frames of senders that find the send lock held,
    go through trio's send_all: every frame arrives whole and in one piece, never interleaved."""
    node = nodes.start(master_conf(tmp_path, role="ASYNC_MASTER", maxMessageSize=4 << 20,
                                   mappedFileSizeCommitLog=16 << 20))
    bodies = [bytes([i]) * (3 << 20 if i % 4 == 0 else 100) for i in range(16)]  # 3 MiB: more than one write
    async with connect(node.address) as conn:
        await conn.request("topic_create", topic="Big", read_queue_nums=1, write_queue_nums=1)
        answers: dict[int, dict] = {}
        async with trio.open_nursery() as nursery:
            async def send(i: int) -> None:
                answers[i] = await conn.request("send", topic="Big", body=bodies[i], queue_id=0, timeout=30)

            for i in range(len(bodies)):
                nursery.start_soon(send, i)
        assert sorted(answers) == list(range(len(bodies)))
        assert {a["status"] for a in answers.values()} == {"PUT_OK"}
        stored: dict[int, bytes] = {}
        with trio.fail_after(60):
            while len(stored) < len(bodies):
                pulled = await conn.request("pull", topic="Big", queue_id=0, offset=len(stored), max_msgs=4,
                                            timeout=30)
                stored |= {len(stored) + k: m["body"] for k, m in enumerate(pulled.get("messages", []))}
        by_offset = {a["queue_offset"]: i for i, a in answers.items()}
        assert all(stored[offset] == bodies[i] for offset, i in by_offset.items())


async def test_a_pool_drops_a_connection_the_peer_stayed_silent_on_for_a_whole_timeout(tmp_path, nodes):
    """A peer that sends nothing for a request's whole timeout may be gone without a reset
    (a host that lost its power, a NAT that forgot the flow): the pool closes that connection
    and the next request opens a new one (storage seed 5792: a producer timed out for 120 s
    on the connection to a master that had restarted). A connection the peer answered other
    requests on meanwhile, or that answers a probe, is kept. The silent peer here is a
    SIGSTOPped node."""
    node = nodes.start(master_conf(tmp_path, role="ASYNC_MASTER"))
    async with trio.open_nursery() as nursery:
        pool = ConnectionPool(nursery)
        assert (await pool.call(node.address, GetStatus())).role == "ASYNC_MASTER"
        first = await pool.get(node.address)
        await pool.call(node.address, TopicCreate(topic="Silent"))
        with pytest.raises(RequestTimeout):  # a parked pull: the peer answers the probe, it stays
            await pool.request(node.address, "pull", topic="Silent", queue_id=0, offset=0, timeout_ms=3000,
                               timeout=0.3)
        assert await pool.get(node.address) is first and not first.closed
        node.proc.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(RequestTimeout):
                await pool.call(node.address, GetStatus(), timeout=0.5)
            assert first.closed
        finally:
            node.proc.send_signal(signal.SIGCONT)
        assert (await pool.call(node.address, GetStatus())).role == "ASYNC_MASTER"
        assert await pool.get(node.address) is not first
        await pool.aclose()
