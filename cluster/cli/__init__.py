"""`tidemq` commands of the cluster layer, registered by the `tidemq` entry (tidemq/cli.py):

- cluster/cli/client.py: `namesrv start`, `send`, `consume`, `query`, `status`
- cluster/cli/cluster.py: `cluster up/status/down/kill/start` (the local launcher)
- cluster/cli/admin.py: `admin ...`, with RocketMQ mqadmin's names as aliases (its actions: admin_queries.py, admin_changes.py; what they share: admin_common.py)
- cluster/drills/cli.py: `drill NAME`, failover drills on a scratch 2m-2s-sync cluster (cluster/drills/framework.py)

Exit codes and output helpers are store/cli.py's.
"""

from __future__ import annotations

import argparse

from ..drills.cli import add_commands as add_drill_commands
from .admin import add_admin_commands
from .client import add_client_commands
from .cluster import add_cluster_commands

__all__ = ["add_commands"]


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register namesrv, send, consume, query, status, cluster, admin and drill."""
    add_client_commands(subparsers)
    add_cluster_commands(subparsers)
    add_admin_commands(subparsers)
    add_drill_commands(subparsers)
