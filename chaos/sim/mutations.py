"""Deliberate small bugs, to prove the simulation's checker catches what it is for:
`tidemq chaos sim --seeds 1..2000 --mutate NAME` must report broken promises.

Each mutation replaces one function for the run (in the worker process that runs it) and
restores it after; the code under test is otherwise the production code.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import attrs

from cluster.client.consumer import PullConsumer
from cluster.client.routing import MessageQueue
from ha.master import HAService
from node.failover.controller import EtcdController
from node.failover.fencing import Fencing
from node.failover.promotion import Failover, Transition
from node.ops import dispatch
from node.ops.puts import Handler
from node.ops.services import NodeServices
from node.tables.consumers import ConsumerManager
from node.tables.transactions import Ended, TransactionTable
from store import runtime
from store.flush import FlushedTime, GroupCommitService, try_flush
from store.mapped_file_queue import MappedFileQueue
from store.message import StoredMessage
from store.reads import MessageReads
from store.record_codec import RecordKind
from store.transaction import HALF_TOPIC, Outcome, half_origin
from wire.protocol import EndTransaction, Request

__all__ = ["MUTATIONS", "mutated"]

MUTATIONS = {
    "pause-fencing": "a master never notices it was paused nor that its slave left (Fencing.beat sees no "
                     "stall, Fencing.slaves no departure), so it answers what its sockets buffered as if no "
                     "promotion could have happened meanwhile",
    "truncation": "a node that rejoins as a slave keeps its divergent tail (Failover.apply skips the cut)",
    "in-sync-wait": "a SYNC_MASTER answers PUT_OK without a slave's ack (HAService.wait_for_slave says yes)",
    "confirm-offset": "a master shows consumers its whole log and tells its slaves so (HAService.confirm_limit "
                      "is always None, as for a master alone): what consumers read may not be on the node "
                      "promoted next",
    "commit-wait": "a SYNC_MASTER answers a commit OK while a slave it needs is not connected "
                   "(HAService.members_away is empty): the slave being promoted lacks it",
    "kip320": "a consumer never moves back to the divergence point after an unclean promotion "
              "(PullConsumer._diverged, _confirm_start and _past_the_end keep its position): it skips "
              "the new master's records at the queue offsets of those it read",
    "commit-twice": "a retried END COMMIT writes the committed record again (the END's duplicate check "
                    "forgets a COMMIT it already applied), as RocketMQ #8158's double commit",
    "check-ended": "an END leaves its transaction in the check service's open set (TransactionTable.end "
                   "records the outcome but keeps it open), so rounds go on checking it, as RocketMQ "
                   "#1517 / #7933",
    "orderly-lock": "the master's queue-lock table grants every lock asked for (ConsumerManager.lock ignores "
                    "the holder, its lease and the fence), so a member joining takes queues another still "
                    "consumes: caught with `--orderly` (chaos/sim/orderly.py)",
    "skip-fsync": "SYNC_FLUSH's group commit marks the CommitLog flushed without an fdatasync "
                  "(GroupCommitService._flush_once): a PUT_OK is answered while its record is only in the "
                  "page cache (storage faults: --storage)",
    "trust-checkpoint": "after each CommitLog flush round the checkpoint is made durable claiming every record "
                        "written so far (FlushedTime.note), past what the round synced (an async flush skips a "
                        "round short of its least pages): recovery would trust records that were never durable "
                        "(storage faults: --storage)",
    "retry-fsync": "a failed CommitLog fdatasync is tried again and, when that one succeeds, believed "
                   "(GroupCommitService._flush_once), PostgreSQL's fsyncgate: the pages the failure lost are "
                   "counted flushed and their puts answered PUT_OK (storage faults: --storage, fsync_error)",
    "new-lease": "a node whose log is in doubt campaigns in the tick that grants it a new lease "
                 "(EtcdController._renew forgets the grant): after an etcd outage every ends/ entry expired "
                 "with its lease, and a longer log not published again yet is cut (etcd mode, --storage)",
    "skip-crc": "reads trust CommitLog records without checking their body CRC (MessageReads.look_message_by_offset "
                "decodes as before issue 45's corrupt): a record whose sector flipped bits is served as good "
                "(storage faults: --storage, corrupt)",
}


def _no_stall(self: Fencing, now: float) -> float | None:
    self.last_beat = now
    return None


def _no_departure(self: Fencing, now: float, open_count: int, accepted: int,
                  hosts: frozenset[str] | None = None) -> int:
    self.open_seen, self.accepted_seen = open_count, accepted
    return 0


def _keep_tail(original: Callable[[Failover, Transition], None]) -> Callable[[Failover, Transition], None]:
    def apply(self: Failover, transition: Transition) -> None:
        original(self, attrs.evolve(transition, truncate_to=None))
    return apply


async def _acked(self: HAService, next_offset: int, timeout_s: float) -> bool:
    return True


def _unconfirmed(self: HAService) -> int | None:
    return None


def _none_away(self: HAService) -> list[str]:
    return []


async def _never_back(self: PullConsumer, queue: MessageQueue, address: str, mark: Any, begin: int) -> int:
    return begin


async def _start_kept(self: PullConsumer, queue: MessageQueue, begin: int, start: Any) -> int:
    return begin


async def _end_kept(self: PullConsumer, queue: MessageQueue, end: int) -> int:
    return end


def _commit_again(original: Handler) -> Handler:
    async def end(s: NodeServices, r: Request, peer: str | None) -> Any:
        f = r.fields
        if isinstance(f, EndTransaction) and f.outcome == Outcome.COMMIT.value:
            half = s.store.look_message_by_offset(f.commitlog_offset)
            if half is not None and half.topic == HALF_TOPIC:
                s.transactions.ensure_loaded(s.store)
                known = s.transactions.ended.get(half_origin(half))
                if known is not None and known.outcome is Outcome.COMMIT:
                    del s.transactions.ended[half_origin(half)]  # as if it had never ended
        return await original(s, r, peer)
    return end


async def _flush_unsynced(self: GroupCommitService) -> bool:
    queue = self.queue
    mf = queue.find_by_offset(queue.flushed_where, return_first_on_not_found=queue.flushed_where == 0)
    if mf is not None:
        mf.flushed_position = max(mf.flushed_position, mf.get_read_position())
        queue.flushed_where = mf.file_from_offset + mf.flushed_position
        queue.store_timestamp = mf.store_timestamp
    self.flush_count += 1
    await runtime.run_sync(lambda: None)
    return True


async def _retry_until_believed(self: GroupCommitService) -> bool:
    if await runtime.run_sync(try_flush, self.queue, 0) is not None:
        await runtime.run_sync(try_flush, self.queue, 0)  # succeeds: the kernel reported the error once
    self.flush_count += 1
    return True


def _claim_written(self: FlushedTime, queue: MappedFileQueue) -> None:
    if self.is_master():
        self.checkpoint.physic_msg_timestamp = int(runtime.wall_clock() * 1000)
        self.checkpoint.flush()


def _trust_records(self: MessageReads, commitlog_offset: int, size: int | None = None) -> StoredMessage | None:
    decoded = self.commit_log.read_record(commitlog_offset)
    if decoded is None or decoded.kind is not RecordKind.MESSAGE:
        return None
    if size is not None and decoded.size != size:
        return None
    return decoded.message


def _forget_grant(renew: Callable[[EtcdController], Awaitable[None]]) -> Callable[[EtcdController], Awaitable[None]]:
    async def renew_forgetting(self: EtcdController) -> None:
        await renew(self)
        self._granted_at = -math.inf
    return renew_forgetting


def _end_keeps_open(self: TransactionTable, origin: int, ended: Ended) -> None:
    self.ended[origin] = ended


def _lock_anything(self: ConsumerManager, group: str, client_id: str, topic: str, queue_ids: list[int],
                   life_s: float | None = None, *, renew: bool = False) -> list[int]:
    return list(queue_ids) if client_id in self.members(group) else []


@contextmanager
def mutated(name: str | None) -> Iterator[None]:
    """Run the block with mutation `name` in place (None: none)."""
    if name is None:
        yield
        return
    if name not in MUTATIONS:
        raise ValueError(f"no mutation {name!r}; there are {', '.join(MUTATIONS)}")
    by_name: dict[str, list[tuple[type[Any], str, Callable[..., Any]]]] = {
        "pause-fencing": [(Fencing, "beat", _no_stall), (Fencing, "slaves", _no_departure)],
        "truncation": [(Failover, "apply", _keep_tail(Failover.apply))],
        "in-sync-wait": [(HAService, "wait_for_slave", _acked)],
        "confirm-offset": [(HAService, "confirm_limit", _unconfirmed)],
        "commit-wait": [(HAService, "members_away", _none_away)],
        "kip320": [(PullConsumer, "_diverged", _never_back), (PullConsumer, "_confirm_start", _start_kept),
                   (PullConsumer, "_past_the_end", _end_kept)],
        "check-ended": [(TransactionTable, "end", _end_keeps_open)],
        "orderly-lock": [(ConsumerManager, "lock", _lock_anything)],
        "skip-fsync": [(GroupCommitService, "_flush_once", _flush_unsynced)],
        "trust-checkpoint": [(FlushedTime, "note", _claim_written)],
        "retry-fsync": [(GroupCommitService, "_flush_once", _retry_until_believed)],
        "skip-crc": [(MessageReads, "look_message_by_offset", _trust_records)],
        "new-lease": [(EtcdController, "_renew", _forget_grant(EtcdController._renew))],
    }
    if name == "commit-twice":  # a handler in the dispatch table, not a method
        handler = dispatch.HANDLERS[EndTransaction]
        dispatch.HANDLERS[EndTransaction] = _commit_again(handler)
        try:
            yield
        finally:
            dispatch.HANDLERS[EndTransaction] = handler
        return
    patches = by_name[name]
    originals = [(owner, attribute, getattr(owner, attribute)) for owner, attribute, _ in patches]
    for owner, attribute, replacement in patches:
        setattr(owner, attribute, replacement)
    try:
        yield
    finally:
        for owner, attribute, original in originals:
            setattr(owner, attribute, original)
