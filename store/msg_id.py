"""Stored host addresses and the offset msgId (FORMATS.md "Message id").

A record's BORNHOST and STOREHOSTADDRESS are address bytes + an int32 port (8 bytes for
IPv4, 20 for IPv6); a msgId is the store host's bytes + the record's PHYSICALOFFSET as hex,
so decoding one gives the node and a direct read position. The record codec
(record_codec.py) and the message model (message.py, which re-exports decode_msg_id and
encode_msg_id for their many callers) use it.
"""

from __future__ import annotations

import functools
import ipaddress
import struct

from .address import AddressError, format_host_port, split_host_port

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_INT32_PORTS = range(-(2**31), 2**31)
"""A stored host's port is an int32 field: encode whatever decode_host gave."""


@functools.lru_cache(maxsize=1024)
def encode_host(host: str) -> bytes:
    """'ip:port' or '[v6]:port' → address bytes + int32 port (8 or 20 bytes)."""
    try:
        addr, port = split_host_port(host, ports=_INT32_PORTS)
    except AddressError:
        raise AddressError(f"host must be ip:port, got {host!r}") from None
    return ipaddress.ip_address(addr).packed + _I32.pack(port)


def decode_host(raw: bytes | bytearray | memoryview) -> str:
    """Address bytes + int32 port → 'ip:port' ('[v6]:port'); cached, hosts repeat."""
    return _decode_host(bytes(raw))


@functools.lru_cache(maxsize=4096)
def _decode_host(raw: bytes) -> str:
    ip = ipaddress.ip_address(raw[:-4])
    port = _I32.unpack(raw[-4:])[0]
    return format_host_port(str(ip), port)


def encode_msg_id(store_host: str, commitlog_offset: int) -> str:
    """Offset msgId: store host address + port + physical offset, upper-case hex."""
    return (encode_host(store_host) + _I64.pack(commitlog_offset)).hex().upper()


@functools.lru_cache(maxsize=64)
def msg_id_prefix(store_host: str) -> str:
    """The host part of `encode_msg_id`: the id is this + the offset as 16 hex digits."""
    return encode_host(store_host).hex().upper()


def decode_msg_id(msg_id: str) -> tuple[str, int]:
    """→ (store host 'ip:port', commitlog offset). 32 hex chars = IPv4, 56 = IPv6."""
    if len(msg_id) not in (32, 56):
        raise ValueError(f"msgId must be 32 or 56 hex characters, got {len(msg_id)}: {msg_id!r}")
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise ValueError(f"msgId is not hexadecimal: {msg_id!r}") from None
    return decode_host(raw[:-8]), _I64.unpack(raw[-8:])[0]
