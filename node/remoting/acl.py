"""aclEnable for RocketMQ's remoting clients: each request is signed (ACL 1.0,
wire/remoting/acl.py) and then held to the same permissions as the CBOR op it becomes.

`signed_session` checks a request's AccessKey and Signature against the account's
remoting secret (node/security/guard.py `signed_session`); a failure is SYSTEM_ERROR with
RocketMQ's remark, as a Java broker answers an AclException. The node's processor table
keeps the session of the request it runs in `CURRENT` (a context variable: each remoting
request runs in its own task, or inline in the reader before the next one starts), and
`screened` judges every CBOR request a processor builds with `Guard.screen`, so a remoting
op needs exactly what its CBOR op needs; a refusal is NO_PERMISSION (`Refused`).
`checked_messages` is the CBOR answers' message rule (Guard.check_answer) for the
remoting answers that carry stored messages, whichever processor wrote them: every record
in the body is read and its topic (and a copy's original topic) checked.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from functools import partial

import attrs

from store.record_codec import RecordKind, decode_record
from wire.protocol import Request
from wire.remoting.acl import SERVER_SKIPPED, credentials, signing_content
from wire.remoting.codes import RequestCode, ResponseCode
from wire.remoting.command import RemotingCommand

from ..security.guard import Guard, Session, peer_host
from .answers import response_code
from .channel import Finish

__all__ = ["CURRENT", "MESSAGE_CODES", "NO_CREDENTIALS", "Refused", "checked_messages", "guarded", "screened",
           "signed_session"]

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


async def guarded(guard: Guard, cmd: RemotingCommand, peer: str | None,
                  run: Callable[[], Awaitable[RemotingCommand | Finish | None]]) -> RemotingCommand | Finish | None:
    """`run` the request's processor as the account that signed it (`CURRENT`), and check
    the messages its answer shows, now or when its Finish ends; a bad signature runs nothing."""
    session = signed_session(guard, cmd, peer)
    if isinstance(session, RemotingCommand):
        CURRENT.set(None)
        return session
    CURRENT.set(session)
    result = await run()
    if not callable(result):
        return checked_messages(guard, session, cmd, result)
    finish = result

    async def checked() -> RemotingCommand | bytes | None:
        response = await finish()
        if isinstance(response, bytes):  # a fast send's answer (no messages); not taken with a guard
            return response
        return checked_messages(guard, session, cmd, response)

    return checked


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
    return attrs.evolve(request, reader=partial(guard.refusal_to_read, session),
                        publisher=partial(guard.refusal_to_publish, session))


MESSAGE_CODES = frozenset({RequestCode.PULL_MESSAGE, RequestCode.QUERY_MESSAGE, RequestCode.VIEW_MESSAGE_BY_ID})
"""Requests whose answer body holds stored messages (CommitLog records, one after another)."""


def checked_messages(guard: Guard, session: Session | None, cmd: RemotingCommand,
                     response: RemotingCommand | None) -> RemotingCommand | None:
    """`response`, or NO_PERMISSION in its place when its body shows a message the account
    may not read (rules.message_needs); a body that is not records fails closed."""
    if response is None or cmd.code not in MESSAGE_CODES or not response.body:
        return response
    if session is None:
        return cmd.response(ResponseCode.SYSTEM_ERROR, NO_CREDENTIALS)
    body, pos = response.body, 0
    while pos < len(body):
        record = decode_record(body, pos, check_crc=False, read_body=False)
        if record.kind is not RecordKind.MESSAGE or record.message is None:
            return cmd.response(ResponseCode.SYSTEM_ERROR, "the answer's messages cannot be checked; not sent")
        why = guard.refusal_to_read(session, record.message.topic, record.message.properties)
        if why is not None:
            return cmd.response(ResponseCode.NO_PERMISSION, why)
        pos += record.size
    return response
