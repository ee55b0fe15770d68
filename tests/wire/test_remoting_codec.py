"""RocketMQ's remoting codec (wire/remoting/), in process: RemotingCommand frames both ways
in JSON and ROCKETMQ serialization, the incremental decoder under any chunking, the facts
sheet's worked bytes (ROCKETMQ-FACTS-REMOTING §1.3) byte for byte, what a C++ client
writes, and every way a frame can be wrong (a broken stream vs. an unreadable header); then
the custom-header readers (headers.py) and the batch and JSON bodies (bodies.py)."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.remoting.bodies import BatchEntry, BodyError, decode_batch, encode_batch, parse_json_body
from wire.remoting.codes import LANGUAGES, RequestCode
from wire.remoting.command import (
    MAX_FRAME_SIZE,
    BadCommand,
    CommandDecoder,
    RemotingCommand,
    RemotingFrameError,
    SerializeType,
    decode_payload,
    encode_command,
    looks_like_remoting,
)
from wire.remoting.headers import HeaderError, ext_bool, ext_int, ext_str, send_header

INT32 = st.integers(-2**31, 2**31 - 1)
INT16 = st.integers(-2**15, 2**15 - 1)
TEXT = st.text(max_size=40)
KEY = st.text(min_size=1, max_size=20)


def _frame(header: bytes, body: bytes = b"", serialize_type: int = 0, header_len: int | None = None) -> bytes:
    """A frame put together by hand (so it can lie)."""
    n = len(header) if header_len is None else header_len
    return struct.pack(">II", 4 + len(header) + len(body), serialize_type << 24 | n) + header + body


def _decode_one(frame: bytes) -> RemotingCommand | BadCommand:
    (cmd,) = CommandDecoder().feed(frame)
    return cmd


# ---------------------------------------------------------------- round trips

json_commands = st.builds(
    RemotingCommand, code=INT32, opaque=INT32, flag=INT32, remark=st.none() | TEXT,
    ext_fields=st.none() | st.dictionaries(TEXT, TEXT, max_size=6), body=st.binary(max_size=300),
    language=st.sampled_from(LANGUAGES) | TEXT, version=INT32, serialize_type=st.just(SerializeType.JSON))

binary_commands = st.builds(
    RemotingCommand, code=INT16, opaque=INT32, flag=INT32, remark=st.none() | st.text(min_size=1, max_size=40),
    ext_fields=st.none() | st.dictionaries(KEY, TEXT, min_size=1, max_size=6), body=st.binary(max_size=300),
    language=st.sampled_from(LANGUAGES), version=INT16, serialize_type=st.just(SerializeType.ROCKETMQ))


@given(json_commands)
def test_a_json_command_round_trips(cmd: RemotingCommand) -> None:
    frame = encode_command(cmd)
    assert frame[4] == 0 and frame[8:9] == b"{"  # the sniff's signature
    assert looks_like_remoting(frame[:5])
    assert _decode_one(frame) == cmd


@given(binary_commands)
def test_a_rocketmq_command_round_trips(cmd: RemotingCommand) -> None:
    """ROCKETMQ strings of length 0 are null (Java), so the strategy keeps remarks and
    ext maps non-empty; an empty ext value stays an empty string."""
    frame = encode_command(cmd)
    assert frame[4] == 1 and looks_like_remoting(frame[:5])
    assert _decode_one(frame) == cmd


def test_rocketmq_empty_strings_read_as_java_reads_them() -> None:
    cmd = RemotingCommand(code=1, remark="", ext_fields={}, serialize_type=SerializeType.ROCKETMQ)
    back = _decode_one(encode_command(cmd))
    assert isinstance(back, RemotingCommand) and back.remark is None and back.ext_fields is None


@pytest.mark.parametrize("opaque", [-1, -2**31, 2**31 - 1, 0])
@pytest.mark.parametrize("st_", list(SerializeType))
def test_the_response_echoes_a_wrapped_opaque_and_the_serialize_type(opaque: int, st_: SerializeType) -> None:
    request = RemotingCommand(code=30, opaque=opaque, serialize_type=st_)
    response = request.response(0, ext_fields={"offset": "42"})
    back = _decode_one(encode_command(response))
    assert isinstance(back, RemotingCommand)
    assert (back.opaque, back.is_response, back.serialize_type) == (opaque, True, st_)


@settings(max_examples=60)
@given(st.lists(json_commands | binary_commands, min_size=1, max_size=6), st.data())
def test_any_chunking_gives_the_same_commands(cmds: list[RemotingCommand], data: st.DataObject) -> None:
    stream = b"".join(encode_command(c) for c in cmds)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    decoder = CommandDecoder()
    got: list[RemotingCommand | BadCommand] = []
    for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        got += decoder.feed(stream[a:b])
    assert got == cmds


def test_byte_by_byte_feeding_yields_each_command_when_its_last_byte_arrives() -> None:
    frames = [encode_command(RemotingCommand(code=c, opaque=c, body=b"x" * c)) for c in (1, 2, 3)]
    decoder = CommandDecoder()
    out = []
    for frame in frames:
        for i, byte in enumerate(frame):
            got = decoder.feed(bytes([byte]))
            assert bool(got) == (i == len(frame) - 1)
            out += got
    assert [c.code for c in out if isinstance(c, RemotingCommand)] == [1, 2, 3]


# ---------------------------------------------------------------- the facts sheet's worked bytes

GET_MAX_OFFSET_HEADER = (b'{"code":30,"extFields":{"queueId":"0","topic":"T"},"flag":0,"language":"JAVA","opaque":7,'
                         b'"serializeTypeCurrentRPC":"JSON","version":409}')
GET_MAX_OFFSET_RESPONSE_HEADER = (b'{"code":0,"extFields":{"offset":"42"},"flag":1,"language":"JAVA","opaque":7,'
                                  b'"serializeTypeCurrentRPC":"JSON","version":409}')
GET_MAX_OFFSET_ROCKETMQ = bytes.fromhex(
    "00000033 0100002f 001e 00 0199 00000007 00000000 00000000 0000001a"
    " 0007 7175657565496400000001 30 0005 746f70696300000001 54".replace(" ", ""))


def test_the_java_get_max_offset_request_byte_for_byte() -> None:
    request = RemotingCommand(code=RequestCode.GET_MAX_OFFSET, opaque=7, ext_fields={"queueId": "0", "topic": "T"})
    frame = encode_command(request)
    assert len(GET_MAX_OFFSET_HEADER) == 136
    assert frame[:8] == bytes.fromhex("0000008c00000088") and frame[8:11] == bytes.fromhex("7b2263")
    assert frame == frame[:8] + GET_MAX_OFFSET_HEADER
    assert _decode_one(frame) == request


def test_the_get_max_offset_response_byte_for_byte() -> None:
    request = _decode_one(b"\x00\x00\x00\x8c\x00\x00\x00\x88" + GET_MAX_OFFSET_HEADER)
    assert isinstance(request, RemotingCommand)
    frame = encode_command(request.response(0, ext_fields={"offset": "42"}))
    assert len(GET_MAX_OFFSET_RESPONSE_HEADER) == 123
    assert frame == bytes.fromhex("0000007f0000007b") + GET_MAX_OFFSET_RESPONSE_HEADER


def test_the_same_request_in_rocketmq_serialization_is_55_bytes() -> None:
    request = RemotingCommand(code=30, opaque=7, ext_fields={"queueId": "0", "topic": "T"},
                              serialize_type=SerializeType.ROCKETMQ)
    assert len(GET_MAX_OFFSET_ROCKETMQ) == 55
    assert encode_command(request) == GET_MAX_OFFSET_ROCKETMQ
    assert _decode_one(GET_MAX_OFFSET_ROCKETMQ) == request


def test_a_cpp_header_with_its_newline_and_numbers_in_ext_fields() -> None:
    """C++ 1.2.3: jsoncpp FastWriter's trailing "\\n" counts in headLen; SEND_MESSAGE's
    Integer fields are JSON numbers, booleans arrive as "0"/"1"; Java reads numbers as text."""
    header = (b'{"code":10,"extFields":{"AccessKey":"","OnsChannel":"ALIYUN","Signature":"x","batch":"1",'
              b'"defaultTopicQueueNums":4,"queueId":3,"sysFlag":0,"topic":"T","ratio":1.5,"on":true},'
              b'"flag":0,"language":"CPP","opaque":1,"remark":"","version":63}\n')
    cmd = _decode_one(_frame(header, b"body"))
    assert isinstance(cmd, RemotingCommand)
    assert (cmd.code, cmd.opaque, cmd.language, cmd.version, cmd.remark, cmd.body) == (10, 1, "CPP", 63, "", b"body")
    assert cmd.ext_fields is not None
    assert (cmd.field("queueId"), cmd.field("defaultTopicQueueNums"), cmd.field("sysFlag")) == ("3", "4", "0")
    assert (cmd.field("ratio"), cmd.field("on"), cmd.field("AccessKey")) == ("1.5", "true", "")
    assert all(type(v) is str for v in cmd.ext_fields.values())


def test_missing_optional_json_fields_take_java_defaults() -> None:
    cmd = _decode_one(_frame(b'{"code":105,"language":"NODE_JS"}'))
    assert isinstance(cmd, RemotingCommand)
    assert (cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields, cmd.version) == (0, 0, None, None, 0)
    assert cmd.language == "NODE_JS"  # kept in JSON; its ROCKETMQ byte is OTHER
    assert encode_command(RemotingCommand(code=1, language="NODE_JS", serialize_type=SerializeType.ROCKETMQ))[10] == 7


# ---------------------------------------------------------------- bad frames: the stream breaks


def test_a_header_longer_than_its_frame_breaks_the_stream() -> None:
    header = b'{"code":1}'
    decoder = CommandDecoder()
    with pytest.raises(RemotingFrameError, match="exceeds the frame"):
        decoder.feed(_frame(header, header_len=len(header) + 1))
    with pytest.raises(RemotingFrameError):  # and stays broken
        decoder.feed(encode_command(RemotingCommand(code=1)))


def test_a_frame_shorter_than_its_header_length_field_breaks_the_stream() -> None:
    with pytest.raises(RemotingFrameError, match="shorter"):
        CommandDecoder().feed(b"\x00\x00\x00\x02\x00\x00")


@pytest.mark.parametrize("limit", [1024, MAX_FRAME_SIZE])
def test_an_oversized_length_is_refused_from_its_prefix_alone(limit: int) -> None:
    decoder = CommandDecoder(limit)
    assert decoder.feed(struct.pack(">I", limit)[:3]) == []
    with pytest.raises(RemotingFrameError, match="exceeds the limit"):
        decoder.feed(struct.pack(">I", limit + 1)[3:])  # no body was waited for


def test_a_frame_at_the_limit_is_read() -> None:
    cmd = RemotingCommand(code=1, body=b"")
    frame = encode_command(cmd)
    assert CommandDecoder(len(frame) - 4).feed(frame) == [cmd]


# ---------------------------------------------------------------- bad headers: a BadCommand, the stream goes on


def _bad(frame: bytes) -> BadCommand:
    decoder = CommandDecoder()
    got = decoder.feed(frame + encode_command(RemotingCommand(code=99, opaque=99)))
    assert len(got) == 2 and isinstance(got[1], RemotingCommand) and got[1].code == 99  # the next frame is read
    assert isinstance(got[0], BadCommand), got[0]
    return got[0]


@pytest.mark.parametrize("header, opaque", [
    (b'{"code":1,"opaque":77', 0),  # cut short: no opaque to read
    (b"\xff\xfe{}", 0),  # not UTF-8
    (b"[1,2]", 0),  # not an object
    (b'"code"', 0),
    (b'{"opaque":77}', 77),  # no code
    (b'{"code":"10","opaque":77}', 77),  # a string code
    (b'{"code":1.5,"opaque":77}', 77),
    (b'{"code":true,"opaque":77}', 77),
    (b'{"code":4294967296,"opaque":77}', 77),  # over int32
    (b'{"code":1,"opaque":77,"flag":"1"}', 77),
    (b'{"code":1,"opaque":77,"version":null}', 77),
    (b'{"code":1,"opaque":77,"extFields":[]}', 77),
    (b'{"code":1,"opaque":77,"extFields":{"a":{"b":"c"}}}', 77),
    (b'{"code":1,"opaque":77,"extFields":{"a":null}}', 77),
    (b'{"code":1,"opaque":77,"remark":5}', 77),
    (b'{"code":1,"opaque":"77"}', 0),  # the opaque itself is unreadable
    (b'{"code":1,"opaque":77,"x":' + b"[" * 50_000 + b"]" * 50_000 + b"}", 0),  # deeper than json goes: no opaque either
    (b"[" * 50_000, 0),
])
def test_an_unreadable_json_header_is_a_bad_command_with_its_opaque(header: bytes, opaque: int) -> None:
    bad = _bad(_frame(header))
    assert (bad.opaque, bad.serialize_type) == (opaque, SerializeType.JSON)
    assert bad.reason


@pytest.mark.parametrize("serialize_type", [2, 0x7F, 0xFF])
def test_an_unknown_serialize_type_is_a_bad_command(serialize_type: int) -> None:
    bad = _bad(_frame(b'{"code":1,"opaque":5}', serialize_type=serialize_type))
    assert "serialize type" in bad.reason and bad.serialize_type is SerializeType.JSON


def _binary(remark: bytes = b"", ext: bytes = b"", remark_len: int | None = None, ext_len: int | None = None) -> bytes:
    fixed = struct.pack(">hbhii", 30, 0, 409, 7, 0)
    return (fixed + struct.pack(">I", len(remark) if remark_len is None else remark_len) + remark
            + struct.pack(">I", len(ext) if ext_len is None else ext_len) + ext)


@pytest.mark.parametrize("header", [
    _binary(b"hi", remark_len=3),  # the remark runs past the end
    _binary(b"hi", remark_len=2**32 - 1),
    _binary(ext=b"", ext_len=1),  # the ext map runs past the end
    _binary(ext=b"\x00\x05key" + b"\x00\x00\x00\x01v"),  # a key running past its map
    _binary(ext=b"\x00\x03key" + b"\x00\x00\x00\x09v"),  # a value running past its map
    _binary(ext=b"\x00\x03key"),  # a key without its value
    _binary(b"\xff\xfe"),  # a remark that is not UTF-8
    _binary()[:-2],  # no ext length
    struct.pack(">hbhii", 30, 0, 409, 7, 0)[:-1],  # cut inside the fixed part
])
def test_binary_header_strings_past_the_end_are_bad_commands(header: bytes) -> None:
    bad = _bad(_frame(header, serialize_type=1))
    assert bad.serialize_type is SerializeType.ROCKETMQ
    assert bad.opaque == (7 if len(header) >= 9 else 0)


@settings(max_examples=300)
@given(st.binary(max_size=200), st.sampled_from([0, 1, 2]), st.binary(max_size=20))
def test_random_header_bytes_never_break_a_well_framed_stream(header: bytes, serialize_type: int, body: bytes) -> None:
    decoder = CommandDecoder()
    got = decoder.feed(_frame(header, body, serialize_type) + encode_command(RemotingCommand(code=5, opaque=5)))
    assert len(got) == 2 and got[1] == RemotingCommand(code=5, opaque=5)
    assert isinstance(got[0], (RemotingCommand, BadCommand))
    if isinstance(got[0], RemotingCommand):
        assert got[0].body == body


def test_decode_payload_needs_its_type_and_length_word() -> None:
    with pytest.raises(RemotingFrameError):
        decode_payload(b"\x00\x00")


# ---------------------------------------------------------------- headers.py


def test_send_header_reads_the_v1_long_names_and_the_v2_letters_alike() -> None:
    v1 = {"producerGroup": "g", "topic": "T", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
          "queueId": "3", "sysFlag": "1", "bornTimestamp": "1700000000000", "flag": "7", "properties": "p",
          "reconsumeTimes": "2", "batch": "1", "maxReconsumeTimes": "16"}
    letters = {"producerGroup": "a", "topic": "b", "defaultTopic": "c", "defaultTopicQueueNums": "d", "queueId": "e",
               "sysFlag": "f", "bornTimestamp": "g", "flag": "h", "properties": "i", "reconsumeTimes": "j",
               "maxReconsumeTimes": "l", "batch": "m"}
    v2 = {letters[k]: v for k, v in v1.items()}
    a = send_header(RequestCode.SEND_MESSAGE, v1)
    assert a == send_header(RequestCode.SEND_MESSAGE_V2, {**v2, "m": "true"})
    assert (a.producer_group, a.topic, a.queue_id, a.sys_flag, a.born_timestamp, a.flag) == ("g", "T", 3, 1,
                                                                                           1700000000000, 7)
    assert (a.properties, a.reconsume_times, a.batch, a.max_reconsume_times) == ("p", 2, True, 16)
    # code 10 does not read letters, 310 does not read long names... but a V2 batch is a batch
    with pytest.raises(HeaderError, match="producerGroup"):
        send_header(RequestCode.SEND_MESSAGE, v2)
    assert send_header(RequestCode.SEND_MESSAGE_V2, {**v2, "m": "false"}).batch is False
    assert send_header(RequestCode.SEND_BATCH_MESSAGE, {**v2, "m": "false"}).batch is True


def test_send_header_defaults_and_required_fields() -> None:
    h = send_header(RequestCode.SEND_MESSAGE, {"producerGroup": "g", "topic": "T", "queueId": "-1"})
    assert (h.default_topic, h.default_topic_queue_nums, h.sys_flag, h.flag, h.properties) == ("", 4, 0, 0, "")
    assert (h.queue_id, h.batch, h.max_reconsume_times) == (-1, False, None)
    for missing in ("producerGroup", "topic", "queueId"):
        ext = {"producerGroup": "g", "topic": "T", "queueId": "0"}
        del ext[missing]
        with pytest.raises(HeaderError, match=missing):
            send_header(RequestCode.SEND_MESSAGE, ext)
    with pytest.raises(HeaderError, match="not an integer"):
        send_header(RequestCode.SEND_MESSAGE, {"producerGroup": "g", "topic": "T", "queueId": "x"})


@pytest.mark.parametrize("value, expected", [
    ("1", True), ("true", True), ("TRUE", True), ("True", True),
    ("0", False), ("false", False), ("", False), ("yes", False), ("2", False), (None, False),
])
def test_ext_bool_reads_cpp_and_java_booleans(value: str | None, expected: bool) -> None:
    assert ext_bool(None if value is None else {"b": value}, "b") is expected


@pytest.mark.parametrize("value", ["1_000", " 5", "5 ", "\u0665", "0x10", "1.0", "1e3", "-", "+", "9" * 21])
def test_ext_int_takes_what_java_parses_only(value: str) -> None:
    with pytest.raises(HeaderError, match="not an integer"):
        ext_int({"a": value}, "a")


def test_ext_str_and_ext_int() -> None:
    assert ext_int({"a": "+7"}, "a") == 7 and ext_int({"a": "1700000000000"}, "a") == 1700000000000
    assert ext_str({"a": ""}, "a") == "" and ext_str(None, "a", "d") == "d"
    assert ext_int({"a": "-5"}, "a") == -5 and ext_int({"a": ""}, "a", 3) == 3
    with pytest.raises(HeaderError):
        ext_str({}, "a")
    with pytest.raises(HeaderError):
        ext_int({"a": ""}, "a")


# ---------------------------------------------------------------- bodies.py

entries = st.builds(BatchEntry, flag=INT32, body=st.binary(max_size=200), properties=st.text(max_size=60))


@given(st.lists(entries, min_size=1, max_size=8))
def test_a_batch_body_round_trips(batch: list[BatchEntry]) -> None:
    assert decode_batch(encode_batch(batch)) == batch


@settings(max_examples=100)
@given(st.lists(entries, min_size=1, max_size=4), st.data())
def test_a_truncated_batch_is_a_body_error(batch: list[BatchEntry], data: st.DataObject) -> None:
    body = encode_batch(batch)
    cut = data.draw(st.integers(1, len(body) - 1))
    if cut in _boundaries(batch):
        assert decode_batch(body[:cut]) == batch[:_boundaries(batch).index(cut) + 1]
    else:
        with pytest.raises(BodyError):
            decode_batch(body[:cut])


def _boundaries(batch: list[BatchEntry]) -> list[int]:
    ends, pos = [], 0
    for e in batch:
        pos += 20 + len(e.body) + 2 + len(e.properties.encode())
        ends.append(pos)
    return ends


def _entry(total: int | None = None, body_len: int | None = None, prop_len: int | None = None,
           body: bytes = b"abc", props: bytes = b"K\x01V") -> bytes:
    real_total = 20 + len(body) + 2 + len(props)
    return (struct.pack(">iiiii", real_total if total is None else total, 0, 0, 0,
                        len(body) if body_len is None else body_len)
            + body + struct.pack(">h", len(props) if prop_len is None else prop_len) + props)


def test_a_well_formed_hand_made_entry_reads() -> None:
    assert decode_batch(_entry()) == [BatchEntry(0, b"abc", "K\x01V")]


@pytest.mark.parametrize("body", [
    _entry(total=10),  # smaller than its own head
    _entry(total=20 + 3 + 2 + 3 + 1),  # says more than there is
    _entry(total=-1),
    _entry(body_len=-1),
    _entry(body_len=50),  # the body runs past its message
    _entry(prop_len=4),  # the properties run past the message
    _entry(prop_len=-1),
    _entry(props=b"\xff\xfe"),  # properties not UTF-8
    _entry()[:10],  # a head cut short
    b"",  # no message at all
])
def test_lying_batch_sizes_are_body_errors(body: bytes) -> None:
    with pytest.raises(BodyError):
        decode_batch(body)


def test_parse_json_body_reads_fastjson_unquoted_numeric_keys() -> None:
    route = ('{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"},"brokerName":"b",'
             '"cluster":"c"}],"odd":{-1:"x, {2:y}"},"list":[1,2]}')
    assert parse_json_body(route.encode(), "route") == {
        "brokerDatas": [{"brokerAddrs": {"0": "127.0.0.1:10911", "1": "127.0.0.1:10921"}, "brokerName": "b",
                         "cluster": "c"}], "odd": {"-1": "x, {2:y}"}, "list": [1, 2]}
    assert parse_json_body(b'{0:"a"}', "x") == {"0": "a"}


@given(st.dictionaries(st.integers(-10**6, 10**6), st.text(max_size=10), max_size=5))
def test_unquoted_numeric_keys_read_as_their_quoted_form(table: dict[int, str]) -> None:
    fastjson = "{" + ",".join(f"{k}:{json.dumps(v)}" for k, v in table.items()) + "}"
    assert parse_json_body(fastjson.encode(), "x") == {str(k): v for k, v in table.items()}


@pytest.mark.parametrize("body", [b"\xff", b"[1]", b"not json", b'{"a":', b"[" * 50_000, b"{0:" * 50_000,
                                  b'{"a":' + b"1" * 5000 + b"}"])
def test_an_unreadable_json_body_is_a_body_error(body: bytes) -> None:
    with pytest.raises(BodyError):
        parse_json_body(body, "test")
