"""node/failover/fencing.py's decisions, fed events directly (no clock, no sockets): hypothesis
drives beats, slave connections and epoch checks in any order and checks the gate against
the rules stated in docs/failover.md."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from node.failover.fencing import STALL_S, CheckOutcome, Fencing
from tests.examples import examples


def test_a_stall_holds_writes_until_a_check_that_started_after_it_confirms() -> None:
    f = Fencing(last_beat=0.0)
    assert f.beat(0.05) is None and not f.held
    admitted = 0.05
    early = f.start_check(0.06)  # asked before the pause: its answer may predate a promotion
    assert f.beat(2.06) == pytest.approx(2.01) and f.held and f.needs_check
    assert f.needed_for(admitted) == 2.06 and f.stalled_since(admitted)
    assert f.finish_check(early, answered=True) is CheckOutcome.STALE and f.held
    late = f.start_check(2.07)
    assert f.finish_check(late, answered=False) is CheckOutcome.UNANSWERED and f.held
    again = f.start_check(2.2)
    assert f.finish_check(again, answered=True) is CheckOutcome.CONFIRMED
    assert not f.held and f.confirmed_at >= f.needed_for(admitted)
    assert f.needed_for(2.3) == -math.inf  # admitted after the stall, every slave there: nothing to wait for


def test_a_slave_that_left_makes_every_write_wait_for_a_check_after_it() -> None:
    f = Fencing(last_beat=0.0)
    assert f.slaves(0.1, 2, 2) == 0 and f.slave_left_at is None
    assert f.slaves(0.2, 1, 2) == 1 and f.slave_left_at == 0.2 and f.needs_check
    assert f.needed_for(0.3) == 0.3  # a check that started at or after its admission
    check = f.start_check(0.25)
    f.finish_check(check, answered=True)
    assert f.confirmed_at < f.needed_for(0.3)
    assert f.wants_check(0.36, 0.1) and not f.wants_check(0.3, 0.1)
    assert f.slaves(0.4, 2, 3) == 0 and f.slave_left_at is None  # as many as ever: per-write checks end
    assert f.slaves(0.5, 2, 4) == 1 and f.slave_left_at == 0.5  # one came and went between looks


def test_another_slave_connecting_does_not_bring_back_the_one_that_left() -> None:
    """Seed 5062 of the simulation: slave a left (it was being promoted) and slave c, which
    had not connected yet this term, connected: as many connections as ever, but a may be
    the new master, so every write still waits for a check after it until a is back."""
    f = Fencing(last_beat=0.0)
    assert f.slaves(0.1, 1, 1, frozenset({"10.0.0.1"})) == 0 and f.slave_left_at is None
    assert f.slaves(0.2, 0, 1, frozenset()) == 1 and f.slave_left_at == 0.2
    assert f.slaves(0.3, 1, 2, frozenset({"10.0.0.3"})) == 0 and f.slave_left_at == 0.2
    f.registered(1, 0.35)
    assert f.slave_left_at == 0.2 and f.needed_for(0.4) == 0.4
    assert f.slaves(0.5, 2, 3, frozenset({"10.0.0.1", "10.0.0.3"})) == 0 and f.slave_left_at is None


def test_a_restarted_master_acknowledges_only_after_a_check_that_started_once_it_settled() -> None:
    """Its slave may have left before this start, mid-promotion, and announce its epoch only
    after its settle time: a check at start-up alone would confirm the old epoch."""
    f = Fencing(last_beat=0.0, settle_until=0.5, needs_check=True)
    first = f.start_check(0.0)
    assert f.finish_check(first, answered=True) is CheckOutcome.CONFIRMED
    assert f.needed_for(0.1) == 0.5 and f.needed_for(0.7) == 0.5  # every write until one confirms then
    assert not f.wants_check(0.4, 0.1) and f.wants_check(0.5, 0.1)
    settled = f.start_check(0.5)
    assert f.finish_check(settled, answered=True) is CheckOutcome.CONFIRMED
    assert f.needed_for(0.8) == -math.inf and not f.wants_check(0.9, 0.1)


def test_a_registered_slave_that_is_not_connected_counts_as_one_that_left() -> None:
    """It never reconnected after this master started, so its promotion would go unseen."""
    f = Fencing(last_beat=0.0)
    assert f.slaves(0.1, 0, 0) == 0 and f.slave_left_at is None
    f.registered(1, 0.2)
    assert f.slave_left_at == 0.2 and f.needed_for(0.3) == 0.3
    assert f.slaves(0.4, 1, 1) == 0 and f.slave_left_at is None  # it connected
    assert f.slaves(0.5, 0, 1) == 1 and f.slave_left_at == 0.5
    f.registered(0, 0.6)  # its registration expired: none to wait for, but it did leave this term
    assert f.slave_left_at == 0.5


@given(st.lists(st.sampled_from(["connect", "disconnect", "look"]), max_size=60))
def test_slave_counts_report_exactly_the_connections_that_ended(events: list[str]) -> None:
    f, open_count, accepted, ended_since = Fencing(last_beat=0.0), 0, 0, 0
    peak = left = 0
    for i, event in enumerate(events):
        if event == "connect":
            open_count, accepted = open_count + 1, accepted + 1
        elif event == "disconnect" and open_count:
            open_count, ended_since = open_count - 1, ended_since + 1
        elif event == "look":
            assert f.slaves(float(i), open_count, accepted) == ended_since
            peak = max(peak, open_count + ended_since)
            left = ended_since > 0 or (left and open_count < peak)
            assert (f.slave_left_at is not None) == bool(left)
            ended_since = 0


class FencingMachine(RuleBasedStateMachine):
    """Beats, checks and admitted writes in any order: a write admitted before a stall is
    acknowledgeable only once a check that started after the stall confirmed, and writes
    are held exactly while the newest stall is newer than every confirmation."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.f = Fencing(last_beat=0.0)
        self.stalls: list[float] = []
        self.confirmed: list[float] = []
        self.checks: list[tuple[object, float, int]] = []
        self.admitted: list[float] = []

    @rule(dt=st.floats(0.0, 1.0))
    def beat(self, dt: float) -> None:
        before, self.now = self.now, self.now + dt
        gap = self.f.beat(self.now)
        assert (gap is not None) == (self.now - before > STALL_S)
        if gap is not None:
            self.stalls.append(self.now)

    @rule()
    def start_check(self) -> None:
        self.checks.append((self.f.start_check(self.now), self.now, len(self.stalls)))

    @precondition(lambda self: self.checks)
    @rule(i=st.integers(0, 10), answered=st.booleans())
    def finish_check(self, i: int, answered: bool) -> None:
        check, started, stalls = self.checks.pop(i % len(self.checks))
        outcome = self.f.finish_check(check, answered=answered)
        expected = (CheckOutcome.STALE if len(self.stalls) != stalls else
                    CheckOutcome.CONFIRMED if answered else CheckOutcome.UNANSWERED)
        assert outcome is expected
        if expected is CheckOutcome.CONFIRMED:
            self.confirmed.append(started)

    @rule()
    def admit(self) -> None:
        self.admitted.append(self.now)

    @invariant()
    def held_while_the_newest_stall_is_unconfirmed(self) -> None:
        newest = max(self.stalls, default=-math.inf)
        assert self.f.held == (newest > max(self.confirmed, default=-math.inf))

    @invariant()
    def acknowledged_only_after_a_check_that_started_after_the_stall(self) -> None:
        for a in self.admitted:
            later = [d for d in self.stalls if d > a]
            ok = self.f.confirmed_at >= self.f.needed_for(a)
            if later:
                assert ok == any(c >= max(later) for c in self.confirmed)
            else:
                assert ok


FencingMachine.TestCase.settings = settings(max_examples=examples(200), stateful_step_count=40, deadline=None)
test_fencing_machine = FencingMachine.TestCase
