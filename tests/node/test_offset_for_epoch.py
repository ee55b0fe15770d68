"""KIP-320's node side without processes: `offset_for_epoch` and the epochs a `pull` answers
with, over a real store and ClientServer (tests/node/test_ops.py's wiring), the node's
epoch history a real EpochFileCache; and a promotion's clamp of committed offsets. With
real processes and an unclean promotion: tests/cluster/test_unclean_consumer.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import trio

from node.failover.promotion import clamp_offsets
from node.ops.services import NodeServices
from store.address import format_host_port
from store.epoch_file import EpochEntry, EpochFileCache
from tests.node.nodeproc import master_conf
from tests.node.test_ops import node_services, ops_server, send
from wire.client import Connection, connect
from wire.protocol import OffsetForEpoch, Pull

TOPIC = "Epochs"


class _History:
    """What the ops read of Failover here: the node's epoch history."""

    def __init__(self, entries: list[EpochEntry]) -> None:
        self.epochs = EpochFileCache(None, entries)


@asynccontextmanager
async def answering(services: NodeServices, history: _History | None) -> AsyncIterator[Connection]:
    served = attrs.evolve(services, failover=history)
    async with trio.open_nursery() as nursery:
        server = ops_server(served)
        await nursery.start(server.run)
        async with connect(format_host_port("127.0.0.1", server.port)) as conn:
            yield conn
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def six_records(tmp_path: Path) -> AsyncIterator[tuple[NodeServices, list[int]]]:
    async with node_services(master_conf(tmp_path, role="ASYNC_MASTER")) as services, \
            answering(services, None) as conn:
        at = [(await send(conn, TOPIC, b"r%d" % i, queue_id=0)).commitlog_offset for i in range(6)]
        yield services, at


def ask(epoch: int, commitlog_offset: int, offset: int) -> OffsetForEpoch:
    return OffsetForEpoch(topic=TOPIC, queue_id=0, epoch=epoch, commitlog_offset=commitlog_offset, offset=offset)


async def test_the_answer_stands_while_the_log_holds_the_epoch_past_the_record_and_moves_back_where_not(tmp_path):
    async with six_records(tmp_path) as (services, at):
        history = _History([EpochEntry(1, 0), EpochEntry(2, at[3])])  # epoch 2 began with record 3
        async with answering(services, history) as conn:
            newest = await conn.call(ask(2, at[5], 6))
            assert (newest.offset, newest.diverged, newest.node_epoch) == (6, False, 2)
            assert newest.end_offset == services.store.get_max_phy_offset()
            held = await conn.call(ask(1, at[2], 3))  # epoch 1's last record here: nothing cut
            assert (held.offset, held.end_offset, held.diverged) == (3, at[3], False)
            # a record of epoch 1 at record 4's place: this log's epoch 1 ended at record 3
            cut = await conn.call(ask(1, at[4], 5))
            assert (cut.offset, cut.end_offset, cut.diverged) == (3, at[3], True)
            far = await conn.call(ask(1, at[5] + 10_000, 40))  # read far past this log's end
            assert (far.offset, far.diverged) == (3, True)
            never_past = await conn.call(ask(1, at[4], 2))  # never forward of the consumer's offset
            assert never_past.offset == 2
            unknown = await conn.call(ask(7, at[1], 2))  # an epoch newer than any here: the log end
            assert (unknown.offset, unknown.diverged) == (2, False)

            early = await conn.call(Pull(topic=TOPIC, queue_id=0, offset=0, max_msgs=2))
            late = await conn.call(Pull(topic=TOPIC, queue_id=0, offset=2, max_msgs=4))
            assert (early.epoch, early.node_epoch, late.epoch, late.node_epoch) == (1, 2, 2, 2)
            empty = await conn.call(Pull(topic=TOPIC, queue_id=0, offset=6))
            assert (empty.epoch, empty.node_epoch) == (None, 2)


async def test_an_epoch_missing_from_the_log_moves_back_to_the_start_of_the_one_before(tmp_path):
    """Epoch 2 was written over a longer log of epoch 1 by a master restarted after a power
    loss; the slave holding epoch 1's longer log was promoted (epoch 3). A consumer whose last
    record came from epoch 2 may hold records this log never had from epoch 1's start on
    (storage seed 3026; Kafka's rule, epoch 3's start, kept it past records it never read)."""
    async with six_records(tmp_path) as (services, at):
        history = _History([EpochEntry(1, 0), EpochEntry(3, at[3])])  # no epoch 2
        async with answering(services, history) as conn:
            gone = await conn.call(ask(2, at[1], 2))
            assert (gone.offset, gone.end_offset, gone.diverged) == (0, 0, True)
            held = await conn.call(ask(1, at[1], 2))  # epoch 1 is here up to epoch 3's start
            assert (held.offset, held.diverged) == (2, False)


async def test_a_node_without_epochs_leaves_the_offset_and_says_so(tmp_path):
    async with six_records(tmp_path) as (services, at), answering(services, _History([])) as conn:
        answer = await conn.call(ask(1, at[5] + 10_000, 9))
        assert (answer.offset, answer.node_epoch, answer.diverged) == (9, -1, False)
        pulled = await conn.call(Pull(topic=TOPIC, queue_id=0, offset=0))
        assert (pulled.epoch, pulled.node_epoch) == (-1, -1)  # read before any epoch: checked later
    (tmp_path / "plain").mkdir()
    async with six_records(tmp_path / "plain") as (services, at), answering(services, None) as conn:
        pulled = await conn.call(Pull(topic=TOPIC, queue_id=0, offset=0))
        assert (pulled.epoch, pulled.node_epoch) == (None, None)  # a node without failover says nothing


async def test_a_record_read_before_any_epoch_is_shared_only_up_to_the_first_one(tmp_path):
    """A slave that replicated while a term began held records of an epoch it had not
    recorded, and a consumer read them (epoch -1); the elected node's first epoch starts
    where its own log diverges from that slave's (storage seed 7566)."""
    async with six_records(tmp_path) as (services, at), \
            answering(services, _History([EpochEntry(2, at[3])])) as conn:
        before = await conn.call(Pull(topic=TOPIC, queue_id=0, offset=0, max_msgs=2))
        assert (before.epoch, before.node_epoch) == (-1, 2)
        shared = await conn.call(ask(-1, at[2], 3))
        assert (shared.offset, shared.end_offset, shared.diverged) == (3, at[3], False)
        gone = await conn.call(ask(-1, at[4], 5))
        assert (gone.offset, gone.end_offset, gone.diverged) == (3, at[3], True)


async def test_a_promotion_clamps_committed_offsets_past_its_queue_ends(tmp_path):
    async with six_records(tmp_path) as (services, _at):
        offsets = services.offsets
        offsets.commit("past", TOPIC, 0, 23)
        offsets.commit("within", TOPIC, 0, 4)
        offsets.commit("empty", "Elsewhere", 1, 2)
        clamped = clamp_offsets(offsets, services.store)
        assert sorted((e.group, e.offset) for e in clamped) == [("empty", 2), ("past", 23)]
        assert (offsets.fetch("past", TOPIC, 0), offsets.fetch("within", TOPIC, 0),
                offsets.fetch("empty", "Elsewhere", 1)) == (6, 4, 0)
        assert clamp_offsets(offsets, services.store) == []


def test_an_offset_s_epoch_and_where_an_epoch_ends() -> None:
    cache = EpochFileCache(None, [EpochEntry(2, 100), EpochEntry(5, 300)])
    assert [cache.epoch_at(o) for o in (0, 99, 100, 299, 300, 10**9)] == [None, None, 2, 2, 5, 5]
    assert [cache.end_after(e, 900) for e in (1, 2, 3, 4, 5, 6)] == [100, 300, 300, 300, 900, 900]
    assert EpochFileCache(None).epoch_at(5) is None and EpochFileCache(None).end_after(1, 7) == 7
