"""What a node decides from the epochs others tell it, without I/O.

node/failover/promotion.py asks the name servers, the group's peers and the master it is about
to replicate from (the `epoch` op), hands their answers here and acts on what comes back:
fence and rejoin, replicate, refuse, or cut a divergent tail first. So the rules are tested
by feeding answers (tests/node/test_failover_epochs.py), as fencing.py's are.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import attrs

from store.config import BrokerRole
from store.epoch_file import EpochEntry, EpochFileCache
from wire.protocol.replies import EpochReply

__all__ = ["Admit", "Cut", "EpochView", "Refuse", "admission", "newer_master"]


@attrs.frozen
class EpochView:
    """One answer about the group's master: its epoch, client address, and who said so."""

    epoch: int
    address: str
    source: str
    master: bool = True
    """The node serves as master (brokerId 0, or a role other than SLAVE): only such a view
    of the same epoch makes a master that yields ties fence."""


def newer_master(views: Iterable[EpochView], own_epoch: int, own_addresses: Collection[str], *,
                 yield_ties: bool = False) -> EpochView | None:
    """The newest view when it names another node with a newer epoch than this one's: the
    group moved on, this master must fence (None: keep serving). `yield_ties`: the same
    epoch counts as newer (a master restarted after an abnormal exit, whose epoch number a
    slave promoted meanwhile may have picked too: the promoted one keeps it)."""
    views = list(views)
    newest = max(views, key=lambda v: v.epoch, default=None)
    if newest is None or newest.address in own_addresses:
        return None
    if newest.epoch > own_epoch:
        return newest
    if yield_ties and newest.epoch == own_epoch:
        return next((v for v in views if v.epoch == own_epoch and v.master and v.address not in own_addresses), None)
    return None


@attrs.frozen
class Admit:
    """Replicate: take the master's history (`entries`), whose newest epoch is `epoch`
    (None for a RocketMQ 4.x master with no epochs in play)."""

    epoch: int | None
    entries: tuple[EpochEntry, ...] = ()


@attrs.frozen
class Refuse:
    """Do not replicate from this master. `follow_namesrv`: it is not (or no longer) the
    group's master, so follow the name servers' instead of a static address. `geometry`:
    a config mismatch that would corrupt the store (shown in status until it is fixed)."""

    reason: str
    follow_namesrv: bool = False
    geometry: bool = False


@attrs.frozen
class Cut:
    """This log has a tail the master's history does not share: rejoin with it cut at `offset`."""

    offset: int
    reason: str


def admission(answer: EpochReply | None, *, address: str | None, own: EpochFileCache,
              newest_seen: int, max_offset: int, segment_size: int) -> Admit | Refuse | Cut:
    """May this slave replicate from the master whose `epoch` answer is `answer` (None: it
    did not answer)? RocketMQ's findConsistentPoint decides where a divergent log is cut.
    Reads `own` (the slave's history), never changes it."""
    theirs_size = answer.mapped_file_size_commit_log if answer else None
    if theirs_size is not None and theirs_size != segment_size:
        return Refuse(f"master {address} has mappedFileSizeCommitLog={theirs_size} and this slave "
                      f"{segment_size}: replicating would corrupt this store; give both the same value",
                      geometry=True)
    epoch = answer.epoch if answer else None
    if epoch is None or epoch < 0:
        if newest_seen < 0:
            return Admit(None)  # no epochs in play: a RocketMQ 4.x master replicates as before
        return Refuse(f"its epoch is unknown (client address {address}) and this node has seen "
                      f"epoch {newest_seen}")
    assert answer is not None
    if answer.fenced or answer.role == BrokerRole.SLAVE.value:
        return Refuse(f"it is not serving as master ({answer.fenced or 'SLAVE'})", follow_namesrv=True)
    if answer.pending:  # its log may lack what this one holds: wait for its new epoch
        return Refuse(f"its epoch is not the group's yet ({answer.pending})")
    if epoch < newest_seen:
        return Refuse(f"its epoch {epoch} is older than the newest seen, {newest_seen}", follow_namesrv=True)
    entries = tuple(EpochEntry(e, s) for e, s in answer.entries)
    if len(own):
        theirs = EpochFileCache(None, entries)
        theirs.set_last_end_offset(answer.max_offset)
        mine = EpochFileCache(None, own.entries)
        mine.set_last_end_offset(max_offset)
        cut = max(mine.find_consistent_point(theirs), 0)
        if cut < max_offset:
            return Cut(cut, f"this log diverges from master {address} (epoch {epoch}) at offset {cut}; "
                            f"cutting [{cut}, {max_offset})")
    elif max_offset > 0 and entries and entries[0].start_offset < max_offset:
        # No history vouches for this log's bytes past where the master's epochs begin: they
        # came from a term this node never recorded (the HA bytes carry no epoch, and a term
        # began while it replicated: storage seed 7566). RocketMQ refuses such a slave forever;
        # only what the master wrote before its first epoch is shared, the rest is cut.
        cut = entries[0].start_offset
        return Cut(cut, f"this log holds [{cut}, {max_offset}) under no epoch it recorded, and master "
                        f"{address} (epoch {epoch}) has epochs from {cut}; cutting [{cut}, {max_offset})")
    return Admit(epoch, entries)
