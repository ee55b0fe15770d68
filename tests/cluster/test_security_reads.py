"""What an account may read, against a real node with logins on: no answer of any op carries a
byte of a message the account may not read, and no op writes a copy of one (issue 37: an
account with SUB on its own group copied a `payments` message into its DLQ and read it).

Each stored message's body carries a marker of its original topic. The test's own model of
the accounts (`READS`) says which original topics each may read; the node's rule is
node/security/rules.py `message_needs`. Both must agree on every answer."""

from __future__ import annotations

import contextlib
from typing import Any

import cbor2
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.security import Credentials, make_verifier
from tests.examples import examples
from tests.node.nodeproc import Nodes, master_conf
from wire.client import NoPermission, TidemqError, connect
from wire.protocol import (
    ConsumerHeartbeat,
    ConsumerSendBack,
    ConsumerUnregister,
    GetByMsgId,
    GetStatus,
    MaxOffset,
    MinOffset,
    OffsetByTime,
    Pull,
    QueryByKey,
    Send,
    TopicCreate,
)

pytestmark = pytest.mark.slow  # a node process

ACCOUNTS: dict[str, str] = {
    "root": 'admin = true',
    "app": 'topicPerms = ["orders=PUB|SUB"]\ngroupPerms = ["app-group=SUB"]',  # the issue's attacker
    "pay": 'topicPerms = ["payments=PUB|SUB", "orders=SUB"]\ngroupPerms = ["app-group=SUB", "pay-group=SUB"]',
    "grp": 'defaultGroupPerm = "SUB"',  # every group, no topic
    "wide": 'defaultTopicPerm = "SUB"\ntopicPerms = ["payments=DENY"]\ndefaultGroupPerm = "SUB"',
    "none": '',
}
READS: dict[str, set[str]] = {  # original topics each account may read (the model)
    "root": {"orders", "payments"}, "app": {"orders"}, "pay": {"orders", "payments"}, "grp": set(),
    "wide": {"orders"}, "none": set(),
}
GROUPS = ["app-group", "pay-group"]
TOPICS = ["orders", "payments", "%RETRY%app-group", "%DLQ%app-group", "%RETRY%pay-group", "%DLQ%pay-group",
          "SCHEDULE_TOPIC_XXXX"]
MARK = b"SECRET-"


def _marker(topic: str, n: int) -> bytes:
    return MARK + topic.encode() + b"-" + str(n).encode()


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reads")
    secrets = {name: f"{name}-secret-0123456789" for name in ACCOUNTS}
    (tmp / "acl.toml").write_text("".join(
        f'[[accounts]]\naccessKey = "{name}"\nscram = "{make_verifier(secrets[name]).text()}"\n{rules}\n\n'
        for name, rules in ACCOUNTS.items()))
    nodes = Nodes()
    try:
        node = nodes.start(master_conf(tmp, "m", "ASYNC_MASTER", aclEnable=True, messageDelayLevel="1h 1h 1h"))
        creds = {name: Credentials(name, secret) for name, secret in secrets.items()}
        stored = trio.run(_seed, node.address, creds["root"])
        yield {"address": node.address, "creds": creds, "stored": stored}
    finally:
        nodes.cleanup()


async def _seed(address: str, root: Credentials) -> dict[str, Any]:
    """As root: orders and payments messages with keys, a payments message in app-group's DLQ
    (a group that consumes both topics), an orders retry (waiting on the schedule topic), a
    payments message in pay-group's DLQ, a delayed payments message."""
    async with connect(address, credentials=root) as conn:
        for topic in ("orders", "payments"):
            await conn.call(TopicCreate(topic=topic, read_queue_nums=2, write_queue_nums=2))
        offsets: list[int] = []
        msg_ids: list[str] = []
        for n in range(3):
            for topic in ("orders", "payments"):
                sent = await conn.call(Send(topic=topic, body=_marker(topic, n), keys=[f"k-{topic}"],
                                            queue_id=n % 2))
                offsets.append(sent.commitlog_offset)
                msg_ids.append(sent.msg_id)
        payments_0, orders_0 = offsets[1], offsets[0]
        await conn.call(ConsumerHeartbeat(group="app-group", client_id="seed-a", topics=["orders", "payments"]))
        await conn.call(ConsumerHeartbeat(group="pay-group", client_id="seed-p", topics=["payments"]))
        for group, offset, level in (("app-group", payments_0, -1), ("app-group", orders_0, 0),
                                     ("pay-group", payments_0, -1)):
            back = await conn.call(ConsumerSendBack(group=group, commitlog_offset=offset, delay_level=level))
            offsets.append(back.commitlog_offset)
            msg_ids.append(back.msg_id)
        delayed = await conn.call(Send(topic="payments", body=_marker("payments", 9), properties={"DELAY": "1"}))
        offsets.append(delayed.commitlog_offset)
        msg_ids.append(delayed.msg_id)
        await conn.call(ConsumerUnregister(group="app-group", client_id="seed-a"))
        await conn.call(ConsumerUnregister(group="pay-group", client_id="seed-p"))
        return {"offsets": offsets, "msg_ids": msg_ids, "payments_0": payments_0}


def _leaks(answer: Any, account: str) -> list[bytes]:
    """Markers of topics `account` may not read that the answer's bytes carry."""
    raw = cbor2.dumps(answer)
    return [_marker(t, n) for t in ("orders", "payments") if t not in READS[account]
            for n in (0, 1, 2, 9) if _marker(t, n) in raw]


async def _max_phy(address: str, root: Credentials) -> int:
    async with connect(address, credentials=root) as conn:
        return (await conn.call(GetStatus())).max_phy_offset


async def test_the_issue_reproduction_answers_no_permission_and_writes_nothing(secured):
    address, creds = secured["address"], secured["creds"]
    before = await _max_phy(address, creds["root"])
    async with connect(address, credentials=creds["app"]) as conn:
        await conn.call(ConsumerHeartbeat(group="app-group", client_id="attacker", topics=["orders"]))
        with pytest.raises(NoPermission, match="lacks SUB on topic 'payments'"):
            await conn.call(ConsumerSendBack(group="app-group",
                                             commitlog_offset=secured["stored"]["payments_0"], delay_level=-1))
        assert await _max_phy(address, creds["root"]) == before  # nothing written
        # the DLQ root filled (app-group consumes payments too) is still not app's to read
        with pytest.raises(NoPermission, match="lacks SUB on topic 'payments'"):
            await conn.call(Pull(topic="%DLQ%app-group", queue_id=0, offset=0, group="app-group"))
        # its own topic's message goes back as before
        own = await conn.call(ConsumerSendBack(group="app-group", commitlog_offset=secured["stored"]["offsets"][0]))
        assert own.topic == "%RETRY%app-group"
    assert await _max_phy(address, creds["root"]) > before


# Each op as its request class; the answer is read as the raw map (`Connection.request`), so
# the leak check sees every byte the node sent, not only the fields a reply class keeps.
OPS = st.one_of(
    st.tuples(st.just(Pull), st.fixed_dictionaries({
        "topic": st.sampled_from(TOPICS), "queue_id": st.integers(0, 2), "offset": st.just(0),
        "group": st.sampled_from([None, *GROUPS]), "max_msgs": st.just(32)})),
    st.tuples(st.just(QueryByKey), st.fixed_dictionaries({
        "topic": st.sampled_from(TOPICS), "key": st.sampled_from(["k-orders", "k-payments"])})),
    st.tuples(st.just(GetByMsgId), st.fixed_dictionaries({"msg_id": st.integers(0, 9)})),
    st.tuples(st.just(ConsumerSendBack), st.fixed_dictionaries({
        "group": st.sampled_from(GROUPS), "commitlog_offset": st.integers(0, 9),
        "delay_level": st.sampled_from([-1, 0])})),
    st.tuples(st.sampled_from([MinOffset, MaxOffset]), st.fixed_dictionaries({
        "topic": st.sampled_from(TOPICS), "queue_id": st.integers(0, 1)})),
    st.tuples(st.just(OffsetByTime), st.fixed_dictionaries({
        "topic": st.sampled_from(TOPICS), "queue_id": st.integers(0, 1), "timestamp": st.just(0)})),
)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(account=st.sampled_from(sorted(ACCOUNTS)), op=OPS,
       heartbeat=st.sampled_from([None, ["orders"], ["payments"], ["orders", "payments"]]))
def test_no_answer_shows_and_no_op_copies_a_message_the_account_may_not_read(secured, account, op, heartbeat):
    request_class, fields = op
    name = request_class.OP
    stored = secured["stored"]
    fields = {k: v for k, v in fields.items() if v is not None}
    if request_class is GetByMsgId:
        fields["msg_id"] = stored["msg_ids"][fields["msg_id"] % len(stored["msg_ids"])]
    if request_class is ConsumerSendBack:
        fields["commitlog_offset"] = stored["offsets"][fields["commitlog_offset"] % len(stored["offsets"])]

    async def one() -> None:
        root, creds = secured["creds"]["root"], secured["creds"][account]
        before = await _max_phy(secured["address"], root)
        async with connect(secured["address"], credentials=creds) as conn:
            if heartbeat is not None and "group" in fields:  # the member may claim topics it may read
                with contextlib.suppress(NoPermission):
                    await conn.call(ConsumerHeartbeat(group=fields["group"], client_id=f"{account}-c",
                                                      topics=heartbeat))
            try:
                answer: Any = await conn.request(request_class(**fields))
            except TidemqError as e:
                answer = str(e)
        assert not _leaks(answer, account), (account, name, fields, answer)
        if request_class is ConsumerSendBack:
            wrote = await _max_phy(secured["address"], root) > before
            source = "payments" if b"payments" in await _source_body(fields["commitlog_offset"]) else "orders"
            assert wrote == isinstance(answer, dict), (account, fields, answer)
            if wrote:  # a copy was made: the account may read what it copied
                assert source in READS[account], (account, fields, answer)

    async def _source_body(offset: int) -> bytes:
        async with connect(secured["address"], credentials=secured["creds"]["root"]) as conn:
            found = await conn.call(GetByMsgId(msg_id=stored["msg_ids"][stored["offsets"].index(offset)]))
            return found.message.body

    trio.run(one)
