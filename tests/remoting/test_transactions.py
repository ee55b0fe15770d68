"""Transactions over remoting against a real node process, with the frames RocketMQ's Java
TransactionMQProducer puts on the wire (PyPI rocketmq 0.4.4 has no transaction producer):
a prepared send (TRAN_MSG=true), END_TRANSACTION COMMIT delivers it and ROLLBACK never does,
a duplicate END answers as the first and the other outcome is refused; an open one makes the
node push CHECK_TRANSACTION_STATE to the producer's connection, whose END
(fromTransactionCheck) delivers it. Small check intervals keep the check test a few seconds."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from store.properties import encode_properties
from store.record_codec import RecordKind, decode_record
from tests.node.nodeproc import Nodes, master_conf
from tests.remoting.client import RemotingClient
from tests.waiting import wait_until
from wire.client import connect
from wire.protocol import Pull, TopicCreate, TransactionList
from wire.remoting.codes import RequestCode, ResponseCode
from wire.remoting.command import RPC_ONEWAY, RemotingCommand

pytestmark = pytest.mark.slow  # starts a node process

TOPIC = "RmqTx"
COMMIT, ROLLBACK, UNKNOWN = "8", "12", "0"


async def cbor(address: str, request: Any) -> Any:
    async with connect(address) as conn:
        return await conn.call(request)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    nodes = Nodes()
    try:
        conf = master_conf(tmp_path_factory.mktemp("rtx"), role="ASYNC_MASTER",
                           transactionCheckInterval=200, transactionTimeOut=300)
        address = nodes.start(conf).address
        trio.run(cbor, address, TopicCreate(topic=TOPIC, read_queue_nums=1, write_queue_nums=1))
        yield address
    finally:
        nodes.cleanup()


def prepare(c: RemotingClient, group: str, body: bytes, uniq: str) -> dict[str, str]:
    """A Java prepared send (SEND_MESSAGE_V2: one-letter names, TRAN_MSG and PGROUP set by the
    client, sysFlag TRANSACTION_PREPARED_TYPE): its answer's header."""
    props = encode_properties({"TRAN_MSG": "true", "PGROUP": group, "UNIQ_KEY": uniq, "WAIT": "true"})
    r = c.call(RequestCode.SEND_MESSAGE_V2, {
        "a": group, "b": TOPIC, "c": "TBW102", "d": "4", "e": "0", "f": "4",
        "g": str(int(time.time() * 1000)), "h": "0", "i": props, "j": "0", "k": "false"}, body)
    assert r.code == ResponseCode.SUCCESS, r.remark
    return dict(r.ext_fields or {})


def end_fields(group: str, sent: dict[str, str], uniq: str, kind: str, *, from_check: bool = False) -> dict[str, str]:
    """What the Java client's endTransaction sends: the offsets from the send's answer (the
    commit log offset out of its offset msgId)."""
    return {"producerGroup": group, "tranStateTableOffset": sent["queueOffset"],
            "commitLogOffset": str(int(sent["msgId"][-16:], 16)), "commitOrRollback": kind,
            "fromTransactionCheck": "true" if from_check else "false", "msgId": uniq, "transactionId": uniq}


async def bodies(address: str) -> list[bytes]:
    reply = await cbor(address, Pull(topic=TOPIC, queue_id=0, offset=0, max_msgs=64))
    return [m.body for m in reply.messages]


def delivered(address: str) -> list[bytes]:
    return trio.run(bodies, address)


def delivers(address: str, body: bytes, what: str) -> None:
    """Wait (10 s at most) until a consumer of TOPIC can read `body`."""
    async def shown() -> bool:
        return body in await bodies(address)

    trio.run(lambda: wait_until(shown, what=what))


def open_offsets(address: str) -> set[int]:
    return {t["offset"] for t in trio.run(cbor, address, TransactionList()).transactions}


def test_commit_delivers_rollback_never_and_one_outcome_only(node) -> None:
    group = "PG-end"
    with RemotingClient(node) as c:
        paid = prepare(c, group, b"paid", "U-PAID")
        gone = prepare(c, group, b"gone", "U-GONE")
        assert b"paid" not in delivered(node), "a half message is not consumable"
        assert int(paid["msgId"][-16:], 16) in open_offsets(node)

        r = c.call(RequestCode.END_TRANSACTION, end_fields(group, paid, "U-PAID", COMMIT))
        assert (r.code, r.remark) == (ResponseCode.SUCCESS, None)
        r = c.call(RequestCode.END_TRANSACTION, end_fields(group, gone, "U-GONE", ROLLBACK))
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert delivered(node).count(b"paid") == 1 and b"gone" not in delivered(node)

        # a duplicate answers as the first and writes nothing; the other outcome is refused
        assert c.call(RequestCode.END_TRANSACTION, end_fields(group, paid, "U-PAID", COMMIT)).code == ResponseCode.SUCCESS
        r = c.call(RequestCode.END_TRANSACTION, end_fields(group, paid, "U-PAID", ROLLBACK))
        assert r.code == ResponseCode.SYSTEM_ERROR and "already ended with COMMIT" in r.remark
        r = c.call(RequestCode.END_TRANSACTION, end_fields(group, gone, "U-GONE", COMMIT))
        assert r.code == ResponseCode.SYSTEM_ERROR and "already ended with ROLLBACK" in r.remark
        assert delivered(node).count(b"paid") == 1 and b"gone" not in delivered(node)
        assert not open_offsets(node) & {int(paid["msgId"][-16:], 16), int(gone["msgId"][-16:], 16)}


def test_oneway_end_unknown_and_bad_headers(node) -> None:
    group = "PG-oneway"
    with RemotingClient(node) as c:
        sent = prepare(c, group, b"oneway", "U-ONEWAY")
        offset = int(sent["msgId"][-16:], 16)
        r = c.call(RequestCode.END_TRANSACTION, end_fields(group, sent, "U-ONEWAY", UNKNOWN))
        assert r.code == ResponseCode.SUCCESS and offset in open_offsets(node), "UNKNOWN leaves it open"
        for bad, remark in (({"commitOrRollback": "4"}, "commitOrRollback must be"),
                            ({"producerGroup": "PG-other"}, "belongs to producer group"),
                            ({"msgId": "U-OTHER"}, "has msgId"),
                            ({"commitLogOffset": "1"}, "no half message")):
            r = c.call(RequestCode.END_TRANSACTION, {**end_fields(group, sent, "U-ONEWAY", COMMIT), **bad})
            assert r.code == ResponseCode.SYSTEM_ERROR and remark in r.remark, (bad, r.remark)
        assert offset in open_offsets(node), "a refused END writes nothing"
        # as Java sends it: oneway, no answer
        c.send(RemotingCommand(code=RequestCode.END_TRANSACTION, flag=RPC_ONEWAY,
                               ext_fields=end_fields(group, sent, "U-ONEWAY", COMMIT)))
        delivers(node, b"oneway", "the oneway COMMIT delivered")
        # a batch may not hold a half message
        props = encode_properties({"TRAN_MSG": "true", "PGROUP": group})
        r = c.call(RequestCode.SEND_BATCH_MESSAGE, {"a": group, "b": TOPIC, "c": "TBW102", "d": "4", "e": "0",
                                                    "f": "0", "g": "0", "h": "0", "i": props, "j": "0"}, b"")
        assert r.code == ResponseCode.MESSAGE_ILLEGAL and "batch" in r.remark


def test_an_open_transaction_is_checked_on_the_producers_connection(node) -> None:
    group, client_id = "PG-check", "10.0.0.7@rtx"
    beat = json.dumps({"clientID": client_id, "producerDataSet": [{"groupName": group}]}).encode()
    with RemotingClient(node) as producer, RemotingClient(node) as other:
        assert producer.call(RequestCode.HEART_BEAT, body=beat).code == ResponseCode.SUCCESS
        half = prepare(other, group, b"checked", "U-CHECK")  # any connection: checks follow the heartbeat
        origin = int(half["msgId"][-16:], 16)

        def checks() -> list[RemotingCommand]:
            producer.call(RequestCode.HEART_BEAT, body=beat)  # reads what the node pushed meanwhile
            return [p for p in producer.pushed if p.code == RequestCode.CHECK_TRANSACTION_STATE]

        check = trio.run(lambda: wait_until(checks, what="CHECK_TRANSACTION_STATE pushed"))[0]
        assert check.is_oneway and other.pushed == []
        h = check.ext_fields or {}
        assert (h["msgId"], h["transactionId"]) == ("U-CHECK", "U-CHECK")
        decoded = decode_record(check.body)
        assert decoded.kind is RecordKind.MESSAGE and decoded.message is not None
        msg = decoded.message
        assert (msg.topic, msg.queue_id, msg.body, msg.properties["PGROUP"]) == (TOPIC, 0, b"checked", group)
        assert (msg.commitlog_offset, msg.queue_offset) == (int(h["commitLogOffset"]), int(h["tranStateTableOffset"]))
        assert h["offsetMsgId"][-16:] == f"{msg.commitlog_offset:016X}"
        assert b"checked" not in delivered(node)

        # the client's answer: END, oneway, fromTransactionCheck, with the check's offsets
        producer.send(RemotingCommand(code=RequestCode.END_TRANSACTION, flag=RPC_ONEWAY, ext_fields={
            "producerGroup": group, "tranStateTableOffset": h["tranStateTableOffset"],
            "commitLogOffset": h["commitLogOffset"], "commitOrRollback": COMMIT, "fromTransactionCheck": "true",
            "msgId": h["msgId"], "transactionId": h["transactionId"]}))
        delivers(node, b"checked", "the checked COMMIT delivered")
        assert origin not in open_offsets(node)
        assert delivered(node).count(b"checked") == 1
