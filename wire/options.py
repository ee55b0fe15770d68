"""`ConnectOptions`: how a client reaches its peers (timeouts, frame cap, login, TLS and the
network seam) as one frozen value, which Connection, ConnectionPool and the cluster client
classes hand down instead of repeating six keywords each.

The public entry points (`connect`, `Connection.open`, `ConnectionPool`, Producer,
PullConsumer, Admin, Consumer) take `options=` and, for the callers that predate it, the
same fields as keywords (`ConnectKeywords`), which override what `options` says.
"""

from __future__ import annotations

import ssl
from typing import TypedDict, Unpack

import attrs

from ha.net import TCP, Network

from .credentials import Credentials

__all__ = ["DEFAULT_MAX_FRAME_SIZE", "ConnectKeywords", "ConnectOptions"]

DEFAULT_MAX_FRAME_SIZE = 8 * 1024 * 1024
"""Largest frame a client sends: the node's default maxFrameSize."""


class ConnectKeywords(TypedDict, total=False):
    """ConnectOptions' fields as keyword arguments (each optional)."""

    connect_timeout: float
    request_timeout: float
    max_frame_size: int
    credentials: Credentials | None
    tls: ssl.SSLContext | None
    net: Network


@attrs.frozen
class ConnectOptions:
    """How to connect. `connect_timeout` bounds the TCP connect, the TLS handshake and the
    login; `request_timeout` is a request's default timeout; `max_frame_size` caps the
    frames sent. `credentials` None: the process's or the environment's
    (wire/credentials.py); `tls` None: the process's or the environment's context
    (wire/tls.py), else plaintext. `net`: where peers are reached (ha/net.py): TCP, or a
    simulated network."""

    connect_timeout: float = 5.0
    request_timeout: float = 10.0
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    credentials: Credentials | None = None
    tls: ssl.SSLContext | None = None
    net: Network = TCP

    def but(self, **changes: Unpack[ConnectKeywords]) -> ConnectOptions:
        """These options with `changes` (the same object when there are none)."""
        return attrs.evolve(self, **changes) if changes else self

    @classmethod
    def of(cls, options: ConnectOptions | None, keywords: ConnectKeywords,
           defaults: ConnectOptions | None = None) -> ConnectOptions:
        """What an entry point taking `options=` and `**keywords` connects with: `options`
        (else its own `defaults`, else the class defaults) overridden by `keywords`."""
        base = options if options is not None else defaults if defaults is not None else cls()
        return base.but(**keywords)
