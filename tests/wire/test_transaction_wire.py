"""`end_transaction` on the wire: any valid request survives encode → CBOR frame → parse, any
reply survives to_wire → from_wire, and bad outcomes and offsets are named."""

from __future__ import annotations

import attrs
import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.examples import examples
from wire.framing import FrameDecoder, encode_frame
from wire.protocol import (
    EndTransaction,
    EndTransactionReply,
    InvalidRequest,
    Status,
    parse_request,
)

groups = st.from_regex(r"[%|a-zA-Z0-9_-]{1,60}", fullmatch=True)
offsets = st.integers(0, 2**63 - 1)
ids = st.none() | st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40)


@given(group=groups, table=offsets, log=offsets, outcome=st.sampled_from(["COMMIT", "ROLLBACK", "UNKNOWN"]),
       from_check=st.booleans(), msg_id=ids, tx=ids, request_id=st.integers(0, 2**31))
@settings(max_examples=examples(200))
def test_an_end_transaction_request_round_trips_through_a_frame(group, table, log, outcome, from_check, msg_id, tx,
                                                                request_id):
    sent = EndTransaction(producer_group=group, tran_state_table_offset=table, commitlog_offset=log, outcome=outcome,
                          from_transaction_check=from_check, msg_id=msg_id, transaction_id=tx)
    decoder = FrameDecoder(max_frame_size=1 << 20)
    [frame] = decoder.feed(encode_frame(sent.to_wire(request_id)))
    parsed = parse_request(frame)
    assert (parsed.op, parsed.id) == ("end_transaction", request_id)
    assert attrs.asdict(parsed.fields) == attrs.asdict(sent)


@given(status=st.sampled_from([Status.OK, Status.PUT_OK, Status.FLUSH_SLAVE_TIMEOUT]),
       outcome=st.sampled_from(["COMMIT", "ROLLBACK", "UNKNOWN"]), duplicate=st.booleans(),
       where=st.none() | st.tuples(st.text(min_size=1, max_size=40), groups, st.integers(0, 1023), offsets, offsets))
@settings(max_examples=examples(100))
def test_an_end_transaction_reply_round_trips(status, outcome, duplicate, where):
    fields = {} if where is None else dict(zip(("msg_id", "topic", "queue_id", "queue_offset", "commitlog_offset"),
                                               where, strict=True))
    reply = EndTransactionReply(status=status, outcome=outcome, duplicate=duplicate, **fields)
    wire_map = cbor2.loads(cbor2.dumps(reply.to_wire(7)))
    assert wire_map["status"] == status.value and wire_map["id"] == 7
    assert EndTransactionReply.from_wire(wire_map) == reply


@pytest.mark.parametrize(("field", "value", "problem"), [
    ("outcome", "commit", "must be one of COMMIT, ROLLBACK, UNKNOWN, got 'commit'"),
    ("outcome", 8, "must be a text string"),
    ("commitlog_offset", -1, "commitlog_offset"),
    ("producer_group", "", "group is empty"),
])
def test_a_bad_end_transaction_is_named(field, value, problem):
    frame = {"v": 1, "op": "end_transaction", "id": 1, "producer_group": "PG", "tran_state_table_offset": 0,
             "commitlog_offset": 0, "outcome": "COMMIT", field: value}
    with pytest.raises(InvalidRequest, match=problem):
        parse_request(frame)
