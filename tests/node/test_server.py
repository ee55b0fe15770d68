"""node.server.ClientServer in-process: a real server on 127.0.0.1 (port 0), real sockets,
the real client (wire.client.Connection); the handler is a small function so each test
controls when an answer is ready. The node's operations are tested in test_ops.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from node.server import ClientServer
from store.address import format_host_port
from tests.waiting import wait_until
from wire.client import BadRequest, ConnectionLost, InternalError, connect
from wire.framing import FrameDecoder, encode_frame
from wire.protocol import PROTOCOL_VERSION, MaxOffset, MinOffset, OffsetReply, Request, ok_response

Handler = Callable[[Request, "str | None"], Awaitable[dict[str, Any]]]
MAX_FRAME = 64 * 1024


@asynccontextmanager
async def serving(handler: Handler, **kwargs: Any) -> AsyncIterator[ClientServer]:
    async with trio.open_nursery() as nursery:
        server = ClientServer(handler, host="127.0.0.1", port=0, max_frame_size=MAX_FRAME, **kwargs)
        await nursery.start(server.run)
        yield server
        nursery.cancel_scope.cancel()


def address(server: ClientServer) -> str:
    return format_host_port(server.host, server.port)


class Gate:
    """A handler whose `pull` answers only once `open()` is called; other ops at once."""

    def __init__(self) -> None:
        self.opened = trio.Event()
        self.peers: list[str | None] = []

    def open(self) -> None:
        self.opened.set()

    async def __call__(self, request: Request, peer: str | None) -> dict[str, Any]:
        self.peers.append(peer)
        if request.op == "pull":
            await self.opened.wait()
        if request.op == "topic_list":
            raise RuntimeError("boom")
        return ok_response(request.id, op=request.op)


async def test_answers_are_paired_by_id_not_by_order():
    gate = Gate()
    async with serving(gate) as server, connect(address(server)) as conn:
        answers: dict[str, dict] = {}
        async with trio.open_nursery() as nursery:

            async def pull() -> None:
                answers["pull"] = await conn.request("pull", topic="T", queue_id=0, offset=0)

            nursery.start_soon(pull)
            await trio.testing.wait_all_tasks_blocked()
            assert server.in_flight == 1, "the pull is parked in the handler"
            assert (await conn.request("status"))["op"] == "status", "a later request is not held back"
            assert "pull" not in answers
            gate.open()
        assert answers["pull"]["op"] == "pull" and answers["pull"]["status"] == "OK"
        assert server.in_flight == 0
    host, port = gate.peers[0].rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0, "the handler is told the client's address"


async def test_an_invalid_request_is_bad_request_and_the_connection_stays():
    async with serving(Gate()) as server, connect(address(server)) as conn:
        with pytest.raises(BadRequest, match="unknown op 'sned'; did you mean 'send'"):
            await conn.request("sned")
        with pytest.raises(BadRequest, match="missing field 'topic' for op 'pull'"):
            await conn.request("pull", queue_id=0, offset=0)
        assert (await conn.request("status"))["status"] == "OK"
        assert not conn.closed


async def test_an_op_that_is_not_text_is_bad_request_and_the_connection_stays():
    """An op of another CBOR type (an array, a map: unhashable in Python) is refused like any
    bad field, not taken for a server bug that closes the connection."""
    async with serving(Gate()) as server, await trio.open_tcp_stream("127.0.0.1", server.port) as stream:
        decoder = FrameDecoder(MAX_FRAME)
        for i, op in enumerate(([1], {"a": 1}, None, 5)):
            await stream.send_all(encode_frame({"v": PROTOCOL_VERSION, "op": op, "id": i}))
            answers: list[dict] = []
            with trio.fail_after(5):
                while not answers:
                    answers = decoder.feed(await stream.receive_some(MAX_FRAME))
            assert answers[0]["id"] == i and answers[0]["status"] == "BAD_REQUEST", answers
            assert "field 'op' must be a text string" in answers[0]["error"]


async def test_a_handler_bug_costs_that_request_only():
    async with serving(Gate()) as server, connect(address(server)) as conn:
        with pytest.raises(InternalError, match="RuntimeError: boom"):
            await conn.request("topic_list")
        assert (await conn.request("status"))["status"] == "OK"


async def test_a_broken_frame_gets_an_error_frame_then_close_and_on_disconnect():
    gone: list[str | None] = []
    async with serving(Gate(), on_disconnect=gone.append) as server:
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        me = format_host_port(*stream.socket.getsockname()[:2])
        await stream.send_all((MAX_FRAME + 1).to_bytes(4, "big"))  # a length over the cap
        decoder, frames = FrameDecoder(MAX_FRAME), []
        with trio.fail_after(10):
            while data := await stream.receive_some(4096):
                frames += decoder.feed(data)
        [frame] = frames
        assert frame["id"] is None and frame["status"] == "BAD_REQUEST"
        assert str(MAX_FRAME) in frame["error"], frame
        await stream.aclose()
        await wait_until(lambda: gone, what="on_disconnect")
        assert gone == [me], "the server forgets the connection by the client's address"
        async with connect(address(server)) as conn:  # other clients are not affected
            assert (await conn.request("status"))["status"] == "OK"


async def test_drain_answers_requests_in_flight_and_refuses_new_connections():
    gate = Gate()
    async with serving(gate) as server, connect(address(server)) as conn:
        answers = []
        async with trio.open_nursery() as nursery:

            async def pull() -> None:
                answers.append(await conn.request("pull", topic="T", queue_id=0, offset=0))

            nursery.start_soon(pull)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(server.drain, 30.0)
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(ConnectionLost):
                async with connect(address(server), connect_timeout=5) as late:
                    await late.request("status")
            assert not answers, "the request in flight is still being served"
            gate.open()
        assert [a["op"] for a in answers] == ["pull"], "answered before the connection closed"
        with trio.fail_after(10):
            await conn.wait_closed()


async def test_drain_gives_up_after_the_grace_period():
    gate = Gate()  # never opened
    async with serving(gate) as server, connect(address(server)) as conn:
        async with trio.open_nursery() as nursery:

            async def pull() -> None:
                with pytest.raises(ConnectionLost):
                    await conn.request("pull", topic="T", queue_id=0, offset=0)

            nursery.start_soon(pull)
            await trio.testing.wait_all_tasks_blocked()
            with trio.fail_after(10):
                await server.drain(0.05)
        assert conn.closed, "the unanswered request's connection is closed, not left hanging"


class Turns:
    """Batched `send`s answered through the server's turn: `commit` records each turn's
    request ids, and a send with `wait` is finished only once `release()` is called."""

    def __init__(self) -> None:
        self.turns: list[list[int]] = []
        self.released = trio.Event()

    def release(self) -> None:
        self.released.set()

    async def handle(self, request: Request, peer: str | None) -> Any:
        return _Put(request.id, bool(request.fields.wait))

    def commit(self, placed: list[_Put]) -> None:
        self.turns.append([p.request_id for p in placed])

    async def finish(self, placed: list[_Put]) -> list[dict[str, Any]]:
        if any(p.waits for p in placed):
            await self.released.wait()
        return [ok_response(p.request_id, op="send") for p in placed]

    def serving(self) -> Any:
        return serving(self.handle, batched_ops=frozenset({"send"}), commit=self.commit, finish=self.finish)


class _Put:
    def __init__(self, request_id: int, waits: bool) -> None:
        self.request_id, self.waits = request_id, waits


async def test_sends_read_in_one_turn_are_committed_as_one_group():
    turns = Turns()
    async with turns.serving() as server, trio.open_nursery() as nursery:
        conns = [await nursery.start(_open, address(server)) for _ in range(8)]
        answers: list[dict] = []

        async def send(conn, i: int) -> None:
            answers.append(await conn.request("send", topic="T", body=b"x", wait=False))

        for i in range(1, 9):  # the requests of one scheduling round, from 8 connections
            nursery.start_soon(send, conns[i - 1], i)
        await wait_until(lambda: len(answers) == 8, what="8 answers")
        assert all(a["status"] == "OK" for a in answers)
        assert sum(map(len, turns.turns)) == 8
        assert len(turns.turns) < 8, turns.turns  # some turn held sends of several connections
        nursery.cancel_scope.cancel()


async def _open(address: str, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
    async with connect(address) as conn:
        task_status.started(conn)
        await trio.sleep_forever()


async def test_a_send_that_waits_does_not_hold_back_one_that_does_not():
    turns = Turns()
    async with turns.serving() as server, connect(address(server)) as a, connect(address(server)) as b:
        async with trio.open_nursery() as nursery:
            waited: list[dict] = []

            async def waiting() -> None:
                waited.append(await a.request("send", topic="T", body=b"w", wait=True))

            nursery.start_soon(waiting)
            quick = await b.request("send", topic="T", body=b"q", wait=False)
            assert quick["status"] == "OK" and not waited
            turns.release()
        assert [w["status"] for w in waited] == ["OK"]


async def test_drain_answers_the_sends_that_wait_before_closing():
    turns = Turns()
    async with turns.serving() as server, connect(address(server)) as conn:
        answers: list[dict] = []
        async with trio.open_nursery() as nursery:

            async def send() -> None:
                answers.append(await conn.request("send", topic="T", body=b"w", wait=True))

            nursery.start_soon(send)
            await wait_until(lambda: turns.turns, what="the send committed")
            nursery.start_soon(server.drain, 30.0)
            await trio.testing.wait_all_tasks_blocked()
            assert not answers and not conn.closed
            turns.release()
        assert [a["status"] for a in answers] == ["OK"]
        with trio.fail_after(10):
            await conn.wait_closed()


async def test_a_client_gone_right_after_its_burst_costs_nothing_else():
    """The sends of a connection that closed before its answers were written are still
    committed; delivering to the closed connection harms no one."""
    turns = Turns()
    turns.release()
    async with turns.serving() as server:
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        await stream.send_all(b"".join(_send_frame(i) for i in range(1, 21)))
        await stream.aclose()
        await wait_until(lambda: sum(map(len, turns.turns)) == 20, what="the burst committed")
        async with connect(address(server)) as conn:
            assert (await conn.request("send", topic="T", body=b"x"))["status"] == "OK"


def _send_frame(request_id: int) -> bytes:
    from wire.framing import encode_frame
    from wire.protocol import PROTOCOL_VERSION

    return encode_frame({"v": PROTOCOL_VERSION, "op": "send", "id": request_id, "topic": "T", "body": b"b"})


async def test_each_server_keeps_its_own_checked_topics():
    """The topics a server's parser found valid (what its compiled codec decodes plain
    sends to) are its own: two nodes in one process, as the simulation runs them, do not
    see each other's."""

    async def answer(request: Request, peer: str | None) -> dict[str, Any]:
        return OffsetReply(offset=7).to_wire(request.id)

    async with serving(answer) as a, serving(answer) as b:
        async with connect(address(a)) as conn:
            assert (await conn.call(MaxOffset(topic="OnA", queue_id=0))).offset == 7
            with pytest.raises(BadRequest, match="topic"):
                await conn.call(MaxOffset(topic="not a topic", queue_id=0))
        async with connect(address(b)) as conn:
            await conn.call(MinOffset(topic="OnB", queue_id=0))
        assert a.checked_topics == {"OnA"}, "a valid topic is remembered, an invalid one is not"
        assert b.checked_topics == {"OnB"}
        assert a.checked_topics is not b.checked_topics
