"""The ACL page's changes: add an account or change its permissions, remove one, through
the admin-only node ops `acl_put` and `acl_remove` (Admin.acl_put / acl_remove: every
broker's ACL file). The form is checked here first with the nodes' own parsers, so a
typo gets a sentence and no request; the secret becomes a SCRAM verifier here, in the
console's process, so it never crosses the wire or lands in a file."""

from __future__ import annotations

import re
from collections.abc import Mapping

import attrs
import trio

from node.security.acl import Rule, address_pattern_problem, make_verifier, parse_perm

from ..client import Admin
from .inputs import InputError

_SPLIT = re.compile(r"[\s,]+")


@attrs.frozen
class AccountForm:
    """One account as the ACL form gives it, checked."""

    access_key: str
    secret: str | None  # None: keep the account's
    admin: bool
    default_topic_perm: str
    default_group_perm: str
    topic_perms: tuple[str, ...]
    group_perms: tuple[str, ...]
    white_remote_address: tuple[str, ...]


def checked_access_key(value: str) -> str:
    key = value.strip()
    if not key or any(c in key for c in ",=") or any(c.isspace() for c in key):
        raise InputError("an account name is required, without ',', '=' or spaces")
    return key


def _perm(value: str, what: str) -> str:
    try:
        parse_perm(value)
    except ValueError as e:
        raise InputError(f"{what}: {e}") from None
    return value.strip().upper()


def _rules(value: str, what: str) -> tuple[str, ...]:
    rules = tuple(r for r in _SPLIT.split(value) if r)
    for rule in rules:
        try:
            Rule.parse(rule)
        except ValueError as e:
            raise InputError(f"{what}: in {rule!r}: {e}") from None
    return rules


def _addresses(value: str) -> tuple[str, ...]:
    patterns = tuple(p for p in _SPLIT.split(value) if p)
    for pattern in patterns:
        problem = address_pattern_problem(pattern)
        if problem:
            raise InputError(f"remote addresses: {pattern!r} is not an IP, a CIDR block or a prefix ending in * "
                             f"({problem})")
    return patterns


def account_form(form: Mapping[str, str]) -> AccountForm:
    """The ACL form's fields, checked; InputError names the first wrong one."""
    secret = form.get("secret", "")
    return AccountForm(
        access_key=checked_access_key(form.get("access_key", "")),
        secret=secret or None,
        admin=form.get("admin") == "1",
        default_topic_perm=_perm(form.get("default_topic_perm", "DENY"), "default topic perm"),
        default_group_perm=_perm(form.get("default_group_perm", "DENY"), "default group perm"),
        topic_perms=_rules(form.get("topic_perms", ""), "topic perms"),
        group_perms=_rules(form.get("group_perms", ""), "group perms"),
        white_remote_address=_addresses(form.get("white_remote_address", "")),
    )


def _where(done: dict[str, bool], missed: dict[str, str]) -> str:
    said = f"on {', '.join(done) or 'no broker'}"
    if missed:
        said += f"; NOT on {', '.join(missed)} (did not answer: run this again when they are back)"
    return said


async def save_account(admin: Admin, account: AccountForm, *, user: str | None) -> str:
    """Add or change `account` on every broker; `user` (the logged-in account) may not take
    its own admin flag away, which would lock them out of this page."""
    if user is not None and account.access_key == user and not account.admin:
        raise InputError(f"{user} is your own account: taking its admin flag away would lock you out of this page")
    scram = None
    if account.secret is not None:
        secret = account.secret
        scram = (await trio.to_thread.run_sync(lambda: make_verifier(secret))).text()
    done, missed = await admin.acl_put(
        account.access_key, scram=scram, admin=account.admin, default_topic_perm=account.default_topic_perm,
        default_group_perm=account.default_group_perm, topic_perms=account.topic_perms,
        group_perms=account.group_perms, white_remote_address=account.white_remote_address)
    verb = "changed" if next(iter(done.values()), False) else "added"  # the first: brokers may share a file
    secret_said = "a new secret" if scram is not None else "its secret kept"
    return f"account {account.access_key} {verb} ({secret_said}) {_where(done, missed)}"


async def remove_account(admin: Admin, access_key: str, *, user: str | None) -> str:
    key = checked_access_key(access_key)
    if user is not None and key == user:
        raise InputError(f"{user} is your own account: removing it would log you out for good")
    done, missed = await admin.acl_remove(key)
    if done and not any(done.values()):
        raise InputError(f"no account {key} in the ACL")
    return f"account {key} removed {_where(done, missed)}"
