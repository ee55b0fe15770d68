"""Prometheus metrics (docs/metrics.md): the /metrics endpoint, the series builder with its
cardinality limit, and the node's collector that reads its state at scrape time."""
