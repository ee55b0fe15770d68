"""The etcd controller's decisions, without I/O (node/failover/controller.py does the I/O).

Each tick the controller reads the group's keys and asks `step` what to do; before each
write it asks `write_refusal`. Both take what the controller last read from etcd and the
node's own state as arguments, so the rules of the module docstring of controller.py are
tested by feeding them (tests/node/test_election.py).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from store.config import BrokerRole

__all__ = ["Step", "awaits_unknown", "eligible", "hand_over_to", "longer_logs", "riding_out_outage", "step",
           "write_refusal"]


class Step(enum.Enum):
    CAMPAIGN = "campaign"
    """No holder: take the key (this node may campaign)."""
    PUBLISH = "publish"
    """This node holds the key: as master, publish the in-sync set."""
    FOLLOW = "follow"
    """Another node holds it: a master fences, a slave follows the holder."""
    WAIT = "wait"
    """Nothing now: a role change is under way, or this node may not campaign."""


def eligible(sync_set: Mapping[str, Any] | None, *, address: str, is_master: bool, fenced: bool) -> bool:
    """Only the set's master and its in-sync members campaign; a new group (no set yet) is
    started by whichever node serves as master; a fenced node never does."""
    if fenced:
        return False
    if sync_set is None:
        return is_master
    return address == sync_set.get("master") or address in (sync_set.get("in_sync") or [])


def longer_logs(sync_set: Mapping[str, Any] | None, ends: Mapping[str, int], *, address: str, own_end: int,
                now: float, until: float, await_unknown: bool = False) -> list[str]:
    """The set's other members (its master and in-sync slaves) whose published CommitLog
    end (`ends`) is past this node's: it leaves the election to them until `until`, so the
    member holding the most, and so the confirm offset, is elected. A master that lost its
    unflushed tail in a crash or power loss is not elected over a slave that holds it.
    `await_unknown`: members that published no end yet count too (this node just
    restarted, its peers may have as well: a group's power loss). Empty: it may campaign."""
    if now >= until or sync_set is None:
        return []
    members = {sync_set.get("master"), *(sync_set.get("in_sync") or [])} - {address, None}
    return sorted(a for a in members if isinstance(a, str)
                  and (ends.get(a, -1) > own_end or (await_unknown and a not in ends)))


def awaits_unknown(now: float, *, vacant_since: float, started_at: float, interval_s: float, ttl_s: float,
                   log_in_doubt: bool) -> bool:
    """Do members that published no log end count as longer (`longer_logs`)? For a tick
    after this node found the key vacant, while within a lease of its start (its peers may
    have restarted too: a group's power loss); and while its own log is in doubt (it
    restarted after a crash or a power loss, or its recovery cut a damaged record, and it
    has not caught up with a master since): it may lack what it acknowledged, and after an
    etcd outage every published end may have expired (storage seed 142: a slave that cut its
    log at a damaged record was elected on it, 74 PUT_OK lost). Either way only until
    `longer_logs`'s `until`: a member that never publishes is taken for gone."""
    return log_in_doubt or now < min(vacant_since + interval_s, started_at + ttl_s)


def hand_over_to(logs: Mapping[str, tuple[int, int]], *, address: str, own_epoch: int, own_end: int) -> str | None:
    """A node whose log is in doubt, about to campaign: the node whose published log
    (last epoch, end: `logs`) is the most up to date, if it is more than this node's (Raft's
    comparison). Such a node may sit outside the set: a slave elected alone, which lost its
    unflushed tail (and the promotion it never began) to a power loss, is the set's only
    member, while the old master it fenced still holds every PUT_OK the slave acknowledged
    from its page cache (storage seed 4744). This node then names that node the set's master
    instead of campaigning (controller.py `_hand_over`). None: campaign."""
    best = max(((epoch, end, a) for a, (epoch, end) in logs.items() if a != address), default=None)
    if best is None or (best[0], best[1]) <= (own_epoch, own_end):
        return None
    return best[2]


def step(holder_lease: int | None, own_lease: int, *, busy: bool, may_campaign: bool, is_master: bool) -> Step:
    """`holder_lease`: the lease the leadership key is held under (None: no key). `busy`: a
    role change is under way (or the term's services are not up)."""
    if busy:
        return Step.WAIT
    if holder_lease is None:
        return Step.CAMPAIGN if may_campaign else Step.WAIT
    if holder_lease == own_lease:
        return Step.PUBLISH if is_master else Step.WAIT
    return Step.FOLLOW


def riding_out_outage(*, leading: bool, reachable: bool | None, fenced: bool, role: BrokerRole) -> bool:
    """etcd is unreachable and this SYNC_MASTER held the key when it last reached it: it
    keeps writing while every in-sync member acks each write."""
    return leading and reachable is False and not fenced and role is BrokerRole.SYNC_MASTER


def write_refusal(now: float, *, leading: bool, lease_deadline: float, holder: str | None, address: str,
                  broker_name: str, last_error: str | None, riding_out: bool) -> str | None:
    """Why this node may not take a write now (None: it may): it does not hold the key, or
    its lease ran out, unless it rides out an etcd outage."""
    if riding_out:
        return None
    if not leading:
        why = (f"etcd holder: {holder}" if holder and holder != address
               else "its leadership lease expired" if holder else "no holder elected yet")
        return f"not the elected master of {broker_name} ({why})"
    if now >= lease_deadline:
        return (f"fenced: the leadership lease of {broker_name} ran out "
                f"({last_error or 'not renewed in time'}); no write until it is renewed")
    return None
