"""The ACL file: accounts, their salted credentials and their permissions (no I/O but
`load_acl` and the remoting secret files an account names).

The file is TOML, one `[[accounts]]` table per account, with RocketMQ's plain_acl.yml key
names (ACL 1.0):

    [[accounts]]
    accessKey = "alice"
    scram = "SCRAM-SHA-256$4096:<salt>$<StoredKey>:<ServerKey>"   # `tidemq acl add-user` writes it
    admin = false
    defaultTopicPerm = "DENY"          # DENY | PUB | SUB | PUB|SUB (ANY is PUB|SUB)
    defaultGroupPerm = "SUB"
    topicPerms = ["orders=PUB|SUB", "logs-*=SUB", "logs-secret=DENY"]
    groupPerms = ["billing=SUB"]
    whiteRemoteAddress = "127.0.0.1"   # or "10.0.0.0/8", "192.168.1.*", a list of them; "*" is anyone
    remotingSecretFile = "alice.remoting"  # optional: RocketMQ clients' secret (or remotingSecret = "...")

`secretKey = "..."` (the plain secret, as plain_acl.yml holds it) is accepted too and hashed
when the file is read, with a warning: the file then holds a secret. The stored form is
PostgreSQL's SCRAM verifier, so the file never holds what a client sends or could log in
with. The one exception is opt-in: RocketMQ's remoting clients sign each request with
HMAC-SHA1 keyed by the plain secret (ACL 1.0), so an account they use holds a separate
remoting secret, in the file or in a file beside it (read with the file); it must differ
from the SCRAM secret, so what the broker keeps to check signatures never logs in over
tidemq's protocol (docs/security.md, "RocketMQ clients").

A pattern ending in `*` is a prefix; among the rules that match a name, DENY wins, else
their permissions add up; a name no rule matches gets the default permission.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import ipaddress
import logging
import os
import tomllib
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from wire.protocol.auth import SCRAM_MECHANISM

log = logging.getLogger("tidemq.security")

__all__ = ["Account", "Acl", "AclError", "Perm", "Rule", "address_pattern_problem", "load_acl", "make_verifier",
           "parse_perm"]

SCRAM_ITERATIONS = 4096  # RFC 7677's minimum; the client pays it once per connection


class AclError(ValueError):
    """The ACL file is unreadable or wrong; the message names the file, account and key."""


class Perm(enum.IntFlag):
    """What a rule grants on a topic or group (RocketMQ's Permission: PUB, SUB, DENY)."""

    NONE = 0
    PUB = 1
    SUB = 2


_PERM_WORDS = {"PUB": Perm.PUB, "SUB": Perm.SUB, "ANY": Perm.PUB | Perm.SUB}


def parse_perm(text: str) -> Perm | None:
    """`PUB`, `SUB`, `PUB|SUB`, `ANY` → the permission; `DENY` → None. ValueError otherwise."""
    words = [w.strip().upper() for w in text.split("|")]
    if words == ["DENY"]:
        return None
    perm = Perm.NONE
    for word in words:
        if word not in _PERM_WORDS:
            raise ValueError(f"{text!r} is not a permission (DENY, PUB, SUB, PUB|SUB or ANY)")
        perm |= _PERM_WORDS[word]
    return perm


def perm_text(perm: Perm | None) -> str:
    if perm is None:
        return "DENY"
    return "|".join(w for w in ("PUB", "SUB") if perm & _PERM_WORDS[w]) or "DENY"


@attrs.frozen
class Rule:
    """`pattern=PERM`: a literal name, or a prefix when it ends in `*`; perm None is DENY."""

    pattern: str
    perm: Perm | None

    def matches(self, name: str) -> bool:
        if self.pattern.endswith("*"):
            return name.startswith(self.pattern[:-1])
        return name == self.pattern

    @classmethod
    def parse(cls, text: str) -> Rule:
        pattern, sep, perm = text.partition("=")
        pattern = pattern.strip()
        if not sep or not pattern:
            raise ValueError(f"{text!r} is not NAME=PERM (NAME may end in * for a prefix)")
        if "*" in pattern[:-1]:
            raise ValueError(f"{text!r}: '*' may only end a pattern (a prefix)")
        return cls(pattern, parse_perm(perm))


def _decide(rules: tuple[Rule, ...], default: Perm | None, name: str, want: Perm) -> bool:
    matching = [r for r in rules if r.matches(name)]
    if not matching:
        return default is not None and want & default == want
    if any(r.perm is None for r in matching):
        return False  # DENY wins over any grant
    granted = Perm.NONE
    for r in matching:
        granted |= r.perm  # type: ignore[operator]  # None was ruled out above
    return want & granted == want


@attrs.frozen
class Verifier:
    """SCRAM's stored credential: what the server needs to check a proof, not the secret."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def text(self) -> str:
        b64 = base64.b64encode
        return (f"{SCRAM_MECHANISM}${self.iterations}:{b64(self.salt).decode()}"
                f"${b64(self.stored_key).decode()}:{b64(self.server_key).decode()}")

    @classmethod
    def parse(cls, text: str) -> Verifier:
        try:
            mechanism, rest = text.split("$", 1)
            iterations_salt, keys = rest.split("$", 1)
            iterations, salt = iterations_salt.split(":", 1)
            stored, server = keys.split(":", 1)
            if mechanism != SCRAM_MECHANISM:
                raise ValueError(f"mechanism {mechanism!r}, expected {SCRAM_MECHANISM}")
            b64 = base64.b64decode
            verifier = cls(b64(salt, validate=True), b64(stored, validate=True), b64(server, validate=True),
                           int(iterations))
        except (ValueError, TypeError) as e:
            raise ValueError(f"not a {SCRAM_MECHANISM}$iterations:salt$StoredKey:ServerKey verifier ({e})") from None
        if verifier.iterations < SCRAM_ITERATIONS:
            raise ValueError(f"{verifier.iterations} iterations is below the minimum {SCRAM_ITERATIONS}")
        return verifier

    def auth_info(self) -> tuple[bytes, bytes, bytes, int]:
        """scramp's form."""
        return self.salt, self.stored_key, self.server_key, self.iterations


def make_verifier(secret: str, *, iterations: int = SCRAM_ITERATIONS) -> Verifier:
    """A fresh salted verifier for `secret` (what `tidemq acl add-user` stores)."""
    if not secret:
        raise ValueError("the secret must not be empty")
    from scramp import ScramMechanism  # here: scramp (~60 ms) is for secured clusters only

    return Verifier(*ScramMechanism(SCRAM_MECHANISM).make_auth_info(secret, iteration_count=iterations))


@attrs.frozen
class Account:
    access_key: str
    verifier: Verifier = attrs.field(repr=False)
    admin: bool = False
    default_topic_perm: Perm | None = None  # DENY
    default_group_perm: Perm | None = None
    topic_rules: tuple[Rule, ...] = ()
    group_rules: tuple[Rule, ...] = ()
    white_remote_address: tuple[str, ...] = ()  # empty: any address
    remoting_secret: str | None = attrs.field(default=None, repr=False)
    """The secret RocketMQ clients sign with (ACL 1.0); None: remoting clients cannot use it."""
    remoting_secret_file: str | None = None  # where it was read from (a change reloads the ACL)

    def may_topic(self, topic: str, want: Perm) -> bool:
        return self.admin or _decide(self.topic_rules, self.default_topic_perm, topic, want)

    def may_group(self, group: str, want: Perm) -> bool:
        return self.admin or _decide(self.group_rules, self.default_group_perm, group, want)

    def may_connect_from(self, host: str) -> bool:
        return not self.white_remote_address or any(address_matches(p, host) for p in self.white_remote_address)


def address_matches(pattern: str, host: str) -> bool:
    """RocketMQ's remote-address patterns: `*`, an exact IP, `192.168.1.*`, or a CIDR block."""
    if pattern == "*":
        return True
    if "/" in pattern:
        try:
            return ipaddress.ip_address(host) in ipaddress.ip_network(pattern, strict=False)
        except ValueError:
            return False
    if pattern.endswith("*"):
        return host.startswith(pattern[:-1])
    return host == pattern


def _check_address_pattern(pattern: str) -> None:
    if "/" in pattern:
        ipaddress.ip_network(pattern, strict=False)  # ValueError names the problem
    elif pattern != "*" and not pattern.endswith("*"):
        ipaddress.ip_address(pattern)


def address_pattern_problem(pattern: str) -> str | None:
    """Why `pattern` is not a remote-address pattern (an IP, a CIDR block, a prefix ending
    in `*`, or `*`), or None when it is one (for forms checked before a file is written)."""
    try:
        _check_address_pattern(pattern)
    except ValueError as e:
        return str(e)
    return None


_ACCOUNT_KEYS = {"accessKey", "scram", "secretKey", "admin", "defaultTopicPerm", "defaultGroupPerm",
                 "topicPerms", "groupPerms", "whiteRemoteAddress", "remotingSecret", "remotingSecretFile"}


@attrs.frozen
class Acl:
    """The accounts of one ACL file, by access key."""

    accounts: Mapping[str, Account]
    source: str = ""

    @property
    def files(self) -> tuple[str, ...]:
        """The files it was read from: the ACL file and the remoting secret files it names."""
        return (self.source, *sorted({a.remoting_secret_file for a in self.accounts.values()
                                      if a.remoting_secret_file}))

    @classmethod
    def from_toml(cls, text: str, *, source: str = "") -> Acl:
        where = source or "ACL"
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise AclError(f"{where}: TOML syntax error: {e}") from None
        unknown = set(raw) - {"accounts"}
        if unknown:
            raise AclError(f"{where}: unknown key(s) {sorted(unknown)}; the file holds [[accounts]] tables")
        entries = raw.get("accounts", [])
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise AclError(f"{where}: 'accounts' must be [[accounts]] tables")
        accounts: dict[str, Account] = {}
        for index, entry in enumerate(entries, start=1):
            account = _account(entry, f"{where}: account {index}", os.path.dirname(source))
            if account.access_key in accounts:
                raise AclError(f"{where}: account {index}: accessKey {account.access_key!r} appears twice")
            accounts[account.access_key] = account
        return cls(accounts, source)


def _account(entry: Mapping[str, Any], where: str, directory: str) -> Account:
    unknown = set(entry) - _ACCOUNT_KEYS
    if unknown:
        raise AclError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(_ACCOUNT_KEYS)}")
    key = entry.get("accessKey")
    if not isinstance(key, str) or not key or any(c in key for c in ",=") or key != key.strip():
        raise AclError(f"{where}: accessKey must be a non-empty name without ',', '=' or edge spaces")
    where = f"{where} ({key})"
    if ("scram" in entry) == ("secretKey" in entry):
        raise AclError(f"{where}: give exactly one of scram (from `tidemq acl add-user`) or secretKey")
    try:
        if "scram" in entry:
            verifier = Verifier.parse(_text(entry["scram"], "scram"))
        else:
            log.warning("%s: secretKey holds a plain secret; `tidemq acl add-user` stores a salted hash instead",
                        where)
            verifier = make_verifier(_text(entry["secretKey"], "secretKey"))
        admin = entry.get("admin", False)
        if not isinstance(admin, bool):
            raise ValueError("admin must be true or false")
        addresses = entry.get("whiteRemoteAddress", [])
        addresses = [addresses] if isinstance(addresses, str) else addresses
        for pattern in _texts(addresses, "whiteRemoteAddress"):
            _check_address_pattern(pattern)
        return Account(
            access_key=key,
            verifier=verifier,
            admin=admin,
            default_topic_perm=parse_perm(_text(entry.get("defaultTopicPerm", "DENY"), "defaultTopicPerm")),
            default_group_perm=parse_perm(_text(entry.get("defaultGroupPerm", "DENY"), "defaultGroupPerm")),
            topic_rules=tuple(Rule.parse(r) for r in _texts(entry.get("topicPerms", []), "topicPerms")),
            group_rules=tuple(Rule.parse(r) for r in _texts(entry.get("groupPerms", []), "groupPerms")),
            white_remote_address=tuple(addresses),
            remoting_secret=_remoting_secret(entry, verifier, directory),
            remoting_secret_file=_secret_path(entry, directory),
        )
    except ValueError as e:
        raise AclError(f"{where}: {e}") from None


def _remoting_secret(entry: Mapping[str, Any], verifier: Verifier, directory: str) -> str | None:
    """The account's remoting secret (`remotingSecret`, or the first line of
    `remotingSecretFile`, relative to the ACL file's directory), if it has one."""
    if "remotingSecret" in entry and "remotingSecretFile" in entry:
        raise ValueError("give one of remotingSecret or remotingSecretFile")
    if "remotingSecret" in entry:
        secret = _text(entry["remotingSecret"], "remotingSecret")
    elif "remotingSecretFile" in entry:
        path = _secret_path(entry, directory) or ""
        try:
            with open(path, encoding="utf-8") as f:
                secret = f.readline().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"remotingSecretFile {path}: cannot read it: {getattr(e, 'strerror', None) or e}") from None
    else:
        return None
    if not secret:
        raise ValueError("the remoting secret must not be empty")
    if verifier_matches(verifier, secret):
        raise ValueError("the remoting secret is the account's SCRAM secret; give RocketMQ clients a separate one "
                         "(the broker keeps it in a form that signs)")
    return secret


def _secret_path(entry: Mapping[str, Any], directory: str) -> str | None:
    if "remotingSecretFile" not in entry:
        return None
    return os.path.join(directory, _text(entry["remotingSecretFile"], "remotingSecretFile"))


def verifier_matches(verifier: Verifier, secret: str) -> bool:
    """Whether `secret` is the one `verifier` was made from (RFC 5802's StoredKey)."""
    salted = hashlib.pbkdf2_hmac("sha256", secret.encode(), verifier.salt, verifier.iterations)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    return hmac.compare_digest(hashlib.sha256(client_key).digest(), verifier.stored_key)


def _text(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string, got {type(value).__name__}")
    return value


def _texts(values: Any, key: str) -> Iterable[str]:
    if not isinstance(values, list):
        raise ValueError(f"{key} must be a list of strings")
    return [_text(v, key) for v in values]


def load_acl(path: str) -> Acl:
    """Read and check an ACL file; AclError names what is wrong (and never a secret)."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except OSError as e:
        raise AclError(f"{path}: cannot read the ACL file: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise AclError(f"{path}: not UTF-8 text: {e}") from None
    return Acl.from_toml(text, source=path)


def files_stamp(acl: Acl) -> tuple[tuple[int, int, int] | None, ...]:
    """What tells that the ACL file, or a remoting secret file it names, changed."""
    return tuple(file_stamp(p) for p in acl.files)


def file_stamp(path: str) -> tuple[int, int, int] | None:
    """What tells that the file changed (mtime, size, inode); None when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino
