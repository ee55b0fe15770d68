"""`tidemq` commands of the cluster layer, registered by the `tidemq` entry (tidemq/cli.py):

- cluster/cli_client.py: `namesrv start`, `send`, `consume`, `query`, `status`
- cluster/cli_cluster.py: `cluster up/status/down/kill/start` (the local launcher)
- cluster/cli_admin.py: `admin ...`, with RocketMQ mqadmin's names as aliases
- cluster/drill_cli.py: `drill NAME`, failover drills on a scratch 2m-2s-sync cluster (cluster/drill.py)

Exit codes and output helpers are store/cli.py's.
"""

from __future__ import annotations

import argparse

from .cli_admin import add_admin_commands
from .cli_client import add_client_commands
from .cli_cluster import add_cluster_commands
from .drill_cli import add_commands as add_drill_commands

__all__ = ["add_commands"]


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register namesrv, send, consume, query, status, cluster, admin and drill."""
    add_client_commands(subparsers)
    add_cluster_commands(subparsers)
    add_admin_commands(subparsers)
    add_drill_commands(subparsers)
