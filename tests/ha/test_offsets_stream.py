"""Consumer-offset commits on the HA extension, end to end over TCP between real stores:
the table goes to a tidemq slave when it takes the extension, each commit follows, and the
master's wait (a SYNC_MASTER commit) ends once the in-sync slaves acked; a RocketMQ 4.x
slave gets none of it and, once known as one, is not waited for."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from ha.master import HAService
from ha.protocol import (
    OffsetCommit,
    OffsetsBatch,
    TransferDecoder,
    encode_offer,
    encode_offsets_ack,
    encode_report,
)
from ha.slave import HAClient
from store.config import BrokerRole
from store.message_store import open_store
from tests.ha.test_replication import make_config, make_message, running_master, slaves_joined
from tests.waiting import wait_until


@asynccontextmanager
async def streaming(tmp_path: Path, table: Callable[[], list[OffsetCommit] | None],
                    on_offsets: Callable[[OffsetsBatch], None] | None = None,
                    stale: frozenset[tuple[str, str, int]] | None = None,
                    ) -> AsyncIterator[tuple[HAService, HAClient]]:
    """A SYNC_MASTER whose offset table is `table` (keys not known whole: `stale`) and a
    tidemq slave joined to it over TCP, holding data (so it offers the extension)."""
    async with (
        running_master(tmp_path / "m", broker_role=BrokerRole.SYNC_MASTER) as (master, ha),
        open_store(make_config(tmp_path / "s", BrokerRole.SLAVE)) as slave,
        trio.open_nursery() as nursery,
    ):
        ha.offset_table = table
        if stale is not None:
            ha.offset_stale_keys = lambda: stale
        client = HAClient(slave.replica_log, slave.config, f"127.0.0.1:{ha.port}", on_offsets=on_offsets)
        await nursery.start(client.run)
        await slaves_joined(ha)
        assert (await master.put_message(make_message(0))).ok  # the slave holds data: it offers
        yield ha, client
        nursery.cancel_scope.cancel()


async def test_a_tidemq_slave_gets_the_table_then_each_commit_and_acks_them(tmp_path):
    table = [OffsetCommit("G", "T", 0, 5), OffsetCommit("G", "T", 1, 9)]
    taken: list[OffsetsBatch] = []
    async with streaming(tmp_path, lambda: list(table), taken.append) as (ha, client):
        await wait_until(lambda: taken, what="the table on the slave")
        assert taken[0].replace and set(taken[0].entries) == set(table)
        assert client.offsets_streamed()

        commit = OffsetCommit("G", "T", 1, 12)
        seq = ha.offsets_committed([commit])
        with trio.fail_after(5):
            assert await ha.wait_for_offsets(seq, 5.0) == []
        assert taken[-1] == OffsetsBatch(seq, False, (commit,))
        assert ha.offsets_missing(seq) == []


async def test_a_table_not_known_whole_goes_to_raise_then_its_fresh_part_to_set(tmp_path):
    """A master whose table is not known to be the group's whole table (it restarted from
    its file, or had none) sends it flagged to raise the slave's, then the offsets committed
    since it started as plain commits (which may lower: an offset reset is the group's)."""
    table = [OffsetCommit("G", "T", 0, 5), OffsetCommit("G", "T", 1, 9)]
    taken: list[OffsetsBatch] = []
    async with streaming(tmp_path, lambda: list(table), taken.append, stale=frozenset({("G", "T", 0)})):
        await wait_until(lambda: len(taken) >= 2, what="the table and its fresh part on the slave")
        seq = taken[0].seq
        assert taken == [OffsetsBatch(seq, True, tuple(table), raise_only=True),
                         OffsetsBatch(seq, False, (OffsetCommit("G", "T", 1, 9),))]


async def test_a_held_table_is_streamed_only_once_ready(tmp_path):
    """A master whose table is not the group's yet (an etcd-mode candidate: its file may be
    5 s old) sends a slave that takes the extension nothing, so the slave keeps its own
    fresher table; once elected (`offsets_ready`) the table goes out whole."""
    table = [OffsetCommit("G", "T", 0, 5)]
    held = [True]
    taken: list[OffsetsBatch] = []
    async with streaming(tmp_path, lambda: None if held[0] else list(table), taken.append) as (ha, client):
        await wait_until(lambda: all(c.extension for c in ha._connections), what="the extension taken")
        assert taken == [] and not client.offsets_streamed()
        held[0] = False
        ha.offsets_ready()
        await wait_until(lambda: taken, what="the table on the slave once ready")
        assert taken[0].replace and set(taken[0].entries) == set(table)


async def test_a_slave_that_does_not_ack_is_waited_for_until_the_timeout(tmp_path):
    """A tidemq slave that takes no batches (no `on_offsets`) never acks: the wait names it."""
    async with streaming(tmp_path, list) as (ha, _client):
        # the table went out (commit number offsets_seq) and is not acked: the slave is missing
        await wait_until(lambda: ha.offsets_missing(ha.offsets_seq), what="the extension taken")
        seq = ha.offsets_committed([OffsetCommit("G", "T", 0, 1)])
        missing = await ha.wait_for_offsets(seq, 0.3)
        assert missing == [ha.status()[0].address]


async def test_a_rocketmq_4x_slave_gets_no_offsets_and_is_not_waited_for(tmp_path):
    """A slave that never offers (RocketMQ 4.x's HAClient: plain reports only) reads only
    4.x frames (a 4.x decoder refuses any other as a negative offset), and commits do not
    wait for it."""
    async with running_master(tmp_path / "m", broker_role=BrokerRole.SYNC_MASTER) as (master, ha):
        ha.offset_table = lambda: [OffsetCommit("G", "T", 0, 5)]
        stream = await trio.open_tcp_stream("127.0.0.1", ha.port)
        async with stream:
            await stream.send_all(encode_report(0))
            await slaves_joined(ha)
            assert (await master.put_message(make_message(0, wait=False))).ok
            decoder = TransferDecoder()  # extension off: an offsets frame would raise here
            end = master.commit_log.max_offset()
            got = 0
            with trio.fail_after(5):
                while got < end:
                    for frame in decoder.feed(await stream.receive_some(65536)):
                        got = max(got, frame.end)
            # not known yet whether it takes offsets: a commit would wait for it
            assert len(ha.offsets_missing(ha.offsets_seq)) == 1
            # two reports after a frame and no offer: RocketMQ 4.x, not waited for
            await stream.send_all(encode_report(got) + encode_report(got))
            await wait_until(lambda: not ha.offsets_missing(ha.offsets_seq), what="known as a 4.x slave")
            seq = ha.offsets_committed([OffsetCommit("G", "T", 0, 6)])
            assert await ha.wait_for_offsets(seq, 1.0) == []
            with trio.move_on_after(0.3):  # poll: whatever the master sends meanwhile
                while data := await stream.receive_some(65536):
                    decoder.feed(data)  # raises ProtocolError on anything but 4.x frames


async def test_a_caught_up_slave_takes_the_extension_within_a_round_trip(tmp_path):
    """A slave that reconnects holding everything (no record to ack) gets a heartbeat at
    once and offers on it: the table arrives well within haSendHeartbeatInterval (5 s),
    without a write to the group."""
    async with (
        running_master(tmp_path / "m", broker_role=BrokerRole.SYNC_MASTER) as (master, ha),
        open_store(make_config(tmp_path / "s", BrokerRole.SLAVE)) as slave,
    ):
        ha.offset_table = lambda: [OffsetCommit("G", "T", 0, 5)]
        assert (await master.put_message(make_message(0, wait=False))).ok
        for connection in range(2):
            taken: list[OffsetsBatch] = []
            async with trio.open_nursery() as nursery:
                client = HAClient(slave.replica_log, slave.config, f"127.0.0.1:{ha.port}", on_offsets=taken.append)
                await nursery.start(client.run)
                start = trio.current_time()
                await wait_until(lambda taken=taken: taken, what=f"the table on connection {connection}")
                if connection:  # caught up before it connected
                    assert trio.current_time() - start < 2.0
                assert slave.commit_log.max_offset() == master.commit_log.max_offset()
                nursery.cancel_scope.cancel()
            await wait_until(lambda: ha.connection_count == 0, what="the connection closed")


async def test_an_ack_of_a_batch_never_sent_closes_the_connection(tmp_path):
    """A slave that acks offsets it cannot hold (beyond the newest batch) is refused: it
    would let a SYNC_MASTER answer commits it never got."""
    async with running_master(tmp_path / "m", broker_role=BrokerRole.SYNC_MASTER) as (master, ha):
        ha.offset_table = list
        assert (await master.put_message(make_message(0, wait=False))).ok
        end = master.commit_log.max_offset()
        async with await trio.open_tcp_stream("127.0.0.1", ha.port) as stream:
            await stream.send_all(encode_report(end))
            await slaves_joined(ha)
            await stream.send_all(encode_offer(end))  # a tidemq slave's offer: the table follows
            await wait_until(lambda: ha.offsets_missing(ha.offsets_seq), what="the table sent")
            await stream.send_all(encode_offsets_ack(ha.offsets_seq + 5))
            with trio.fail_after(5):
                while await stream.receive_some(65536):
                    pass  # until the master closes it
        await wait_until(lambda: ha.connection_count == 0, what="the connection closed")
