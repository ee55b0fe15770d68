"""The `tidemq` console script: assembles each layer's own commands, and nothing else.

This module sits above every package (store ← ha ← node ← cluster ← chaos, pipeline), so
no layer imports the one above it to build the command line: each layer's `cli.py` exposes
`add_commands(subparsers)` and this module calls them in order. An action sets
`handler=fn` with `fn(args) -> int`, the exit code (store/cli.py: 0 ok, 1 the command ran
and found a problem, 2 usage error or unusable input).

`TidemqParser` names an unknown option or command and suggests the nearest valid one
(`tidemq send --topik Orders hi` → "unknown option --topik; did you mean --topic?") before
argparse would complain about a missing required option instead; every subparser is a
`TidemqParser` too, since argparse builds subparsers with the parent's class.

A command line that names a known group imports only the layer that registers it (and, in
the cluster layer, only that group's module): every process the launcher, the drills and
the tests start (`node start`, `namesrv start`, `send`, ...) would otherwise pay for every
layer's imports, ~0.3 s each. `--help`, no command and an unknown one build every layer.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import sys
from collections.abc import Callable, Sequence

from store.cli import EXIT_OK, EXIT_USAGE, UsageError, error, sole_cause

Handler = Callable[[argparse.Namespace], int]
_FLAG = re.compile(r"^--?[A-Za-z]")

# Each layer's `cli` module and the command groups its add_commands registers, bottom layer
# first (tests/tidemq/test_cli.py checks the groups against what each layer registers).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("store.cli", ("store",)),
    ("node.cli", ("tls", "acl", "node")),
    ("cluster.cli", ("namesrv", "send", "consume", "query", "status", "cluster", "admin", "console", "drill")),
    ("chaos.cli", ("chaos",)),
    ("pipeline.cli", ("pipeline",)),
]


class TidemqParser(argparse.ArgumentParser):
    """An ArgumentParser that names an unknown option or command with the nearest valid one."""

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        argv = list(sys.argv[1:] if args is None else args)
        self._check_names(argv)
        return super().parse_known_args(argv, namespace)

    def _check_names(self, argv: list[str]) -> None:
        """Look at this parser's own part of `argv` (up to its subcommand) for unknown
        options, and at the subcommand name itself."""
        subcommands = self._subcommands()
        known = [s for action in self._actions for s in action.option_strings]
        expects_value = {s for a in self._actions for s in a.option_strings if a.nargs != 0}
        skip_next = False
        for token in argv:
            if skip_next:
                skip_next = False
                continue
            if token == "--":
                return
            if _FLAG.match(token):
                name = token.split("=", 1)[0]
                if not self._known_option(name, known):
                    self._unknown("option", name, known)
                skip_next = "=" not in token and self._resolve(name, known) in expects_value
                continue
            if subcommands is not None:  # the first positional is the subcommand
                if token not in subcommands:
                    self._unknown("command", token, list(subcommands))
                return

    def _subcommands(self) -> dict[str, argparse.ArgumentParser] | None:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return action.choices  # type: ignore[return-value]
        return None

    def _resolve(self, name: str, known: list[str]) -> str | None:
        if name in known:
            return name
        prefixed = [k for k in known if k.startswith(name) and name.startswith("--")]
        return prefixed[0] if len(prefixed) == 1 else None

    def _known_option(self, name: str, known: list[str]) -> bool:
        if self._resolve(name, known) is not None:
            return True
        # "-n5"-style short options with an attached value
        return len(name) > 2 and not name.startswith("--") and name[:2] in known

    def _unknown(self, kind: str, name: str, valid: list[str]) -> None:
        near = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
        hint = f"; did you mean {near[0]}?" if near else ""
        if kind == "command":
            hint += f" (commands: {', '.join(valid)})" if not near else ""
        self.error(f"unknown {kind} {name}{hint}")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for `argv`: only the named group's when `argv` names a known one first
    (nothing else is parsed differently: groups are independent subparsers), else every
    layer's (`--help`, no command, an unknown command and its nearest name)."""
    parser = TidemqParser(
        prog="tidemq", description="tidemq: a replicated, RocketMQ-style message store.",
    )
    groups = parser.add_subparsers(dest="group", metavar="COMMAND")
    wanted = _named_group(argv)
    for module, names in LAYERS:
        if wanted is None or names == (wanted,):
            importlib.import_module(module).add_commands(groups)
        elif wanted in names:  # a layer of several groups registers the one named
            importlib.import_module(module).add_commands(groups, only=wanted)
    _add_login_options(parser)
    return parser


def _named_group(argv: Sequence[str] | None) -> str | None:
    """The command group `argv` starts with when it is a known one (the top level has no
    options but --help, which wants every group)."""
    if not argv or argv[0] not in {name for _, names in LAYERS for name in names}:
        return None
    return argv[0]


def _add_login_options(parser: argparse.ArgumentParser) -> None:
    """`--user` and `--secret-file` on every action that talks to a cluster (docs/security.md):
    the account the command's connections log in with, for clusters with aclEnable. An
    offline action (`offline=True` in its defaults: `store dump/query/verify`, the `acl` and
    `tls` file tools, `chaos list/sim/proxy`) gets none."""
    sub = parser._subparsers._group_actions[0] if parser._subparsers else None  # type: ignore[union-attr]
    if sub is None:
        taken = {"--user", "--secret-file"} & set(parser._option_string_actions)
        offline = parser.get_default("offline")
        if parser.get_default("handler") is not None and not taken and not offline:  # (`acl add-user` has its own)
            login = parser.add_argument_group("login (aclEnable)")
            login.add_argument("--user", metavar="ACCESS_KEY",
                               help="log in as this account (default: $TIDEMQ_USER)")
            login.add_argument("--secret-file", dest="login_secret_file", metavar="FILE",
                               help="the account's secret (default: $TIDEMQ_SECRET_FILE)")
            login.add_argument("--tls-ca", metavar="FILE",
                               help="connect with TLS, checking servers with this CA (default: $TIDEMQ_TLS_CA)")
        return
    assert isinstance(sub, argparse._SubParsersAction)  # the one action of add_subparsers' group
    for child in set(sub.choices.values()):
        _add_login_options(child)


def _apply_login(args: argparse.Namespace) -> None:
    """Make `--user`/`--secret-file` the process's login and `--tls-ca` its TLS, and its
    children's (the env)."""
    from wire.credentials import Credentials, CredentialsError, set_default_credentials
    from wire.tls import TlsError, TlsSettings, set_default_client_tls

    tls_ca = getattr(args, "tls_ca", None)
    if tls_ca:
        try:
            set_default_client_tls(TlsSettings("enforcing", ca_file=tls_ca).client_context())
        except TlsError as e:
            raise UsageError(str(e)) from None
        os.environ["TIDEMQ_TLS_CA"] = os.path.abspath(tls_ca)
    user = getattr(args, "user", None)
    secret_file = getattr(args, "login_secret_file", None)
    if user is None and secret_file is None:
        return
    user = user or os.environ.get("TIDEMQ_USER")
    secret_file = secret_file or os.environ.get("TIDEMQ_SECRET_FILE")
    if not user or not secret_file:
        raise UsageError("--user and --secret-file go together (or TIDEMQ_USER and TIDEMQ_SECRET_FILE)")
    try:
        set_default_credentials(Credentials.from_file(user, secret_file))
    except CredentialsError as e:
        raise UsageError(str(e)) from None
    os.environ["TIDEMQ_USER"] = user
    os.environ["TIDEMQ_SECRET_FILE"] = os.path.abspath(secret_file)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line `argv` (default sys.argv[1:]) and return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:  # no command at all, or a group without an action
        group_parser = getattr(args, "group_parser", parser)
        group_parser.print_usage(sys.stderr)
        error(f"{args.group!r} needs an action" if args.group else "a command is required")
        return EXIT_USAGE
    try:
        _apply_login(args)
        return handler(args)
    except UsageError as e:
        error(str(e))
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except OSError as e:
        return _os_error(e)
    except BaseExceptionGroup as group:  # the same, raised out of a trio nursery: one line too
        cause = sole_cause(group, (UsageError, OSError))
        if cause is None:
            raise
        if isinstance(cause, OSError):
            return _os_error(cause)
        error(str(cause))
        return EXIT_USAGE


def _os_error(e: OSError) -> int:
    if isinstance(e, BrokenPipeError):
        # the reader went away (e.g. `| head`): not an error; keep Python quiet at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    error(f"{e.filename or ''}: {e.strerror or e}".lstrip(": "))
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
