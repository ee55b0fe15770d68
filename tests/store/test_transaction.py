"""store/transaction.py: the half, committed and op records of a transaction, through the
record codec: a half message commits back to exactly what was sent, on its real topic and
queue, and its op record names it (FORMATS-style notes: docs/transactions.md)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.message import Message, StoredMessage
from store.record_codec import RecordKind, decode_record, encode_record, patch_record
from store.sysflag import TRANSACTION_MASK, SysFlag
from store.transaction import (
    HALF_TOPIC,
    OP_HALF_TOPIC,
    PROPERTY_TRAN_COMMIT_OFFSET,
    PROPERTY_TRAN_END,
    PROPERTY_TRAN_HALF_OFFSET,
    REMOVE_TAG,
    Outcome,
    committed_message,
    half_message,
    half_origin,
    is_prepared,
    op_half_offset,
    op_message,
)
from tests.examples import examples
from tests.store.test_message import key_text, prop_names, prop_text, valid_topics

HOST = "127.0.0.1:10911"
RESERVED = {"REAL_TOPIC", "REAL_QID", "DELAY", "TRAN_HALF_OFFSET", "UNIQ_KEY"}


def stored(msg: Message, queue_offset: int, physical_offset: int) -> StoredMessage:
    """`msg` as the store would hold it at those offsets."""
    buf = encode_record(msg, HOST, 4 * 1024 * 1024)
    patch_record(buf, queue_offset, physical_offset, 1_700_000_000_000)
    decoded = decode_record(buf)
    assert decoded.kind is RecordKind.MESSAGE and decoded.message is not None, decoded.error
    return decoded.message


@given(
    topic=valid_topics, queue_id=st.integers(0, 1023), body=st.binary(min_size=1, max_size=200),
    tags=st.none() | key_text, keys=st.lists(key_text, max_size=3),
    props=st.dictionaries(prop_names.filter(lambda n: n not in RESERVED), prop_text, max_size=4),
    half_queue_offset=st.integers(0, 2**40), half_offset=st.integers(0, 2**50),
    commit_offset=st.integers(0, 2**50), outcome=st.sampled_from([Outcome.COMMIT, Outcome.ROLLBACK]),
)
@settings(max_examples=examples(200))
def test_a_half_message_commits_back_to_what_was_sent_and_its_op_record_names_it(
        topic, queue_id, body, tags, keys, props, half_queue_offset, half_offset, commit_offset, outcome):
    props = {**props, "TRAN_MSG": "true", "PGROUP": "PG"}
    sent = Message(topic=topic, body=body, queue_id=queue_id, tags=tags, keys=tuple(keys), properties=props,
                   sys_flag=SysFlag.TRANSACTION_PREPARED)
    assert is_prepared(sent.properties)
    half = stored(half_message(sent), half_queue_offset, half_offset)
    assert (half.topic, half.queue_id, half.sys_flag & TRANSACTION_MASK) == (HALF_TOPIC, 0, 0)
    assert (half.properties["REAL_TOPIC"], half.properties["REAL_QID"]) == (topic, str(queue_id))
    assert half_origin(half) == half_offset

    committed = stored(committed_message(half), 0, commit_offset)
    assert (committed.topic, committed.queue_id, committed.body, committed.tags, committed.keys) == (
        topic, queue_id, body, tags, tuple(keys))
    assert committed.sys_flag & TRANSACTION_MASK == SysFlag.TRANSACTION_COMMIT
    assert committed.prepared_transaction_offset == half_offset
    user = {k: v for k, v in committed.properties.items() if k not in ("TAGS", "KEYS", "WAIT")}
    assert user == props

    op = stored(op_message(half, outcome, commit_offset if outcome is Outcome.COMMIT else None), 0, 0)
    assert (op.topic, op.queue_id, op.tags) == (OP_HALF_TOPIC, 0, REMOVE_TAG)
    assert op_half_offset(op) == half_queue_offset and op.body == str(half_queue_offset).encode()
    assert op.properties[PROPERTY_TRAN_END] == outcome.value
    assert op.properties[PROPERTY_TRAN_HALF_OFFSET] == str(half_offset)
    assert op.properties.get(PROPERTY_TRAN_COMMIT_OFFSET) == (
        str(commit_offset) if outcome is Outcome.COMMIT else None)


@pytest.mark.parametrize(("value", "prepared"), [("true", True), ("TRUE", True), (" true ", True), ("false", False),
                                                  ("1", False), ("", False)])
def test_tran_msg_parses_as_rocketmq_parses_it(value, prepared):
    assert is_prepared({"TRAN_MSG": value}) is prepared
    assert is_prepared({}) is False


def test_an_unknown_end_has_no_op_record():
    half = stored(half_message(Message(topic="T", body=b"x", properties={"TRAN_MSG": "true", "PGROUP": "G"})), 0, 0)
    with pytest.raises(ValueError, match="an UNKNOWN end writes no op record"):
        op_message(half, Outcome.UNKNOWN)


def test_an_op_record_body_that_is_no_offset_names_none():
    op = stored(Message(topic=OP_HALF_TOPIC, body=b"12,13", tags=REMOVE_TAG), 0, 0)
    assert op_half_offset(op) is None
