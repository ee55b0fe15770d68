"""Consumer offsets that travel with the HA stream (the node's side of ha/protocol.py's
offsets frames), so a commit answered OK by a SYNC_MASTER is on the slave it promotes.

The master sends each tidemq slave its whole offset table when the slave takes the HA
extension, then every commit; a SYNC_MASTER answers a commit OK once every in-sync slave that
streams offsets acked it, and otherwise as for a put: FLUSH_SLAVE_TIMEOUT after `slaveTimeout`,
SLAVE_NOT_AVAILABLE while a slave it needs is not connected (stored on the master, not
confirmed on its slaves). A RocketMQ 4.x slave gets none of
this and keeps the 10 s pull of node/slave_sync.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ha.master import HAService
from ha.protocol import OffsetCommit, OffsetsBatch
from store.config import BrokerRole
from wire.protocol import Status

from .tables.offsets import ConsumerOffsetManager, OffsetEntry

log = logging.getLogger("tidemq.node")

__all__ = ["OffsetFollower", "offset_table", "replicate_commit"]


def offset_table(offsets: ConsumerOffsetManager, held: Callable[[], bool] = lambda: False) -> list[OffsetCommit] | None:
    """The whole table as the HA stream carries it (a slave's first batch); None while
    `held` (an etcd-mode candidate, whose table is its file's, up to 5 s old)."""
    if held():
        return None
    return [OffsetCommit(e.group, e.topic, e.queue_id, e.offset) for e in offsets.entries()]


class OffsetFollower:
    """A slave's side of one term's offsets stream: takes each batch into the node's table.

    A whole table replaces the slave's, but not when the master flags it `raise_only` (its
    own table was not the group's whole table: it restarted from its file, up to 5 s old, or
    had none), nor when it comes from the same master restarted
    since the last batch this term took (its sequence numbers start again: its table is its
    `consumerOffset.json`, up to 5 s old, while this slave's holds every commit it acked):
    then each offset is raised to the master's where that is higher and nothing is lowered
    (seed 321: a restarted master's table replaced its slave's, the slave was promoted, and
    commits answered OK were gone). An offset reset on the master in the 5 s before its crash
    is then lost on the slave: a group re-reads less, never skips."""

    def __init__(self, offsets: ConsumerOffsetManager, source: Callable[[], str | None] = lambda: None) -> None:
        self.offsets = offsets
        self.source = source
        """The master the batches come from now: a batch from another master (a promotion, an
        election) starts over, its table replacing this slave's."""
        self.last: tuple[str | None, int] | None = None  # (master, sequence) of the last batch

    def take(self, batch: OffsetsBatch) -> None:
        master = self.source()
        restarted = self.last is not None and self.last[0] == master and batch.seq <= self.last[1]
        self.last = (master, batch.seq)
        entries = [OffsetEntry(c.group, c.topic, c.queue_id, c.offset) for c in batch.entries]
        if batch.replace and not restarted and not batch.raise_only:
            if self.offsets.replace_all(entries, complete=True):
                log.info("took %d consumer offset(s) from the master's HA stream", len(entries))
            return
        if batch.replace:
            log.warning("the master restarted (offsets batch %d): its table is its file's; keeping each "
                        "offset at least where this slave had it", batch.seq)
        for e in entries:
            if batch.replace:
                self.offsets.raise_to(e.group, e.topic, e.queue_id, e.offset)
            else:
                self.offsets.commit(e.group, e.topic, e.queue_id, e.offset)


async def replicate_commit(ha: HAService | None, role: BrokerRole, entry: OffsetEntry,
                           timeout_s: float) -> Status | None:
    """Send a commit already in the master's table to its slaves. A SYNC_MASTER answers as
    for a put: SLAVE_NOT_AVAILABLE at once when a slave it needs is not connected (before
    the wait, or after it: one may leave meanwhile, to be promoted), FLUSH_SLAVE_TIMEOUT
    when an in-sync slave that streams offsets did not ack within `timeout_s`; None when
    every one holds it (and always on an ASYNC_MASTER)."""
    if ha is None:
        return None
    seq = ha.offsets_committed([OffsetCommit(entry.group, entry.topic, entry.queue_id, entry.offset)])
    if role is not BrokerRole.SYNC_MASTER:
        return None
    if ha.members_away():
        return Status.SLAVE_NOT_AVAILABLE
    missing = await ha.wait_for_offsets(seq, timeout_s)
    if missing:
        log.warning("commit of %s/%s:%d=%d not acked by in-sync slave(s) %s within %.1f s",
                    entry.group, entry.topic, entry.queue_id, entry.offset, ", ".join(missing), timeout_s)
        return Status.FLUSH_SLAVE_TIMEOUT
    return Status.SLAVE_NOT_AVAILABLE if ha.members_away() else None
