"""The login handshake's requests and reply, shared by the node and the name server.

SCRAM-SHA-256 (RFC 5802 / RFC 7677) carried in two round trips: `auth_start` carries the
client-first message and is answered with the server-first (salt, iteration count, the
combined nonce); `auth_finish` carries the client-final (the proof) and is answered with the
server-final (the server's signature, which the client checks: each side proves it knows
the credential, and the secret itself never crosses the wire). A server with security off
answers both with `enabled: false`.
"""

from __future__ import annotations

import attrs

from .codec import STR, WireRequest, wire
from .replies import WireReply

__all__ = ["AUTH_OPS", "SCRAM_MECHANISM", "AuthFinish", "AuthReply", "AuthStart"]

SCRAM_MECHANISM = "SCRAM-SHA-256"
"""The one mechanism a login uses (the node's verifiers and the client's handshake)."""

MAX_SCRAM_MESSAGE = 1024
"""Longer than any well-formed SCRAM message of a sane user name."""


def _scram_message(v: str) -> str | None:
    if not v:
        return "must not be empty"
    if len(v) > MAX_SCRAM_MESSAGE:
        return f"must be at most {MAX_SCRAM_MESSAGE} characters, got {len(v)}"
    return None


@attrs.define(kw_only=True)
class AuthReply(WireReply):
    """The server's SCRAM message; `enabled` is false when the server does not check logins."""

    message: str = ""
    enabled: bool = True


@attrs.define(kw_only=True)
class AuthStart(WireRequest):
    OP = "auth_start"
    REPLY = AuthReply
    message: str = wire(STR, _scram_message)


@attrs.define(kw_only=True)
class AuthFinish(WireRequest):
    OP = "auth_finish"
    REPLY = AuthReply
    message: str = wire(STR, _scram_message)


AUTH_OPS: dict[str, type[WireRequest]] = {cls.OP: cls for cls in (AuthStart, AuthFinish)}
