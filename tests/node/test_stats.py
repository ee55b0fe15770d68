"""node/stats.py: put/get rates over the last minute, on a clock the test moves."""

from __future__ import annotations

from node.stats import BrokerStats, MinuteCounter


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_rate_over_the_seconds_covered_then_the_last_minute():
    clock = Clock()
    c = MinuteCounter(clock)
    c.add(30)
    assert c.per_second() == 0.0, "the current second is not full yet"
    clock.now += 1
    c.add(10)
    clock.now += 1
    assert c.per_second() == 20.0  # 40 events in the 2 full seconds since start
    clock.now += 120
    assert c.per_second() == 0.0 and c.total == 40, "a minute later the old buckets are out of the window"
    for _ in range(60):
        c.add(6)
        clock.now += 1
    assert c.per_second() == 6.0


def test_a_bucket_is_reused_only_for_its_own_second():
    clock = Clock()
    c = MinuteCounter(clock)
    c.add(100)
    clock.now += 60  # the same ring slot, a minute later
    c.add(1)
    clock.now += 1
    assert c.per_second() == round(1 / 60, 1) and c.total == 101


def test_broker_stats_json():
    clock = Clock()
    s = BrokerStats(clock)
    s.put.add(4)
    s.get.add(2)
    clock.now += 2
    assert s.to_json() == {"put_tps": 2.0, "get_tps": 1.0, "put_total": 4, "get_total": 2,
                           "send_requests": 0, "send_groups": 0}

