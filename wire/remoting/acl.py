"""RocketMQ ACL 1.0 request signatures (J-acl PlainAccessValidator, cpp ClientRPCHook): a
client puts `AccessKey`, `OnsChannel` and `Signature` in every request's extFields, where
`Signature` = Base64(HmacSHA1(secretKey, content)) and the content is the values of every
other extField, in key order, followed by the body (after any compression).

A broker leaves `_UNIQUE_KEY_QUERY` out of the content too (apache/rocketmq#1216): the Java
client adds it to QUERY_MESSAGE after signing. Keys are ordered by their UTF-8 bytes (the
C++ client's std::map); Java's TreeMap orders UTF-16 units, the same for every ASCII key a
header has. No I/O.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

__all__ = ["ACCESS_KEY", "ONS_CHANNEL", "SERVER_SKIPPED", "SIGNATURE", "UNIQUE_KEY_QUERY", "credentials",
           "sign", "sign_content", "signed_fields", "signing_content"]

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
ONS_CHANNEL = "OnsChannel"
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
SERVER_SKIPPED = frozenset({SIGNATURE, UNIQUE_KEY_QUERY})
"""What a broker leaves out of the content it checks."""


def signing_content(ext_fields: Mapping[str, str] | None, body: bytes = b"", *,
                    skip: frozenset[str] = frozenset({SIGNATURE})) -> bytes:
    """The bytes a signature covers: the values of `ext_fields` but `skip`, in key order,
    then `body`. A server passes `skip=SERVER_SKIPPED`."""
    fields = ext_fields or {}
    keys = sorted((k for k in fields if k not in skip), key=lambda k: k.encode())
    return b"".join(fields[k].encode() for k in keys) + body


def sign_content(secret: str, content: bytes) -> str:
    """Base64(HmacSHA1(secret, content)), as `Signature` carries it."""
    return base64.b64encode(hmac.new(secret.encode(), content, hashlib.sha1).digest()).decode()


def sign(secret: str, ext_fields: Mapping[str, str] | None, body: bytes = b"") -> str:
    """The `Signature` a client sends for these extFields (the others than `Signature`) and body."""
    return sign_content(secret, signing_content(ext_fields, body))


def signed_fields(ext_fields: Mapping[str, str] | None, access_key: str, secret: str, body: bytes = b"",
                  channel: str = "") -> dict[str, str]:
    """`ext_fields` as a client sends them with credentials: plus `AccessKey`, `OnsChannel`
    and the `Signature` over all of them and the body."""
    out = {**(ext_fields or {}), ACCESS_KEY: access_key, ONS_CHANNEL: channel}
    out[SIGNATURE] = sign(secret, out, body)
    return out


def credentials(ext_fields: Mapping[str, str] | None) -> tuple[str, str] | None:
    """(AccessKey, Signature) a request carries; None without an AccessKey (the C++ client
    sends an empty one when it has no credentials)."""
    fields = ext_fields or {}
    access_key = fields.get(ACCESS_KEY, "")
    if not access_key:
        return None
    return access_key, fields.get(SIGNATURE, "")
