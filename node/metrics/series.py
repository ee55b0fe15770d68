"""One scrape's metric families, with the cardinality limit (metricsOtelCardinalityLimit).

Collectors build their families afresh at each scrape from the state they read, so a series
costs nothing between scrapes. Per-topic and per-group series are `bounded`: once a scrape
holds `limit` of them, the rest are refused and counted (`refused`, exported as
rocketmq_metrics_series_refused with its running total), as RocketMQ's OpenTelemetry SDK
drops attributes past its cardinality limit.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric

from .histogram import GroupHistogram

__all__ = ["Series"]


class Series:
    """Families by name; every sample carries the process's `base` labels (cluster,
    node_type, node_id, ...) then its own."""

    def __init__(self, base: Mapping[str, str], limit: int) -> None:
        self.base_names = list(base)
        self.base_values = list(base.values())
        self.limit = limit
        self.bounded = 0  # bounded series added this scrape
        self.refused = 0  # bounded series refused this scrape
        self._families: dict[str, Metric] = {}
        self._labels: dict[str, tuple[str, ...]] = {}

    def _family(self, kind: str, name: str, doc: str, labels: Sequence[str], unit: str) -> Metric:
        family = self._families.get(name)
        if family is None:
            if not doc:
                raise ValueError(f"{name}: the first use of a family gives its help text")
            names = self.base_names + list(labels)
            family_type = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily,
                           "histogram": HistogramMetricFamily}[kind]
            family = self._families[name] = family_type(name, doc, labels=names, unit=unit)
            self._labels[name] = tuple(labels)
        elif self._labels[name] != tuple(labels):
            raise ValueError(f"{name}: labels {tuple(labels)} differ from {self._labels[name]}")
        return family

    def _admit(self, bounded: bool) -> bool:
        if not bounded:
            return True
        if self.bounded >= self.limit:
            self.refused += 1
            return False
        self.bounded += 1
        return True

    def declare(self, kind: str, name: str, doc: str, labels: Sequence[str] = (), unit: str = "") -> None:
        """A family with no samples yet: it is listed (HELP, TYPE) even when empty."""
        self._family(kind, name, doc, labels, unit)

    def gauge(self, name: str, doc: str, value: float, labels: Mapping[str, str] | None = None, *,
              unit: str = "", bounded: bool = False) -> None:
        labels = labels or {}
        family = self._family("gauge", name, doc, list(labels), unit)
        if self._admit(bounded):
            family.add_metric(self.base_values + list(labels.values()), value)  # type: ignore[attr-defined]

    def counter(self, name: str, doc: str, value: float, labels: Mapping[str, str] | None = None, *,
                unit: str = "", bounded: bool = False) -> None:
        labels = labels or {}
        family = self._family("counter", name, doc, list(labels), unit)
        if self._admit(bounded):
            family.add_metric(self.base_values + list(labels.values()), value)  # type: ignore[attr-defined]

    def histogram(self, name: str, doc: str, hist: GroupHistogram, labels: Mapping[str, str] | None = None, *,
                  unit: str = "", bounded: bool = False) -> None:
        labels = labels or {}
        family = self._family("histogram", name, doc, list(labels), unit)
        if self._admit(bounded):
            family.add_metric(self.base_values + list(labels.values()),  # type: ignore[attr-defined]
                              buckets=hist.cumulative(), sum_value=hist.sum)

    def families(self) -> Iterator[Metric]:
        yield from self._families.values()
