"""May this slave be promoted without losing what a consumer may have read? (no I/O)

Kafka's `unclean.leader.election.enable=false` as the default (issue 42, item 2): a manual
promotion goes ahead only for a slave of its master's in-sync set that holds the confirm
offset, the offset below which consumers may have read (ha/master.py `confirm_limit`).
Who decides depends on what can still be asked:

- **The master answers** (its `status` came back, asked whether or not the slave's HA
  connection is up): its in-sync set decides, matched by the slave's end of the HA connection
  (the 4.x HA wire names no slave); a slave it cannot name (a proxy or NAT on the HA link)
  is judged by the offsets alone. The master's confirm offset counts too. A slave that
  holds the master's whole log loses nothing, so it passes even when the set left it out
  (it reported too long ago: haMaxTimeSlaveNotCatchup).
- **The master is gone** (the usual reason to promote): the slave's own log end against
  the newest confirm offset it learned over HA. An in-sync slave always holds it (the
  confirm offset is the least ack of the set); a slave that fell out learned a confirm
  offset past its end, unless it was cut off before the master sent one. So the slave must
  also have caught up with its master lately: the master keeps a slave in its set for
  haMaxTimeSlaveNotCatchup after it last caught up, and no longer (ha/master.py `members`);
  past that (less a margin for the link's delay; the time is the wall clock's, kept in its
  checkpoint across restarts), or when it never caught up, the master may have confirmed
  alone what it lacks: refused.

`unclean` promotes anyway; the verdict names the range the promotion drops: from the
slave's end to the highest offset known confirmed or stored by the master.
"""

from __future__ import annotations

import attrs

from wire.protocol import StatusReply, WirePromoteCheck

__all__ = ["MasterView", "assess"]

SILENCE_MARGIN_S = 2.0
"""How much sooner than haMaxTimeSlaveNotCatchup a slave that cannot ask its master stops
counting itself in its set (a quarter of it at most): the delay of the frame it judges by."""


@attrs.frozen
class MasterView:
    """The master's answer, as far as the check needs it."""

    address: str
    max_offset: int
    confirm_offset: int | None
    slaves: tuple[str, ...]
    """HA connection addresses of its connected slaves."""
    in_sync: tuple[str, ...]
    """Those of them in its in-sync set."""

    @classmethod
    def of(cls, address: str, status: StatusReply) -> MasterView:
        """The confirm offset is at least the master's `acked_floor`: one restarted after an
        abnormal exit may have acknowledged its whole recovered log before, whatever confirm
        offset it knows now (storage seed 1104: after a group power loss the master knew 0,
        and a slave that had lost everything passed as clean)."""
        rows = status.ha.slaves or []
        confirms = [c for c in (status.confirm_offset, status.acked_floor) if c is not None]
        return cls(address, status.max_phy_offset, max(confirms) if confirms else None,
                   tuple(r.address for r in rows), tuple(sorted(r.address for r in rows if r.in_sync)))


def assess(address: str, *, end: int, whole_end: int, known_confirm: int | None, ha_local: str | None,
           master: MasterView | None, master_address: str | None, asked: bool = True,
           caught_up_s: float | None = None, max_silence_s: float = 15.0,
           in_doubt: bool = False) -> WirePromoteCheck:
    """The verdict for the slave at `address` whose CommitLog ends at `end` (its last whole
    record at `whole_end`: a promotion cuts the partial one), that last learned
    `known_confirm` and connects to its master from `ha_local`; `master` is None when the
    master at `master_address` did not answer, or was not `asked` (an unclean promotion).
    `caught_up_s`: seconds since it last caught up with its master (None: never; kept in its
    checkpoint across restarts), judged against haMaxTimeSlaveNotCatchup `max_silence_s` when
    the master is gone. `in_doubt`: the slave restarted after an abnormal exit (its
    checkpoint, and the confirm offset it kept, may be gone)."""
    confirms = [c for c in (known_confirm, master.confirm_offset if master else None) if c is not None]
    confirm = max(confirms) if confirms else None
    in_set = None
    if master is not None and ha_local is not None and ha_local in master.slaves:
        in_set = ha_local in master.in_sync
    drop_to = max(end, confirm or 0, master.max_offset if master else 0)
    behind = confirm is not None and end < confirm
    margin = min(SILENCE_MARGIN_S, max_silence_s / 4)
    # the master gone, a slave that has not caught up with it lately cannot tell what it
    # confirmed meanwhile: judged when it learned a confirm offset (a 4.x master sends none,
    # and promises nothing), and when its log is in doubt, whose checkpoint may have lost it
    # (storage seed 4438: a slave that lost its whole log to a power loss was promoted clean
    # over its master's new epoch, which consumers had read)
    stale = master is None and asked and (confirm is not None or in_doubt) and (
        caught_up_s is None or caught_up_s > max_silence_s - margin)
    holds_all = master is not None and end >= master.max_offset  # out of the set by silence alone
    if master is not None:
        where = f"master {master.address} at offset {master.max_offset}, in-sync set: " + (
            ", ".join(master.in_sync) or "the master alone")
    else:
        how = "unreachable" if asked else "not asked (unclean)"
        where = f"master {master_address or 'unknown'} {how}: the confirm offset is the last this slave learned"
    if in_set is False and not holds_all:
        why = (f"{address} (HA connection {ha_local}) is not in the in-sync set: its CommitLog ends at {end}, "
               f"the confirm offset is {_offset(confirm)} ({where})")
    elif behind:
        why = (f"{address} is behind the confirm offset: its CommitLog ends at {end}, the confirm offset is "
               f"{_offset(confirm)} ({where})")
    elif stale:
        since = "never" if caught_up_s is None else f"{caught_up_s:.1f} s ago"
        why = (f"{address} last caught up with its master {since}, and its master keeps a slave in its "
               f"in-sync set only {max_silence_s:g} s after that (haMaxTimeSlaveNotCatchup): the master may "
               f"have confirmed alone records it lacks; its CommitLog ends at {end}, the confirm offset it "
               f"learned is {_offset(confirm)} ({where})")
    else:
        if master is None:
            named = "judged by the confirm offset it learned"
        elif in_set:
            named = "in the in-sync set"
        elif in_set is False:
            named = "not in the in-sync set (silent too long) but it holds the master's whole log"
        else:
            named = "not named by the master (a proxy or NAT on the HA link?): judged by offsets"
        why = (f"{address} holds the confirm offset {_offset(confirm)} (its CommitLog ends at {end}); {named} "
               f"({where})")
    clean = (in_set is not False or holds_all) and not behind and not stale
    if not clean:
        why += f"; promoting it drops CommitLog [{whole_end}, {drop_to})"
    return WirePromoteCheck(
        address=address, clean=clean, reason=why, max_offset=end, confirm_offset=confirm,
        master_address=master.address if master is not None else master_address,
        master_reachable=master is not None, master_offset=master.max_offset if master is not None else None,
        in_sync=list(master.in_sync) if master is not None else None, in_set=in_set,
        drop_from=min(whole_end, end), drop_to=drop_to)


def _offset(confirm: int | None) -> str:
    return "unknown (no tidemq master ever sent one)" if confirm is None else str(confirm)
