"""Writing security files: accounts into an ACL file, secrets, and development certificates.

Used by `tidemq acl` and `tidemq tls` and by the launcher's `make_dev_secrets`. The ACL file
is edited with tomlkit, so an operator's comments stay, and replaced in one rename, so a
server never reads half of it. Secrets and keys are written with mode 0600.
"""

from __future__ import annotations

import datetime
import fcntl
import functools
import os
import secrets
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar

import tomlkit

from .acl import Acl, AclError, Rule, load_acl, make_verifier, parse_perm

__all__ = ["DEV_HOSTS", "check_permissions", "edit_account", "new_secret", "put_account", "remove_account",
           "write_dev_certs"]

DEV_HOSTS = ("127.0.0.1", "::1", "localhost")


def _write_private(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def new_secret(path: str) -> str:
    """A random secret, written to `path` (0600)."""
    secret = secrets.token_urlsafe(24)
    _write_private(path, (secret + "\n").encode())
    return secret


P = ParamSpec("P")
T = TypeVar("T")


def _one_writer(edit: Callable[P, T]) -> Callable[P, T]:
    """`edit(path, ...)` while holding an exclusive lock (flock) on the file's directory: an
    edit reads, changes and replaces the file, so two at once (two nodes sharing one file,
    two `acl_put`s on one node) would each write the file without the other's change. The
    directory, not the file, as the file is replaced; no lock file is left beside it."""
    @functools.wraps(edit)
    def locked(*args: P.args, **kwargs: P.kwargs) -> T:
        fd = os.open(os.path.dirname(os.path.abspath(str(args[0]))), os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd closes
            return edit(*args, **kwargs)
        finally:
            os.close(fd)

    return locked


def _read_document(path: str) -> tomlkit.TOMLDocument:
    if not os.path.exists(path):
        return tomlkit.document()
    load_acl(path)  # AclError: refuse to edit a file the servers would refuse
    with open(path, encoding="utf-8") as f:
        return tomlkit.parse(f.read())


def _accounts(document: tomlkit.TOMLDocument) -> tomlkit.items.AoT:
    if "accounts" not in document:
        document["accounts"] = tomlkit.aot()
    return document["accounts"]  # type: ignore[return-value]


def _save(path: str, document: tomlkit.TOMLDocument) -> None:
    text = tomlkit.dumps(document)
    Acl.from_toml(text, source=path)  # AclError: the result must load, or the servers keep the old file
    _write_private(path, text.encode())


def check_permissions(default_perms: Sequence[str], rules: Sequence[str]) -> None:
    """ValueError naming the first permission (`PUB|SUB`) or rule (`NAME=PERM`) that is not one."""
    for perm in default_perms:
        parse_perm(perm)
    for rule in rules:
        Rule.parse(rule)


@_one_writer
def put_account(
    path: str, access_key: str, secret: str, *, admin: bool = False, default_topic_perm: str = "DENY",
    default_group_perm: str = "DENY", topic_perms: Sequence[str] = (), group_perms: Sequence[str] = (),
    white_remote_address: Sequence[str] = (), remoting_secret_file: str | None = None,
) -> bool:
    """Add `access_key` to the ACL file at `path` (created if missing), or replace it; True
    when it replaced one. AclError (a bad permission among them: the result is checked
    whole before it is written) changes nothing. `remoting_secret_file`: RocketMQ clients
    sign with the secret in that file (made, random, when missing); the entry names it
    relative to the ACL file."""
    document = _read_document(path)
    entry = _entry(access_key, {"scram": make_verifier(secret).text()}, admin, default_topic_perm, default_group_perm,
                   topic_perms, group_perms, white_remote_address)
    if remoting_secret_file is not None:
        if not os.path.exists(remoting_secret_file):
            new_secret(remoting_secret_file)
        entry["remotingSecretFile"] = os.path.relpath(os.path.abspath(remoting_secret_file),
                                                      os.path.dirname(os.path.abspath(path)))
    replaced = _put(_accounts(document), entry)
    _save(path, document)
    return replaced


def _entry(access_key: str, verifier: dict[str, Any], admin: bool, default_topic_perm: str, default_group_perm: str,
           topic_perms: Sequence[str], group_perms: Sequence[str],
           white_remote_address: Sequence[str]) -> tomlkit.items.Table:
    """An account's table: its key, `verifier` (scram, or an old secretKey) and its permissions."""
    entry = tomlkit.table()
    entry["accessKey"] = access_key
    for key, value in verifier.items():
        entry[key] = value
    entry["admin"] = admin
    entry["defaultTopicPerm"] = default_topic_perm
    entry["defaultGroupPerm"] = default_group_perm
    entry["topicPerms"] = list(topic_perms)
    entry["groupPerms"] = list(group_perms)
    if white_remote_address:
        entry["whiteRemoteAddress"] = list(white_remote_address)
    return entry


def _put(accounts: Any, entry: tomlkit.items.Table) -> bool:
    """Replace the account of `entry`'s key in place, or append it; True when it replaced one."""
    for index, old in enumerate(accounts):
        if old.get("accessKey") == entry["accessKey"]:
            accounts[index] = entry
            return True
    accounts.append(entry)
    return False


@_one_writer
def edit_account(
    path: str, access_key: str, *, scram: str | None = None, admin: bool = False, default_topic_perm: str = "DENY",
    default_group_perm: str = "DENY", topic_perms: Sequence[str] = (), group_perms: Sequence[str] = (),
    white_remote_address: Sequence[str] = (),
) -> bool:
    """`acl_put`: add `access_key` with the verifier `scram`, or replace its permissions
    (keeping its verifier, and its remoting secret, when `scram` is None); True when it
    replaced one. AclError (no verifier for a new account, or a bad value: checked whole
    before the write) changes nothing. The file must exist (aclEnable reads it)."""
    if not os.path.exists(path):
        raise AclError(f"{path}: no ACL file to edit")
    document = _read_document(path)
    accounts = _accounts(document)
    old = next((a for a in accounts if a.get("accessKey") == access_key), None)
    if old is None and scram is None:
        raise AclError(f"{access_key} is a new account: give it a secret")
    kept = ("scram", "secretKey") if scram is None else ()  # the old verifier, when no new one
    verifier = {k: old[k] for k in kept if old is not None and k in old}
    if scram is not None:
        verifier["scram"] = scram
    entry = _entry(access_key, verifier, admin, default_topic_perm, default_group_perm, topic_perms, group_perms,
                   white_remote_address)
    if old is not None:
        for key in ("remotingSecret", "remotingSecretFile"):
            if key in old:
                entry[key] = old[key]
    replaced = _put(accounts, entry)
    _save(path, document)
    return replaced


@_one_writer
def remove_account(path: str, access_key: str) -> bool:
    """Remove `access_key` from the ACL file; False when it was not there."""
    document = _read_document(path)
    accounts = _accounts(document)
    keep = [a for a in accounts if a.get("accessKey") != access_key]
    if len(keep) == len(accounts):
        return False
    document["accounts"] = tomlkit.aot()
    for a in keep:
        document["accounts"].append(a)
    _save(path, document)
    return True


def write_dev_certs(directory: str, hosts: Sequence[str] = DEV_HOSTS, days: int = 365) -> dict[str, str]:
    """ca.pem, node.pem and node-key.pem in `directory`: a new local CA and one certificate
    (server and client use) for `hosts`, valid `days`. For development and tests."""
    import trustme  # the python-trio project's CA library (on cryptography); only this needs it

    if days < 1:
        raise ValueError(f"days must be >= 1, got {days}")
    os.makedirs(directory, exist_ok=True)
    ca = trustme.CA(organization_name="tidemq dev CA")
    not_after = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=days)
    leaf = ca.issue_cert(*hosts, common_name="tidemq-node", not_after=not_after)
    paths = {name: os.path.join(directory, name) for name in ("ca.pem", "node.pem", "node-key.pem")}
    ca.cert_pem.write_to_path(paths["ca.pem"])
    with open(paths["node.pem"], "wb") as f:
        for pem in leaf.cert_chain_pems:
            f.write(pem.bytes())
    _write_private(paths["node-key.pem"], leaf.private_key_pem.bytes())
    return paths

