"""A histogram fed a group at a time: `observe(value, n)` counts n observations of one value
in one step, so the put path records a whole send group (one turn) for the cost of one."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

__all__ = ["MESSAGE_SIZE_BUCKETS", "RPC_LATENCY_BUCKETS_MS", "GroupHistogram"]

MESSAGE_SIZE_BUCKETS = (1024.0, 4 * 1024.0, 512 * 1024.0, 1024 * 1024.0, 2 * 1024 * 1024.0, 4 * 1024 * 1024.0)
"""RocketMQ 5's rocketmq_message_size buckets (bytes): 1k, 4k, 512k, 1M, 2M, 4M."""
RPC_LATENCY_BUCKETS_MS = (1.0, 3.0, 5.0, 10.0, 50.0, 100.0, 500.0, 1000.0, 3000.0, 5000.0)
"""rocketmq_rpc_latency buckets (milliseconds), RocketMQ 5's remoting boundaries."""


class GroupHistogram:
    """Counts per bucket (upper bounds `bounds`, plus +Inf) and the sum of the values."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float, n: int = 1) -> None:
        self.counts[bisect_left(self.bounds, value)] += n
        self.sum += value * n

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, float]]:
        """(le, cumulative count) pairs as Prometheus buckets, +Inf last."""
        out: list[tuple[str, float]] = []
        total = 0
        for bound, c in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += c
            out.append(("+Inf" if bound == float("inf") else repr(bound), float(total)))
        return out
