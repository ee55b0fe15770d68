"""aclEnable for RocketMQ's remoting clients: each request is signed (ACL 1.0,
wire/remoting/acl.py) and then held to the same permissions as the CBOR op it becomes.

`signed_session` checks a request's AccessKey and Signature against the account's
remoting secret (node/security/guard.py `signed_session`); a failure is SYSTEM_ERROR with
RocketMQ's remark, as a Java broker answers an AclException. The node's processor table
keeps the session of the request it runs in `CURRENT` (a context variable: each remoting
request runs in its own task, or inline in the reader before the next one starts), and
`screened` judges every CBOR request a processor builds with `Guard.screen`, so a remoting
op needs exactly what its CBOR op needs; a refusal is NO_PERMISSION (`Refused`).
"""

from __future__ import annotations

import contextvars
from functools import partial

import attrs

from wire.protocol import Request
from wire.remoting.acl import SERVER_SKIPPED, credentials, signing_content
from wire.remoting.codes import ResponseCode
from wire.remoting.command import RemotingCommand

from ..security.guard import Guard, Session, peer_host
from .answers import response_code

__all__ = ["CURRENT", "NO_CREDENTIALS", "Refused", "screened", "signed_session"]

NO_CREDENTIALS = "No accessKey is configured"
"""RocketMQ's remark for a request without an AccessKey on a broker with aclEnable."""

CURRENT: contextvars.ContextVar[Session | None] = contextvars.ContextVar("remoting_session", default=None)
"""The session of the remoting request this task runs (set by the processor table)."""


class Refused(Exception):
    """A request its account may not make: the response code and remark to answer with."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


def signed_session(guard: Guard, cmd: RemotingCommand, peer: str | None) -> Session | RemotingCommand:
    """The session a signed request runs as, or the SYSTEM_ERROR that refuses it."""
    creds = credentials(cmd.ext_fields)
    if creds is None:
        guard.refused += 1
        return cmd.response(ResponseCode.SYSTEM_ERROR, NO_CREDENTIALS)
    content = signing_content(cmd.ext_fields, cmd.body, skip=SERVER_SKIPPED)
    session = guard.signed_session(peer_host(peer), *creds, content)
    if isinstance(session, str):
        return cmd.response(ResponseCode.SYSTEM_ERROR, session)
    return session


def screened(guard: Guard, session: Session | None, request: Request) -> Request:
    """`request` as the op may run it for `session` (its reader set, so an op that copies a
    stored message asks first), or Refused."""
    if session is None:  # a request built outside a remoting request's task: fail closed
        raise Refused(ResponseCode.SYSTEM_ERROR, NO_CREDENTIALS)
    refusal = guard.screen(session, request)
    if refusal is not None:
        raise Refused(response_code(refusal["status"]), refusal.get("error") or refusal["status"])
    return attrs.evolve(request, reader=partial(guard.refusal_to_read, session))
