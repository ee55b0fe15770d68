"""The `tidemq` console script.

Commands are grouped: `tidemq <group> <action> ...`. Each group registers its actions in an
`_add_<group>_commands(subparsers)` function; each action sets `handler` to a function
taking the parsed arguments and returning the exit code.

Exit codes: 0 success, 1 the command ran but found a problem (e.g. a damaged store),
2 usage errors and unusable inputs (a message on stderr, never a traceback).

Groups:
  store   offline, read-only tools over a store directory (dump, verify)
  (to come: node start, cluster ..., send, ...)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from store import tools
from store.tools import StoreToolError

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_USAGE = 2

Handler = Callable[[argparse.Namespace], int]


class CommandError(Exception):
    """A command cannot run (bad input, missing directory): reported on stderr, exit 2."""


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, separators=(",", ":")))


def _error(message: str) -> None:
    print(f"tidemq: error: {message}", file=sys.stderr)


def _non_negative_int(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


# ---------------------------------------------------------------------------------------
# store: offline tools (store/tools.py)


def _store_dir(path: str) -> str:
    if not os.path.isdir(path):
        raise CommandError(f"store directory {path!r} does not exist")
    return path


def _cmd_store_dump(args: argparse.Namespace) -> int:
    status = EXIT_OK
    for record in tools.dump(_store_dir(args.dir), from_offset=args.from_offset, limit=args.limit):
        _print_json(record)
        if "error" in record:
            status = EXIT_PROBLEM
    sys.stdout.flush()
    return status


def _cmd_store_verify(args: argparse.Namespace) -> int:
    summary = tools.verify(_store_dir(args.dir))
    _print_json(summary)
    sys.stdout.flush()
    return EXIT_OK if summary["clean"] else EXIT_PROBLEM


def _add_store_commands(subparsers: argparse._SubParsersAction) -> None:
    store = subparsers.add_parser(
        "store",
        help="offline, read-only tools over a store directory",
        description="Offline, read-only tools over a store directory. They take no lock "
        "and can run while a node uses the store.",
    )
    store.set_defaults(group_parser=store)
    actions = store.add_subparsers(dest="action", metavar="ACTION")

    dump = actions.add_parser(
        "dump",
        help="print every CommitLog record as one JSON object per line",
        description="Print every CommitLog record as one JSON object per line (BLANK "
        "fillers as {\"offset\",\"blank\"}); stops at the end of data or at the first "
        "invalid record (printed as {\"offset\",\"error\"}, exit 1).",
    )
    dump.add_argument("dir", metavar="DIR", help="store root directory (storePathRootDir)")
    dump.add_argument(
        "--from", dest="from_offset", metavar="OFFSET", type=_non_negative_int,
        help="start at this CommitLog offset; it must be a record start",
    )
    dump.add_argument(
        "--limit", metavar="N", type=_non_negative_int, help="print at most N records"
    )
    dump.set_defaults(handler=_cmd_store_dump)

    verify = actions.add_parser(
        "verify",
        help="check the CommitLog and print a JSON summary (exit 1 when damaged)",
        description="Walk every CommitLog segment, check record structure and body CRCs, "
        "and print one JSON summary. Exit 0 when clean, 1 when damaged.",
    )
    verify.add_argument("dir", metavar="DIR", help="store root directory (storePathRootDir)")
    verify.set_defaults(handler=_cmd_store_verify)


# ---------------------------------------------------------------------------------------
# other groups register here: _add_node_commands (node start), _add_cluster_commands, ...


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tidemq", description="tidemq: a replicated, RocketMQ-style message store."
    )
    groups = parser.add_subparsers(dest="group", metavar="COMMAND")
    _add_store_commands(groups)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line `argv` (default sys.argv[1:]) and return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:  # no command at all, or a group without an action
        getattr(args, "group_parser", parser).print_usage(sys.stderr)
        _error(f"{args.group!r} needs an action" if args.group else "a command is required")
        return EXIT_USAGE
    try:
        return handler(args)
    except (CommandError, StoreToolError) as e:
        _error(str(e))
        return EXIT_USAGE
    except BrokenPipeError:
        # the reader went away (e.g. `| head`): not an error; keep Python quiet at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except OSError as e:
        _error(f"{e.filename or ''}: {e.strerror or e}".lstrip(": "))
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
