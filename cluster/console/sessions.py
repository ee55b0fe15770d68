"""Logins (`tidemq console --login`, docs/console.md): each user logs in with their tidemq
account and the console talks to the nodes as that account (SCRAM, wire/credentials.py).

A login opens the user's own Admin and Producer in a task of the server's nursery (their
connection pools live there until logout); the browser holds only a signed session cookie
naming a random session id, never the secret. Whether the account is an admin is asked of
a node once, at login: `topic_list` is an admin-only op (docs/security.md).

A session lives `lifetime_s` from its login (8 hours unless `tidemq console
--session-lifetime` says otherwise), however busy: a stolen cookie is worth that long at
most. After it, the next request is sent to the login page and the user's clients close;
sessions nobody comes back to are closed by `expire`, which the server runs every minute."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

import attrs
import trio

from wire.client import AuthenticationFailed, NoPermission, TidemqError
from wire.credentials import Credentials
from wire.protocol import TopicList

from ..client import Admin, Producer
from .dashboard import History
from .inputs import InputError

DEFAULT_LIFETIME_S = 8 * 3600.0
"""How long a login lasts (docs/console.md): a working day."""


@attrs.define
class UserClients:
    """One logged-in user's clients."""

    user: str
    admin: Admin
    producer: Producer
    is_admin: bool
    logged_in_at: float
    """When the login was made (the Sessions clock)."""
    history: History = attrs.field(factory=History)
    done: trio.Event = attrs.field(factory=trio.Event)


@attrs.define
class Sessions:
    """Session id → the user's clients, for the console's life."""

    namesrv: str
    nursery: trio.Nursery
    lifetime_s: float = DEFAULT_LIFETIME_S
    clock: Callable[[], float] = time.time
    """Wall-clock seconds: the signed cookie carries the login time too."""
    by_id: dict[str, UserClients] = attrs.field(factory=dict)

    async def login(self, user: str, secret: str) -> str:
        """A new session id for `user`; InputError saying why the cluster refused the login."""
        if not user or not secret:
            raise InputError("give your account and its secret")
        credentials = Credentials(user, secret)

        async def run(task_status: trio.TaskStatus[UserClients | Exception]) -> None:
            try:
                async with Admin(self.namesrv, credentials=credentials) as admin, \
                        Producer(self.namesrv, credentials=credentials, group="TIDEMQ_CONSOLE") as producer:
                    is_admin = await _check(admin)
                    clients = UserClients(user, admin, producer, is_admin, self.clock())
                    task_status.started(clients)
                    await clients.done.wait()
            except (TidemqError, OSError) as e:
                task_status.started(e)

        started: UserClients | Exception = await self.nursery.start(run)
        if isinstance(started, Exception):
            raise InputError(f"login as {user} failed: {started}")
        sid = secrets.token_urlsafe(24)
        self.by_id[sid] = started
        return sid

    def get(self, sid: str | None) -> UserClients | None:
        return self.by_id.get(sid) if sid else None

    def expired(self, logged_in_at: float) -> bool:
        """Whether a login made at `logged_in_at` is older than the sessions' lifetime."""
        return self.clock() - logged_in_at > self.lifetime_s

    def expire(self) -> int:
        """Log out every session older than the lifetime (their clients close): how many."""
        old = [sid for sid, c in self.by_id.items() if self.expired(c.logged_in_at)]
        for sid in old:
            self.logout(sid)
        return len(old)

    def logout(self, sid: str | None) -> None:
        clients = self.by_id.pop(sid, None) if sid else None
        if clients is not None:
            clients.done.set()


async def _check(admin: Admin) -> bool:
    """Log in on a registered broker (an error when the account or secret is wrong) and
    learn whether the account is an admin."""
    brokers = await admin.masters()
    try:
        await admin.pool.call(brokers[0].address, TopicList())
    except AuthenticationFailed:
        raise
    except NoPermission:
        return False
    return True
