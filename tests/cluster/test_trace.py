"""Message trace (issue 44 item 4): the client's dispatcher (batches, sizes, keys, drops and
failures never reaching the user), and with real processes a message's whole life as
`queryMsgTraceById` tells it: sent, stored, a failed try, its retry, a second group that
dead-letters it."""

from __future__ import annotations

import contextlib
import json

import pytest
import trio

from cluster.client import (
    Admin,
    BroadcastConsumer,
    Consumer,
    Producer,
    PullConsumer,
    TransactionProducer,
)
from cluster.client.base import SendResult
from cluster.client.trace import TraceDispatcher
from tests.cluster.helpers import broker_conf, cli, start_namesrv, wait_for
from tests.node.nodeproc import Nodes
from wire.client import NotFound, Status
from wire.protocol.trace import TRACE_TOPIC, SubBeforeTrace, decode_traces

LEVELS = " ".join(["1s"] * 18)


class Recorder:
    """A trace sender that keeps what it was asked to send (or refuses, when `fail`)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.sent: list[tuple[str, bytes, list[str]]] = []
        self.entered = self.left = False

    async def __aenter__(self) -> Recorder:
        self.entered = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.left = True

    async def send(self, topic: str, body: bytes | str, *, keys=()) -> SendResult:
        if self.fail:
            raise NotFound(Status.NOT_FOUND.value, f"topic {topic} does not exist")
        assert isinstance(body, bytes)
        self.sent.append((topic, body, list(keys)))
        return SendResult(Status.PUT_OK, "ID", "b", 0, 0, 0)


def before(n: int, keys: str = "") -> SubBeforeTrace:
    return SubBeforeTrace(timestamp=n, region_id="r", group="g", request_id=f"q{n}", msg_id=f"M{n}",
                          retry_times=0, keys=keys)


async def test_dispatcher_batches_records_keyed_by_msg_id_and_keys():
    sender = Recorder()
    dispatcher = TraceDispatcher(lambda: sender, "MyTrace", batch_size=5, flush_interval_s=0.05)
    async with dispatcher.running():
        for n in range(12):
            dispatcher.record(before(n, keys="k1 k2" if n == 0 else ""))
        await wait_for(lambda: len(sender.sent) == 3, what="3 batches of at most 5")
    assert sender.entered and sender.left
    assert [t for t, _, _ in sender.sent] == ["MyTrace"] * 3
    records = [r for _, body, _ in sender.sent for r in decode_traces(body)]
    assert records == [before(n, keys="k1 k2" if n == 0 else "") for n in range(12)]
    assert sender.sent[0][2] == ["M0", "k1", "k2", "M1", "M2", "M3", "M4"]
    assert dispatcher.stats.recorded == dispatcher.stats.sent == 12 and dispatcher.stats.failed == 0


async def test_dispatcher_splits_big_batches_and_sends_the_rest_on_close():
    sender = Recorder()
    dispatcher = TraceDispatcher(lambda: sender, batch_size=20, flush_interval_s=30, max_message_size=100)
    async with dispatcher.running():
        for n in range(4):
            dispatcher.record(before(n, keys="x" * 30))
    # the flush interval never passed: closing sent them, each ~60 bytes, so one per message
    assert len(sender.sent) == 4 and all(len(body) <= 100 for _, body, _ in sender.sent)
    assert dispatcher.stats.sent == 4 and sender.sent[0][0] == TRACE_TOPIC


async def test_a_failing_trace_topic_or_a_full_queue_is_counted_never_raised():
    dispatcher = TraceDispatcher(lambda: Recorder(fail=True), flush_interval_s=0.01, max_queued=3)
    async with dispatcher.running():
        for n in range(5):  # the dispatch task has not run yet: 2 do not fit
            dispatcher.record(before(n))
    assert dispatcher.stats.recorded == 3 and dispatcher.stats.dropped == 2
    assert dispatcher.stats.failed == 3 and dispatcher.stats.sent == 0
    dispatcher.record(before(9))  # after close: dropped, not raised
    assert dispatcher.stats.dropped == 3


@pytest.fixture
def nodes():
    n = Nodes()
    yield n
    n.cleanup()


@pytest.mark.slow
async def test_message_life_through_trace(tmp_path, nodes):
    """traceTopicEnable creates the trace topic (autoCreateTopicEnable is off); a traced
    send, group CG failing the first try then taking the retry, group DG failing it with no
    retries left (its DLQ): queryMsgTraceById names each step."""
    ns = start_namesrv(nodes, tmp_path)
    master = nodes.start(broker_conf(tmp_path, "m", "broker-a", ns.address, messageDelayLevel=LEVELS,
                                     traceTopicEnable=True, autoCreateTopicEnable=False))
    async with Admin(namesrv=ns.address) as admin:
        await wait_for(lambda: admin.route(TRACE_TOPIC, refresh=True), what="the trace topic's route")
        await admin.create_topic("TT", read_queue_nums=1, write_queue_nums=1)
        await wait_for(lambda: admin.route("TT", refresh=True), what="TT's route")

    tries: dict[str, list[int]] = {"CG": [], "DG": []}

    def handle_cg(msg):
        tries["CG"].append(msg.reconsume_times)
        if msg.reconsume_times == 0:
            raise RuntimeError("first try fails")

    def handle_dg(msg):
        tries["DG"].append(msg.reconsume_times)
        return False

    opts = dict(namesrv=ns.address, heartbeat_interval_s=0.3, rebalance_interval_s=1.0, poll_ms=200,
                enable_msg_trace=True)
    async with Producer(namesrv=ns.address, group="PG", enable_msg_trace=True) as producer:
        sent = await producer.send("TT", b"hello", tags="tA", keys=["order-1"])
        await producer.send("TT", b"another", keys=["order-2"])
    assert producer.tracer is not None and producer.tracer.stats.sent == 2
    async with Consumer("CG", "TT", handle_cg, **opts) as cg, \
            Consumer("DG", "TT", handle_dg, max_reconsume_times=0, **opts) as dg:
        await wait_for(lambda: tries["CG"].count(1) == 2 and len(tries["DG"]) == 2,
                       timeout=40, what="CG's retries taken, DG's failures")
    assert cg.tracer is not None and dg.tracer is not None
    assert cg.tracer.stats.sent == 8 and dg.tracer.stats.sent == 4  # SubBefore + SubAfter per call
    assert dg.stats.dead == 2

    async with Admin(namesrv=ns.address) as admin:
        async def whole():
            life = await admin.query_msg_trace(sent.msg_id)
            return life if len(life.consumed) == 3 and life.dead and life.retries else None
        life = await wait_for(whole, what="the whole life indexed")
    [pub] = life.sent
    assert (pub.group, pub.topic, pub.tags, pub.keys, pub.success) == ("PG", "TT", "tA", "order-1", True)
    assert pub.store_host == master.address and pub.offset_msg_id == sent.msg_id and pub.msg_type == "NORMAL"
    assert pub.client_host and pub.client_host.startswith("127.0.0.1")
    assert life.stored is not None and life.stored.broker_name == "broker-a" and life.stored.topic == "TT"
    assert life.stored.store_timestamp > 0
    assert life.groups == ["CG", "DG"] or life.groups == ["DG", "CG"]
    cg_calls = [c for c in life.consumed if c.group == "CG"]
    assert [(c.retry_times, c.status, c.result) for c in cg_calls] == [(0, "failed", "EXCEPTION"),
                                                                       (1, "success", "SUCCESS")]
    [dg_call] = [c for c in life.consumed if c.group == "DG"]
    assert (dg_call.retry_times, dg_call.status, dg_call.result) == (0, "failed", "FAILED")
    assert all(c.cost_ms is not None and c.cost_ms >= 0 for c in life.consumed)
    [retry] = life.retries
    assert (retry.topic, retry.reconsume_times) == ("%RETRY%CG", 1)
    [dead] = life.dead
    assert dead.topic == "%DLQ%DG" and dead.broker_name == "broker-a"
    assert [s["type"] for s in life.steps()][0] == "Pub"

    # the CLI prints the same steps (JSON lines), and says so when nothing is known
    out = cli("admin", "queryMsgTraceById", "-n", ns.address, "-i", sent.msg_id, "--json")
    assert out.returncode == 0, out.stderr.decode()
    steps = [json.loads(line) for line in out.stdout.decode().splitlines()]
    assert sorted(s["type"] for s in steps) == ["DLQ", "Pub", "Retry", "Stored", "Sub", "Sub", "Sub"]
    assert {s["group"] for s in steps if s["type"] == "Sub"} == {"CG", "DG"}
    missing = cli("admin", "trace", "-n", ns.address, "-i", "NOSUCHID")
    assert missing.returncode == 1 and b"no trace of message NOSUCHID" in missing.stderr


@pytest.mark.slow
async def test_a_send_never_fails_because_its_trace_cannot_be_stored(tmp_path, nodes):
    """No trace topic and no auto-creation: the user's send is stored, the trace is counted
    as failed."""
    node = nodes.start(broker_conf(tmp_path, "m", "broker-a", None, autoCreateTopicEnable=False))
    async with Admin(brokers=[node.address]) as admin:
        await admin.create_topic("T", read_queue_nums=1, write_queue_nums=1)
    with trio.fail_after(30):
        async with Producer(brokers=[node.address], enable_msg_trace=True) as producer:
            result = await producer.send("T", b"x")
            assert result.ok
    assert producer.tracer is not None
    assert producer.tracer.stats.failed == 1 and producer.tracer.stats.sent == 0


@pytest.mark.slow
async def test_pull_broadcast_and_transactions_trace_too(tmp_path, nodes):
    """A PullConsumer's `messages()` and a BroadcastConsumer's handler calls are traced, and
    a TransactionProducer's half message and END; the trace topic is auto-created on first
    use (autoCreateTopicEnable, the default)."""
    node = nodes.start(broker_conf(tmp_path, "m", "broker-a", None))
    brokers = [node.address]
    async with Producer(brokers=brokers, enable_msg_trace=True) as producer:
        sent = await producer.send("PT", b"p", keys=["pk"])
    async with PullConsumer(brokers=brokers, group="pull-g", topic="PT", enable_msg_trace=True) as pc, \
            contextlib.aclosing(pc.messages(idle_timeout_ms=500)) as it:
        got = [m.body async for m in it]
    assert got == [b"p"]
    async with BroadcastConsumer("bc-g", "PT", lambda m: False, brokers=brokers, enable_msg_trace=True,
                                 offsets_dir=tmp_path / "offsets", max_messages=1) as bc:
        with trio.fail_after(20):
            await bc.finished.wait()
    async with Admin(brokers=brokers) as admin:
        async def both():
            life = await admin.query_msg_trace(sent.msg_id)
            return life if {c.group for c in life.consumed} == {"pull-g", "bc-g"} and life.sent else None
        life = await wait_for(both, what="the pull and broadcast traces indexed")
    by_group = {c.group: c for c in life.consumed}
    assert (by_group["pull-g"].status, by_group["pull-g"].result) == ("success", "SUCCESS")
    assert (by_group["bc-g"].status, by_group["bc-g"].result) == ("failed", "FAILED")
    assert life.sent[0].store_host == node.address and life.sent[0].group == ""


    # a transactional send: its half message's Pub and the END's record
    async with TransactionProducer(brokers=brokers, group="tx-g", checker=lambda check: "COMMIT",
                                   enable_msg_trace=True) as tp:
        done = await tp.send_in_transaction("PT", b"t", lambda prepared: "COMMIT", keys=["tk"])
    half_id = done.prepared.msg_id
    async with Admin(brokers=brokers) as admin:
        async def ended():
            life = await admin.query_msg_trace(half_id)
            return life if life.sent and life.transactions else None
        life = await wait_for(ended, what="the transaction's traces indexed")
    [pub] = life.sent
    assert (pub.group, pub.msg_type, pub.keys) == ("tx-g", "TRANS_HALF", "tk")
    [end] = life.transactions
    assert (end.group, end.transaction_state, end.from_transaction_check) == ("tx-g", "COMMIT_MESSAGE", False)
    assert end.transaction_id == done.prepared.transaction_id
