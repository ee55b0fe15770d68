"""wire.protocol: framing, CBOR decoding errors, request validation, response helpers."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import attrs
import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire.framing import FrameDecoder, FrameError, encode_frame
from wire.protocol import (
    CHECKED_LIMIT,
    INT64_MAX,
    OPS,
    InvalidRequest,
    ReplyError,
    Request,
    Send,
    Status,
    error_response,
    ok_response,
    parse_request,
    parse_tag_filter,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
MSG_ID = "7F00000100007A2F0000000000000000"  # 127.0.0.1:31279, offset 0


def raw_frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


# ---------------------------------------------------------------- framing


def test_round_trip_one_frame():
    obj = {"v": 1, "op": "send", "id": 7, "topic": "T", "body": b"\x00\xff", "keys": ["k"]}
    frame = encode_frame(obj)
    assert frame[:4] == struct.pack(">I", len(frame) - 4)
    assert FrameDecoder(1024).feed(frame) == [obj]


def test_several_frames_in_one_feed_and_byte_by_byte():
    objs = [{"id": i, "status": "OK", "x": "y" * i} for i in range(5)]
    data = b"".join(encode_frame(o) for o in objs)
    assert FrameDecoder(1024).feed(data) == objs
    dec = FrameDecoder(1024)
    out = []
    for b in data:
        out += dec.feed(bytes([b]))
    assert out == objs
    assert dec.buffered == 0


json_like = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text() | st.binary(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
maps = st.dictionaries(st.text(max_size=8), json_like, max_size=6)


@given(objs=st.lists(maps, min_size=1, max_size=8), data=st.data())
def test_random_chunking_yields_the_same_frames(objs, data):
    stream = b"".join(encode_frame(o) for o in objs)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=20)))
    dec = FrameDecoder(1 << 20)
    out = []
    prev = 0
    for cut in [*cuts, len(stream)]:
        out += dec.feed(stream[prev:cut])
        prev = cut
    assert out == objs
    assert dec.buffered == 0


def test_frame_at_the_limit_is_accepted():
    body = cbor2.dumps({"a": b"x" * 100})
    assert FrameDecoder(len(body)).feed(raw_frame(body)) == [{"a": b"x" * 100}]


def test_oversized_frame_rejected_from_the_header_alone():
    dec = FrameDecoder(1000)
    assert dec.feed(struct.pack(">I", 1001)[:3]) == []
    with pytest.raises(FrameError) as exc:
        dec.feed(struct.pack(">I", 1001)[3:])  # no body byte sent at all
    assert exc.value.reason == "frame of 1001 bytes exceeds the limit 1000"
    assert str(exc.value) == exc.value.reason
    assert dec.buffered == 0


def test_oversized_header_does_not_buffer_the_body():
    dec = FrameDecoder(1000)
    with pytest.raises(FrameError, match="frame of 4294967295 bytes exceeds the limit 1000"):
        dec.feed(b"\xff\xff\xff\xff" + b"x" * 5000)
    assert dec.buffered == 0


def test_decoder_stays_broken_after_an_error():
    dec = FrameDecoder(10)
    with pytest.raises(FrameError):
        dec.feed(struct.pack(">I", 11))
    with pytest.raises(FrameError, match="exceeds the limit 10"):
        dec.feed(encode_frame({}))


def test_valid_frames_before_a_bad_one_are_lost_with_the_stream():
    # the stream is unusable after a bad frame; the caller closes after an error frame
    dec = FrameDecoder(100)
    with pytest.raises(FrameError):
        dec.feed(encode_frame({"id": 1}) + raw_frame(b"\xff"))


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b"\xff", "not valid CBOR"),  # a lone break code
        (b"\xa1\x61", "not valid CBOR"),  # truncated map
        (b"\x62\xff\xfe", "not valid CBOR"),  # text string that is not UTF-8
        (b"", "empty frame"),
        (b"\xa0\x00", "1 bytes after the CBOR value"),
    ],
)
def test_garbage_cbor_is_a_frame_error(body, words):
    with pytest.raises(FrameError) as exc:
        FrameDecoder(100).feed(raw_frame(body))
    assert words in exc.value.reason


@pytest.mark.parametrize(
    ("value", "name"),
    [([1, 2], "array"), (5, "integer"), ("op", "text string"), (b"x", "byte string"), (None, "null")],
)
def test_non_map_cbor_is_a_frame_error(value, name):
    with pytest.raises(FrameError, match=f"frame holds a CBOR {name}, expected a map"):
        FrameDecoder(100).feed(raw_frame(cbor2.dumps(value)))


def test_encode_frame_checks_type_and_own_limit():
    with pytest.raises(TypeError):
        encode_frame([1, 2])  # type: ignore[arg-type]
    with pytest.raises(FrameError, match="exceeds the limit 10"):
        encode_frame({"body": b"x" * 20}, max_frame_size=10)


def test_decoder_rejects_a_nonpositive_limit():
    with pytest.raises(ValueError):
        FrameDecoder(0)


# ---------------------------------------------------------------- requests


def req(op: str, **fields) -> dict:
    return {"v": 1, "op": op, "id": 1, **fields}


MINIMAL = {
    "send": {"topic": "T", "body": b"x"},
    "send_batch": {"topic": "T", "messages": [{"body": b"x"}]},
    "pull": {"topic": "T", "queue_id": 0, "offset": 0},
    "query_by_key": {"topic": "T", "key": "k"},
    "get_by_msg_id": {"msg_id": MSG_ID},
    "offset_by_time": {"topic": "T", "queue_id": 0, "timestamp": 0},
    "min_offset": {"topic": "T", "queue_id": 0},
    "max_offset": {"topic": "T", "queue_id": 0},
    "commit_offset": {"group": "G", "topic": "T", "queue_id": 0, "offset": 5},
    "fetch_offset": {"group": "G", "topic": "T", "queue_id": 0},
    "offset_list": {},
    "offset_for_epoch": {"topic": "T", "queue_id": 0, "epoch": 1, "commitlog_offset": 0, "offset": 0},
    "topic_create": {"topic": "T"},
    "topic_delete": {"topic": "T"},
    "subgroup_update": {"group": "G"},
    "subgroup_list": {},
    "consumer_heartbeat": {"group": "G", "client_id": "127.0.0.1@1@a"},
    "consumer_unregister": {"group": "G", "client_id": "127.0.0.1@1@a"},
    "consumer_list": {"group": "G"},
    "consumer_watch": {"group": "G"},
    "consumer_lock": {"group": "G", "client_id": "c", "topic": "T", "queue_ids": [0, 1]},
    "consumer_unlock": {"group": "G", "client_id": "c", "topic": "T", "queue_ids": [0]},
    "consumer_send_back": {"group": "G", "commitlog_offset": 0},
    "topic_list": {},
    "status": {},
    "admin.delete_expired_files": {},
    "epoch": {},
    "promote": {},
    "promote_check": {},
    "count_messages": {"from_offset": 0, "to_offset": 100},
    "subgroup_delete": {"group": "G"},
    "producer_heartbeat": {"group": "PG", "client_id": "127.0.0.1@1@a"},
    "producer_unregister": {"group": "PG", "client_id": "127.0.0.1@1@a"},
    "producer_list": {"group": "PG"},
    "topic_status": {"topic": "T"},
    "broker_config": {},
    "broker_config_update": {"key": "syncFlushTimeout", "value": "3000"},
    "broker_write_perm": {"writeable": False},
    "stats_all": {},
    "acl_list": {},
    "acl_put": {"access_key": "alice"},
    "acl_remove": {"access_key": "alice"},
    "end_transaction": {"producer_group": "PG", "tran_state_table_offset": 0, "commitlog_offset": 0,
                        "outcome": "COMMIT"},
    "transaction_check_watch": {"group": "PG", "client_id": "c1"},
    "transaction_resume": {},
    "transaction_list": {},
}


def test_minimal_covers_every_op():
    assert set(MINIMAL) == set(OPS)


def test_promote_takes_only_a_master_role():
    assert attrs.asdict(parse_request(req("promote", role="ASYNC_MASTER")).fields) == {"role": "ASYNC_MASTER",
                                                                                        "unclean": False}
    assert parse_request(req("promote", unclean=True)).fields.unclean is True
    with pytest.raises(InvalidRequest, match="must be SYNC_MASTER or ASYNC_MASTER, got 'SLAVE'"):
        parse_request(req("promote", role="SLAVE"))


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_op_parses_with_required_fields_and_gets_defaults(op):
    r = parse_request(req(op, **MINIMAL[op]))
    assert isinstance(r, Request)
    assert (r.op, r.id) == (op, 1)
    assert {a.name for a in attrs.fields(type(r.fields))} == {f.name for f in OPS[op]}
    assert op == type(r.fields).OP


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_required_field_is_required(op):
    for name in MINIMAL[op]:
        fields = {k: v for k, v in MINIMAL[op].items() if k != name}
        with pytest.raises(InvalidRequest, match=f"^missing field '{name}' for op '{re.escape(op)}'$"):
            parse_request(req(op, **fields))


def test_defaults():
    send = attrs.asdict(parse_request(req("send", topic="T", body=b"x")).fields)
    assert send == {
        "topic": "T",
        "body": b"x",
        "queue_id": None,
        "tags": None,
        "keys": [],
        "properties": {},
        "flag": 0,
        "born_timestamp": None,
        "wait": True,
    }
    pull = attrs.asdict(parse_request(req("pull", topic="T", queue_id=1, offset=9)).fields)
    assert pull == {
        "topic": "T",
        "queue_id": 1,
        "offset": 9,
        "max_msgs": 32,
        "tag_filter": "*",
        "timeout_ms": 0,
        "group": None,
        "sql_filter": None,
    }
    q = parse_request(req("query_by_key", topic="T", key="k")).fields
    assert (q.max_num, q.begin_ts, q.end_ts) == (32, 0, INT64_MAX)
    t = parse_request(req("topic_create", topic="T")).fields
    assert (t.read_queue_nums, t.write_queue_nums, t.perm) == (4, 4, 6)
    batch = attrs.asdict(parse_request(req("send_batch", topic="T", messages=[{"body": b"a"}])).fields)
    assert batch["messages"] == [{"body": b"a", "tags": None, "keys": [], "properties": {}, "flag": 0}]
    assert (batch["queue_id"], batch["wait"]) == (None, True)


def test_defaults_are_not_shared_between_requests():
    a = parse_request(req("send", topic="T", body=b"x"))
    a.fields.keys.append("mutated")
    a.fields.properties["p"] = "q"
    b = parse_request(req("send", topic="T", body=b"x"))
    assert b.fields.keys == [] and b.fields.properties == {}


def test_full_send():
    fields = {
        "topic": "T",
        "body": b"hello",
        "queue_id": 3,
        "tags": "TagA",
        "keys": ["k1", "k2"],
        "properties": {"a": "b"},
        "flag": 7,
        "born_timestamp": 1_700_000_000_000,
        "wait": False,
    }
    assert attrs.asdict(parse_request(req("send", **fields)).fields) == fields
    assert Send(**fields).to_wire(1) == req("send", **fields)


def test_envelope_problems():
    with pytest.raises(InvalidRequest, match="missing field 'v'"):
        parse_request({"op": "status", "id": 1})
    with pytest.raises(InvalidRequest, match="unsupported protocol version 2") as exc:
        parse_request({"v": 2, "op": "status", "id": 4})
    assert exc.value.request_id == 4
    with pytest.raises(InvalidRequest, match="unsupported protocol version True"):
        parse_request({"v": True, "op": "status", "id": 1})
    with pytest.raises(InvalidRequest, match="^missing field 'id'$") as exc:
        parse_request({"v": 1, "op": "status"})
    assert exc.value.request_id is None
    with pytest.raises(InvalidRequest, match="field 'id' must be a 64-bit integer, got text string"):
        parse_request({"v": 1, "op": "status", "id": "1"})
    with pytest.raises(InvalidRequest, match="field 'id' must be a 64-bit integer"):
        parse_request({"v": 1, "op": "status", "id": 2**64})
    with pytest.raises(InvalidRequest, match="^missing field 'op'$") as exc:
        parse_request({"v": 1, "id": 9})
    assert exc.value.request_id == 9
    with pytest.raises(InvalidRequest, match="field 'op' must be a text string, got integer"):
        parse_request({"v": 1, "op": 3, "id": 1})


def test_unknown_op():
    with pytest.raises(InvalidRequest, match="^unknown op 'x'$") as exc:
        parse_request(req("x"))
    assert exc.value.request_id == 1
    with pytest.raises(InvalidRequest, match="^unknown op 'sned'; did you mean 'send'\\?$"):
        parse_request(req("sned"))


def test_unknown_field_is_refused_with_a_suggestion():
    with pytest.raises(InvalidRequest, match="unknown field 'queueId' for op 'send'; did you mean 'queue_id'"):
        parse_request(req("send", topic="T", body=b"x", queueId=1))
    with pytest.raises(InvalidRequest, match="unknown field 'messages\\[0\\].tag' for op 'send_batch'"):
        parse_request(req("send_batch", topic="T", messages=[{"body": b"x", "tag": "a"}]))


WRONG_TYPES = [
    ("send", {"topic": 5, "body": b"x"}, "topic", "a text string", "integer"),
    ("send", {"topic": "T", "body": "x"}, "body", "a byte string", "text string"),
    ("send", {"topic": "T", "body": b"x", "queue_id": "1"}, "queue_id", "an integer", "text string"),
    ("send", {"topic": "T", "body": b"x", "queue_id": True}, "queue_id", "an integer", "boolean"),
    ("send", {"topic": "T", "body": b"x", "flag": 1.0}, "flag", "an integer", "float"),
    ("send", {"topic": "T", "body": b"x", "wait": 1}, "wait", "a boolean", "integer"),
    ("send", {"topic": "T", "body": b"x", "keys": "k"}, "keys", "an array of text strings", "text string"),
    ("send", {"topic": "T", "body": b"x", "keys": ["a", 1]}, "keys[1]", "a text string", "integer"),
    ("send", {"topic": "T", "body": b"x", "properties": ["a"]}, "properties", "a map of text strings", "array"),
    ("send", {"topic": "T", "body": b"x", "properties": {"a": 1}}, "properties['a']", "a text string", "integer"),
    ("send", {"topic": "T", "body": b"x", "tags": None}, "tags", "a text string", "null"),
    ("send_batch", {"topic": "T", "messages": {"body": b"x"}}, "messages", "an array of maps", "map"),
    ("send_batch", {"topic": "T", "messages": [b"x"]}, "messages[0]", "a map", "byte string"),
    ("send_batch", {"topic": "T", "messages": [{"body": 1}]}, "messages[0].body", "a byte string", "integer"),
    ("pull", {"topic": "T", "queue_id": 0, "offset": "0"}, "offset", "an integer", "text string"),
    ("pull", {"topic": "T", "queue_id": 0, "offset": 0, "tag_filter": ["a"]}, "tag_filter", "a text string", "array"),
    ("get_by_msg_id", {"msg_id": b"\x00"}, "msg_id", "a text string", "byte string"),
    ("topic_create", {"topic": "T", "perm": "rw"}, "perm", "an integer", "text string"),
]


@pytest.mark.parametrize(("op", "fields", "path", "expected", "got"), WRONG_TYPES)
def test_wrong_type_names_field_and_expected_type(op, fields, path, expected, got):
    with pytest.raises(InvalidRequest) as exc:
        parse_request(req(op, **fields))
    msg = exc.value.message
    assert msg.startswith(f"field {path!r} must be {expected}"), msg
    assert msg.endswith(f"got {got}"), msg
    assert exc.value.request_id == 1


BAD_VALUES = [
    ("send", {"topic": "T", "body": b""}, "body", "message body is empty"),
    ("send_batch", {"topic": "T", "messages": [{"body": b""}]}, "messages[0].body", "message body is empty"),
    ("send_batch", {"topic": "T", "messages": []}, "messages", "at least one message"),
    ("send", {"topic": "", "body": b"x"}, "topic", "topic is empty"),
    ("send", {"topic": "a b", "body": b"x"}, "topic", "characters outside"),
    ("send", {"topic": "t" * 128, "body": b"x"}, "topic", "limit is 127"),
    ("send", {"topic": "T", "body": b"x", "queue_id": -1}, "queue_id", "must be in 0.."),
    ("send", {"topic": "T", "body": b"x", "tags": ""}, "tags", "must not be empty"),
    ("send", {"topic": "T", "body": b"x", "keys": ["a b"]}, "keys", "without spaces"),
    ("send", {"topic": "T", "body": b"x", "properties": {"TAGS": "a"}}, "properties", "field 'tags'"),
    ("send", {"topic": "T", "body": b"x", "properties": {"a": ""}}, "properties", "non-empty"),
    ("send", {"topic": "T", "body": b"x", "properties": {"a": "b\x01c"}}, "properties", "\\x01"),
    ("send", {"topic": "T", "body": b"x", "flag": 2**31}, "flag", "must be in"),
    ("pull", {"topic": "T", "queue_id": 0, "offset": -1}, "offset", "must be in 0.."),
    ("pull", {"topic": "T", "queue_id": 0, "offset": 2**63}, "offset", "must be in 0.."),
    ("pull", {"topic": "T", "queue_id": 0, "offset": 0, "max_msgs": 0}, "max_msgs", "must be in 1.."),
    ("pull", {"topic": "T", "queue_id": 0, "offset": 0, "timeout_ms": -5}, "timeout_ms", "must be in 0.."),
    ("pull", {"topic": "T", "queue_id": 0, "offset": 0, "tag_filter": "||"}, "tag_filter", "names no tag"),
    ("pull", {"topic": "T", "queue_id": 0, "offset": 0, "group": "g g"}, "group", "group"),
    ("query_by_key", {"topic": "T", "key": ""}, "key", "must not be empty"),
    ("get_by_msg_id", {"msg_id": "abc"}, "msg_id", "32 or 56 hex"),
    ("get_by_msg_id", {"msg_id": "Z" * 32}, "msg_id", "not hexadecimal"),
    ("topic_create", {"topic": "T", "perm": 8}, "perm", "0..7"),
    ("topic_create", {"topic": "T", "read_queue_nums": 0}, "read_queue_nums", "must be in 1..1024"),
]


@pytest.mark.parametrize(("op", "fields", "path", "words"), BAD_VALUES)
def test_bad_values_name_the_field(op, fields, path, words):
    with pytest.raises(InvalidRequest) as exc:
        parse_request(req(op, **fields))
    msg = exc.value.message
    assert msg.startswith(f"field {path!r}"), msg
    assert words in msg, msg


def test_tag_filter():
    assert parse_tag_filter("*") is None
    assert parse_tag_filter("") is None
    assert parse_tag_filter(" a || b ||") == frozenset({"a", "b"})
    with pytest.raises(ValueError):
        parse_tag_filter("||")


def test_request_from_decoded_frame():
    frame = encode_frame(req("pull", topic="T", queue_id=2, offset=10, tag_filter="a||b"))
    (decoded,) = FrameDecoder(1024).feed(frame)
    r = parse_request(decoded)
    assert r.fields.tag_filter == "a||b" and r.fields.queue_id == 2


# ---------------------------------------------------------------- responses


def test_ok_response():
    assert ok_response(3) == {"id": 3, "status": "OK"}
    assert ok_response(4, Status.PUT_OK, msg_id=MSG_ID) == {"id": 4, "status": "PUT_OK", "msg_id": MSG_ID}
    assert ok_response(5, status="FOUND", messages=[]) == {"id": 5, "status": "FOUND", "messages": []}
    with pytest.raises(ValueError, match="unknown response status"):
        ok_response(1, "PUT_MAYBE")
    with pytest.raises(ValueError):
        ok_response(1, error="x")


def test_error_response_round_trips():
    resp = error_response(None, Status.BAD_REQUEST, "missing field 'id'")
    assert resp == {"id": None, "status": "BAD_REQUEST", "error": "missing field 'id'"}
    (decoded,) = FrameDecoder(1024).feed(encode_frame(error_response(9, "SERVICE_NOT_AVAILABLE", "slave")))
    assert decoded == {"id": 9, "status": "SERVICE_NOT_AVAILABLE", "error": "slave"}


def test_statuses_include_store_and_node_names():
    names = {s.value for s in Status}
    assert {"OK", "BAD_REQUEST", "NOT_FOUND", "SERVICE_NOT_AVAILABLE", "INTERNAL_ERROR"} <= names
    assert {"PUT_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE"} <= names
    assert {"FOUND", "NO_MATCHED_MESSAGE", "OFFSET_OVERFLOW_ONE", "NO_MATCHED_LOGIC_QUEUE"} <= names


# ---------------------------------------------------------------- docs


def test_docs_cover_every_op_and_field():
    text = DOC.read_text()
    for op, schema in OPS.items():
        assert f"### `{op}`" in text, op
        section = text.split(f"### `{op}`", 1)[1].split("\n### ", 1)[0]
        for field in schema:
            assert f"`{field.name}`" in section, (op, field.name)


# ---------------------------------------------------------------- the batch fast path

_message_values = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.binary(max_size=4),
    st.text(alphabet="ab \x01", max_size=3), st.lists(st.text(max_size=2), max_size=2),
    st.dictionaries(st.text(max_size=2), st.text(max_size=2), max_size=2),
)
_message_maps = st.dictionaries(
    st.sampled_from(["body", "tags", "keys", "properties", "flag", "bodyy", "tag"]), _message_values, max_size=4
)


def _batch_outcome(message: dict):
    try:
        return attrs.asdict(
            parse_request({"v": 1, "op": "send_batch", "id": 1, "topic": "T", "messages": [message]}).fields)
    except InvalidRequest as e:
        return ("InvalidRequest", e.message)


@given(message=_message_maps)
def test_plain_batch_messages_parse_as_the_schema_does(message):
    """The fast path for body(+tags) batch messages answers exactly as the schema path."""
    from wire.protocol import codec, requests

    fast = requests._plain_message(message)
    if fast is not None:
        assert fast == codec.parse_fields(message, requests.BatchMessage, "messages[0].", "send_batch")
    outcome = _batch_outcome(message)
    if fast is not None:
        assert outcome["messages"] == [attrs.asdict(fast)]


def test_plain_batch_message_fields():
    fields = attrs.asdict(parse_request({"v": 1, "op": "send_batch", "id": 1, "topic": "T",
                                         "messages": [{"body": b"x", "tags": "a"}, {"body": b"y"}]}).fields)
    assert fields["messages"] == [
        {"body": b"x", "tags": "a", "keys": [], "properties": {}, "flag": 0},
        {"body": b"y", "tags": None, "keys": [], "properties": {}, "flag": 0},
    ]
    with pytest.raises(InvalidRequest, match="tags"):
        parse_request({"v": 1, "op": "send_batch", "id": 1, "topic": "T", "messages": [{"body": b"x", "tags": ""}]})


def test_a_peer_speaking_http_is_named_not_measured():
    with pytest.raises(FrameError, match="does not speak the tidemq protocol: it sent 'HTTP'"):
        FrameDecoder(1024).feed(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    with pytest.raises(FrameError, match="frame of 16777216 bytes exceeds the limit 1024"):
        FrameDecoder(1024).feed(struct.pack(">I", 1 << 24))


def test_a_register_reply_reads_what_it_wrote_and_drops_wrongly_typed_values():
    from wire.protocol.namesrv import RegisterReply

    reply = RegisterReply(registered=True, master_address="h:1", master_ha_address="h:2", master_epoch=3,
                          master_role="SYNC_MASTER", broker_expire_ms=120_000)
    wire = reply.to_wire(9)
    assert (wire["id"], wire["status"]) == (9, "OK")
    assert RegisterReply.from_wire(cbor2.loads(cbor2.dumps(wire))) == reply
    odd = RegisterReply.from_wire({"registered": 1, "master_address": 5, "master_epoch": "3", "master_role": None})
    assert odd == RegisterReply(registered=False)


def test_a_request_object_is_what_the_server_parses():
    from wire.protocol import NODE_REQUESTS, BatchMessage, Pull, SendBatch

    pull = Pull(topic="T", queue_id=2, offset=7, tag_filter="a||b")
    assert pull.to_wire(4) == {"v": 1, "op": "pull", "id": 4, "topic": "T", "queue_id": 2, "offset": 7,
                               "tag_filter": "a||b"}  # defaults left out
    assert parse_request(pull.to_wire(4)).fields == pull
    batch = SendBatch(topic="T", messages=[BatchMessage(body=b"a", keys=["k"]), BatchMessage(body=b"b")])
    assert parse_request(cbor2.loads(cbor2.dumps(batch.to_wire(1)))).fields == batch
    assert set(NODE_REQUESTS) == set(OPS)


def test_every_op_names_a_reply_class_that_reads_what_it_writes():
    from wire.protocol import NODE_REQUESTS, EpochReply, SendReply, StatusReply
    from wire.protocol.namesrv import NAMESRV_REQUESTS

    for cls in [*NODE_REQUESTS.values(), *NAMESRV_REQUESTS.values()]:
        assert isinstance(cls.REPLY, type), cls.OP
    sent = SendReply(status=Status.FLUSH_SLAVE_TIMEOUT, msg_id=MSG_ID, queue_id=1, queue_offset=2, commitlog_offset=3)
    wire_map = cbor2.loads(cbor2.dumps(sent.to_wire(7)))
    assert wire_map["status"] == "FLUSH_SLAVE_TIMEOUT" and wire_map["id"] == 7
    assert SendReply.from_wire(wire_map) == sent
    epoch = EpochReply(epoch=2, entries=[[1, 0], [2, 500]], max_offset=900, broker_id=0, role="SYNC_MASTER")
    assert EpochReply.from_wire(cbor2.loads(cbor2.dumps(epoch.to_wire(1)))) == epoch
    # a newer node may say more; an older one less (status has a default for everything)
    assert StatusReply.from_wire({"id": 1, "status": "OK", "role": "SLAVE", "brand_new_field": 1}).role == "SLAVE"


def test_an_answer_without_a_required_field_is_a_reply_error():
    from wire.client import BadReply, read_reply
    from wire.protocol import MinOffset, OffsetReply, ReplyError

    with pytest.raises(ReplyError, match="lacks the field 'offset' of OffsetReply"):
        OffsetReply.from_wire({"id": 1, "status": "OK"})
    with pytest.raises(BadReply, match="min_offset: the answer lacks the field 'offset' of OffsetReply") as e:
        read_reply(MinOffset(topic="T", queue_id=0), {"id": 1, "status": "OK"}, "h:1")
    assert e.value.status == "BAD_REPLY" and e.value.address == "h:1"


def test_the_parser_remembers_valid_topics_in_the_callers_set_only():
    checked: set[str] = set()
    parse_request(req("max_offset", topic="Kept", queue_id=0), checked=checked)
    parse_request(req("pull", topic="Also", queue_id=0, offset=0), checked=checked)
    with pytest.raises(InvalidRequest):
        parse_request(req("max_offset", topic="bad topic", queue_id=0), checked=checked)
    parse_request(req("max_offset", topic="Unseen", queue_id=0))  # no set: nothing is remembered
    assert checked == {"Kept", "Also"}
    full = {f"t{i}" for i in range(CHECKED_LIMIT)}
    parse_request(req("max_offset", topic="Over", queue_id=0), checked=full)
    assert len(full) == CHECKED_LIMIT and "Over" not in full, "the set stops growing at its limit"


def test_a_stored_message_is_the_map_docs_protocol_md_lists_byte_for_byte():
    """WireMessage is the message map pull, query_by_key and get_by_msg_id answer with: the
    same keys in the same order (so the same CBOR bytes) as docs/protocol.md lists them, and
    a client reads back what the node wrote."""
    from store.message import Message
    from store.record_codec import decode_record, encode_record
    from wire.protocol import MessageReply, PullReply, WireMessage

    msg = Message(topic="T", body=b"payload", queue_id=2, tags="a", keys=("k1", "k2"), properties={"p": "v"},
                  flag=3, born_timestamp=1_700_000_000_000, born_host="10.0.0.9:4000", reconsume_times=1)
    stored = decode_record(encode_record(msg, "127.0.0.1:10911", 1 << 20)).message
    assert stored is not None
    want = {"topic": "T", "queue_id": 2, "queue_offset": stored.queue_offset,
            "commitlog_offset": stored.commitlog_offset, "msg_id": stored.msg_id, "body": b"payload", "tags": "a",
            "keys": ["k1", "k2"], "properties": {"p": "v"}, "born_timestamp": 1_700_000_000_000,
            "store_timestamp": stored.store_timestamp, "flag": 3, "reconsume_times": 1, "size": stored.size,
            "sys_flag": stored.sys_flag, "born_host": "10.0.0.9:4000", "body_crc": stored.body_crc}
    wire = WireMessage.of(stored).to_wire()
    assert cbor2.dumps(wire) == cbor2.dumps(want)
    section = DOC.read_text().split("Each message map has:", 1)[1].split("\n\n", 1)[0]
    listed = [w.strip("`") for w in section.replace(",", " ").split() if w.startswith("`")]
    assert listed == list(want), "docs/protocol.md lists the message map's fields in the wire's order"
    pull = PullReply(status=Status.FOUND, messages=[WireMessage.of(stored)], next_begin_offset=1, max_offset=1)
    assert cbor2.dumps(pull.to_wire(5)) == cbor2.dumps({"id": 5, "status": "FOUND", "messages": [want],
                                                        "next_begin_offset": 1, "min_offset": 0, "max_offset": 1,
                                                        "epoch": None, "node_epoch": None})
    assert PullReply.from_wire(cbor2.loads(cbor2.dumps(pull.to_wire(5)))) == pull
    assert MessageReply.from_wire({"message": want}).message == WireMessage.of(stored)
    older = WireMessage.from_wire({k: want[k] for k in list(want)[:6]})  # an older node's shorter map
    assert (older.tags, older.keys, older.size) == (None, [], None)


def test_the_status_enum_is_the_node_s_names_and_the_store_s_in_their_order():
    from store.status import GetMessageStatus, PutMessageStatus

    node = ["OK", "BAD_REQUEST", "NOT_FOUND", "INTERNAL_ERROR", "INDETERMINATE", "NO_PERMISSION",
            "TRANSACTION_ENDED"]
    assert [s.value for s in Status] == node + [m.value for m in PutMessageStatus] + [m.value for m in GetMessageStatus]
    assert all(s.name == s.value for s in Status)


def _doc_keys(row: str, braces: str) -> list[str]:
    """The field names docs/protocol.md lists in a `{a, b, ...}` group of the status table's row."""
    line = next(x for x in DOC.read_text().splitlines() if x.startswith(f"| `{row}` |"))
    return [k.strip() for k in re.findall(braces, line)[0].split(",")]


def test_a_node_s_ha_view_is_the_map_docs_protocol_md_lists_byte_for_byte():
    """WireHAView is `status`'s `ha`: a master's `{"slaves": [...]}`, a slave's flat client
    map or `{}`, the keys in docs/protocol.md's order; shorter and older maps still read."""
    from ha.master import SlaveStatus
    from ha.slave import SlaveHAStatus
    from wire.protocol import StatusReply, WireHAClient, WireHASlave, WireHAView

    row = {"address": "10.0.0.2:5000", "ack_offset": 4096, "lag_bytes": 100, "connected_since": 1_700_000_000_000,
           "in_sync": True}
    master = WireHAView(slaves=[WireHASlave.of(SlaveStatus(**row))])
    assert cbor2.dumps(master.to_wire()) == cbor2.dumps({"slaves": [row]})
    assert list(row) == _doc_keys("ha", r'"slaves": \[\{([^}]*)\}')
    client = {"master_address": "10.0.0.1:10912", "connected": True, "max_offset": 4096,
              "master_max_offset_seen": 4196, "lag_bytes": 100, "local_address": "10.0.0.2:5000"}
    slave = WireHAView(client=WireHAClient.of(SlaveHAStatus(**client)))
    assert cbor2.dumps(slave.to_wire()) == cbor2.dumps(client)
    assert list(client) == _doc_keys("ha", r"on a slave: `\{([^}]*)\}")
    assert WireHAView().to_wire() == {}
    for view in (master, slave, WireHAView()):
        reply = StatusReply(role="SLAVE", ha=view)
        assert cbor2.dumps(reply.to_wire(1)["ha"]) == cbor2.dumps(view.to_wire())
        assert StatusReply.from_wire(cbor2.loads(cbor2.dumps(reply.to_wire(1)))).ha == view
    assert (master.lag_bytes(), slave.lag_bytes(), WireHAView().lag_bytes()) == (100, 100, None)
    assert (master.connected, slave.connected) == (False, True)
    # a node that omits fields, a null slave list, an answer without `ha` (the name server's)
    short = WireHAView.from_wire({"slaves": [{"lag_bytes": 7}]})
    assert short.slaves == [WireHASlave(address="", ack_offset=-1, lag_bytes=7, connected_since=0, in_sync=False)]
    assert WireHAView.from_wire({"connected": True}).client == WireHAClient(connected=True)
    assert WireHAView.from_wire({"slaves": None}) == WireHAView(slaves=[])
    assert StatusReply.from_wire({"role": "NAMESRV"}).ha == WireHAView()
    assert StatusReply.from_wire({"ha": {"slaves": [row, {"lag_bytes": 9}]}}).lag_bytes() == 100


def test_a_route_is_the_map_docs_protocol_md_lists_byte_for_byte():
    """`get_route`'s groups are WireGroupRoute values (brokers WireRouteBroker, queue data
    WireQueueData): keys in docs/protocol.md's order, read back as written, and a name
    server that says less still reads (defaults: alive, no epoch, perm 6, no queue data)."""
    from wire.protocol import WireGroupRoute, WireQueueData, WireRouteBroker
    from wire.protocol.namesrv import RouteReply

    broker = {"broker_id": 1, "role": "SLAVE", "address": "h:2", "ha_address": "h:3", "alive": False,
              "max_offset": 4096, "epoch": 2, "lease_holder": "h:1", "in_sync": ["h:2"], "age_ms": 250}
    queue_data = {"read_queue_nums": 4, "write_queue_nums": 2, "perm": 4}
    group = {"broker_name": "a", "cluster": "C", "brokers": [broker], "queue_data": queue_data}
    value = WireGroupRoute(broker_name="a", cluster="C", brokers=[WireRouteBroker(**broker)],
                           queue_data=WireQueueData(**queue_data))
    reply = RouteReply(topic="T", groups=[value])
    assert cbor2.dumps(reply.to_wire(3)) == cbor2.dumps({"id": 3, "status": "OK", "topic": "T", "groups": [group]})
    assert RouteReply.from_wire(cbor2.loads(cbor2.dumps(reply.to_wire(3)))) == reply
    text = DOC.read_text().split("### `get_route`", 1)[1].split("### ", 1)[0].split("sorted by name", 1)[1]
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert [k for r in rows for k in re.findall(r"`(\w+)`", r.split(" | ")[0])] == list(group)
    assert re.findall(r"`(\w+)`", rows[1].split("by id:")[1]) == list(broker)
    assert [k.strip() for k in re.findall(r"\{([^}]*)\}", rows[2])[0].split(",")] == list(queue_data)
    short = WireGroupRoute.from_wire({"broker_name": "a", "brokers": [{"broker_id": 0, "role": "SYNC_MASTER",
                                                                       "address": "h:1"}]})
    assert short == WireGroupRoute(broker_name="a", brokers=[WireRouteBroker(broker_id=0, role="SYNC_MASTER",
                                                                             address="h:1")])
    assert (short.cluster, short.queue_data, short.brokers[0].alive, short.brokers[0].epoch) == ("", None, True, None)
    assert WireQueueData.from_wire({"read_queue_nums": 1, "write_queue_nums": 1}).perm == 6
    with pytest.raises(ReplyError, match="'address' of WireRouteBroker"):
        WireGroupRoute.from_wire({"broker_name": "a", "brokers": [{"broker_id": 0, "role": "SLAVE"}]})


def test_a_node_s_disk_and_stats_sections_are_the_maps_docs_protocol_md_lists():
    """`status`'s `disk` and `stats` are WireDiskUsage and WireNodeStats: keys in
    docs/protocol.md's order, read back as written; a section an answer lacks is None and a
    shorter one takes defaults."""
    from wire.protocol import StatusReply, WireDiskUsage, WireNodeStats

    disk = {"path": "/s", "total": 1000, "used": 250, "free": 750, "used_ratio": 0.25}
    stats = {"put_tps": 2.5, "get_tps": 1.0, "put_total": 10, "get_total": 4, "send_requests": 8, "send_groups": 2}
    reply = StatusReply(disk=WireDiskUsage(**disk), stats=WireNodeStats(**stats))
    wire_map = reply.to_wire(1)
    assert cbor2.dumps([wire_map["disk"], wire_map["stats"]]) == cbor2.dumps([disk, stats])
    assert StatusReply.from_wire(cbor2.loads(cbor2.dumps(wire_map))) == reply
    assert list(stats) == _doc_keys("stats", r"`\{([^}]*)\}`")
    line = next(x for x in DOC.read_text().splitlines() if x.startswith("| `disk` |"))
    assert re.findall(r"`(\w+)`", line.split(" | ", 1)[1].split(";")[0]) == list(disk)
    older = StatusReply.from_wire({"stats": {"put_tps": 3.0}})
    assert (older.disk, older.stats) == (None, WireNodeStats(put_tps=3.0))


def test_a_node_s_last_truncation_is_the_map_docs_protocol_md_lists():
    """`status`'s `last_truncation` is a WireTruncation: the report's keys in
    docs/protocol.md's order, null when nothing was cut, shorter reports read."""
    from wire.protocol import StatusReply, WireTruncation

    cut = {"from_offset": 5000, "to_offset": 5419, "dropped_bytes": 419, "message_count": 1, "msg_ids": [MSG_ID],
           "at_ms": 1_700_000_000_000, "reason": "rejoin at epoch 3"}
    reply = StatusReply(last_truncation=WireTruncation(**cut))
    assert cbor2.dumps(reply.to_wire(1)["last_truncation"]) == cbor2.dumps(cut)
    assert StatusReply.from_wire(cbor2.loads(cbor2.dumps(reply.to_wire(1)))) == reply
    assert list(cut) == _doc_keys("last_truncation", r"`\{([^}]*)\}`")
    assert StatusReply().to_wire(1)["last_truncation"] is None
    assert StatusReply.from_wire({"last_truncation": {"msg_ids": ["A"]}}).last_truncation == WireTruncation(msg_ids=["A"])


def test_a_node_s_controller_view_is_the_map_docs_auto_failover_md_lists():
    """`status`'s `controller` is a WireControllerView: keys in docs/auto-failover.md's
    order, the etcd values (`lease_holder`, `sync_state_set`) kept as maps, and tools print
    a status as its wire maps, not as the values' attributes."""
    from wire.protocol import StatusReply, WireControllerView, WireHAClient, WireHAView

    view = {"mode": "etcd", "endpoints": ["http://127.0.0.1:2379"], "lease": "7a", "lease_left_ms": 1900,
            "leading": True, "lease_holder": {"address": "h:1", "epoch": 4},
            "sync_state_set": {"master": "h:1", "in_sync": ["h:2"]}, "etcd_reachable": True, "unnamed_slaves": [],
            "watching": True, "watch_events": 3, "last_error": None, "events": [{"at_ms": 1, "event": "won"}]}
    reply = StatusReply(controller=WireControllerView(**view))
    assert cbor2.dumps(reply.to_wire(1)["controller"]) == cbor2.dumps(view)
    assert StatusReply.from_wire(cbor2.loads(cbor2.dumps(reply.to_wire(1)))) == reply
    section = (DOC.parent / "auto-failover.md").read_text().split("keys in this order):", 1)[1].split(". `tidemq", 1)[0]
    listed = [w for w in re.findall(r"`(\w+)`", section) if w not in ("etcd", "master", "replicas")]
    assert listed == list(view)
    assert StatusReply.from_wire({"controller": {"leading": True}}).controller == WireControllerView(leading=True)
    client = WireHAClient(master_address="h:1", connected=True)
    printed = StatusReply(ha=WireHAView(client=client), controller=WireControllerView(**view)).to_json()
    assert "id" not in printed and "status" not in printed
    assert (printed["ha"], printed["controller"]) == (client.to_wire(), view)


_int64 = st.integers(0, 2**63 - 1)


@given(epoch=_int64, commitlog_offset=_int64, offset=_int64, last=st.one_of(st.none(), _int64),
       node=st.one_of(st.none(), _int64), diverged=st.booleans())
def test_kip320_fields_read_back_what_they_wrote(epoch, commitlog_offset, offset, last, node, diverged):
    """offset_for_epoch's request parses as it was built; its answer and a pull's epochs
    survive CBOR, and an older node's pull answer (no epochs) reads as None."""
    from wire.protocol import OffsetForEpoch, OffsetForEpochReply, PullReply

    asked = OffsetForEpoch(topic="T", queue_id=1, epoch=epoch, commitlog_offset=commitlog_offset, offset=offset)
    assert parse_request(cbor2.loads(cbor2.dumps(asked.to_wire(3)))).fields == asked
    answer = OffsetForEpochReply(offset=offset, end_offset=commitlog_offset, node_epoch=epoch, diverged=diverged)
    assert OffsetForEpochReply.from_wire(cbor2.loads(cbor2.dumps(answer.to_wire(3)))) == answer
    pull = PullReply(status=Status.FOUND, messages=[], next_begin_offset=offset, epoch=last, node_epoch=node)
    assert PullReply.from_wire(cbor2.loads(cbor2.dumps(pull.to_wire(3)))) == pull
    older = PullReply.from_wire({"status": "FOUND", "messages": [], "next_begin_offset": offset})
    assert (older.epoch, older.node_epoch) == (None, None)
