"""What the cluster layer's commands share: running an async command, `--namesrv` /
`--broker`, and turning client errors into exit codes (store/cli.py has the codes)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from node.client import TidemqError
from store.cli import EXIT_PROBLEM, UsageError, error, handled, until_signal

__all__ = ["add_source", "handled", "run_async", "source", "until_signal"]


def run_async(args: argparse.Namespace, main: Callable[[], Awaitable[int]]) -> int:
    """Run an async command; a TidemqError (the cluster could not do it) is one line on
    stderr and exit 1; a bad address is a usage error."""
    logging.basicConfig(level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return trio.run(main)
    except TidemqError as e:
        error(str(e))
        return EXIT_PROBLEM
    except ValueError as e:  # bad addresses and the like
        raise UsageError(str(e)) from None


def source(args: argparse.Namespace) -> dict[str, Any]:
    """Producer/PullConsumer/Admin keyword arguments for --namesrv or --broker."""
    if args.namesrv and args.broker:
        raise UsageError("give --namesrv or --broker, not both")
    if not args.namesrv and not args.broker:
        raise UsageError("--namesrv ADDR (or --broker ADDR) is required")
    return {"namesrv": args.namesrv} if args.namesrv else {"brokers": args.broker}


def add_source(p: argparse.ArgumentParser) -> None:
    p.add_argument("--namesrv", metavar="ADDR", help="name server host:port (several separated by ';')")
    p.add_argument("--broker", metavar="ADDR", action="append",
                   help="a broker's client address, instead of a name server (repeatable)")
    p.add_argument("-v", "--verbose", action="store_true", help="log the client's decisions on stderr")
