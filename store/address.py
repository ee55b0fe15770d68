"""`host:port` addresses: the one parser for every layer.

RocketMQ writes addresses as `host:port` (`brokerIP1:listenPort`, `haMasterAddress`,
`masterAddr`), lists of them separated by `;` (`namesrvAddr`), and IPv6 hosts in brackets
(`[::1]:10911`, the form the CommitLog's STOREHOST decodes to). The store needs this for
its store host, so it lives here, in the lowest layer; ha/, node/ and cluster/ use it for
config keys, connect targets and name-server registrations. Errors are `AddressError`
(a ValueError) whose text names the bad value; callers prefix the key or field it came from.
"""

from __future__ import annotations

__all__ = ["PORTS", "AddressError", "format_host_port", "parse_address_list", "split_host_port"]

PORTS = range(1, 65536)
"""Ports a peer can listen on."""


class AddressError(ValueError):
    """A malformed `host:port` (or list of them); the message quotes the value."""


def split_host_port(address: str, *, ports: range = PORTS) -> tuple[str, int]:
    """`"host:port"` or `"[v6]:port"` → `(host, port)`, the host without brackets.

    Surrounding whitespace is ignored. The port must be in `ports`: 1..65535 for a peer;
    the CommitLog codec passes the int32 range, since a record's born/store host holds
    whatever port was written. An IPv6 host must be bracketed: `::1:80` is ambiguous.
    """
    host, sep, port = address.strip().rpartition(":")
    digits = port[1:] if port.startswith("-") else port
    if not sep or not host or not (digits.isascii() and digits.isdigit()) or int(port) not in ports:
        raise AddressError(f"must be host:port, got {address!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if not host:
            raise AddressError(f"must be host:port, got {address!r}")
    elif ":" in host or "[" in host or "]" in host:
        raise AddressError(f"must be host:port with an IPv6 host in brackets ([::1]:port), got {address!r}")
    return host, int(port)


def format_host_port(host: str, port: int) -> str:
    """`(host, port)` → `"host:port"`, an IPv6 host in brackets (the inverse of split)."""
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


def parse_address_list(value: str) -> list[str]:
    """`"a:1;b:2"` (RocketMQ's namesrvAddr form) → `["a:1", "b:2"]`, each checked and stripped.

    Empty entries (`"a:1;"`, spaces) are skipped, so the result may be empty; an
    AddressError quotes the whole value and, in a longer list, the bad entry.
    """
    out = []
    for part in value.split(";"):
        part = part.strip()
        if not part:
            continue
        try:
            split_host_port(part)
        except AddressError:
            entry = "" if part == value.strip() else f" (bad entry {part!r})"
            raise AddressError(f"must be host:port[;host:port...], got {value!r}{entry}") from None
        out.append(part)
    return out
