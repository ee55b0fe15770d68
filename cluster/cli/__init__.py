"""`tidemq` commands of the cluster layer, registered by the `tidemq` entry (tidemq/cli.py):

- cluster/cli/client.py: `namesrv start`, `send`, `consume`, `query`, `status`
- cluster/cli/cluster.py: `cluster up/status/down/kill/start` (the local launcher)
- cluster/cli/admin.py: `admin ...`, with RocketMQ mqadmin's names as aliases (its actions: admin_queries.py, admin_changes.py; what they share: admin_common.py)
- cluster/console/cli.py: `console`, the web console (cluster/console/)
- cluster/drills/cli.py: `drill NAME`, failover drills on a scratch 2m-2s-sync cluster (cluster/drills/framework.py)

Exit codes and output helpers are store/cli.py's.
"""

from __future__ import annotations

import argparse

__all__ = ["add_commands"]

CLIENT_GROUPS = ("namesrv", "send", "consume", "query", "status")


def add_commands(subparsers: argparse._SubParsersAction, only: str | None = None) -> None:
    """Register namesrv, send, consume, query, status, cluster, admin, console and drill, or only the
    module of the group `only` names (imported here, so a `send` loads no launcher or drill)."""
    if only is None or only in CLIENT_GROUPS:
        from .client import add_client_commands
        add_client_commands(subparsers)
    if only in (None, "cluster"):
        from .cluster import add_cluster_commands
        add_cluster_commands(subparsers)
    if only in (None, "admin"):
        from .admin import add_admin_commands
        add_admin_commands(subparsers)
    if only in (None, "console"):
        from ..console.cli import add_console_commands
        add_console_commands(subparsers)
    if only in (None, "drill"):
        from ..drills.cli import add_commands as add_drill_commands
        add_drill_commands(subparsers)
