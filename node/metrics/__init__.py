"""Prometheus metrics (docs/metrics.md): the /metrics endpoint, the series builder with its
cardinality limit, and the node's collector that reads its state at scrape time."""


class MetricsError(Exception):
    """The endpoint cannot be set up (its token file); the message names the file. Kept here,
    free of prometheus_client, so a process catches it without importing the exporter."""
