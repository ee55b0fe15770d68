"""node/consumers.ConsumerManager's expiry (RocketMQ's channelExpiredTimeout), on trio's
virtual clock: a paused member (connection open, no heartbeats) is dropped at the timeout
and the members waiting on a change are woken at that moment; a member that heartbeats
rarely is never dropped between two of its heartbeats."""

from __future__ import annotations

import pytest
import trio

from node.config import BrokerConfig, ConfigError
from node.tables.consumers import CHANNEL_EXPIRED_S, EXPIRE_EXTRA_S, LOCK_FENCE_S, ConsumerManager


async def test_a_silent_member_is_dropped_at_the_timeout_and_watchers_are_woken(autojump_clock) -> None:
    consumers = ConsumerManager(clock=trio.current_time)
    assert consumers.expire_s == CHANNEL_EXPIRED_S == 120.0
    consumers.heartbeat("G", "paused", ["T"], 1_000)
    consumers.heartbeat("G", "live", ["T"], 1_000)
    start, seen = trio.current_time(), consumers.version("G")
    woken_at: list[float] = []

    async def watch() -> None:
        await consumers.wait_changed("G", seen)
        woken_at.append(trio.current_time())

    async def live_member() -> None:
        while not woken_at:
            consumers.heartbeat("G", "live", ["T"], 1_000)
            await trio.sleep(1)  # poll-exempt: a heartbeat a second, on the autojump clock

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        nursery.start_soon(live_member)
    assert woken_at[0] - start == pytest.approx(CHANNEL_EXPIRED_S, abs=0.01)  # not at a later access
    assert consumers.members("G") == ["live"]


async def test_a_member_that_heartbeats_rarely_is_not_dropped_between_its_heartbeats(autojump_clock) -> None:
    consumers = ConsumerManager(clock=trio.current_time, expire_s=5.0)
    consumers.heartbeat("G", "slow", ["T"], 100_000)  # every 100 s
    await trio.sleep(2 * 100 + EXPIRE_EXTRA_S - 1)  # poll-exempt: the autojump clock moves to just before expiry
    assert consumers.members("G") == ["slow"]
    await trio.sleep(2)  # poll-exempt: and past it
    assert consumers.members("G") == []


def test_channel_expired_timeout_is_a_node_key_with_rocketmqs_default() -> None:
    assert BrokerConfig().channel_expired_timeout == 120_000
    assert BrokerConfig(channel_expired_timeout=2_000).channel_expired_timeout == 2_000
    with pytest.raises(ConfigError, match="channelExpiredTimeout must be in 1000..3600000 ms"):
        BrokerConfig(channel_expired_timeout=10)


async def test_listeners_hear_joins_leaves_and_drops_not_refreshes_or_unlocks(autojump_clock) -> None:
    consumers = ConsumerManager(clock=trio.current_time, expire_s=5.0)
    heard: list[str] = []
    consumers.listeners.append(heard.append)
    consumers.heartbeat("G", "a", ["T"], 1_000)
    consumers.heartbeat("G", "b", ["T"], 1_000)
    consumers.heartbeat("G", "a", ["T"], 1_000)  # a refresh
    assert consumers.lock("G", "a", "T", [0]) == [0]
    consumers.unlock("G", "a", "T", [0])  # a freed lock bumps the version, but no one joined or left
    assert heard == ["G", "G"]
    consumers.unregister("G", "b")
    assert heard == ["G", "G", "G"]
    await trio.sleep(2 * 1 + EXPIRE_EXTRA_S)  # poll-exempt: the autojump clock moves past a's expiry
    assert consumers.members("G") == []
    assert heard == ["G", "G", "G", "G"]


async def test_a_lock_with_a_life_lapses_unless_taken_again(autojump_clock) -> None:
    consumers = ConsumerManager(clock=trio.current_time)
    consumers.heartbeat("G", "a", ["T"], 1_000)
    consumers.heartbeat("G", "b", ["T"], 1_000)
    assert consumers.lock("G", "a", "T", [0, 1], life_s=60) == [0, 1]
    await trio.sleep(30)  # poll-exempt: virtual time, within the locks' life
    assert consumers.lock("G", "a", "T", [1], life_s=60) == [1]  # the re-lock renews queue 1's lock
    assert consumers.lock("G", "b", "T", [0, 1], life_s=60) == []
    await trio.sleep(31)  # poll-exempt: queue 0's life is over, queue 1's is not
    for member in ("a", "b"):
        consumers.heartbeat("G", member, ["T"], 1_000)
    assert consumers.lock_holders("G") == {"T:1": "a"}
    assert consumers.lock("G", "b", "T", [0, 1], life_s=60) == [0]


async def test_a_lease_outlives_its_holders_broken_connection_but_not_its_clean_leave(autojump_clock) -> None:
    consumers = ConsumerManager(clock=trio.current_time)
    consumers.heartbeat("G", "a", ["T"], 1_000, peer="10.0.0.1:1")
    consumers.heartbeat("G", "b", ["T"], 1_000, peer="10.0.0.2:1")
    assert consumers.lock("G", "a", "T", [0], life_s=60) == [0]
    assert consumers.lock("G", "a", "T", [1]) == [1]  # a membership lock (rebalancing)
    consumers.disconnected("10.0.0.1:1")  # a may still be consuming queue 0
    assert consumers.lock("G", "b", "T", [0, 1], life_s=60) == [1]
    assert consumers.lock_holders("G") == {"T:0": "a", "T:1": "b"}
    consumers.heartbeat("G", "a", ["T"], 1_000, peer="10.0.0.1:2")  # back: its renewal keeps it
    assert consumers.lock("G", "a", "T", [0], life_s=60, renew=True) == [0]
    consumers.unregister("G", "a")  # a clean leave lets go at once
    assert consumers.lock("G", "b", "T", [0], life_s=60) == [0]


async def test_a_lease_outlives_its_holders_expiry_until_it_lapses(autojump_clock) -> None:
    consumers = ConsumerManager(clock=trio.current_time, expire_s=5.0)
    consumers.heartbeat("G", "a", ["T"], 1_000)
    assert consumers.lock("G", "a", "T", [0], life_s=60) == [0]
    await trio.sleep(2 + EXPIRE_EXTRA_S + 1)  # poll-exempt: virtual time, past a's expiry (a paused member)
    consumers.heartbeat("G", "b", ["T"], 1_000)
    assert consumers.members("G") == ["b"]
    assert consumers.lock("G", "b", "T", [0], life_s=60) == []  # a may wake and consume within its lease
    await trio.sleep(60)  # poll-exempt: virtual time, past the lease
    consumers.heartbeat("G", "b", ["T"], 1_000)
    assert consumers.lock("G", "b", "T", [0], life_s=60) == [0]


async def test_a_fenced_table_grants_leases_only_to_their_claimed_holders(autojump_clock) -> None:
    consumers = ConsumerManager(clock=trio.current_time, fence_s=LOCK_FENCE_S)
    for member in ("a", "b"):
        consumers.heartbeat("G", member, ["T"], 1_000)
    assert consumers.lock("G", "b", "T", [0, 1], life_s=60) == []  # b never held them
    assert consumers.lock("G", "a", "T", [0], life_s=60, renew=True) == [0]  # a held queue 0
    assert consumers.lock("G", "b", "T", [0], life_s=60, renew=True) == []  # one claim wins
    assert consumers.lock("G", "b", "T", [2]) == [2]  # membership locks are not fenced
    await trio.sleep(LOCK_FENCE_S)  # poll-exempt: virtual time, to the fence's end
    for member in ("a", "b"):
        consumers.heartbeat("G", member, ["T"], 1_000)
    assert consumers.lock("G", "b", "T", [0, 1], life_s=60) == [1]


async def test_a_broadcasting_member_is_listed_but_never_a_change_of_the_group(autojump_clock) -> None:
    consumers = ConsumerManager(clock=trio.current_time, expire_s=5.0)
    told: list[str] = []
    consumers.listeners.append(told.append)
    consumers.heartbeat("G", "clu", ["T"], 1_000)
    seen = consumers.version("G")
    assert consumers.heartbeat("G", "bc", ["T"], 1_000, broadcasting=True) == ["clu"]
    assert consumers.members("G") == ["clu"]
    assert [d["message_model"] for d in consumers.describe("G")] == ["BROADCASTING", "CLUSTERING"]
    assert consumers.unregister("G", "bc") and consumers.version("G") == seen and told == ["G"]
    consumers.heartbeat("G", "bc", ["T"], 1_000, broadcasting=True)
    await trio.sleep(2 + EXPIRE_EXTRA_S + 5)  # poll-exempt: the autojump clock, past both expiries
    assert consumers.members("G") == [] and consumers.describe("G") == []
    assert told == ["G", "G"], "only the clustering member's expiry told the listeners"
