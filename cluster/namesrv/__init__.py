"""The name server: brokers register and heartbeat, clients ask where a topic lives.

config.py reads its file (its requests are wire/protocol/namesrv.py's), route_table.py what it knows (no I/O),
server.py the process (`tidemq namesrv start`).

`NameServer` and `RouteTable` are imported on first use: the launcher and every `tidemq cluster`
command read name server configs through this package, and the server's imports (the node's
client port, the client library) were half a second of each such command's start-up."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import DEFAULT_PORT, NamesrvConfig, load_namesrv_config, namesrv_config_from_mapping

if TYPE_CHECKING:
    from .route_table import RouteTable
    from .server import NameServer

__all__ = ["DEFAULT_PORT", "NameServer", "NamesrvConfig", "RouteTable",
           "load_namesrv_config", "namesrv_config_from_mapping"]


def __getattr__(name: str) -> Any:
    if name == "NameServer":
        from .server import NameServer

        return NameServer
    if name == "RouteTable":
        from .route_table import RouteTable

        return RouteTable
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
