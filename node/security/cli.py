"""`tidemq acl add-user | remove-user | list`: edit an ACL file without writing secrets in it.

The file is edited with tomlkit, so an operator's comments and layout stay as they were;
the new entry holds the SCRAM verifier (`scram = "SCRAM-SHA-256$..."`), never the secret.
A running node or name server picks the change up within a second, and a new account's
first login at once (node/security/guard.py).
"""

from __future__ import annotations

import argparse
import getpass
import sys

from store.cli import EXIT_OK, UsageError, handled
from wire.credentials import CredentialsError, read_secret_file

from .acl import AclError, load_acl, perm_text
from .files import (
    DEV_HOSTS,
    check_permissions,
    new_secret,
    put_account,
    remove_account,
    write_dev_certs,
)

__all__ = ["add_commands"]


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    _add_tls_commands(subparsers)
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
    add.add_argument("--remoting-secret-file", metavar="FILE",
                     help="RocketMQ clients (ACL 1.0) sign with the secret in FILE, made (random, 0600) if missing; "
                     "it must differ from the account's secret (docs/security.md)")
    add.set_defaults(handler=handled(_cmd_add_user))

    remove = actions.add_parser("remove-user", help="remove an account (its open connections lose access)")
    remove.add_argument("access_key", metavar="ACCESS_KEY")
    remove.add_argument("-f", "--file", required=True, metavar="ACL_FILE")
    remove.set_defaults(handler=handled(_cmd_remove_user), offline=True)  # a file tool: no login options

    show = actions.add_parser("list", help="the accounts and their permissions (never their verifiers)")
    show.add_argument("-f", "--file", required=True, metavar="ACL_FILE")
    show.set_defaults(handler=handled(_cmd_list), offline=True)  # a file tool: no login options


def _add_tls_commands(subparsers: argparse._SubParsersAction) -> None:
    tls = subparsers.add_parser("tls", help="certificates for tlsMode", description="TLS files (docs/security.md).")
    tls.set_defaults(group_parser=tls)
    actions = tls.add_subparsers(dest="action", metavar="ACTION")
    make = actions.add_parser(
        "make-dev-certs", help="a local CA and one certificate for every process of a local layout",
        description="Write ca.pem (the CA: tlsCaFile, and clients' --tls-ca), node.pem and node-key.pem "
        "(tlsCertFile and tlsKeyFile of every node and name server: one certificate for the hosts given) "
        "into DIR. For development and tests: a production cluster's certificates come from its own CA.",
    )
    make.add_argument("directory", metavar="DIR")
    make.add_argument("--host", action="append", default=[], metavar="HOST",
                      help="a name or IP the certificate is valid for (default: 127.0.0.1, ::1 and localhost)")
    make.add_argument("--days", type=int, default=365, help="how long the certificate is valid (default 365)")
    make.set_defaults(handler=handled(_cmd_make_dev_certs), offline=True)  # a file tool: no login options


def _cmd_make_dev_certs(args: argparse.Namespace) -> int:
    try:
        paths = write_dev_certs(args.directory, args.host or DEV_HOSTS, args.days)
    except ValueError as e:
        raise UsageError(str(e)) from None
    print(f"wrote {', '.join(paths.values())} (valid {args.days} days)")
    return EXIT_OK


def _secret(args: argparse.Namespace) -> str:
    if args.generate:
        if not args.secret_file:
            raise UsageError("--generate needs --secret-file: where to write the new secret")
        return new_secret(args.secret_file)
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


def _cmd_add_user(args: argparse.Namespace) -> int:
    try:  # check every value before asking for the secret
        check_permissions((args.default_topic_perm, args.default_group_perm), [*args.topic_perm, *args.group_perm])
    except ValueError as e:
        raise UsageError(str(e)) from None
    try:
        replaced = put_account(
            args.file, args.access_key, _secret(args), admin=args.admin,
            default_topic_perm=args.default_topic_perm, default_group_perm=args.default_group_perm,
            topic_perms=args.topic_perm, group_perms=args.group_perm,
            white_remote_address=args.white_remote_address, remoting_secret_file=args.remoting_secret_file,
        )
    except AclError as e:
        raise UsageError(str(e)) from None
    print(f"{'updated' if replaced else 'added'} account {args.access_key} in {args.file}")
    return EXIT_OK


def _cmd_remove_user(args: argparse.Namespace) -> int:
    try:
        removed = remove_account(args.file, args.access_key)
    except AclError as e:
        raise UsageError(str(e)) from None
    if not removed:
        print(f"tidemq: no account {args.access_key} in {args.file}", file=sys.stderr)
        return 1
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
              f"\tfrom: {', '.join(a.white_remote_address) or 'anywhere'}"
              f"\tremoting: {'signed' if a.remoting_secret else 'no'}")
    return EXIT_OK
