"""The name server: brokers register and heartbeat, clients ask where a topic lives.

config.py reads its file (its requests are wire/protocol/namesrv.py's), route_table.py what it knows (no I/O),
server.py the process (`tidemq namesrv start`)."""

from .config import DEFAULT_PORT, NamesrvConfig, load_namesrv_config, namesrv_config_from_mapping
from .route_table import RouteTable
from .server import NameServer

__all__ = ["DEFAULT_PORT", "NameServer", "NamesrvConfig", "RouteTable",
           "load_namesrv_config", "namesrv_config_from_mapping"]
