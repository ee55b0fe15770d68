"""A server speaking Toxiproxy 2.x's HTTP API that proxies TCP under trio (no Toxiproxy
server can be installed on these machines). Driven through the toxiproxy-python client;
see chaos.network for how scenarios pick this server or a real one (TOXIPROXY_URL)."""

from .api import VERSION, ToxiproxyServer, run_server
from .link import Link, Proxy
from .toxics import DEFAULTS, STREAMS, Toxic, ToxicError, parse_toxic

__all__ = ["DEFAULTS", "STREAMS", "VERSION", "Link", "Proxy", "Toxic", "ToxicError",
           "ToxiproxyServer", "parse_toxic", "run_server"]
