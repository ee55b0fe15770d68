"""The name server's /metrics (docs/metrics.md): its registered brokers and route changes,
read from the route table at scrape time, and the security counters the nodes export too."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from node.metrics.endpoint import MetricsEndpoint, token_from
from node.metrics.series import Series
from wire.tls import handshake_failures

from .config import NamesrvConfig
from .route_table import RouteTable

__all__ = ["NamesrvCollector", "namesrv_endpoint"]

SERIES_LIMIT = 50_000  # the name server's series are few: (cluster, role, alive) per row


class NamesrvCollector(Collector):
    def __init__(self, table: RouteTable, address: Callable[[], str],
                 security: Callable[[], dict[str, Any] | None]) -> None:
        self.table = table
        self.address = address
        self.security = security

    def collect(self) -> Iterator[Metric]:
        out = Series({"node_type": "namesrv", "node_id": self.address()}, SERIES_LIMIT)
        out.declare("gauge", "rocketmq_namesrv_brokers", "Brokers registered with this name server",
                    ("cluster", "role", "alive"))
        for (cluster, role, alive), n in sorted(self.table.counts().items()):
            out.gauge("rocketmq_namesrv_brokers", "", n,
                      {"cluster": cluster, "role": role, "alive": "true" if alive else "false"})
        out.counter("rocketmq_namesrv_route_changes_total", "Changes of what routes tell clients (a broker came, "
                    "left, moved, changed role, epoch, topics or write permission)", self.table.route_changes)
        view = self.security()
        if view is not None:
            out.counter("rocketmq_auth_failed_logins_total", "Logins refused (unknown account, bad signature)",
                        int(view.get("failed_logins") or 0))
            out.counter("rocketmq_auth_refusals_total", "Requests refused for lack of permission",
                        int(view.get("refused") or 0))
        out.counter("rocketmq_tls_handshake_failures_total", "TLS handshakes this process refused or that failed",
                    handshake_failures())
        yield from out.families()


def namesrv_endpoint(cfg: NamesrvConfig, collector: NamesrvCollector,
                     tls: Any) -> MetricsEndpoint:
    """The endpoint on metricsPromExporterHost (default listenAddress):metricsPromExporterPort
    (MetricsError: the token file cannot be read)."""
    return MetricsEndpoint([collector], host=cfg.metrics_prom_exporter_host or cfg.listen_address,
                           port=cfg.metrics_prom_exporter_port, tls=tls,
                           bearer_token=token_from(cfg.metrics_prom_bearer_token_file))
