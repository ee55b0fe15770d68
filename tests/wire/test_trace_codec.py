"""wire.protocol.trace: RocketMQ's trace format round-trips, and a body written by the rules
of RocketMQ's TraceDataEncoder (bytes built here by hand) decodes field by field."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire.protocol.trace import (
    ConsumeReturn,
    EndTransactionTrace,
    MessageType,
    PubTrace,
    RecallTrace,
    SubAfterTrace,
    SubBeforeTrace,
    TraceFormatError,
    decode_traces,
    encode_trace,
    encode_traces,
    trace_keys,
)

text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=20)
word = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1, max_size=20)
ms = st.integers(0, 2**63 - 1)
small = st.integers(0, 2**31 - 1)

pubs = st.builds(PubTrace, timestamp=ms, region_id=text, group=text, topic=text, msg_id=text, tags=text, keys=text,
                 store_host=text, body_length=small, cost_ms=small, msg_type=st.sampled_from(MessageType),
                 offset_msg_id=text, success=st.booleans(), client_host=st.none() | word)
befores = st.builds(SubBeforeTrace, timestamp=ms, region_id=text, group=text, request_id=text, msg_id=text,
                    retry_times=small, keys=text)
afters = st.one_of(
    st.builds(SubAfterTrace, request_id=text, msg_id=text, cost_ms=small, success=st.booleans(), keys=text,
              context_code=st.sampled_from(ConsumeReturn).map(int), timestamp=ms, group=text),
    st.builds(SubAfterTrace, request_id=text, msg_id=text, cost_ms=small, success=st.booleans(), keys=text,
              context_code=st.sampled_from(ConsumeReturn).map(int)),
)
ends = st.builds(EndTransactionTrace, timestamp=ms, region_id=text, group=text, topic=text, msg_id=text, tags=text,
                 keys=text, store_host=text, msg_type=st.sampled_from(MessageType), transaction_id=text,
                 transaction_state=st.sampled_from(["COMMIT_MESSAGE", "ROLLBACK_MESSAGE", "UNKNOW"]),
                 from_transaction_check=st.booleans())
recalls = st.builds(RecallTrace, timestamp=ms, region_id=text, group=text, topic=text, msg_id=text,
                    success=st.booleans())
records = st.one_of(pubs, befores, afters, ends, recalls)


@given(st.lists(records, max_size=8))
def test_round_trip(batch):
    assert decode_traces(encode_traces(batch)) == batch


@given(records)
def test_one_record_is_one_field_splitter_terminated_line(record):
    encoded = encode_trace(record)
    assert encoded.endswith("\x02") and encoded.count("\x02") == 1
    assert encoded.startswith(record.TYPE + "\x01")


def test_decodes_what_rocketmq_writes():
    """A batch as RocketMQ 4.9 / 5 writes it (TraceDataEncoder.encoderFromContextBean): a Pub
    (14 fields), a SubBefore, a SubAfter with timestamp and group (not the cloud channel),
    a SubAfter of the cloud channel (contextCode then a bare CONTENT_SPLITOR), an
    EndTransaction; Java's null keys are written as the text "null"."""
    c, f = b"\x01", b"\x02"
    body = (
        c.join([b"Pub", b"1700000000123", b"DefaultRegion", b"PG", b"TopicTest", b"7F000001000018B4AAC25F1D2C9E0000",
                b"TagA", b"order-1 order-2", b"127.0.0.1:10911", b"11", b"5", b"0",
                b"7F00000100002A9F0000000000000ABC", b"true"]) + f
        + c.join([b"SubBefore", b"1700000000200", b"DefaultRegion", b"CG", b"req-1",
                  b"7F000001000018B4AAC25F1D2C9E0000", b"1", b"order-1 order-2"]) + f
        + c.join([b"SubAfter", b"req-1", b"7F000001000018B4AAC25F1D2C9E0000", b"3", b"false", b"order-1 order-2",
                  b"4", b"1700000000203", b"CG"]) + f
        + c.join([b"SubAfter", b"req-2", b"MSG2", b"0", b"true", b"null", b"0"]) + c + f
        + c.join([b"EndTransaction", b"1700000000300", b"DefaultRegion", b"TPG", b"TopicTest", b"MSG3", b"null",
                  b"null", b"127.0.0.1:10911", b"1", b"TX-1", b"COMMIT_MESSAGE", b"false"]) + f
    )
    pub, before, after, cloud_after, end = decode_traces(body)
    assert pub == PubTrace(timestamp=1700000000123, region_id="DefaultRegion", group="PG", topic="TopicTest",
                           msg_id="7F000001000018B4AAC25F1D2C9E0000", tags="TagA", keys="order-1 order-2",
                           store_host="127.0.0.1:10911", body_length=11, cost_ms=5, msg_type=MessageType.NORMAL,
                           offset_msg_id="7F00000100002A9F0000000000000ABC", success=True)
    assert before == SubBeforeTrace(timestamp=1700000000200, region_id="DefaultRegion", group="CG",
                                    request_id="req-1", msg_id=pub.msg_id, retry_times=1, keys="order-1 order-2")
    assert after == SubAfterTrace(request_id="req-1", msg_id=pub.msg_id, cost_ms=3, success=False,
                                  keys="order-1 order-2", context_code=ConsumeReturn.FAILED,
                                  timestamp=1700000000203, group="CG")
    assert cloud_after == SubAfterTrace(request_id="req-2", msg_id="MSG2", cost_ms=0, success=True, keys="null",
                                        context_code=0, timestamp=None, group=None)
    assert end.transaction_state == "COMMIT_MESSAGE" and end.msg_type is MessageType.TRANS_HALF
    assert not end.from_transaction_check and end.group == "TPG"
    # and ours, written back, are the same bytes
    assert encode_traces([pub, before, after, cloud_after, end]) == body


def test_old_pub_layouts():
    """A 13-field Pub (no offsetMsgId) and a 15-field one (clientHost last) both decode."""
    c = "\x01"
    head = ["Pub", "1", "r", "PG", "T", "ID", "", "", "h:1", "3", "2", "0"]
    (short,) = decode_traces(c.join([*head, "true"]) + "\x02")
    assert short.offset_msg_id == "" and short.success and short.client_host is None
    (long,) = decode_traces(c.join([*head, "OFF", "false", "10.0.0.9"]) + "\x02")
    assert long.offset_msg_id == "OFF" and not long.success and long.client_host == "10.0.0.9"


def test_unknown_types_are_skipped_and_empty_is_nothing():
    assert decode_traces(b"") == []
    assert decode_traces("Future\x01x\x01y\x02") == []


@pytest.mark.parametrize("body", [
    b"Pub\x01notanumber\x01r\x01g\x01t\x01id\x01\x01\x01h\x011\x011\x010\x01o\x01true\x02",
    b"SubBefore\x011\x02",
    b"Pub\x011\x01r\x01g\x01t\x01id\x01\x01\x01h\x011\x011\x019\x01o\x01true\x02",  # msgType 9
    b"\xff\xfe",
])
def test_malformed_raises_a_clear_error(body):
    with pytest.raises(TraceFormatError):
        decode_traces(body)


def test_splitters_inside_a_field_are_refused():
    with pytest.raises(ValueError, match="splitter"):
        encode_trace(RecallTrace(timestamp=1, region_id="r", group="g\x01", topic="t", msg_id="m", success=True))


def test_trace_keys_are_msg_id_then_the_keys():
    record = SubBeforeTrace(timestamp=1, region_id="r", group="g", request_id="q", msg_id="M", retry_times=0,
                            keys="a  b")
    assert trace_keys(record) == ["M", "a", "b"]
