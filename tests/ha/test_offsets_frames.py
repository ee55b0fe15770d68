"""The HA extension's consumer-offset frames: golden bytes, round trips in any chunking,
the split of a large table, acks, and bad frames (ha/protocol.py, docs/formats.md)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ha.protocol import (
    HEADER_SIZE,
    OFFSETS_MARK,
    OFFSETS_MORE,
    OFFSETS_REPLACE,
    OffsetCommit,
    OffsetsBatch,
    ProtocolError,
    ReportDecoder,
    Transfer,
    TransferDecoder,
    decode_offsets_body,
    encode_confirm,
    encode_offsets,
    encode_offsets_ack,
    encode_report,
    encode_transfer,
)

names = st.text(min_size=1, max_size=40)
commits = st.builds(OffsetCommit, names, names, st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1))


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)]


def extended() -> TransferDecoder:
    decoder = TransferDecoder()
    decoder.extension = True  # the slave offered (ha/slave.py sets it with the offer)
    return decoder


def test_offsets_frame_golden():
    """Header (-2, body size), then seq, flags, count and each entry's queue id, offset and
    length-prefixed UTF-8 group and topic."""
    data = encode_offsets(7, [OffsetCommit("G", "T", 3, 17)], replace=True)
    assert data == bytes.fromhex(
        "fffffffffffffffe 0000001f"  # OFFSETS_MARK, 31 body bytes
        "0000000000000007 01 00000001"  # seq 7, REPLACE, 1 entry
        "00000003 0000000000000011 0001 47 0001 54"  # queue 3, offset 17, "G", "T"
    )
    assert encode_offsets_ack(7) == bytes.fromhex("fffffffffffffff9")  # a report of -7


@given(st.lists(commits, max_size=30), st.sampled_from([(False, False), (True, False), (True, True)]),
       st.integers(1, 2**40), st.lists(st.integers(0, 10_000)))
def test_offsets_round_trip_any_split_between_transfers(entries, kind, seq, cuts):
    """Offsets frames between transfers, cut anywhere: the transfers come out as sent and
    the batch whole, with its sequence number and kind (commits, a table, a file's table)."""
    replace, raise_only = kind
    data = (encode_transfer(0, b"abc") + encode_offsets(seq, entries, replace=replace, raise_only=raise_only)
            + encode_transfer(3, b"de"))
    decoder = extended()
    frames = [f for chunk in split(data, cuts) for f in decoder.feed(chunk)]
    assert frames == [Transfer(0, b"abc"), Transfer(3, b"de")]
    assert decoder.take_offsets() == [OffsetsBatch(seq, replace, tuple(entries), raise_only=raise_only)]
    assert decoder.take_offsets() == []


@given(st.lists(commits, min_size=1, max_size=60), st.integers(400, 1200))
def test_a_large_table_is_split_and_delivered_once_complete(entries, max_body):
    """A table larger than one frame goes out in frames flagged MORE but the last; the
    decoder hands over the batch only after the last frame (a slave never takes half a table)."""
    data = encode_offsets(5, entries, replace=True, max_body=max_body)
    decoder = extended()
    pos, frames = 0, 0
    while pos < len(data):
        size = int.from_bytes(data[pos + 8 : pos + 12], "big")
        assert 0 < size <= max_body
        frames += 1
        decoder.feed(data[pos : pos + HEADER_SIZE + size])
        pos += HEADER_SIZE + size
        if pos < len(data):
            assert decoder.offsets == []
    assert decoder.take_offsets() == [OffsetsBatch(5, True, tuple(entries))]
    seq, flags, _ = decode_offsets_body(data[HEADER_SIZE : HEADER_SIZE + int.from_bytes(data[8:12], "big")])
    assert seq == 5 and flags & OFFSETS_REPLACE and bool(flags & OFFSETS_MORE) == (frames > 1)


def test_empty_table_is_one_frame():
    decoder = extended()
    decoder.feed(encode_offsets(1, [], replace=True))
    assert decoder.take_offsets() == [OffsetsBatch(1, True, ())]


def test_offsets_frames_only_after_the_offer():
    """A slave that did not offer (a 4.x slave never does) refuses an offsets frame as a
    negative offset, exactly as it refuses a confirm frame."""
    with pytest.raises(ProtocolError, match="negative offset -2"):
        TransferDecoder().feed(encode_offsets(1, [OffsetCommit("G", "T", 0, 1)], replace=False))


@pytest.mark.parametrize("body, error", [
    (b"\x00" * 12, "offsets frame of 12 bytes"),
    (bytes.fromhex("0000000000000000 00 00000000"), "sequence number 0"),
    (bytes.fromhex("0000000000000001 08 00000000"), "unknown flags"),
    (bytes.fromhex("0000000000000001 04 00000000"), "RAISE without REPLACE"),
    (bytes.fromhex("0000000000000001 00 00000001 00000000"), "malformed"),
    (bytes.fromhex("0000000000000001 00 00000000 00"), "1 byte"),
    (bytes.fromhex("0000000000000001 00 00000001 00000000 ffffffffffffffff 0001 47 0001 54"), "negative committed"),
    (bytes.fromhex("0000000000000001 00 00000001 00000000 0000000000000001 0001 ff 0001 54"), "malformed"),
    (bytes.fromhex("0000000000000001 00 00000001 00000000 0000000000000001 0001 47 0009 54"), "runs past"),
])
def test_bad_offsets_frames_are_protocol_errors(body, error):
    """A malformed frame closes the connection (the decoder fails), and takes nothing."""
    decoder = extended()
    frame = OFFSETS_MARK.to_bytes(8, "big", signed=True) + len(body).to_bytes(4, "big") + body
    with pytest.raises(ProtocolError, match=error):
        decoder.feed(frame)
    assert decoder.take_offsets() == []
    with pytest.raises(ProtocolError, match="already failed"):
        decoder.feed(b"")


def test_a_frame_of_another_batch_inside_a_split_one_is_refused():
    first = encode_offsets(3, [OffsetCommit("G", "T", q, q) for q in range(20)], replace=True, max_body=100)
    cut = HEADER_SIZE + int.from_bytes(first[8:12], "big")  # the first frame only (flagged MORE)
    decoder = extended()
    decoder.feed(first[:cut])
    with pytest.raises(ProtocolError, match="inside batch 3"):
        decoder.feed(encode_offsets(4, [OffsetCommit("G", "T", 0, 1)], replace=False))


def test_encoders_reject_impossible_values():
    with pytest.raises(ProtocolError):
        encode_offsets(0, [], replace=False)
    with pytest.raises(ProtocolError):
        encode_offsets(1, [OffsetCommit("G", "T", 0, -1)], replace=False)
    with pytest.raises(ProtocolError):
        encode_offsets(1, [OffsetCommit("G" * 70_000, "T", 0, 1)], replace=False)
    with pytest.raises(ProtocolError, match="whole table"):
        encode_offsets(1, [], replace=False, raise_only=True)
    with pytest.raises(ProtocolError, match="does not fit"):
        encode_offsets(1, [OffsetCommit("G" * 100, "T", 0, 1)], replace=False, max_body=64)
    with pytest.raises(ProtocolError):
        encode_offsets_ack(0)


def test_offsets_acks_only_once_offsets_were_sent():
    """A negative report is a protocol error until the master sent offsets (a 4.x master
    never does, so never reads one); then it comes through as -seq, between plain reports."""
    with pytest.raises(ProtocolError, match="negative offset -3"):
        ReportDecoder().feed(encode_offsets_ack(3))
    decoder = ReportDecoder()
    decoder.offsets_acks = True
    assert decoder.feed(encode_report(10) + encode_offsets_ack(3) + encode_report(12)) == [10, -3, 12]


def test_confirm_and_offsets_frames_mix():
    decoder = extended()
    decoder.feed(encode_confirm(9) + encode_offsets(2, [OffsetCommit("G", "T", 1, 5)], replace=False))
    assert decoder.confirm == 9
    assert decoder.take_offsets() == [OffsetsBatch(2, False, (OffsetCommit("G", "T", 1, 5),))]
