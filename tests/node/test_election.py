"""node/failover/election.py: the etcd controller's decisions, fed state directly (no etcd)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from node.failover.election import (
    Step,
    awaits_unknown,
    eligible,
    hand_over_to,
    longer_logs,
    riding_out_outage,
    step,
    write_refusal,
)
from store.config import BrokerRole

SET = {"master": "m:1", "in_sync": ["s1:1"], "epoch": 3, "role": "SYNC_MASTER"}


def test_only_the_sets_master_and_members_may_campaign() -> None:
    assert eligible(SET, address="m:1", is_master=False, fenced=False)
    assert eligible(SET, address="s1:1", is_master=False, fenced=False)
    assert not eligible(SET, address="s2:1", is_master=False, fenced=False)  # lagging: not in the set
    assert not eligible(SET, address="s1:1", is_master=False, fenced=True)
    assert eligible(None, address="m:1", is_master=True, fenced=False)  # a new group: its master starts it
    assert not eligible(None, address="s1:1", is_master=False, fenced=False)


@given(st.one_of(st.none(), st.integers(1, 3)), st.integers(0, 3), st.booleans(), st.booleans(), st.booleans())
def test_each_tick_does_one_thing(holder, own, busy, may_campaign, is_master) -> None:
    got = step(holder, own, busy=busy, may_campaign=may_campaign, is_master=is_master)
    if busy:
        assert got is Step.WAIT  # a role change is under way: nothing is decided meanwhile
    elif holder is None:
        assert got is (Step.CAMPAIGN if may_campaign else Step.WAIT)
    elif holder == own:
        assert got is (Step.PUBLISH if is_master else Step.WAIT)
    else:
        assert got is Step.FOLLOW


def test_writes_need_a_live_lease_unless_riding_out_an_outage() -> None:
    kw = dict(holder="m:1", address="m:1", broker_name="broker-a", last_error=None)
    assert write_refusal(5.0, leading=True, lease_deadline=6.0, riding_out=False, **kw) is None
    ran_out = write_refusal(6.0, leading=True, lease_deadline=6.0, riding_out=False, **kw)
    assert ran_out is not None and ran_out.startswith("fenced: the leadership lease of broker-a ran out")
    other = write_refusal(5.0, leading=False, lease_deadline=-math.inf, riding_out=False,
                          **{**kw, "holder": "s1:1"})
    assert other == "not the elected master of broker-a (etcd holder: s1:1)"
    assert write_refusal(9.0, leading=True, lease_deadline=6.0, riding_out=True, **kw) is None


def test_only_a_sync_master_that_led_rides_out_an_etcd_outage() -> None:
    assert riding_out_outage(leading=True, reachable=False, fenced=False, role=BrokerRole.SYNC_MASTER)
    assert not riding_out_outage(leading=True, reachable=False, fenced=False, role=BrokerRole.ASYNC_MASTER)
    assert not riding_out_outage(leading=True, reachable=None, fenced=False, role=BrokerRole.SYNC_MASTER)
    assert not riding_out_outage(leading=False, reachable=False, fenced=False, role=BrokerRole.SYNC_MASTER)
    assert not riding_out_outage(leading=True, reachable=False, fenced=True, role=BrokerRole.SYNC_MASTER)


def test_a_member_leaves_the_election_to_members_with_longer_logs_until_the_deferral_ends() -> None:
    """Issue 45, seeds 8 and 28: the old master lost its unflushed tail in a power loss (or the
    whole group lost power); the member whose log ends furthest is elected first."""
    ends = {"m:1": 100, "s1:1": 500}
    assert longer_logs(SET, ends, address="m:1", own_end=100, now=1.0, until=5.0) == ["s1:1"]
    assert longer_logs(SET, ends, address="m:1", own_end=100, now=5.0, until=5.0) == []  # it may be gone
    assert longer_logs(SET, ends, address="s1:1", own_end=500, now=1.0, until=5.0) == []  # the longest
    assert longer_logs(SET, {**ends, "s1:1": 100}, address="m:1", own_end=100, now=1.0, until=5.0) == []  # a tie
    assert longer_logs(SET, {}, address="m:1", own_end=100, now=1.0, until=5.0) == []  # not published
    assert longer_logs(SET, {}, address="m:1", own_end=100, now=1.0, until=5.0, await_unknown=True) == ["s1:1"]
    assert longer_logs({**SET, "in_sync": ["s2:1"]}, {"s1:1": 900}, address="m:1", own_end=100, now=1.0,
                       until=5.0) == []  # not a member
    assert longer_logs(None, ends, address="m:1", own_end=100, now=1.0, until=5.0) == []


def test_members_that_published_no_end_are_awaited_after_a_start_and_while_the_log_is_in_doubt() -> None:
    """A tick after this node found the key vacant (within a lease of its start), and for the
    whole deferral while its own log is in doubt (a crash, a power loss or a damaged record
    cut it, and it has not caught up since): storage seed 142, a slave that had cut its log
    at a damaged record was elected on it after an etcd outage had expired every end."""
    base = {"interval_s": 1.0, "ttl_s": 3.0}
    assert awaits_unknown(100.5, vacant_since=100.0, started_at=99.0, log_in_doubt=False, **base)
    assert not awaits_unknown(101.0, vacant_since=100.0, started_at=99.0, log_in_doubt=False, **base)
    assert not awaits_unknown(100.5, vacant_since=100.0, started_at=90.0, log_in_doubt=False, **base)  # long up
    assert awaits_unknown(105.0, vacant_since=100.0, started_at=90.0, log_in_doubt=True, **base)
    # with those members unknown the short log defers; once they publish, only longer ones
    # count, and at the deferral's end it campaigns whatever it awaits (they may be gone)
    outage_set = {"master": "b:1", "in_sync": ["a:1", "c:1"], "epoch": 2}
    assert longer_logs(outage_set, {}, address="a:1", own_end=1248, now=101.0, until=106.0,
                       await_unknown=True) == ["b:1", "c:1"]
    assert longer_logs(outage_set, {"b:1": 28134, "c:1": 1000}, address="a:1", own_end=1248, now=101.0,
                       until=106.0, await_unknown=True) == ["b:1"]
    assert longer_logs(outage_set, {}, address="a:1", own_end=1248, now=106.0, until=106.0,
                       await_unknown=True) == []


def test_a_log_in_doubt_hands_the_election_to_a_more_up_to_date_log_by_epoch_then_end() -> None:
    """Storage seed 4744: slave b, elected alone (epoch 2), lost its promotion and its
    unflushed tail to a power loss; the old master a, fenced and outside the set, still held
    the PUT_OK messages b had acknowledged from its page cache. b names a instead of
    campaigning. A longer log of an older epoch is not more up to date (its tail past the
    newer epoch's start is cut when it rejoins)."""
    logs = {"a:1": (1, 43158), "b:1": (1, 33142)}
    assert hand_over_to(logs, address="b:1", own_epoch=1, own_end=33142) == "a:1"
    assert hand_over_to(logs, address="a:1", own_epoch=1, own_end=43158) is None
    assert hand_over_to({"a:1": (1, 43158)}, address="b:1", own_epoch=2, own_end=100) is None
    assert hand_over_to({"a:1": (3, 10), "c:1": (2, 90000)}, address="b:1", own_epoch=2, own_end=100) == "a:1"
    assert hand_over_to({"a:1": (2, 100)}, address="b:1", own_epoch=2, own_end=100) is None  # equal: campaign
    assert hand_over_to({}, address="b:1", own_epoch=2, own_end=100) is None
