"""node.ops in-process: the node's operations behind a real ClientServer on 127.0.0.1, over
a real store in tmp_path, reached with the real client (wire.client.Connection). The same
wiring as node/broker.py, without a process, so each op's answers are checked directly."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from node.config import load_config
from node.ops.dispatch import BATCHED_OPS, append_requests, finish_requests, handle_now
from node.ops.services import NodeServices
from node.server import ClientServer
from node.tables.offsets import ConsumerOffsetManager
from node.tables.topics import TopicConfigManager
from store.address import format_host_port
from store.message_store import open_store
from tests.node.nodeproc import master_conf, slave_conf
from wire.client import BadRequest, Connection, NotFound, ServiceUnavailable, connect
from wire.protocol import (
    CommitOffset,
    ConsumerHeartbeat,
    ConsumerLock,
    FetchOffset,
    GetByMsgId,
    GetStatus,
    MaxOffset,
    MinOffset,
    OffsetList,
    Pull,
    PullReply,
    QueryByKey,
    Send,
    SendReply,
    Status,
    TopicCreate,
    TopicDelete,
    TopicList,
)


@asynccontextmanager
async def node_services(conf: Path) -> AsyncIterator[NodeServices]:
    """A node's store and tables from its config file, as NodeServices (no server)."""
    cfg = load_config(str(conf))
    root = cfg.store.store_path_root_dir
    topics = TopicConfigManager(root, auto_create=cfg.auto_create_topic_enable,
                                default_queue_nums=cfg.default_topic_queue_nums)
    topics.load()
    offsets = ConsumerOffsetManager(root)
    offsets.load()
    async with open_store(cfg.store) as store:
        yield NodeServices(cfg=cfg, store=store, topics=topics, offsets=offsets)


def ops_server(services: NodeServices, **server: Any) -> ClientServer:
    """A ClientServer on a free port answering with the node's ops, sends batched as the
    node batches them (`server`: more ClientServer arguments)."""
    return ClientServer(partial(handle_now, services), host="127.0.0.1", port=0,
                        max_frame_size=services.cfg.max_frame_size, batched_ops=BATCHED_OPS,
                        commit=partial(append_requests, services), finish=partial(finish_requests, services),
                        **server)


@asynccontextmanager
async def serving_ops(conf: Path, **server: Any) -> AsyncIterator[tuple[NodeServices, Connection]]:
    """A node's store, tables and operations behind a ClientServer on a free port, and a
    connection to it (`server`: more ClientServer arguments, e.g. an older op table)."""
    async with node_services(conf) as services, trio.open_nursery() as nursery:
        server = ops_server(services, **server)
        await nursery.start(server.run)
        async with connect(format_host_port("127.0.0.1", server.port)) as conn:
            yield services, conn
        nursery.cancel_scope.cancel()


async def send(conn: Connection, topic: str, body: bytes, **fields: Any) -> SendReply:
    answer: SendReply = await conn.call(Send(topic=topic, body=body, **fields))
    assert answer.status is Status.PUT_OK, answer
    return answer


async def test_a_sent_message_reads_back_by_offset_msg_id_and_key(tmp_path):
    async with serving_ops(master_conf(tmp_path, role="ASYNC_MASTER")) as (services, conn):
        sent = await send(conn, "Orders", b"order 42", queue_id=1, tags="paid", keys=["o-42", "c-7"],
                          properties={"region": "eu"})
        assert (sent.queue_id, sent.queue_offset) == (1, 0)
        assert sent.commitlog_offset == 0 and services.store.get_max_phy_offset() > 0

        pulled = await conn.call(Pull(topic="Orders", queue_id=1, offset=0))
        assert pulled.status is Status.FOUND and pulled.next_begin_offset == 1
        [m] = pulled.messages
        assert (m.body, m.tags, m.keys, m.msg_id) == (b"order 42", "paid", ["o-42", "c-7"], sent.msg_id)
        assert m.properties["region"] == "eu" and "TAGS" not in m.properties

        by_id = (await conn.call(GetByMsgId(msg_id=sent.msg_id))).message
        assert by_id == m
        by_key = (await conn.call(QueryByKey(topic="Orders", key="c-7"))).messages
        assert [x.msg_id for x in by_key] == [sent.msg_id]
        assert (await conn.call(MaxOffset(topic="Orders", queue_id=1))).offset == 1
        assert (await conn.call(MinOffset(topic="Orders", queue_id=1))).offset == 0

        filtered = await conn.call(Pull(topic="Orders", queue_id=1, offset=0, tag_filter="unpaid"))
        assert filtered.status is Status.NO_MATCHED_MESSAGE and not filtered.messages
        with pytest.raises(NotFound, match="no message with msgId"):
            await conn.call(GetByMsgId(msg_id=sent.msg_id[:-4] + "FFFF"))


async def test_a_damaged_record_is_refused_naming_its_range_and_status_reports_it(tmp_path):
    """A bit flipped in a stored body (a corrupt sector, docs/store.md "Corrupt records"):
    the pull serves what lies before it, then answers SERVICE_NOT_AVAILABLE with its range,
    a lookup finds no message, and `status` lists the range (checkCrcOnRead=all: the record is
    in the active segment, which the default trusts on reads)."""
    async with serving_ops(master_conf(tmp_path, role="ASYNC_MASTER", checkCrcOnRead="all")) as (services, conn):
        first = await send(conn, "Orders", b"order 1", queue_id=0)
        second = await send(conn, "Orders", b"order 2", queue_id=0)
        size = services.store.look_message_by_offset(second.commitlog_offset).size
        segment = Path(services.store.config.store_path_root_dir) / "commitlog" / f"{0:020d}"
        with open(segment, "r+b") as f:  # the body starts 88 bytes in (IPv4 hosts)
            f.seek(second.commitlog_offset + 88)
            flipped = bytes([f.read(1)[0] ^ 0x04])
            f.seek(second.commitlog_offset + 88)
            f.write(flipped)
        pulled = await conn.call(Pull(topic="Orders", queue_id=0, offset=0))
        assert [m.body for m in pulled.messages] == [b"order 1"] and pulled.next_begin_offset == 1
        damaged = f"[{second.commitlog_offset}, {second.commitlog_offset + size})"
        with pytest.raises(ServiceUnavailable, match=re.escape(f"the CommitLog record at {damaged} is damaged")):
            await conn.call(Pull(topic="Orders", queue_id=0, offset=1))
        with pytest.raises(NotFound):
            await conn.call(GetByMsgId(msg_id=second.msg_id))
        assert (await conn.call(GetByMsgId(msg_id=first.msg_id))).message.body == b"order 1"
        status = await conn.call(GetStatus())
        assert status.damaged == [{"start": second.commitlog_offset, "end": second.commitlog_offset + size,
                                   "reason": "body CRC mismatch", "found_by": "read"}]


async def test_a_long_poll_is_woken_by_a_send_and_released_by_shutdown(tmp_path):
    async with serving_ops(master_conf(tmp_path, role="ASYNC_MASTER")) as (services, conn):
        answers: list[PullReply] = []

        async def pull(offset: int) -> None:
            answers.append(await conn.call(Pull(topic="Wake", queue_id=0, offset=offset, timeout_ms=60_000),
                                           timeout=90))

        await conn.call(TopicCreate(topic="Wake", read_queue_nums=1, write_queue_nums=1))
        with trio.fail_after(10):  # long before the pull's own 60 s: the send wakes it
            async with trio.open_nursery() as nursery:
                nursery.start_soon(pull, 0)
                await trio.testing.wait_all_tasks_blocked()
                assert not answers, "nothing to read yet: the pull waits"
                await send(conn, "Wake", b"now", queue_id=0)
        assert answers[0].status is Status.FOUND and answers[0].messages[0].body == b"now"

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(pull, 1)
                await trio.testing.wait_all_tasks_blocked()
                services.stop_long_polls()  # what a shutdown does before draining
        assert answers[1].status is Status.OFFSET_OVERFLOW_ONE and answers[1].messages == []


async def test_topics_must_exist_when_auto_create_is_off_and_queue_ids_be_in_range(tmp_path):
    conf = master_conf(tmp_path, role="ASYNC_MASTER", autoCreateTopicEnable=False)
    async with serving_ops(conf) as (services, conn):
        with pytest.raises(NotFound, match="topic 'New' does not exist on broker-t"):
            await conn.call(Send(topic="New", body=b"x"))
        created = await conn.call(TopicCreate(topic="New", read_queue_nums=2, write_queue_nums=2))
        assert created.topic["write_queue_nums"] == 2
        with pytest.raises(BadRequest, match="queue_id 2 is out of range: topic 'New' has 2 write queues"):
            await conn.call(Send(topic="New", body=b"x", queue_id=2))
        await send(conn, "New", b"x", queue_id=1)
        listed = (await conn.call(TopicList())).topics
        assert [(t["topic"], t["read_queue_nums"]) for t in listed] == [("New", 2)]
        assert services.topics.list()[0].topic == "New"
        changes = services.topics.changes.version
        assert (await conn.call(TopicDelete(topic="New"))).deleted is True
        assert services.topics.list() == [] and services.topics.changes.version > changes  # registers again
        assert (await conn.call(TopicDelete(topic="New"))).deleted is False
        with pytest.raises(NotFound, match="topic 'New' does not exist"):  # gone for sends too
            await conn.call(Send(topic="New", body=b"x"))


async def test_committed_offsets_are_fetched_and_listed(tmp_path):
    async with serving_ops(master_conf(tmp_path, role="ASYNC_MASTER")) as (services, conn):
        with pytest.raises(NotFound, match="group 'G' has no committed offset for T:3"):
            await conn.call(FetchOffset(group="G", topic="T", queue_id=3))
        await conn.call(CommitOffset(group="G", topic="T", queue_id=3, offset=17))
        assert (await conn.call(FetchOffset(group="G", topic="T", queue_id=3))).offset == 17
        assert (await conn.call(OffsetList())).offsets == [
            {"group": "G", "topic": "T", "queue_id": 3, "offset": 17}
        ]
        assert services.offsets.fetch("G", "T", 3) == 17


async def test_a_slave_refuses_writes_and_reports_its_role(tmp_path):
    conf = slave_conf(tmp_path, master_conf(tmp_path))
    async with serving_ops(conf) as (services, conn):
        with pytest.raises(ServiceUnavailable, match="this node is a SLAVE and refuses writes"):
            await conn.call(Send(topic="T", body=b"x"))
        with pytest.raises(ServiceUnavailable, match="refuses offset commits"):
            await conn.call(CommitOffset(group="G", topic="T", queue_id=0, offset=1))
        with pytest.raises(ServiceUnavailable, match="refuses topic changes"):
            await conn.call(TopicDelete(topic="T"))
        await conn.call(ConsumerHeartbeat(group="G", client_id="c", topics=["T"]))
        with pytest.raises(ServiceUnavailable, match="refuses queue locks"):  # locks live on the master only
            await conn.call(ConsumerLock(group="G", client_id="c", topic="T", queue_ids=[0], life_ms=60_000))
        status = await conn.call(GetStatus())
        assert status.role == "SLAVE" and status.broker_id == 1
        assert status.max_phy_offset == services.store.get_max_phy_offset() == 0
        assert status.address == services.cfg.address and status.disk is not None and status.disk.total > 0


def test_every_request_class_has_one_handler_and_the_batched_ops_are_the_sends():
    """Handlers are keyed by request class: every op the node parses has one, no concern's
    table claims another's class, and the server's batched op names come from the classes."""
    from node.ops import admin, consumers, pulls, puts, transactions
    from node.ops.dispatch import BATCHED, HANDLERS
    from wire.protocol import NODE_REQUESTS, Send, SendBatch

    tables = [puts.PUT_HANDLERS, pulls.PULL_HANDLERS, admin.ADMIN_HANDLERS, consumers.CONSUMER_HANDLERS,
              transactions.TRANSACTION_HANDLERS]
    assert sum(len(t) for t in tables) == len(HANDLERS), "no request class is in two tables"
    assert set(HANDLERS) == set(NODE_REQUESTS.values())
    assert (Send, SendBatch) == BATCHED and {"send", "send_batch"} == BATCHED_OPS
