"""A connection lost while the node shuts down for a role change: the client's `connect`
never drops the cancellation for the block's error (the Cancelled reaches the term's scope,
the error as its context), and SlaveSync's loop ends with the cancellation instead of taking
the process down (issue 21, part 2)."""

from __future__ import annotations

import random
from functools import partial

import pytest
import trio
import trio.testing

from node.slave_sync import SlaveSync
from node.tables.offsets import ConsumerOffsetManager
from node.tables.topics import TopicConfigManager
from tests.node.nodeproc import master_conf
from tests.waiting import wait_until
from wire.client import ConnectionLost, connect
from wire.protocol import CommitOffset, TopicCreate


async def _listen(nursery: trio.Nursery, handler) -> str:
    listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
    return f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"


async def test_connect_lets_an_outer_cancel_beside_the_block_error_reach_its_scope() -> None:
    async def idle(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        address = await _listen(nursery, idle)
        seen: list[BaseException] = []
        with trio.CancelScope() as outer:  # the term's scope
            try:
                async with connect(address) as conn:
                    await trio.testing.wait_all_tasks_blocked()  # the reader task is parked in receive
                    outer.cancel()  # Cancelled reaches the reader
                    raise ConnectionLost("lost mid-shutdown")
            except BaseException as e:
                seen.append(e)
                raise
        assert outer.cancelled_caught, "the cancellation reached its scope, not dropped for the error"
        assert isinstance(seen[0], trio.Cancelled)  # not an ExceptionGroup, not the ConnectionLost alone
        assert isinstance(seen[0].__context__, ConnectionLost) and "lost mid-shutdown" in str(seen[0].__context__)
        assert conn.closed
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("seed", range(3))
async def test_slave_sync_ends_cleanly_when_cancelled_amid_lost_connections(tmp_path, seed: int) -> None:
    """A master whose connections are cut again and again (accepted, then closed after a
    random delay) while the term is cancelled at random moments: every run of the loop
    ends by cancellation alone, having logged the lost connections."""
    rng = random.Random(seed)

    async def cut(stream: trio.SocketStream) -> None:
        await trio.sleep(rng.random() * 0.01)  # poll-exempt: a random delay before the cut is the scenario
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        address = await _listen(nursery, cut)
        for _ in range(15):
            sync = SlaveSync(address, TopicConfigManager(str(tmp_path), auto_create=True, default_queue_nums=4), ConsumerOffsetManager(str(tmp_path)),
                             max_frame_size=1 << 20, interval_s=0.001)
            with trio.CancelScope() as term:
                async with trio.open_nursery() as inner:
                    await inner.start(sync.run)
                    await wait_until(lambda s=sync: s.last_error, what="a lost connection", timeout=5)
                    await trio.sleep(rng.random() * 0.02)  # poll-exempt: cancelled at a random moment
                    term.cancel()
            assert term.cancelled_caught
            assert "connection" in sync.last_error
        nursery.cancel_scope.cancel()


async def test_the_pull_leaves_offsets_alone_while_the_ha_stream_brings_them(tmp_path, nodes) -> None:
    """A pulled offset table is older than what the HA stream brought (node/offset_stream.py):
    while offsets stream, or when a batch came during the round, the pull takes the topics
    but not the offsets; with no stream it takes both."""
    master = nodes.start(master_conf(tmp_path, "m", "ASYNC_MASTER"))
    async with connect(master.address) as conn:
        await conn.call(TopicCreate(topic="Pulled"))
        await conn.call(CommitOffset(group="G", topic="Pulled", queue_id=0, offset=3))
    for stream_states, takes_offsets in [([(True, 1), (True, 1)], False), ([(False, 1), (False, 2)], False),
                                         ([(False, 0), (False, 0)], True)]:
        root = tmp_path / f"slave-{len(stream_states)}-{takes_offsets}-{stream_states[1][1]}"
        offsets = ConsumerOffsetManager(str(root))
        offsets.commit("G", "Pulled", 0, 7)  # what the stream brought
        topics = TopicConfigManager(str(root), auto_create=False, default_queue_nums=4)
        states = iter(stream_states)
        sync = SlaveSync(master.address, topics, offsets, max_frame_size=1 << 20,
                         offsets_stream=lambda states=states: next(states))
        await sync.sync_once()
        assert topics.get("Pulled") is not None
        assert offsets.fetch("G", "Pulled", 0) == (3 if takes_offsets else 7)
