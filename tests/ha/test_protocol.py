"""The HA wire codec: golden bytes (RocketMQ 4.x layout), arbitrary splits, bad values."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ha.protocol import (
    DEFAULT_BATCH_SIZE,
    HEADER_SIZE,
    REPORT_SIZE,
    ProtocolError,
    ReportDecoder,
    Transfer,
    TransferDecoder,
    encode_confirm,
    encode_heartbeat,
    encode_offer,
    encode_report,
    encode_transfer,
    encode_transfer_header,
    is_offer,
)

INT64_MAX = 2**63 - 1

offsets = st.integers(min_value=0, max_value=INT64_MAX)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    """Cut ``data`` at the given positions (taken modulo its length, any order, duplicates ok)."""
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)]


def feed_all(decoder, chunks):
    out = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    return out


# --- constants and golden bytes ---------------------------------------------------------------


def test_constants():
    assert REPORT_SIZE == 8
    assert HEADER_SIZE == 12
    assert DEFAULT_BATCH_SIZE == 32768


def test_report_golden():
    assert encode_report(0) == bytes(8)
    assert encode_report(0x0102030405060708) == bytes.fromhex("0102030405060708")
    assert encode_report(1073741824) == bytes.fromhex("0000000040000000")
    assert encode_report(INT64_MAX) == bytes.fromhex("7fffffffffffffff")


def test_transfer_golden():
    assert (
        encode_transfer(1073741824, b"abc") == bytes.fromhex("0000000040000000 00000003") + b"abc"
    )
    assert encode_transfer_header(1073741824, 3) == bytes.fromhex("000000004000000000000003")
    assert encode_transfer_header(0, DEFAULT_BATCH_SIZE) == bytes.fromhex(
        "000000000000000000008000"
    )


def test_transfer_accepts_memoryview_and_bytearray():
    data = bytearray(b"0123456789")
    expected = bytes.fromhex("0000000000000007 00000004") + b"2345"
    assert encode_transfer(7, memoryview(data)[2:6]) == expected
    assert encode_transfer(7, bytearray(b"2345")) == expected
    # a multi-byte-format memoryview still counts bytes, not items
    wide = memoryview(bytearray(8)).cast("I")
    assert encode_transfer(0, wide)[8:12] == bytes.fromhex("00000008")


def test_heartbeat_golden():
    hb = encode_heartbeat(5)
    assert len(hb) == HEADER_SIZE
    assert hb == bytes.fromhex("0000000000000005 00000000")
    assert hb.endswith(bytes.fromhex("00000000"))


def test_empty_transfer_is_a_heartbeat():
    assert encode_transfer(5, b"") == encode_heartbeat(5)
    (frame,) = TransferDecoder().feed(encode_heartbeat(5))
    assert frame == Transfer(5, b"")
    assert frame.is_heartbeat
    assert frame.end == 5


def test_transfer_properties_and_repr():
    frame = Transfer(100, b"x" * 1000)
    assert not frame.is_heartbeat
    assert frame.end == 1100
    assert "1000 bytes" in repr(frame)
    assert "xxxx" not in repr(frame)
    with pytest.raises(AttributeError):
        frame.offset = 1  # frozen


# --- round trips with arbitrary splits --------------------------------------------------------

frames_strategy = st.lists(st.tuples(offsets, st.binary(max_size=300)), max_size=20)
cuts_strategy = st.lists(st.integers(min_value=0), max_size=30)


@given(frames=frames_strategy, cuts=cuts_strategy)
def test_transfer_round_trip_any_split(frames, cuts):
    stream = b"".join(encode_transfer(off, body) for off, body in frames)
    decoder = TransferDecoder(max_body=300)
    got = feed_all(decoder, split(stream, cuts))
    assert got == [Transfer(off, body) for off, body in frames]
    assert all(isinstance(t.body, bytes) or t.body.readonly for t in got)
    assert decoder.buffered == 0


@given(frames=frames_strategy, cuts=cuts_strategy)
def test_transfer_round_trip_byte_by_byte_tail(frames, cuts):
    """Chunks as bytearray / memoryview work too, and a trailing partial frame stays buffered."""
    stream = b"".join(encode_transfer(off, body) for off, body in frames)
    tail = encode_transfer(9, b"tail")[:-1]
    chunks = split(stream + tail, cuts)
    decoder = TransferDecoder(max_body=300)
    got = []
    for i, chunk in enumerate(chunks):
        got.extend(decoder.feed(bytearray(chunk) if i % 2 else memoryview(chunk)))
    assert got == [Transfer(off, body) for off, body in frames]
    assert decoder.buffered == len(tail)
    assert decoder.feed(b"l") == [Transfer(9, b"tail")]
    assert decoder.buffered == 0


@given(reports=st.lists(offsets, max_size=50), cuts=cuts_strategy)
def test_report_round_trip_any_split(reports, cuts):
    stream = b"".join(encode_report(r) for r in reports)
    decoder = ReportDecoder()
    got = feed_all(decoder, split(stream, cuts))
    assert got == reports
    assert decoder.last == (reports[-1] if reports else None)
    assert decoder.buffered == 0


def test_report_last_keeps_newest_complete_value():
    decoder = ReportDecoder()
    assert decoder.last is None
    assert decoder.feed(encode_report(10) + encode_report(20) + encode_report(30)[:3]) == [10, 20]
    assert decoder.last == 20
    assert decoder.buffered == 3
    assert decoder.feed(b"") == []
    assert decoder.last == 20
    assert decoder.feed(encode_report(30)[3:]) == [30]
    assert decoder.last == 30
    assert decoder.buffered == 0


def test_many_frames_in_one_chunk():
    frames = [Transfer(i * 1000, bytes([i % 256]) * (i % 50)) for i in range(5000)]
    stream = b"".join(encode_transfer(t.offset, t.body) for t in frames)
    assert TransferDecoder().feed(stream) == frames


def test_full_batches_fed_in_small_pieces():
    """Frames split across many chunks: many max-size bodies, fed 1000 bytes at a time."""
    frames = [Transfer(i * DEFAULT_BATCH_SIZE, bytes([i]) * DEFAULT_BATCH_SIZE) for i in range(12)]
    stream = b"".join(encode_transfer(t.offset, t.body) for t in frames)
    decoder = TransferDecoder()
    got = feed_all(decoder, [stream[i : i + 1000] for i in range(0, len(stream), 1000)])
    assert got == frames
    assert decoder.buffered == 0


def test_body_of_exactly_max_body_is_accepted():
    body = b"\xab" * DEFAULT_BATCH_SIZE
    assert TransferDecoder().feed(encode_transfer(0, body)) == [Transfer(0, body)]
    assert TransferDecoder(max_body=3).feed(encode_transfer(1, b"abc")) == [Transfer(1, b"abc")]


# --- partial headers --------------------------------------------------------------------------


@pytest.mark.parametrize("cut", range(1, HEADER_SIZE))
def test_partial_header_waits_for_the_rest(cut):
    frame = encode_transfer(1073741824, b"abc")
    decoder = TransferDecoder()
    assert decoder.feed(frame[:cut]) == []
    assert decoder.buffered == cut
    assert decoder.feed(frame[cut:]) == [Transfer(1073741824, b"abc")]
    assert decoder.buffered == 0


def test_header_without_body_waits_for_the_body():
    decoder = TransferDecoder()
    assert decoder.feed(encode_transfer_header(42, 5)) == []
    assert decoder.buffered == HEADER_SIZE
    assert decoder.feed(b"ab") == []
    assert decoder.buffered == HEADER_SIZE + 2
    assert decoder.feed(b"cde" + encode_heartbeat(47)) == [
        Transfer(42, b"abcde"),
        Transfer(47, b""),
    ]


@pytest.mark.parametrize("cut", range(1, REPORT_SIZE))
def test_partial_report_waits_for_the_rest(cut):
    data = encode_report(0x0102030405060708)
    decoder = ReportDecoder()
    assert decoder.feed(data[:cut]) == []
    assert decoder.last is None
    assert decoder.feed(data[cut:]) == [0x0102030405060708]
    assert decoder.last == 0x0102030405060708


# --- bad values -------------------------------------------------------------------------------


def raw_header(offset: int, size: int) -> bytes:
    return offset.to_bytes(8, "big", signed=True) + size.to_bytes(4, "big", signed=True)


def test_encode_report_rejects_negative_offset():
    with pytest.raises(ProtocolError, match="-5"):
        encode_report(-5)


def test_encoders_reject_impossible_values():
    with pytest.raises(ProtocolError, match="-7"):
        encode_transfer(-7, b"x")
    with pytest.raises(ProtocolError, match="-1"):
        encode_heartbeat(-1)
    with pytest.raises(ProtocolError, match="-3"):
        encode_transfer_header(0, -3)
    with pytest.raises(ProtocolError, match=str(2**63)):
        encode_report(2**63)
    with pytest.raises(ProtocolError, match=str(2**31)):
        encode_transfer_header(0, 2**31)


def test_protocol_error_is_a_value_error():
    assert issubclass(ProtocolError, ValueError)


def test_report_decoder_rejects_negative_offset():
    decoder = ReportDecoder()
    with pytest.raises(ProtocolError, match="negative offset -5"):
        decoder.feed(encode_report(1) + (-5).to_bytes(8, "big", signed=True))
    # the stream cannot be resynchronised: the decoder stays failed
    with pytest.raises(ProtocolError):
        decoder.feed(encode_report(2))


def test_transfer_decoder_rejects_negative_offset():
    decoder = TransferDecoder()
    with pytest.raises(ProtocolError, match="negative offset -5 in master header"):
        decoder.feed(raw_header(-5, 0))
    with pytest.raises(ProtocolError):
        decoder.feed(encode_heartbeat(0))


def test_transfer_decoder_rejects_negative_size():
    with pytest.raises(ProtocolError, match="-12"):
        TransferDecoder().feed(raw_header(0, -12))


def test_transfer_decoder_rejects_oversized_body_before_it_arrives():
    with pytest.raises(ProtocolError, match="body size 40000 exceeds the batch limit 32768"):
        TransferDecoder().feed(raw_header(0, 40000))
    with pytest.raises(ProtocolError, match="body size 4 exceeds the batch limit 3"):
        TransferDecoder(max_body=3).feed(encode_transfer(0, b"abcd")[:HEADER_SIZE])


def test_bad_header_after_good_frames_in_one_chunk():
    decoder = TransferDecoder()
    with pytest.raises(ProtocolError, match="-9"):
        decoder.feed(encode_transfer(0, b"ok") + raw_header(-9, 0))


@pytest.mark.parametrize("cut", range(1, HEADER_SIZE))
def test_bad_header_split_is_detected_once_complete(cut):
    bad = raw_header(0, 40000)
    decoder = TransferDecoder()
    assert decoder.feed(bad[:cut]) == []
    with pytest.raises(ProtocolError, match="40000"):
        decoder.feed(bad[cut:])


def test_max_body_must_be_sane():
    with pytest.raises(ValueError, match="-1"):
        TransferDecoder(max_body=-1)


def test_frames_do_not_change_when_the_fed_buffer_is_reused():
    """A frame may be a view of the chunk it came in; a mutable chunk is copied first."""
    chunk = bytearray(encode_transfer(0, b"abc"))
    (frame,) = TransferDecoder().feed(chunk)
    chunk[HEADER_SIZE:] = b"xyz"
    assert frame.body == b"abc"


# --- tidemq's confirm-offset extension ---------------------------------------------------------


def test_offer_is_three_plain_reports_and_confirm_golden():
    """The offer is 4.x reports (E, 0, E): a 4.x master takes them as acks. A confirm frame
    is a header with offset -1 and size 8, then the offset."""
    assert encode_offer(0x1234) == encode_report(0x1234) + encode_report(0) + encode_report(0x1234)
    assert ReportDecoder().feed(encode_offer(7)) == [7, 0, 7]
    assert encode_confirm(0x40000000) == bytes.fromhex("ffffffffffffffff 00000008 0000000040000000")
    assert is_offer(7, 0) and not is_offer(0, 0) and not is_offer(-1, 0) and not is_offer(7, 3)
    with pytest.raises(ProtocolError):
        encode_offer(0)


def test_confirm_frames_only_after_the_offer():
    """A slave that did not offer (and a 4.x slave never does) refuses a confirm frame as a
    negative offset; one that offered takes the newest confirm offset and no frame for it."""
    with pytest.raises(ProtocolError, match="negative offset -1"):
        TransferDecoder().feed(encode_confirm(5))
    decoder = TransferDecoder()
    decoder.extension = True
    assert decoder.confirm is None
    assert decoder.feed(encode_transfer(0, b"ab") + encode_confirm(2)) == [Transfer(0, b"ab")]
    assert decoder.confirm == 2
    assert decoder.feed(encode_confirm(1)) == [] and decoder.confirm == 2  # never goes back


@given(offsets, st.lists(st.integers(min_value=0, max_value=64), max_size=6))
def test_confirm_frame_any_split(confirm, cuts):
    data = encode_transfer(10, b"xyz") + encode_confirm(confirm) + encode_heartbeat(13)
    decoder = TransferDecoder()
    decoder.extension = True
    frames = feed_all(decoder, split(data, cuts))
    assert [(f.offset, bytes(f.body)) for f in frames] == [(10, b"xyz"), (13, b"")]
    assert decoder.confirm == confirm


def test_confirm_frame_of_the_wrong_size_is_refused():
    decoder = TransferDecoder()
    decoder.extension = True
    with pytest.raises(ProtocolError, match="confirm frame of 4 bytes"):
        decoder.feed(raw_header(-1, 4) + bytes(4))
