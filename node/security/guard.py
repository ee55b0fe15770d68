"""The gate in front of a server's ops: logins (SCRAM-SHA-256), permissions, counters.

One `Guard` per server (the node's client port, the name server) and one `Session` per
connection. `screen(session, request)` answers the login ops itself and refuses any other
request its account may not make; `check_answer` refuses any answer that carries a message
the account may not read (rules.message_needs: its topic, and a copy's original topic), and
`refusal_to_read` is the same rule for an op that copies a stored message before it writes
(the server hands it to the op as `Request.reader`). A refusal is a
NO_PERMISSION response that names the op and what it needed, never a secret, and the
request is not run. No I/O except re-reading the ACL file when it changed (checked at most
once a second, on the request path: a stat), so a revoked grant applies to open
connections too; a login that names an account the loaded file lacks checks at once, so an
account just added (`tidemq acl add-user`) logs in at once rather than after a second of
failed logins. A file that no longer parses is logged and the last good one is kept.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from store.address import AddressError, split_host_port
from store.properties import PROPERTY_REAL_TOPIC, PROPERTY_RETRY_TOPIC
from wire.protocol.auth import AUTH_OPS, AuthReply
from wire.protocol.codec import Request, Status, error_response
from wire.remoting.acl import sign_content

from .acl import (
    SCRAM_ITERATIONS,
    SCRAM_MECHANISM,
    Account,
    Acl,
    AclError,
    Perm,
    files_stamp,
    load_acl,
    perm_text,
)
from .rules import message_needs, needs, topic_need

log = logging.getLogger("tidemq.security")

__all__ = ["AUTH_FAILED", "Guard", "Session"]

AUTH_FAILED = "authentication failed (unknown account, wrong secret, or not allowed from this address)"
"""One text for every failed login, so a refusal does not tell which part was wrong."""
MAX_FAILURES = 10
"""Failed logins one address may make per FAILURE_WINDOW_S before its logins are refused."""
FAILURE_WINDOW_S = 60.0
RELOAD_CHECK_S = 1.0
MAX_TRACKED_HOSTS = 10_000
"""Addresses with recent failures kept before those outside the window are dropped."""


@attrs.define(eq=False)
class Session:
    """One connection's login state: its peer's host and, once logged in, its account."""

    host: str
    account: str | None = None
    scram: Any = None  # the SCRAM server between auth_start and auth_finish
    claimed: str | None = None  # the account auth_start named


def peer_host(peer: str | None) -> str:
    """The host part of "ip:port" / "[ip]:port" (what address rules and rate limits use).
    A peer name that is not host:port is taken whole, so it still counts for rate limits
    (and matches no address rule but `*`)."""
    if not peer:
        return ""
    try:
        return split_host_port(peer)[0]
    except AddressError:
        return peer


class Guard:
    """Checks logins and permissions against the ACL file at `path` (loaded now: AclError
    if it is wrong, so a node with a bad file does not start)."""

    def __init__(self, path: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._clock = clock
        self._acl: Acl = load_acl(path)
        self._stamp = files_stamp(self._acl)
        self._checked_at = clock()
        from scramp import ScramMechanism  # here: a node without aclEnable never loads scramp

        self._mechanism = ScramMechanism(SCRAM_MECHANISM)
        self._decoy_key = os.urandom(32)
        self._failures: dict[str, collections.deque[float]] = {}
        self.logins = 0
        self.failed_logins = 0
        self.rate_limited = 0
        self.refused = 0
        self.reloads = 0
        self.reload_error: str | None = None
        self.signed_requests = 0  # RocketMQ clients' requests whose signature passed
        self.failed_signatures = 0

    # ------------------------------------------------------------ the ACL file

    @property
    def acl(self) -> Acl:
        if self._clock() - self._checked_at >= RELOAD_CHECK_S:
            self._check_file()
        return self._acl

    def accounts(self) -> list[dict[str, Any]]:
        """The ACL's accounts and what each may do, for `acl_list`: never a secret or verifier."""
        return [{"access_key": a.access_key, "admin": a.admin,
                 "default_topic_perm": perm_text(a.default_topic_perm),
                 "default_group_perm": perm_text(a.default_group_perm),
                 "topic_perms": [f"{r.pattern}={perm_text(r.perm)}" for r in a.topic_rules],
                 "group_perms": [f"{r.pattern}={perm_text(r.perm)}" for r in a.group_rules],
                 "white_remote_address": list(a.white_remote_address)}
                for a in sorted(self.acl.accounts.values(), key=lambda a: a.access_key)]

    def recheck(self) -> None:
        """Look at the file now (this node just edited it: `acl_put`, `acl_remove`)."""
        self._check_file()

    def _check_file(self) -> None:
        """Reload the file when its stamp, or a remoting secret file's, changed (a stat
        each when none did)."""
        self._checked_at = self._clock()
        stamp = files_stamp(self._acl)
        if stamp != self._stamp:
            self._reload()
            # the ACL file as it was before the reload (a write since then reloads again),
            # and the secret files the loaded one names
            self._stamp = (stamp[0], *files_stamp(self._acl)[1:])

    def _account(self, name: str) -> Account | None:
        """The account a login names; one the loaded file lacks is looked for in the file
        as it is now (it may have just been added), not a second later."""
        account = self.acl.accounts.get(name)
        if account is None:
            self._check_file()
            account = self._acl.accounts.get(name)
        return account

    def _reload(self) -> None:
        try:
            self._acl = load_acl(self.path)
        except AclError as e:
            self.reload_error = str(e)
            log.error("ACL file changed but cannot be used; keeping the previous one: %s", e)
            return
        self.reload_error = None
        self.reloads += 1
        log.info("ACL file %s reloaded: %d account(s)", self.path, len(self._acl.accounts))

    # ------------------------------------------------------------ requests

    def screen(self, session: Session, request: Request) -> dict[str, Any] | None:
        """The answer to a login op, or a refusal; None when `request` (parsed: its
        envelope and typed fields) may run."""
        if request.op in AUTH_OPS:
            return self._login_step(session, request)
        if session.account is None:
            self.refused += 1
            return error_response(request.id, Status.NO_PERMISSION,
                                  f"{request.op}: authentication required (this server checks logins; "
                                  "give the client an account: --user/--secret-file or TIDEMQ_USER)")
        account = self.acl.accounts.get(session.account)
        if account is None or not account.may_connect_from(session.host):
            self.refused += 1
            return error_response(request.id, Status.NO_PERMISSION,
                                  f"{request.op}: account {session.account!r} is no longer allowed here")
        for need in needs(request.fields):
            if not need.granted(account):
                return self._refuse(request, account, need.describe())
        return None

    def may_send(self, session: Session, topic: str) -> bool:
        """Whether `screen` lets a `send` or `send_batch` of `session` to `topic` run: the
        compiled send path screens its plain requests with this, and hands any it refuses
        to `screen` for the answer."""
        if session.account is None:
            return False
        account = self.acl.accounts.get(session.account)
        return (account is not None and account.may_connect_from(session.host)
                and topic_need(topic, Perm.PUB).granted(account))

    def check_answer(self, session: Session, request: Request, response: dict[str, Any]) -> dict[str, Any] | None:
        """A refusal in place of `response` when it shows a message the account may not read
        (rules.message_needs): every answer that carries messages, whatever its op, so an op
        added later cannot leak one."""
        if session.account is None:
            return None
        shown = _messages_in(response)
        if not shown:
            return None
        account = self.acl.accounts.get(session.account)
        if account is None:  # removed while the op ran: fail closed
            self.refused += 1
            return error_response(request.id, Status.NO_PERMISSION,
                                  f"{request.op}: account {session.account!r} is no longer allowed here")
        if account.admin:
            return None
        checked: set[tuple[str, str | None, str | None]] = set()
        for m in shown:
            topic = m.get("topic")
            props = m.get("properties")
            props = props if isinstance(props, dict) else {}
            if not isinstance(topic, str):  # a map without a topic is no message we wrote: fail closed
                return self._refuse(request, account, "SUB on a message of unknown topic")
            key = (topic, props.get(PROPERTY_RETRY_TOPIC), props.get(PROPERTY_REAL_TOPIC))
            if key in checked:
                continue
            checked.add(key)
            lacking = _lacking(account, topic, props)
            if lacking is not None:
                return self._refuse(request, account, lacking)
        return None

    def refusal_to_read(self, session: Session, topic: str, properties: Mapping[str, str]) -> str | None:
        """Why `session`'s account may not be shown or copy a message stored under `topic`
        with `properties` (None: it may). Ops that copy a stored message call it through
        `Request.reader` before they write."""
        account = self.acl.accounts.get(session.account or "")
        if account is None:
            self.refused += 1
            return f"account {session.account!r} is no longer allowed here"
        lacking = _lacking(account, topic, properties)
        if lacking is None:
            return None
        self.refused += 1
        return f"account {account.access_key!r} lacks {lacking}"

    def refusal_to_publish(self, session: Session, topic: str) -> str | None:
        """Why `session`'s account may not publish to `topic` (None: it may): for an op that
        writes to a topic it reads from a stored message (`Request.publisher`)."""
        account = self.acl.accounts.get(session.account or "")
        if account is None:
            self.refused += 1
            return f"account {session.account!r} is no longer allowed here"
        need = topic_need(topic, Perm.PUB)
        if need.granted(account):
            return None
        self.refused += 1
        return f"account {account.access_key!r} lacks {need.describe()}"

    def _refuse(self, request: Any, account: Account, what: str) -> dict[str, Any]:
        self.refused += 1
        return error_response(request.id, Status.NO_PERMISSION,
                              f"{request.op}: account {account.access_key!r} lacks {what}")

    # ------------------------------------------------------------ logins

    def _login_step(self, session: Session, request: Any) -> dict[str, Any]:
        if session.account is not None:
            return error_response(request.id, Status.BAD_REQUEST,
                                  f"{request.op}: already logged in as {session.account!r}")
        if request.op == "auth_start":
            return self._start(session, request)
        return self._finish(session, request)

    def _start(self, session: Session, request: Any) -> dict[str, Any]:
        wait = self._rate_limit_wait(session.host)
        if wait is not None:
            self.rate_limited += 1
            return error_response(request.id, Status.NO_PERMISSION,
                                  f"auth_start: too many failed logins from {session.host}; "
                                  f"try again in {wait:.0f} s")
        session.claimed = None

        def auth_info(user: str) -> tuple[bytes, bytes, bytes, int]:
            session.claimed = user
            account = self._account(user)
            if account is None or not account.may_connect_from(session.host):
                return self._decoy(user)  # the proof will fail at auth_finish, as for a wrong secret
            return account.verifier.auth_info()

        server = self._mechanism.make_server(auth_info)
        try:
            server.set_client_first(request.fields.message)
            first = server.get_server_first()
        except Exception as e:  # noqa: BLE001 - untrusted input through a third-party parser
            return self._failed(session, request, e)
        session.scram = server
        return AuthReply(message=first).to_wire(request.id)

    def _finish(self, session: Session, request: Any) -> dict[str, Any]:
        server, session.scram = session.scram, None
        if server is None:
            return error_response(request.id, Status.BAD_REQUEST, "auth_finish: send auth_start first")
        try:
            server.set_client_final(request.fields.message)
            final = server.get_server_final()
        except Exception as e:  # noqa: BLE001 - untrusted input through a third-party parser
            return self._failed(session, request, e)
        account = self.acl.accounts.get(session.claimed or "")
        if account is None or not account.may_connect_from(session.host):
            return self._failed(session, request, "decoy account")  # (a decoy proof cannot pass)
        session.account = account.access_key
        self.logins += 1
        log.debug("%s logged in as %r", session.host, account.access_key)
        return AuthReply(message=final).to_wire(request.id)

    def _failed(self, session: Session, request: Any, why: object) -> dict[str, Any]:
        self.failed_logins += 1
        self._note_failure(session.host)
        # the claimed name is logged (an operator needs it), the messages never are
        log.warning("failed login from %s as %r (%s: %s)", session.host, session.claimed, request.op,
                    type(why).__name__ if isinstance(why, Exception) else why)
        return error_response(request.id, Status.NO_PERMISSION, f"{request.op}: {AUTH_FAILED}")

    def _note_failure(self, host: str) -> None:
        now = self._clock()
        if len(self._failures) > MAX_TRACKED_HOSTS:  # many addresses failed: forget the old ones
            self._failures = {h: d for h, d in self._failures.items() if d and now - d[-1] <= FAILURE_WINDOW_S}
        self._failures.setdefault(host, collections.deque()).append(now)

    def _rate_limit_wait(self, host: str) -> float | None:
        """Seconds until `host` may try again, or None when it may now."""
        recent = self._failures.get(host)
        if not recent:
            return None
        now = self._clock()
        while recent and now - recent[0] > FAILURE_WINDOW_S:
            recent.popleft()
        if len(recent) < MAX_FAILURES:
            if not recent:
                del self._failures[host]
            return None
        return max(1.0, FAILURE_WINDOW_S - (now - recent[0]))

    def _decoy(self, user: str) -> tuple[bytes, bytes, bytes, int]:
        """Credentials no secret matches, the same for a name each time (an unknown account
        looks like a known one: same salt on every try)."""
        digest = hmac.new(self._decoy_key, user.encode(), hashlib.sha256).digest()
        return digest[:16], hashlib.sha256(digest + b"stored").digest(), hashlib.sha256(digest + b"server").digest(), \
            SCRAM_ITERATIONS

    # ------------------------------------------------------------ RocketMQ clients (ACL 1.0)

    def signed_session(self, host: str, access_key: str, signature: str, content: bytes) -> Session | str:
        """The session of one signed remoting request from `host` (each request carries
        its own signature: no login state), or why it is refused, in RocketMQ's words.
        Failures are rate-limited per address and access key (the same limit as logins),
        not per address: a client that signs with a stale secret sends a failure with
        every request, and must not lock its host's other accounts, or the broker's own
        logins, out. Unlike RocketMQ, a white address never stands in for the signature."""
        tracked = f"{host} {access_key}"
        wait = self._rate_limit_wait(tracked)
        if wait is not None:
            self.rate_limited += 1
            return f"too many failed signatures for accessKey={access_key} from {host}; try again in {wait:.0f} s"
        account = self._account(access_key)
        if account is None or account.remoting_secret is None:
            return self._signature_failed(tracked, f"No acl config for {access_key}")
        if not account.may_connect_from(host):
            return self._signature_failed(tracked, f"accessKey={access_key} may not connect from {host}")
        if not hmac.compare_digest(sign_content(account.remoting_secret, content).encode(), signature.encode()):
            return self._signature_failed(tracked, f"Check signature failed for accessKey={access_key}")
        self.signed_requests += 1
        return Session(host, account=access_key)

    def _signature_failed(self, tracked: str, why: str) -> str:
        self.failed_signatures += 1
        self._note_failure(tracked)
        log.warning("refused a signed request (%s): %s", tracked, why)
        return why

    def view(self) -> dict[str, Any]:
        """For `status`: the counters and the file (never an account's credentials)."""
        return {"acl_file": self.path, "accounts": len(self._acl.accounts), "logins": self.logins,
                "failed_logins": self.failed_logins, "rate_limited": self.rate_limited, "refused": self.refused,
                "reloads": self.reloads, "reload_error": self.reload_error,
                "signed_requests": self.signed_requests, "failed_signatures": self.failed_signatures}


def _messages_in(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The message maps an answer carries (`message`, `messages`)."""
    out: list[dict[str, Any]] = []
    one = response.get("message")
    if isinstance(one, dict):
        out.append(one)
    many = response.get("messages")
    if isinstance(many, list):
        out.extend(m for m in many if isinstance(m, dict))
    return out


def _lacking(account: Account, topic: str, properties: Mapping[str, str]) -> str | None:
    """What `account` lacks to read a message stored under `topic` (None: nothing)."""
    for need in message_needs(topic, properties):
        if not need.granted(account):
            return need.describe()
    return None
