"""`tidemq acl add-user | remove-user | list`: edit an ACL file without writing secrets in it.

The file is edited with tomlkit, so an operator's comments and layout stay as they were;
the new entry holds the SCRAM verifier (`scram = "SCRAM-SHA-256$..."`), never the secret.
A running node or name server picks the change up within a second (node/security/guard.py).
"""

from __future__ import annotations

import argparse
import getpass
import os
import secrets
import sys

import tomlkit

from store.cli import EXIT_OK, UsageError, handled

from .acl import Acl, AclError, Rule, load_acl, make_verifier, parse_perm, perm_text
from .credentials import CredentialsError, read_secret_file

__all__ = ["add_commands"]


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    acl = subparsers.add_parser("acl", help="manage the ACL file (accounts and permissions)",
                                description="Accounts and permissions for aclEnable (docs/security.md).")
    acl.set_defaults(group_parser=acl)
    actions = acl.add_subparsers(dest="action", metavar="ACTION")

    add = actions.add_parser(
        "add-user", help="add an account, or replace its secret and permissions",
        description="Add ACCESS_KEY to the ACL file (created if missing) with a salted SCRAM-SHA-256 verifier. "
        "The secret comes from --secret-file, or --generate (a random one, written to --secret-file), "
        "or is asked for on the terminal.",
    )
    add.add_argument("access_key", metavar="ACCESS_KEY")
    add.add_argument("-f", "--file", required=True, metavar="ACL_FILE")
    add.add_argument("--secret-file", metavar="FILE", help="the secret (first line); with --generate, where to write it")
    add.add_argument("--generate", action="store_true", help="make a random secret and write it to --secret-file (0600)")
    add.add_argument("--admin", action="store_true", help="may use every op (topic and group changes, promote, cleanup)")
    add.add_argument("--default-topic-perm", default="DENY", metavar="PERM", help="DENY, PUB, SUB or PUB|SUB (default DENY)")
    add.add_argument("--default-group-perm", default="DENY", metavar="PERM", help="DENY, PUB, SUB or PUB|SUB (default DENY)")
    add.add_argument("--topic-perm", action="append", default=[], metavar="NAME=PERM",
                     help="a topic rule (NAME may end in * for a prefix); repeat for more")
    add.add_argument("--group-perm", action="append", default=[], metavar="NAME=PERM",
                     help="a consumer-group rule (NAME may end in * for a prefix); repeat for more")
    add.add_argument("--white-remote-address", action="append", default=[], metavar="PATTERN",
                     help="addresses the account may log in from: an IP, 10.0.0.0/8 or 192.168.1.*; repeat for more")
    add.set_defaults(handler=handled(_cmd_add_user))

    remove = actions.add_parser("remove-user", help="remove an account (its open connections lose access)")
    remove.add_argument("access_key", metavar="ACCESS_KEY")
    remove.add_argument("-f", "--file", required=True, metavar="ACL_FILE")
    remove.set_defaults(handler=handled(_cmd_remove_user))

    show = actions.add_parser("list", help="the accounts and their permissions (never their verifiers)")
    show.add_argument("-f", "--file", required=True, metavar="ACL_FILE")
    show.set_defaults(handler=handled(_cmd_list))


def _secret(args: argparse.Namespace) -> str:
    if args.generate:
        if not args.secret_file:
            raise UsageError("--generate needs --secret-file: where to write the new secret")
        secret = secrets.token_urlsafe(24)
        fd = os.open(args.secret_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(secret + "\n")
        return secret
    if args.secret_file:
        try:
            return read_secret_file(args.secret_file)
        except CredentialsError as e:
            raise UsageError(str(e)) from None
    if not sys.stdin.isatty():
        raise UsageError("give --secret-file FILE (or --generate --secret-file FILE): no terminal to ask on")
    secret = getpass.getpass(f"secret for {args.access_key}: ")
    if not secret or secret != getpass.getpass("again: "):
        raise UsageError("the secrets are empty or differ")
    return secret


def _read_document(path: str) -> tomlkit.TOMLDocument:
    if not os.path.exists(path):
        return tomlkit.document()
    try:
        load_acl(path)  # refuse to edit a file the nodes would refuse
        with open(path, encoding="utf-8") as f:
            return tomlkit.parse(f.read())
    except AclError as e:
        raise UsageError(str(e)) from None


def _write_document(path: str, document: tomlkit.TOMLDocument) -> None:
    """Replace the file in one rename, so a node never reads half of it."""
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(tomlkit.dumps(document))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _accounts(document: tomlkit.TOMLDocument) -> tomlkit.items.AoT:
    if "accounts" not in document:
        document["accounts"] = tomlkit.aot()
    return document["accounts"]  # type: ignore[return-value]


def _cmd_add_user(args: argparse.Namespace) -> int:
    try:  # check every value before touching the file
        for perm in (args.default_topic_perm, args.default_group_perm):
            parse_perm(perm)
        for rule in [*args.topic_perm, *args.group_perm]:
            Rule.parse(rule)
    except ValueError as e:
        raise UsageError(str(e)) from None
    document = _read_document(args.file)
    entry = tomlkit.table()
    entry["accessKey"] = args.access_key
    entry["scram"] = make_verifier(_secret(args)).text()
    entry["admin"] = args.admin
    entry["defaultTopicPerm"] = args.default_topic_perm
    entry["defaultGroupPerm"] = args.default_group_perm
    entry["topicPerms"] = args.topic_perm
    entry["groupPerms"] = args.group_perm
    if args.white_remote_address:
        entry["whiteRemoteAddress"] = args.white_remote_address
    accounts = _accounts(document)
    replaced = False
    for index, old in enumerate(accounts):
        if old.get("accessKey") == args.access_key:
            accounts[index] = entry
            replaced = True
    if not replaced:
        accounts.append(entry)
    try:  # the result must load, or the nodes would keep the old file
        Acl.from_toml(tomlkit.dumps(document), source=args.file)
    except AclError as e:
        raise UsageError(str(e)) from None
    _write_document(args.file, document)
    print(f"{'updated' if replaced else 'added'} account {args.access_key} in {args.file}")
    return EXIT_OK


def _cmd_remove_user(args: argparse.Namespace) -> int:
    document = _read_document(args.file)
    accounts = _accounts(document)
    keep = [a for a in accounts if a.get("accessKey") != args.access_key]
    if len(keep) == len(accounts):
        print(f"tidemq: no account {args.access_key} in {args.file}", file=sys.stderr)
        return 1
    document["accounts"] = tomlkit.aot()
    for a in keep:
        document["accounts"].append(a)
    _write_document(args.file, document)
    print(f"removed account {args.access_key} from {args.file}")
    return EXIT_OK


def _cmd_list(args: argparse.Namespace) -> int:
    try:
        acl = load_acl(args.file)
    except AclError as e:
        raise UsageError(str(e)) from None
    for a in acl.accounts.values():
        rules = ", ".join(f"{r.pattern}={perm_text(r.perm)}" for r in a.topic_rules) or "-"
        groups = ", ".join(f"{r.pattern}={perm_text(r.perm)}" for r in a.group_rules) or "-"
        print(f"{a.access_key}\tadmin={str(a.admin).lower()}\ttopics: default {perm_text(a.default_topic_perm)}; "
              f"{rules}\tgroups: default {perm_text(a.default_group_perm)}; {groups}"
              f"\tfrom: {', '.join(a.white_remote_address) or 'anywhere'}")
    return EXIT_OK
