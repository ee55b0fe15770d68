"""The Dashboard's numbers: put/get TPS per broker and per topic over time.

No background task polls the cluster: each time a Dashboard asks for its data (every few
seconds while one is open), the nodes' `status` (per broker) and `stats_all` (per topic)
are read once, unless the last sample is younger than MIN_INTERVAL_S, and appended to a
bounded history that every open Dashboard shares. The TPS are the nodes' own (messages
per second over their last minute)."""

from __future__ import annotations

import collections
import time
from typing import Any

import attrs
import trio

from ..client import Admin

MIN_INTERVAL_S = 2.0
HISTORY = 300
"""Samples kept: 10 minutes at one every 2 s."""
TOP_TOPICS = 8


@attrs.define
class Sample:
    at_s: float
    brokers: dict[str, tuple[float, float]]  # "group/id" → (put_tps, get_tps)
    topics: dict[str, float]  # topic → put_tps
    groups: dict[str, float]  # "topic / group" → get_tps


@attrs.define
class History:
    samples: collections.deque[Sample] = attrs.field(factory=lambda: collections.deque(maxlen=HISTORY))
    lock: trio.Lock = attrs.field(factory=trio.Lock)

    async def sample(self, admin: Admin) -> None:
        """Read the cluster once, unless the newest sample is recent enough."""
        async with self.lock:
            now = time.time()
            if self.samples and now - self.samples[-1].at_s < MIN_INTERVAL_S:
                return
            brokers = {}
            for s in await admin.status():
                if s.status is not None and s.status.stats is not None:
                    brokers[f"{s.broker_name}/{s.broker_id}"] = (s.status.stats.put_tps, s.status.stats.get_tps)
            puts, gets = await admin.stats_all()
            self.samples.append(Sample(now, brokers, {p["topic"]: p["put_tps"] for p in puts},
                                       {f"{g['topic']} / {g['group']}": g["get_tps"] for g in gets}))

    def series(self) -> dict[str, Any]:
        """uPlot's shape: one time axis (epoch seconds) and a list of values per series
        (None where a series had no value), for brokers' put and get and the busiest topics."""
        samples = list(self.samples)
        times = [round(s.at_s, 1) for s in samples]
        brokers = sorted({b for s in samples for b in s.brokers})
        totals: collections.Counter[str] = collections.Counter()
        for s in samples:
            totals.update(s.topics)
        topics = [t for t, _ in sorted(totals.items(), key=lambda kv: -kv[1])[:TOP_TOPICS]]
        latest = samples[-1] if samples else None
        return {
            "t": times,
            "put": {b: [s.brokers.get(b, (None, None))[0] for s in samples] for b in brokers},
            "get": {b: [s.brokers.get(b, (None, None))[1] for s in samples] for b in brokers},
            "topics": {t: [s.topics.get(t) for s in samples] for t in topics},
            "now": {
                "topics": sorted(latest.topics.items()) if latest else [],
                "groups": sorted(latest.groups.items()) if latest else [],
            },
        }
