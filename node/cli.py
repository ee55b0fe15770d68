"""`tidemq node start`: run one node (master or slave) in the foreground.

Registered by the `tidemq` entry (tidemq/cli.py) through `add_commands`; exit codes and
error helpers are store/cli.py's. When stderr is a terminal, the store's recovery at start
shows a progress bar (CommitLog bytes validated of the total).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from typing import TextIO

from store.cli import EXIT_OK, EXIT_PROBLEM, UsageError, error, handled
from store.recovery import RecoveryProgress


@contextlib.contextmanager
def recovery_progress_bar(stream: TextIO | None = None) -> Iterator[RecoveryProgress | None]:
    """A rich bar on `stream` (stderr) for `open_store(recovery_progress=...)` (validated
    bytes, total bytes), when it is a terminal (else None: logs get no control characters);
    it disappears once recovery is done."""
    stream = stream or sys.stderr
    if not stream.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    progress = Progress(TextColumn("recovering the CommitLog"), BarColumn(), DownloadColumn(),
                        TransferSpeedColumn(), console=Console(file=stream), transient=True)
    task = progress.add_task("recover", total=None)
    started = False

    def update(validated: int, total: int) -> None:
        nonlocal started
        if not started:
            progress.start()
            started = True
        progress.update(task, completed=validated, total=total)
        if validated >= total:
            progress.stop()

    try:
        yield update
    finally:
        progress.stop()


def _cmd_node_start(args: argparse.Namespace) -> int:
    import trio

    from node.broker import Broker
    from node.config import ConfigError, check_ports_free, load_config
    from node.failover.truncation import CutFailed
    from node.logs import setup_logging
    from node.security.acl import AclError
    from node.tables.jsonfile import ConfigFileError
    from store.message_store import StoreLockedError
    from wire.tls import TlsError

    try:
        cfg = load_config(args.config, base_dir=args.base_dir)
        check_ports_free(cfg)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    setup_logging(cfg)
    serving = False

    with recovery_progress_bar() as progress:
        try:  # reads the role and epoch history stored beside the store
            node = Broker(cfg, recovery_progress=progress)
        except (ConfigFileError, ConfigError, AclError, TlsError) as e:
            raise UsageError(str(e)) from None

        async def serve() -> None:
            nonlocal serving
            async with trio.open_nursery() as nursery:
                address = await nursery.start(node.run)
                serving = True
                # the launcher and tests wait for this line
                print(f"READY {cfg.broker_name} {node.cfg.broker_id} {address}", flush=True)

        try:
            trio.run(serve)
        except KeyboardInterrupt:  # Ctrl-C before the signal handler was installed
            return 130
        except Exception as e:
            cause = _single_cause(e)
            if isinstance(cause, StoreLockedError | ConfigFileError):
                raise UsageError(str(cause)) from None
            if isinstance(cause, OSError) and not serving:  # e.g. a port taken since the check
                raise UsageError(f"{cfg.source}: cannot start: {cause}") from None
            if isinstance(cause, CutFailed):  # the disk failed a role change's cut: the node stops
                error(f"{cfg.source}: {cause}")
                return EXIT_PROBLEM
            raise
    return EXIT_OK


def _single_cause(exc: BaseException) -> BaseException:
    """The one exception inside nested one-member groups (trio nurseries wrap start-up errors)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def add_commands(subparsers: argparse._SubParsersAction, only: str | None = None) -> None:
    """Register `tidemq node start` and `tidemq acl/tls ...` (or only the group `only` names)."""
    if only != "node":  # (imported here: a node start needs none of the ACL file tools)
        from .security import cli as security_cli

        security_cli.add_commands(subparsers)
    if only not in (None, "node"):
        return
    node = subparsers.add_parser(
        "node", help="run a node", description="Run one tidemq node (master or slave)."
    )
    node.set_defaults(group_parser=node)
    actions = node.add_subparsers(dest="action", metavar="ACTION")
    start = actions.add_parser(
        "start",
        help="run a node in the foreground until SIGTERM/SIGINT",
        description="Start the node described by a broker config file (.toml or "
        ".properties) in the foreground. Prints 'READY <brokerName> <brokerId> <address>' "
        "on stdout once it serves clients; SIGTERM or SIGINT stops it gracefully (exit 0). "
        "Exit 2 on a config error or when a port or the store is in use.",
    )
    start.add_argument("-c", "--config", required=True, metavar="FILE", help="broker config file")
    start.add_argument(
        "--base-dir", metavar="DIR",
        help="resolve a relative storePathRootDir against DIR (default: the working directory)",
    )
    start.set_defaults(handler=handled(_cmd_node_start))
