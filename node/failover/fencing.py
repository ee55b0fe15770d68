"""When a master may take and acknowledge writes: the fencing watch's decisions, without I/O.

node/failover/promotion.py feeds `Fencing` what it observes (beats of its event loop, the HA service's
slave counts, epoch checks started and finished) and asks it what to do: check before this
write, hold writes, what a write admitted at time t needs before it is acknowledged. Times
are the caller's monotonic clock (`trio.current_time()`), passed in, so the decisions are
tested by feeding events (tests/node/test_fencing.py) as h11 and wsproto test theirs.

The rules (docs/failover.md, "Fencing and rejoining"):

- **A stall** is a gap over `stall_s` between two beats: the process did not run (SIGSTOP, a
  frozen VM) while a slave may have been promoted and its sockets buffered sends. A write
  admitted before it is acknowledged only after a check that started after it; until one
  confirms, writes are held.
- **A slave that left** (fewer connections than this term had, or than the group has
  slaves registered with the name servers, or a host that was connected this term is not:
  it may be the one being promoted, and another slave connecting does not bring it back):
  every write is acknowledged only after a check that started after its admission.
- **A master that just started** on its old epoch may have missed a promotion of its slave
  that began before it started: writes are acknowledged only after a check that started
  `settle_until` (the promoted slave's settle time) after the start.
- **A check** confirms when a name server or peer answered (or there is none to ask) and no
  stall happened while it was asked: answers sent before a stall may predate a promotion.
"""

from __future__ import annotations

import enum
import math

import attrs

__all__ = ["STALL_S", "Check", "CheckOutcome", "Fencing"]

STALL_S = 0.25
"""A gap between two beats above this is a stall. It is well above the gaps a busy loop
shows (a false stall costs one round trip to the name servers)."""


class CheckOutcome(enum.Enum):
    CONFIRMED = "confirmed"
    """Answered, no stall meanwhile: writes admitted before the check started may be acked."""
    STALE = "stale"
    """A stall happened while asking: the answers may predate a promotion; ask again."""
    UNANSWERED = "unanswered"
    """No name server or peer answered."""


@attrs.frozen
class Check:
    """An epoch check under way: when it started and the stalls seen by then."""

    started: float
    stalls: int


@attrs.define
class Fencing:
    """One master term's fencing state; see the module docstring."""

    last_beat: float
    stall_s: float = STALL_S
    stalls: int = 0
    stalled_at: float = -math.inf
    """When the last stall was noted (the end of the gap)."""
    last_stall_s: float | None = None
    open_seen: int = 0
    accepted_seen: int = 0
    peak_slaves: int = 0
    open_hosts: frozenset[str] = frozenset()
    """The hosts of the slave connections open at the last look."""
    seen_hosts: frozenset[str] = frozenset()
    """Every host a slave of this term connected from (slaves that share a host, as in a
    local cluster, are told apart only by count)."""
    slave_left_at: float | None = None
    """When a slave connection of this term ended (None: as many are open as ever were)."""
    last_check: float = -math.inf
    """When the last finished check started."""
    confirmed_at: float = -math.inf
    """When the last check that confirmed this node's epoch started."""
    needs_check: bool = False
    registered_slaves: int = 0
    """The group's slaves the name servers listed at the last check. One that is registered
    but not connected to this term (it never reconnected after this node started) could be
    promoted unseen: that counts as a slave that left."""
    settle_until: float = -math.inf
    """A master that just started on its old epoch: a promotion of its slave that began
    before (the slave already gone, so no departure is seen) is announced by then (the
    promoted slave waits PROMOTE_SETTLE_S first), so until a check that started then
    confirms, every write waits for one."""

    # ---- what happens ------------------------------------------------------------------------
    def beat(self, now: float) -> float | None:
        """The loop runs at `now`: the gap since the last beat when it is a stall, else None."""
        gap, self.last_beat = now - self.last_beat, now
        if gap <= self.stall_s:
            return None
        self.stalls += 1
        self.stalled_at, self.last_stall_s = now, gap
        self.needs_check = True
        return gap

    def slaves(self, now: float, open_count: int, accepted: int, hosts: frozenset[str] | None = None) -> int:
        """The HA service's open connections, connections accepted so far and (when known)
        the hosts of the open ones, at `now`: how many slave connections ended since the
        last call (a check is then due)."""
        ended = self.open_seen + (accepted - self.accepted_seen) - open_count
        self.open_seen, self.accepted_seen = open_count, accepted
        if hosts is not None:
            self.open_hosts, self.seen_hosts = hosts, self.seen_hosts | hosts
        self.peak_slaves = max(self.peak_slaves, open_count, open_count + ended)
        if ended > 0:
            if self.slave_left_at is None:
                self.slave_left_at = now
            self.needs_check = True
        elif self._all_back(self.registered_slaves):
            self.slave_left_at = None
        return max(ended, 0)

    def registered(self, count: int, now: float) -> None:
        """A check found `count` slaves of the group registered with the name servers."""
        self.registered_slaves = count
        if self.open_seen < count and self.slave_left_at is None:
            self.slave_left_at = now
        elif self._all_back(count):
            self.slave_left_at = None

    def _all_back(self, registered: int) -> bool:
        """As many slave connections as this term ever had and the name servers list, and
        every host that was connected this term is again."""
        return self.open_seen >= max(self.peak_slaves, registered) and self.seen_hosts <= self.open_hosts

    def start_check(self, now: float) -> Check:
        self.needs_check = False  # set again by a stall or a slave leaving while asking
        return Check(now, self.stalls)

    def finish_check(self, check: Check, *, answered: bool) -> CheckOutcome:
        """`answered`: a name server or peer answered without a newer epoch, or there was
        none to ask (a newer epoch is the caller's to act on: it fences)."""
        self.last_check = max(self.last_check, check.started)
        if self.stalls != check.stalls:
            return CheckOutcome.STALE
        if not answered:
            return CheckOutcome.UNANSWERED
        self.confirmed_at = max(self.confirmed_at, check.started)
        return CheckOutcome.CONFIRMED

    # ---- what to do --------------------------------------------------------------------------
    @property
    def held(self) -> bool:
        """A stall no check has confirmed since: writes are refused."""
        return self.stalled_at > self.confirmed_at

    def wants_check(self, now: float, recheck_s: float) -> bool:
        """Ask before going on: a check is due, or (a slave left / writes held) the last one
        started over `recheck_s` ago."""
        # `now >= last_check + recheck_s`, not `now - last_check >= recheck_s`: the sum is the
        # deadline a waiter sleeps until, and the difference can fall an ulp short of it
        settling = self.confirmed_at < self.settle_until <= now and self.last_check < self.settle_until
        return self.needs_check or settling or (
            (self.slave_left_at is not None or self.held) and now >= self.last_check + recheck_s)

    def needed_for(self, admitted: float) -> float:
        """The start time a confirming check must have before a write admitted at `admitted`
        is acknowledged (-inf: none needed)."""
        need = -math.inf
        if self.stalled_at > admitted:
            need = self.stalled_at
        if self.slave_left_at is not None:
            need = max(need, admitted)
        if self.confirmed_at < self.settle_until:
            need = max(need, self.settle_until)
        return need

    def stalled_since(self, admitted: float) -> bool:
        return self.stalled_at > admitted

    def held_reason(self) -> str | None:
        if not self.held:
            return None
        return (f"this node stalled for {self.last_stall_s:.1f} s (its peers may have promoted a slave "
                "meanwhile) and no name server or peer has confirmed its epoch since")
