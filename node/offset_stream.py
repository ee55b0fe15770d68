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

__all__ = ["offset_table", "replicate_commit", "take_batch"]


def offset_table(offsets: ConsumerOffsetManager, held: Callable[[], bool] = lambda: False) -> list[OffsetCommit] | None:
    """The whole table as the HA stream carries it (a slave's first batch); None while
    `held` (an etcd-mode candidate, whose table is its file's, up to 5 s old)."""
    if held():
        return None
    return [OffsetCommit(e.group, e.topic, e.queue_id, e.offset) for e in offsets.entries()]


def take_batch(offsets: ConsumerOffsetManager, batch: OffsetsBatch) -> None:
    """A slave takes a streamed batch: the master's whole table, or commits on top of it."""
    entries = [OffsetEntry(c.group, c.topic, c.queue_id, c.offset) for c in batch.entries]
    if batch.replace:
        if offsets.replace_all(entries):
            log.info("took %d consumer offset(s) from the master's HA stream", len(entries))
        return
    for e in entries:
        offsets.commit(e.group, e.topic, e.queue_id, e.offset)


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
