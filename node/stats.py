"""Put and get counters of one node over the last minute (RocketMQ's BrokerStatsManager).

`status` answers with them so `tidemq status` shows each broker's put/get TPS the way
RocketMQ's `brokerStatus` does (putTps, getTransferedTps). Counts go into one-second
buckets of a 60-slot ring; a rate is the sum of the last minute's full seconds divided by
the seconds covered (less than 60 just after start).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from wire.protocol import WireNodeStats

from .metrics.histogram import MESSAGE_SIZE_BUCKETS, RPC_LATENCY_BUCKETS_MS, GroupHistogram

WINDOW_S = 60


class MinuteCounter:
    """Events per second over a sliding minute, in O(1) per event."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._started = int(clock())
        self._buckets = [0] * WINDOW_S
        self._seconds = [-1] * WINDOW_S  # which second each bucket holds
        self.total = 0

    def add(self, n: int = 1) -> None:
        now = int(self._clock())
        i = now % WINDOW_S
        if self._seconds[i] != now:
            self._seconds[i], self._buckets[i] = now, 0
        self._buckets[i] += n
        self.total += n

    def per_second(self) -> float:
        """Average events per second over the last full minute (or since start)."""
        now = int(self._clock())
        first = max(now - WINDOW_S, self._started)
        count = sum(b for b, s in zip(self._buckets, self._seconds, strict=True) if first <= s < now)
        span = now - first
        return round(count / span, 1) if span > 0 else 0.0


class BrokerStats:
    """Messages stored by puts and messages returned by pulls; send requests and the
    CommitLog groups they were appended in (how much group commit gathers). Per topic and
    per (topic, consumer group) too, for mqadmin statsAll (`by_topic`): counted once per
    send group and per pull, not per message."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.put = MinuteCounter(clock)
        self.get = MinuteCounter(clock)
        self.send_requests = 0
        self.send_groups = 0
        self.topic_put: dict[str, MinuteCounter] = {}
        self.group_get: dict[tuple[str, str], MinuteCounter] = {}
        # for /metrics (node/metrics/): bytes in and out, message sizes, send latency; fed
        # once per send group or pull like the counters above
        self.topic_put_bytes: dict[str, int] = {}
        self.group_get_bytes: dict[tuple[str, str], int] = {}
        self.message_size: dict[str, GroupHistogram] = {}  # by topic
        self.send_latency: dict[str, GroupHistogram] = {}  # by outcome: "success", "failure"

    def add_put(self, topic: str, n: int) -> None:
        counter = self.topic_put.get(topic)
        if counter is None:
            counter = self.topic_put[topic] = MinuteCounter(self._clock)
        counter.add(n)

    def add_get(self, topic: str, group: str | None, n: int, size: int = 0) -> None:
        """`n` messages (`size` bytes) of `topic` pulled for `group` ("" when the pull named none)."""
        key = (topic, group or "")
        counter = self.group_get.get(key)
        if counter is None:
            counter = self.group_get[key] = MinuteCounter(self._clock)
        counter.add(n)
        self.group_get_bytes[key] = self.group_get_bytes.get(key, 0) + size

    def add_put_bytes(self, topic: str, n: int, size: int) -> None:
        """`n` messages of `topic` stored in one send group, `size` bytes in all: the size
        histogram takes them at their mean size (one step per topic and group)."""
        self.topic_put_bytes[topic] = self.topic_put_bytes.get(topic, 0) + size
        if n <= 0:
            return
        hist = self.message_size.get(topic)
        if hist is None:
            hist = self.message_size[topic] = GroupHistogram(MESSAGE_SIZE_BUCKETS)
        hist.observe(size / n, n)

    def add_send_latency(self, ms: float, n: int, ok: bool) -> None:
        """`n` sends of one group answered `ms` after the group was appended."""
        key = "success" if ok else "failure"
        hist = self.send_latency.get(key)
        if hist is None:
            hist = self.send_latency[key] = GroupHistogram(RPC_LATENCY_BUCKETS_MS)
        hist.observe(ms, n)

    def by_topic(self) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
        """(per topic: put_tps, put_total; per topic and group: get_tps, get_total), sorted."""
        topics = [{"topic": t, "put_tps": c.per_second(), "put_total": c.total}
                  for t, c in sorted(self.topic_put.items())]
        groups = [{"topic": t, "group": g, "get_tps": c.per_second(), "get_total": c.total}
                  for (t, g), c in sorted(self.group_get.items())]
        return topics, groups

    def to_json(self) -> dict[str, Any]:
        return self.view().to_wire()

    def view(self) -> WireNodeStats:
        """The node's totals as `status` answers them."""
        return WireNodeStats(put_tps=self.put.per_second(), get_tps=self.get.per_second(),
                             put_total=self.put.total, get_total=self.get.total,
                             send_requests=self.send_requests, send_groups=self.send_groups)
