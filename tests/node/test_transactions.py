"""Transactional messages on the node (issue 43, items 1 and 2): half messages, end_transaction,
exactly one outcome across duplicates, races and restarts, and the RocketMQ bugs whose shapes
must not come back (#8158, #1517, #7933). The node's operations behind a real ClientServer
over a real store (tests/node/test_ops.py's wiring); a restart closes the store and opens it
again from its files."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
import trio

from node.ops.dispatch import handle_request
from node.ops.services import NodeServices
from node.ops.transactions import half_of
from node.tables.transactions import TransactionTable
from store.message import Message
from store.message_store import MessageStore
from store.status import PutMessageResult
from store.sysflag import TRANSACTION_MASK, SysFlag
from store.transaction import (
    HALF_TOPIC,
    OP_HALF_TOPIC,
    PROPERTY_TRAN_END,
    PROPERTY_TRAN_HALF_OFFSET,
    Outcome,
    committed_message,
)
from tests.node.nodeproc import master_conf, slave_conf
from tests.node.test_ops import serving_ops
from wire.client import (
    BadRequest,
    Connection,
    NoPermission,
    NotFound,
    ServiceUnavailable,
    TransactionEnded,
    connect,
)
from wire.protocol import (
    EndTransaction,
    EndTransactionReply,
    GetStatus,
    Pull,
    PullReply,
    Request,
    Send,
    SendBatch,
    SendReply,
    Status,
    TopicCreate,
)

GROUP = "PG-orders"
NO_CHECKS_SENT = {"checks_posted": 0, "checks_dropped": 0, "checks_without_producer": 0, "checks_refused": 0,
                  "producers_watching": 0}
"""`status`'s check mailbox counts of a node that sent no check yet."""
TOPIC = "Orders"


async def prepare(conn: Connection, body: bytes = b"order 1", *, queue_id: int = 1, **props: str) -> SendReply:
    properties = {"TRAN_MSG": "true", "PGROUP": GROUP, "__transactionId__": "tx-" + body.decode(), **props}
    reply: SendReply = await conn.call(Send(topic=TOPIC, body=body, queue_id=queue_id, tags="paid",
                                            keys=["k-" + body.decode().replace(" ", "-")], properties=properties))
    assert reply.status is Status.PUT_OK, reply
    return reply


async def end(conn: Connection, half: SendReply, outcome: str, *, group: str = GROUP,
              from_check: bool = False) -> EndTransactionReply:
    reply: EndTransactionReply = await conn.call(EndTransaction(
        producer_group=group, tran_state_table_offset=half.queue_offset, commitlog_offset=half.commitlog_offset,
        outcome=outcome, from_transaction_check=from_check))
    return reply


async def pull_all(conn: Connection, topic: str, queue_id: int) -> PullReply:
    reply: PullReply = await conn.call(Pull(topic=topic, queue_id=queue_id, offset=0, max_msgs=100))
    return reply


async def delivered(conn: Connection, queue_id: int = 1) -> list[bytes]:
    return [m.body for m in (await pull_all(conn, TOPIC, queue_id)).messages]


async def create_topic(conn: Connection) -> None:
    await conn.call(TopicCreate(topic=TOPIC, read_queue_nums=4, write_queue_nums=4))


def conf_of(tmp_path: Path, **extra: object) -> Path:
    return master_conf(tmp_path, role="ASYNC_MASTER", **extra)


async def test_a_prepared_send_is_a_half_message_no_consumer_of_the_real_topic_sees(tmp_path):
    async with serving_ops(conf_of(tmp_path)) as (services, conn):
        await create_topic(conn)
        half = await prepare(conn)
        assert half.queue_id == 1 and half.queue_offset == 0  # the asked queue; the half queue's offset
        stored = services.store.look_message_by_offset(half.commitlog_offset)
        assert stored is not None and stored.topic == HALF_TOPIC and stored.queue_id == 0
        assert stored.sys_flag & TRANSACTION_MASK == 0  # stored as NOT, as RocketMQ stores it
        assert {k: stored.properties[k] for k in ("REAL_TOPIC", "REAL_QID", "PGROUP", "TRAN_MSG",
                                                  "__transactionId__")} == {
            "REAL_TOPIC": TOPIC, "REAL_QID": "1", "PGROUP": GROUP, "TRAN_MSG": "true", "__transactionId__": "tx-order 1"}
        assert await delivered(conn) == []
        assert [m.body for m in (await pull_all(conn, HALF_TOPIC, 0)).messages] == [b"order 1"]
        status = await conn.call(GetStatus())
        assert status.transactions == {"open": 1, "open_by_topic": {TOPIC: 1}, "committed": 0, "rolled_back": 0,
                                       "ended_unrecorded": 0, "op_missing": 0, "discarded": 0, "checks": 0,
                                       **NO_CHECKS_SENT}


async def test_commit_writes_the_message_on_its_real_queue_and_an_op_record(tmp_path):
    async with serving_ops(conf_of(tmp_path)) as (services, conn):
        await create_topic(conn)
        half = await prepare(conn)
        done = await end(conn, half, "COMMIT")
        assert (done.status, done.outcome, done.duplicate) == (Status.PUT_OK, "COMMIT", False)
        assert (done.topic, done.queue_id, done.queue_offset) == (TOPIC, 1, 0)
        [msg] = (await pull_all(conn, TOPIC, 1)).messages
        assert (msg.body, msg.tags, msg.keys, msg.msg_id) == (b"order 1", "paid", ["k-order-1"], done.msg_id)
        assert msg.sys_flag is not None and msg.sys_flag & TRANSACTION_MASK == SysFlag.TRANSACTION_COMMIT
        assert "REAL_TOPIC" not in msg.properties and msg.properties["PGROUP"] == GROUP
        stored = services.store.look_message_by_offset(msg.commitlog_offset)
        assert stored is not None and stored.prepared_transaction_offset == half.commitlog_offset
        [op] = (await pull_all(conn, OP_HALF_TOPIC, 0)).messages
        assert (op.tags, op.body) == ("d", str(half.queue_offset).encode())
        assert op.properties[PROPERTY_TRAN_END] == "COMMIT"
        assert op.properties[PROPERTY_TRAN_HALF_OFFSET] == str(half.commitlog_offset)
        status = await conn.call(GetStatus())
        assert status.transactions is not None
        assert (status.transactions["open"], status.transactions["committed"]) == (0, 1)


async def test_rollback_writes_only_the_op_record_and_unknown_writes_nothing(tmp_path):
    async with serving_ops(conf_of(tmp_path)) as (services, conn):
        await create_topic(conn)
        first, second = await prepare(conn, b"a"), await prepare(conn, b"b")
        before = services.store.get_max_phy_offset()
        unknown = await end(conn, second, "UNKNOWN")
        assert (unknown.status, unknown.outcome, unknown.duplicate) == (Status.OK, "UNKNOWN", False)
        assert services.store.get_max_phy_offset() == before, "UNKNOWN writes nothing"
        rolled = await end(conn, first, "ROLLBACK")
        assert (rolled.status, rolled.outcome, rolled.msg_id) == (Status.PUT_OK, "ROLLBACK", None)
        [op] = (await pull_all(conn, OP_HALF_TOPIC, 0)).messages
        assert op.properties[PROPERTY_TRAN_END] == "ROLLBACK" and op.body == str(first.queue_offset).encode()
        assert await delivered(conn) == []
        status = await conn.call(GetStatus())
        assert status.transactions is not None
        assert (status.transactions["open"], status.transactions["rolled_back"]) == (1, 1)  # b is still open
        assert (await end(conn, second, "COMMIT")).outcome == "COMMIT"  # an UNKNOWN leaves it to end later
        assert await delivered(conn) == [b"b"]


async def test_exactly_one_outcome_duplicates_answer_what_was_done_and_the_other_outcome_is_refused(tmp_path):
    async with serving_ops(conf_of(tmp_path)) as (services, conn):
        await create_topic(conn)
        c, r = await prepare(conn, b"c"), await prepare(conn, b"r")
        first = await end(conn, c, "COMMIT")
        await end(conn, r, "ROLLBACK")
        log_end = services.store.get_max_phy_offset()
        again = await end(conn, c, "COMMIT")
        assert (again.outcome, again.duplicate, again.msg_id, again.commitlog_offset) == (
            "COMMIT", True, first.msg_id, first.commitlog_offset)
        assert (await end(conn, r, "ROLLBACK")).duplicate
        assert (await end(conn, c, "UNKNOWN")).outcome == "COMMIT"  # an UNKNOWN after the end reports it
        with pytest.raises(TransactionEnded, match="already ended with COMMIT; nothing was written"):
            await end(conn, c, "ROLLBACK")
        with pytest.raises(TransactionEnded, match="already ended with ROLLBACK"):
            await end(conn, r, "COMMIT")
        assert services.store.get_max_phy_offset() == log_end, "no END after the first wrote anything"
        assert await delivered(conn) == [b"c"]


async def test_an_end_is_checked_against_its_half_message(tmp_path):
    async with serving_ops(conf_of(tmp_path)) as (services, conn):
        await create_topic(conn)
        half = await prepare(conn)
        with pytest.raises(BadRequest, match="belongs to producer group 'PG-orders', not 'other'"):
            await end(conn, half, "COMMIT", group="other")
        wrong_offset = SendReply(status=Status.PUT_OK, msg_id=half.msg_id, queue_id=1, queue_offset=7,
                                 commitlog_offset=half.commitlog_offset)
        with pytest.raises(BadRequest, match="has half queue offset 0, not 7"):
            await end(conn, wrong_offset, "COMMIT")
        plain: SendReply = await conn.call(Send(topic=TOPIC, body=b"plain", queue_id=0))
        with pytest.raises(NotFound, match="no half message at CommitLog offset"):
            await end(conn, plain, "COMMIT")
        with pytest.raises(BadRequest, match="must be one of COMMIT, ROLLBACK, UNKNOWN"):
            await conn.call(EndTransaction(producer_group=GROUP, tran_state_table_offset=0,
                                           commitlog_offset=half.commitlog_offset, outcome="commit"))
        # another transaction's half message at the offsets the END names (an unclean
        # failover's new master reused them): not found, and nothing written
        with pytest.raises(NotFound, match="no half message of transaction 'tx-other' at CommitLog offset"):
            await conn.call(EndTransaction(producer_group=GROUP, tran_state_table_offset=half.queue_offset,
                                           commitlog_offset=half.commitlog_offset, outcome="COMMIT",
                                           transaction_id="tx-other"))
        assert await delivered(conn) == []
        reply: EndTransactionReply = await conn.call(EndTransaction(
            producer_group=GROUP, tran_state_table_offset=half.queue_offset, commitlog_offset=half.commitlog_offset,
            outcome="COMMIT", transaction_id="tx-order 1"))
        assert reply.outcome == "COMMIT" and await delivered(conn) == [b"order 1"]


async def test_clients_may_not_send_to_the_system_topics_nor_batch_or_delay_half_messages(tmp_path):
    async with serving_ops(conf_of(tmp_path)) as (services, conn):
        await create_topic(conn)
        await prepare(conn)  # the half topic exists now: the plain send path must refuse it too
        for topic in (HALF_TOPIC, OP_HALF_TOPIC, "TRANS_CHECK_MAX_TIME_TOPIC"):
            with pytest.raises(NoPermission, match=f"sending to topic '{topic}' is forbidden"):
                await conn.call(Send(topic=topic, body=b"forged"))
        with pytest.raises(BadRequest, match="a batch may not hold transactional messages"):
            await conn.call(SendBatch(topic=TOPIC, messages=[
                {"body": b"x", "properties": {"TRAN_MSG": "true", "PGROUP": GROUP}}]))
        with pytest.raises(BadRequest, match="needs the property PGROUP"):
            await conn.call(Send(topic=TOPIC, body=b"x", properties={"TRAN_MSG": "true"}))
        with pytest.raises(BadRequest, match="cannot be delayed"):
            await conn.call(Send(topic=TOPIC, body=b"x", properties={"TRAN_MSG": "true", "PGROUP": GROUP,
                                                                      "DELAY": "2"}))
        assert len((await pull_all(conn, HALF_TOPIC, 0)).messages) == 1


async def test_reject_transaction_message_refuses_prepared_sends_only(tmp_path):
    async with serving_ops(conf_of(tmp_path, rejectTransactionMessage=True)) as (services, conn):
        await create_topic(conn)
        with pytest.raises(NoPermission, match="refuses transactional messages \\(rejectTransactionMessage\\)"):
            await conn.call(Send(topic=TOPIC, body=b"x", properties={"TRAN_MSG": "true", "PGROUP": GROUP}))
        assert (await conn.call(Send(topic=TOPIC, body=b"plain"))).status is Status.PUT_OK


async def test_an_end_needs_pub_on_the_half_messages_real_topic_and_writes_nothing_without(tmp_path):
    """Request.publisher, which a server that checks logins sets (node/security/guard.py)."""
    async with serving_ops(conf_of(tmp_path)) as (services, conn):
        await create_topic(conn)
        half = await prepare(conn)
        before = services.store.get_max_phy_offset()
        fields = EndTransaction(producer_group=GROUP, tran_state_table_offset=half.queue_offset,
                                commitlog_offset=half.commitlog_offset, outcome="COMMIT")
        asked: list[str] = []

        def publisher(topic: str) -> str | None:
            asked.append(topic)
            return f"account 'bob' lacks PUB on topic {topic!r}"

        answer = await handle_request(services, Request(op="end_transaction", id=9, fields=fields,
                                                        publisher=publisher), None)
        assert isinstance(answer, dict) and answer["status"] == "NO_PERMISSION", answer
        assert "lacks PUB on topic 'Orders'" in answer["error"] and asked == [TOPIC]
        assert services.store.get_max_phy_offset() == before and await delivered(conn) == []
        allowed = await handle_request(services, Request(op="end_transaction", id=10, fields=fields,
                                                         publisher=lambda _t: None), None)
        assert isinstance(allowed, dict) and allowed["status"] == "PUT_OK", allowed


async def test_a_slave_refuses_end_transaction(tmp_path):
    async with serving_ops(slave_conf(tmp_path, master_conf(tmp_path))) as (services, conn):
        with pytest.raises(ServiceUnavailable, match="SLAVE and refuses end_transaction"):
            await conn.call(EndTransaction(producer_group=GROUP, tran_state_table_offset=0, commitlog_offset=0,
                                           outcome="COMMIT"))


async def test_rocketmq_8158_a_checked_commit_racing_the_producer_commit_is_stored_once(tmp_path):
    """#8158 (1): the check answered COMMIT while the producer's own COMMIT was on its way: the
    message was committed twice. (2): the check answered ROLLBACK, then the producer's COMMIT
    still committed it. Here the two COMMITs race on two connections, then a checked
    ROLLBACK is followed by a late producer COMMIT."""
    conf = conf_of(tmp_path)
    async with serving_ops(conf) as (services, conn):
        await create_topic(conn)
        raced, rolled = await prepare(conn, b"raced"), await prepare(conn, b"rolled")
        answers: list[EndTransactionReply] = []

        async def commit(c: Connection, from_check: bool) -> None:
            answers.append(await end(c, raced, "COMMIT", from_check=from_check))

        async with connect(conn.address) as checker, trio.open_nursery() as nursery:  # two connections at once
            nursery.start_soon(commit, checker, True)
            nursery.start_soon(commit, conn, False)
        assert sorted(a.duplicate for a in answers) == [False, True]
        assert len({a.commitlog_offset for a in answers}) == 1
        assert (await end(conn, rolled, "ROLLBACK", from_check=True)).outcome == "ROLLBACK"
        with pytest.raises(TransactionEnded):
            await end(conn, rolled, "COMMIT")
        assert await delivered(conn) == [b"raced"]


async def test_rocketmq_1517_and_7933_an_ended_transaction_stays_ended_across_a_restart(tmp_path):
    """#1517: half messages already committed or rolled back were checked again; #7933: a
    committed and consumed message was checked again and delivered a second time. The state
    lives in the log: after a restart the ended transactions are not open (nothing a check
    could pick), a repeated COMMIT delivers nothing new, and a ROLLBACK is refused."""
    conf = conf_of(tmp_path)
    async with serving_ops(conf) as (services, conn):
        await create_topic(conn)
        c, r, o = await prepare(conn, b"c"), await prepare(conn, b"r"), await prepare(conn, b"o")
        committed = await end(conn, c, "COMMIT")
        await end(conn, r, "ROLLBACK")
        assert await delivered(conn) == [b"c"]  # consumed once
    async with serving_ops(conf) as (services, conn):
        status = await conn.call(GetStatus())
        assert status.transactions == {"open": 1, "open_by_topic": {TOPIC: 1}, "committed": 1, "rolled_back": 1,
                                       "ended_unrecorded": 0, "op_missing": 0, "discarded": 0, "checks": 0,
                                       **NO_CHECKS_SENT}
        assert set(services.transactions.open) == {o.commitlog_offset}, "only the open one would be checked"
        again = await end(conn, c, "COMMIT", from_check=True)
        assert (again.duplicate, again.commitlog_offset) == (True, committed.commitlog_offset)
        with pytest.raises(TransactionEnded):
            await end(conn, c, "ROLLBACK")
        with pytest.raises(TransactionEnded):
            await end(conn, r, "COMMIT", from_check=True)
        assert (await end(conn, o, "COMMIT")).duplicate is False
        assert await delivered(conn) == [b"c", b"o"]


async def _orphan_commit(services: NodeServices, conn: Connection) -> tuple[SendReply, PutMessageResult]:
    """A half message and its committed record with no op record after it."""
    await create_topic(conn)
    half = await prepare(conn)
    stored = services.store.look_message_by_offset(half.commitlog_offset)
    assert stored is not None
    orphan = await services.store.put_message(committed_message(stored))
    assert orphan.ok and orphan.append is not None
    return half, orphan


async def test_a_commit_whose_op_record_a_crash_cut_is_known_committed_after_the_restart(tmp_path):
    """The END appends the committed record, then the op record: a crash between them leaves
    the first alone at the log's end. Building the table again finds it, so a retried
    COMMIT is a duplicate (and writes the missing op record) and a ROLLBACK is refused."""
    conf = conf_of(tmp_path)
    async with serving_ops(conf) as (services, conn):
        half, orphan = await _orphan_commit(services, conn)  # what the crash left
    async with serving_ops(conf) as (services, conn):
        status = await conn.call(GetStatus())
        assert status.transactions is not None
        assert (status.transactions["open"], status.transactions["committed"],
                status.transactions["op_missing"]) == (0, 1, 1)
        with pytest.raises(TransactionEnded):
            await end(conn, half, "ROLLBACK")
        again = await end(conn, half, "COMMIT")
        assert again.duplicate and orphan.append is not None
        assert again.commitlog_offset == orphan.append.wrote_offset
        [op] = (await pull_all(conn, OP_HALF_TOPIC, 0)).messages
        assert op.properties[PROPERTY_TRAN_END] == "COMMIT"
        assert (await conn.call(GetStatus())).transactions["op_missing"] == 0
        assert await delivered(conn) == [b"order 1"]


async def test_a_commit_whose_op_record_a_power_loss_took_is_found_past_later_op_records(tmp_path):
    """A power loss keeps or drops each page on its own: a COMMIT's committed record can
    survive while its op record is gone and later transactions' op records follow. The walk
    from the last op record misses it; the index finds it by the half's KEYS, so a check's
    COMMIT is a duplicate, not a second copy (storage seed 5104)."""
    conf = conf_of(tmp_path)
    async with serving_ops(conf) as (services, conn):
        half, orphan = await _orphan_commit(services, conn)  # its op record: gone
        later = await prepare(conn, b"order 2")
        await end(conn, later, "ROLLBACK")  # an op record past the orphan
    async with serving_ops(conf) as (services, conn):
        status = await conn.call(GetStatus())
        assert status.transactions is not None
        assert (status.transactions["open"], status.transactions["committed"],
                status.transactions["op_missing"]) == (0, 1, 1)
        again = await end(conn, half, "COMMIT", from_check=True)
        assert again.duplicate and again.commitlog_offset == orphan.append.wrote_offset
        assert await delivered(conn) == [b"order 1"]


async def test_a_half_message_keeps_its_properties_through_half_of(tmp_path):
    """half_of swaps the topic and queue into REAL_TOPIC/REAL_QID and keeps the rest."""
    async with serving_ops(conf_of(tmp_path)) as (services, _conn):
        msg = Message(topic=TOPIC, body=b"x", queue_id=3, tags="t", keys=("a",),
                      properties={"TRAN_MSG": "true", "PGROUP": GROUP, "u": "1"}, sys_flag=SysFlag.TRANSACTION_PREPARED)
        half = await half_of(services, msg)
        assert (half.topic, half.queue_id, half.sys_flag, half.tags, half.keys) == (HALF_TOPIC, 0, 0, "t", ("a",))
        assert half.properties == {"TRAN_MSG": "true", "PGROUP": GROUP, "u": "1", "REAL_TOPIC": TOPIC,
                                   "REAL_QID": "3"}


async def test_the_table_is_built_from_commitlog_records_no_consume_queue_holds_yet(tmp_path):
    """Records past what is dispatched (a master dispatches only what its in-sync slaves hold;
    here: ConsumeQueues deleted, a store loaded and not started) are read from the CommitLog."""
    conf = conf_of(tmp_path)
    async with serving_ops(conf) as (services, conn):
        await create_topic(conn)
        c, r, o = await prepare(conn, b"c"), await prepare(conn, b"r"), await prepare(conn, b"o")
        await end(conn, c, "COMMIT")
        await end(conn, r, "ROLLBACK")
        cfg = services.cfg
    shutil.rmtree(cfg.store.path("consumequeue"))
    store = MessageStore(cfg.store).load()
    try:
        assert store.get_max_offset_in_queue(OP_HALF_TOPIC, 0) == 0 and store.dispatched_offset() == 0
        table = TransactionTable()
        table.load(store)
        assert set(table.open) == {o.commitlog_offset}
        assert {k: v.outcome for k, v in table.ended.items()} == {
            c.commitlog_offset: Outcome.COMMIT, r.commitlog_offset: Outcome.ROLLBACK}
        assert table.ended[c.commitlog_offset].commit_offset is not None
        assert table.status()["open_by_topic"] == {TOPIC: 1}
    finally:
        store.close()


@pytest.mark.parametrize("seed", range(8))
async def test_random_ends_keep_one_outcome_each_and_the_rebuilt_table_agrees(tmp_path, seed):
    """Random prepares and ENDs (duplicates, conflicts, UNKNOWNs) against a model: each answer
    is the model's, consumers get exactly the committed bodies once, and a table built again
    from the store equals the one the ENDs kept."""
    rng = random.Random(seed)
    async with serving_ops(conf_of(tmp_path)) as (services, conn):
        await create_topic(conn)
        halves: list[SendReply] = []
        model: dict[int, str] = {}  # half offset → outcome
        for step in range(40):
            if not halves or rng.random() < 0.35:
                halves.append(await prepare(conn, f"m{step}".encode()))
                continue
            half = rng.choice(halves)
            asked = rng.choice(["COMMIT", "ROLLBACK", "UNKNOWN"])
            known = model.get(half.commitlog_offset)
            if known is not None and asked not in (known, "UNKNOWN"):
                with pytest.raises(TransactionEnded):
                    await end(conn, half, asked)
                continue
            answer = await end(conn, half, asked)
            assert answer.outcome == (known or asked)
            assert answer.duplicate == (known is not None and asked != "UNKNOWN")
            if known is None and asked != "UNKNOWN":
                model[half.commitlog_offset] = asked
        committed = sorted(body_of(services, h) for h in halves if model.get(h.commitlog_offset) == "COMMIT")
        assert sorted(await delivered(conn)) == committed
        live = services.transactions
        rebuilt = TransactionTable()
        rebuilt.load(services.store)
        assert set(rebuilt.open) == set(live.open) == {h.commitlog_offset for h in halves} - set(model)
        assert {k: v.outcome.value for k, v in rebuilt.ended.items()} == model
        assert {k: v.commit_offset for k, v in rebuilt.ended.items()} == {
            k: v.commit_offset for k, v in live.ended.items()}


def body_of(services: NodeServices, half: SendReply) -> bytes:
    stored = services.store.look_message_by_offset(half.commitlog_offset)
    assert stored is not None
    return stored.body
