"""store.address: the one host:port parser (single addresses, IPv6 in brackets, `;` lists)."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store.address import AddressError, format_host_port, parse_address_list, split_host_port
from store.msg_id import decode_host, encode_host


@given(ip=st.ip_addresses(), port=st.integers(1, 65535))
def test_format_then_split_round_trips(ip, port):
    text = format_host_port(str(ip), port)
    assert text.startswith("[") == (ip.version == 6)
    host, got_port = split_host_port(text)
    assert (ipaddress.ip_address(host), got_port) == (ip, port)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:10911", ("127.0.0.1", 10911)),
        ("  node-a.local:1 ", ("node-a.local", 1)),
        ("[::1]:65535", ("::1", 65535)),
        ("[fe80::1]:80", ("fe80::1", 80)),
    ],
)
def test_split_accepts(text, expected):
    assert split_host_port(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("127.0.0.1", "must be host:port"),
        (":10911", "must be host:port"),
        ("host:", "must be host:port"),
        ("host:port", "must be host:port"),
        ("host:0", "must be host:port"),
        ("host:65536", "must be host:port"),
        ("host:-1", "must be host:port"),
        ("host:١٢", "must be host:port"),  # non-ASCII digits are not a port
        ("[]:80", "must be host:port"),
        ("::1:80", "IPv6 host in brackets"),
        ("[::1:80", "IPv6 host in brackets"),
    ],
)
def test_split_rejects_naming_the_value(text, reason):
    with pytest.raises(AddressError, match=reason) as info:
        split_host_port(text)
    assert repr(text) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_the_port_range_is_the_callers():
    assert split_host_port("10.0.0.1:0", ports=range(0, 65536)) == ("10.0.0.1", 0)
    with pytest.raises(AddressError):
        split_host_port("10.0.0.1:0")
    int32 = range(-(2**31), 2**31)
    assert split_host_port("0.0.0.0:16788127", ports=int32) == ("0.0.0.0", 16788127)
    assert split_host_port("[::1]:-5", ports=int32) == ("::1", -5)
    with pytest.raises(AddressError):
        split_host_port("h:--5", ports=int32)


def test_format_keeps_an_already_bracketed_host():
    assert format_host_port("[::1]", 5) == "[::1]:5"
    assert format_host_port("h", 5) == "h:5"


def test_list_splits_strips_and_skips_empty_entries():
    assert parse_address_list(" a:1 ; [::1]:2;;b:3; ") == ["a:1", "[::1]:2", "b:3"]
    assert parse_address_list("") == []
    assert parse_address_list(" ; ") == []


def test_list_error_names_the_value_and_the_bad_entry():
    with pytest.raises(AddressError) as info:
        parse_address_list("a:1;b;c:3")
    assert str(info.value) == "must be host:port[;host:port...], got 'a:1;b;c:3' (bad entry 'b')"
    with pytest.raises(AddressError) as info:
        parse_address_list("127.0.0.1")
    assert str(info.value) == "must be host:port[;host:port...], got '127.0.0.1'"


@given(ip=st.ip_addresses(), port=st.integers(-(2**31), 2**31 - 1))
def test_the_record_codec_encodes_any_host_it_decodes(ip, port):
    """A CommitLog record's host is 4 or 16 address bytes and an int32 port: a damaged or
    foreign record may hold any port, and its msgId must still be computable."""
    raw = ip.packed + port.to_bytes(4, "big", signed=True)
    assert encode_host(decode_host(raw)) == raw
