"""What the admin actions share: the table-or-JSON output, the command wrapper (one Admin,
exit codes), target brokers, and the value parsers."""

from __future__ import annotations

import argparse
import datetime
import sys
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from store.cli import UsageError, print_json

from .common import handled, run_async, source
from .tables import rows_table

UNIQ_KEY = "UNIQ_KEY"
"""The property RocketMQ's clients set to each message's own id (what queryMsgByUniqueKey finds)."""


def emit(args: argparse.Namespace, rows: Sequence[Mapping[str, Any]], title: str, *,
          table_rows: Sequence[Mapping[str, Any]] | None = None) -> None:
    """`rows` as JSON lines (--json), else `table_rows` (default: the same rows) as one table."""
    if getattr(args, "json", False):
        for row in rows:
            print_json(dict(row))
        return
    from rich.console import Console

    Console(width=None if sys.stdout.isatty() else 200).print(
        rows_table(rows if table_rows is None else table_rows, title))


def admin_command(body: Callable[[argparse.Namespace, Any], Awaitable[int]], *,
                   check: Callable[[argparse.Namespace], None] | None = None) -> Callable[[argparse.Namespace], int]:
    """An action: `check(args)` (usage errors, before anything connects), then
    `body(args, admin)` with an Admin on --namesrv / --broker; exit codes as store/cli.py."""
    def run(args: argparse.Namespace) -> int:
        from ..client import Admin

        src = source(args)
        if check is not None:
            check(args)

        async def main() -> int:
            async with Admin(**src) as admin:
                return await body(args, admin)

        return run_async(args, main)

    return handled(run)


def target_brokers(args: argparse.Namespace, *, brokers_key: str = "broker_names") -> dict[str, Any]:
    if args.cluster and args.on_broker:
        raise UsageError("give -c CLUSTER or -b BROKER, not both")
    return {"cluster": args.cluster, brokers_key: args.on_broker}


def parse_bool(text: str) -> bool:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def parse_time_ms(text: str) -> int | None:
    """-s of resetOffsetByTime: "now" (None: each queue's end), milliseconds since the epoch,
    an ISO 8601 time (local time unless it names a zone), or mqadmin's
    yyyy-MM-dd#HH:mm:ss:SSS."""
    if text == "now":
        return None
    if text.isdigit():
        return int(text)
    try:
        if "#" in text:
            moment = datetime.datetime.strptime(text, "%Y-%m-%d#%H:%M:%S:%f")
        else:
            moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"-s {text!r} is not a time: give now, milliseconds since the epoch, "
                         "2026-11-24T10:30:00 or 2026-11-24#10:30:00:000") from None
    return int(moment.timestamp() * 1000)


def new_uniq_key() -> str:
    """A message's own id, 32 hex digits as RocketMQ's MessageClientIDSetter makes them."""
    return uuid.uuid4().hex.upper()


def config_key(args: argparse.Namespace) -> None:
    """-k names a key of the node's config: canonical camelCase, or a usage error."""
    from node.live_config import canonical_key

    if args.key is not None:
        try:
            args.key = canonical_key(args.key)
        except ValueError as e:
            raise UsageError(str(e)) from None
