"""What the cluster layer's commands share: running an async command, `--namesrv` /
`--broker`, and turning client errors into exit codes (store/cli.py has the codes)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from store.cli import EXIT_PROBLEM, UsageError, error, handled, sole_cause, until_signal
from wire.client import TidemqError

__all__ = ["NAMESRV_ENV", "add_source", "handled", "run_async", "source", "until_signal"]

NAMESRV_ENV = "NAMESRV_ADDR"
"""The name server when a command is given neither --namesrv nor --broker (mqadmin's habit)."""


def run_async(args: argparse.Namespace, main: Callable[[], Awaitable[int]]) -> int:
    """Run an async command; a TidemqError (the cluster could not do it) is one line on
    stderr and exit 1, also when a nursery raised it in an exception group (every error in
    the group a TidemqError: the first is told); a bad address is a usage error."""
    logging.basicConfig(level=logging.INFO if getattr(args, "verbose", False) else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        return trio.run(main)
    except TidemqError as e:
        error(str(e))
        return EXIT_PROBLEM
    except ValueError as e:  # bad addresses and the like
        raise UsageError(str(e)) from None
    except BaseExceptionGroup as group:
        cause = sole_cause(group, (TidemqError,))
        if cause is None:
            raise
        error(str(cause))
        return EXIT_PROBLEM


def source(args: argparse.Namespace) -> dict[str, Any]:
    """Producer/PullConsumer/Admin keyword arguments for --namesrv (-n) or --broker, else
    the NAMESRV_ADDR environment variable."""
    if args.namesrv and args.broker:
        raise UsageError("give --namesrv or --broker, not both")
    if args.broker:
        return {"brokers": args.broker}
    namesrv = args.namesrv or os.environ.get(NAMESRV_ENV, "").strip()
    if not namesrv:
        raise UsageError(f"--namesrv ADDR (-n ADDR, or ${NAMESRV_ENV}) or --broker ADDR is required")
    args.namesrv = namesrv  # what the command says it asked
    return {"namesrv": namesrv}


def add_source(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--namesrv", metavar="ADDR",
                   help=f"name server host:port (several separated by ';'; default: ${NAMESRV_ENV})")
    p.add_argument("--broker", metavar="ADDR", action="append",
                   help="a broker's client address, instead of a name server (repeatable)")
    p.add_argument("-v", "--verbose", action="store_true", help="log the client's decisions on stderr")
