"""The remoting send fast path's compiled reader (wire/_remoting_codec.pyx) against its
reference (wire/remoting/plain_send.py: decode_payload, then plain_send), in process.

Any frame, however odd or broken: the compiled reader gives the reference's reading or
None (the frame then takes the reference). Headers in the shapes clients write (the C++
client's, a Java client's V2, json.dumps with or without ASCII escapes, sorted or not):
it gives exactly the reference's reading, None included, so the common send never leaves
the compiled path for want of a case."""

from __future__ import annotations

import importlib
import json
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.accel import forced_pure
from tests.examples import examples
from wire.remoting import plain_send
from wire.remoting.command import (
    MAX_FRAME_SIZE,
    CommandDecoder,
    RemotingCommand,
    RemotingFrameError,
)
from wire.remoting.plain_send import (
    RemotingSend,
    plain_splitter,
    read_plain_send,
    reference_read_plain_send,
)

needs_compiled = pytest.mark.skipif(plain_send.COMPILED is None,
                                    reason="wire._remoting_codec not loaded (TIDEMQ_PURE=1 or not built)")
SETTINGS = settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
TOPICS = {"TopicA", "Topic_B", "主题"}
V2 = {"producerGroup": "a", "topic": "b", "defaultTopic": "c", "defaultTopicQueueNums": "d", "queueId": "e",
      "sysFlag": "f", "bornTimestamp": "g", "flag": "h", "properties": "i", "reconsumeTimes": "j",
      "unitMode": "k", "maxReconsumeTimes": "l", "batch": "m", "bname": "n"}
BMP = st.characters(max_codepoint=0xFFFF, exclude_categories=("Cs",))


def test_the_remoting_codec_is_built() -> None:
    """`pip install` builds wire._remoting_codec on a machine with a C compiler (this one): a
    build that fell back to the reference would lose the compiled remoting send path."""
    built = importlib.import_module("wire._remoting_codec")  # ImportError: it was not built
    assert plain_send.COMPILED is (None if forced_pure() else built)


def _payload(header: bytes, body: bytes) -> bytes:
    """A frame without its length prefix: the header length word, the header, the body."""
    return struct.pack(">I", len(header)) + header + body


def _both(payload: bytes) -> tuple[RemotingSend | None, RemotingSend | None]:
    """(compiled, reference) readings; the compiled one from inside a larger buffer, as the
    decoder hands it over."""
    buf = bytearray(b"\x00" * 7 + payload + b"\xff" * 3)
    try:
        reference = reference_read_plain_send(payload, TOPICS)
    except Exception:  # a frame whose framing is lost (RemotingFrameError): no reading either way
        reference = None
    return read_plain_send(buf, 7, 7 + len(payload), TOPICS), reference


def _numberish(clean: bool) -> st.SearchStrategy[Any]:
    if clean:  # mostly what clients write, sometimes a number the reference does not take plain
        good = st.integers(0, 2**31 - 1)
        odd = st.one_of(st.integers(2**31, 10**19), st.integers(-5, -1), st.sampled_from(["", "07", "-3"]))
        return st.one_of(*[good, good.map(str)] * 6, odd)
    return st.one_of(st.integers(0, 2**31 + 5), st.integers(-5, 5), st.integers(0, 10**19),
                     st.integers(0, 2**40).map(str), st.sampled_from(["", "07", "1_0", " 5", "٥", "-3", "+4", "1.5"]))


PROP_NAMES = st.sampled_from(["UNIQ_KEY", "WAIT", "TAGS", "KEYS", "TRAN_MSG", "DELAY", "user", "k", ""])
PROP_VALUES = st.one_of(st.sampled_from(["true", "false", "FALSE", "a b  c", "x\x01y", "", "tag", "3"]),
                        st.text(BMP, max_size=12))


@st.composite
def properties(draw: st.DrawFn, clean: bool) -> str:
    pairs = draw(st.lists(st.tuples(PROP_NAMES, PROP_VALUES), max_size=6,
                          unique_by=(lambda p: p[0]) if clean else None))
    if clean:
        pairs = [(k, v.replace("\x01", "")) for k, v in pairs if k not in ("TRAN_MSG", "DELAY") or draw(st.booleans())]
    text = "\x02".join(f"{k}\x01{v}" for k, v in pairs)
    return text + draw(st.sampled_from(["", "\x02"]))


@st.composite
def headers(draw: st.DrawFn, clean: bool) -> tuple[bytes, bytes]:
    """A send's header and body: `clean` in the shapes clients write (strings and integers,
    each key once, BMP text), else with every kind of oddity the reference reads."""
    code = draw(st.sampled_from([10, 310]) if clean else st.sampled_from([10, 310, 10, 11, 320, 36]))
    ext: dict[str, Any] = {}
    if draw(st.booleans()) or clean:
        ext["producerGroup"] = draw(st.sampled_from(["pg", "", "组"]) if clean else st.one_of(st.text(max_size=5),
                                                                                            st.integers()))
    topic = draw(st.sampled_from(sorted(TOPICS) * 4 + ["Other", ""]))
    ext["topic"] = topic if clean else draw(st.one_of(st.just(topic), st.integers(0, 9), st.none()))
    for name in ("queueId", "sysFlag", "bornTimestamp", "flag", "defaultTopicQueueNums", "reconsumeTimes",
                 "maxReconsumeTimes"):
        if draw(st.integers(0, 4)) or (clean and name == "queueId"):
            ext[name] = draw(_numberish(clean) if name != "queueId" or not clean
                             else st.integers(0, 2**31 - 1).map(str) | st.integers(0, 2**31 - 1))
    if draw(st.booleans()):
        ext["batch"] = draw(st.sampled_from(["0", "1", "false", "TRUE", "x", 0, 1] if not clean else ["0", "false", 0]))
    if draw(st.integers(0, 5)):
        ext["properties"] = draw(properties(clean))
    for name in ("defaultTopic", "unitMode", "bname", "AccessKey"):
        if draw(st.booleans()):
            ext[name] = draw(st.one_of(st.text(BMP, max_size=8), st.integers(-2**70, 2**70)))
    if not clean and draw(st.integers(0, 9)) == 0:
        ext[draw(st.sampled_from(list(ext) or ["x"]))] = draw(st.one_of(st.booleans(), st.floats(), st.none(),
                                                                         st.lists(st.integers(), max_size=2)))
    if code == 310:
        ext = {V2.get(k, k): v for k, v in ext.items()}
    header: dict[str, Any] = {"code": code, "extFields": ext, "flag": draw(st.sampled_from([0, 0, 2] if clean else
                                                                                         [0, 1, 2, 3, 2**31])),
                              "language": "CPP", "opaque": draw(st.integers(0, 2**31 - 1)), "version": 63}
    if draw(st.booleans()):
        header["remark"] = draw(st.one_of(st.none(), st.text(BMP, max_size=5)))
    if draw(st.booleans()):
        header["serializeTypeCurrentRPC"] = "JSON"
    if not clean and draw(st.integers(0, 7)) == 0:
        header[draw(st.sampled_from(["code", "extFields", "other", "opaque"]))] = draw(
            st.one_of(st.floats(), st.booleans(), st.none(), st.text(max_size=3)))
    items = list(header.items())
    if not draw(st.booleans()):
        items = draw(st.permutations(items))
    raw = json.dumps(dict(items), ensure_ascii=draw(st.booleans()) if clean else draw(st.booleans()),
                     separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])))
    if draw(st.booleans()):
        raw += "\n"
    body = draw(st.binary(min_size=0 if not clean else 1, max_size=20))
    return raw.encode(), body


@needs_compiled
@SETTINGS
@given(frame=headers(clean=True))
def test_in_the_shapes_clients_write_the_compiled_reading_is_the_reference(frame: tuple[bytes, bytes]) -> None:
    compiled, reference = _both(_payload(*frame))
    assert compiled == reference


@needs_compiled
@SETTINGS
@given(frame=headers(clean=False), cut=st.integers(0, 3), flip=st.integers(0, 10_000), byte=st.integers(0, 255))
def test_any_frame_is_read_as_the_reference_reads_it_or_left_to_the_reference(
        frame: tuple[bytes, bytes], cut: int, flip: int, byte: int) -> None:
    payload = bytearray(_payload(*frame))
    if cut == 1 and len(payload) > 4:  # a mangled byte anywhere
        payload[flip % len(payload)] = byte
    elif cut == 2:  # a header length that lies
        struct.pack_into(">I", payload, 0, (flip % (len(payload) + 8)))
    compiled, reference = _both(bytes(payload))
    assert compiled is None or compiled == reference


@needs_compiled
def test_the_cpp_clients_send_is_read_compiled() -> None:
    """The C++ client 1.2.3's SEND_MESSAGE, as bench/lean.py writes it, control characters
    escaped as its JSON writer escapes them."""
    props = "UNIQ_KEY\x010A0B0C\x02WAIT\x01true\x02TAGS\x01bench\x02KEYS\x01k1 k2\x02color\x01red\x02"
    header = {"code": 10, "flag": 0, "language": "CPP", "opaque": 7, "remark": "", "version": 63,
              "extFields": {"AccessKey": "", "OnsChannel": "", "Signature": "", "batch": "0",
                            "bornTimestamp": "1700000000000", "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
                            "flag": 0, "producerGroup": "pg", "properties": props, "queueId": 3,
                            "reconsumeTimes": "0", "sysFlag": 0, "topic": "TopicA", "unitMode": "0"}}
    raw = (json.dumps(header, sort_keys=True, separators=(",", ":")) + "\n").encode()
    assert b"\\u0001" in raw
    compiled, reference = _both(_payload(raw, b"hello"))
    assert compiled is not None and compiled == reference
    assert (compiled.topic, compiled.queue_id, compiled.born_timestamp, compiled.tags, compiled.keys,
            compiled.properties, compiled.wait, compiled.body, compiled.oneway) == (
        "TopicA", 3, 1700000000000, "bench", ("k1", "k2"), {"UNIQ_KEY": "0A0B0C", "color": "red"}, True, b"hello",
        False)
    assert compiled.command().ext_fields == reference.command().ext_fields if reference else False


@needs_compiled
@SETTINGS
@given(frames=st.lists(st.one_of(headers(clean=True), headers(clean=False)), min_size=1, max_size=6),
       cuts=st.lists(st.integers(1, 400), max_size=8), oversized=st.booleans())
def test_the_compiled_splitter_gives_what_the_decoder_gives(frames: list[tuple[bytes, bytes]], cuts: list[int],
                                                            oversized: bool) -> None:
    """A stream of frames in any chunking: the decoder with the compiled splitter gives the
    same commands as without it, a send it read as the reference reads that send, and the
    same error where a frame is over the limit."""
    stream = b"".join(len(p).to_bytes(4, "big") + p for p in (_payload(*f) for f in frames))
    limit = MAX_FRAME_SIZE
    if oversized:
        limit = max(len(_payload(*f)) for f in frames) - 1
    splitter = plain_splitter(TOPICS)
    assert splitter is not None
    plain, compiled = CommandDecoder(limit), CommandDecoder(limit, splitter)
    chunks, pos = [], 0
    for cut in cuts + [len(stream)]:
        chunks.append(stream[pos:pos + cut])
        pos += cut
    chunks.append(stream[pos:])

    def run(decoder: CommandDecoder) -> tuple[list[Any], str | None]:
        out: list[Any] = []
        try:
            for chunk in chunks:
                out.extend(decoder.feed(chunk))
        except RemotingFrameError as e:
            return out, e.reason
        return out, None

    expected, expected_error = run(plain)
    got, error = run(compiled)
    assert error == expected_error
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        if isinstance(g, RemotingSend):
            assert isinstance(e, RemotingCommand)
            assert g == reference_read_plain_send(_payload(g.header, g.body), TOPICS)
            assert g.command() == e
        else:
            assert g == e
