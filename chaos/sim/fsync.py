"""Failed fsyncs in a simulated run (the fault `fsync_error`): a node's next CommitLog
fdatasync fails with EIO (disk.py `fail_next_sync`); `duration` later the operator restarts
the node's process, and its recovery brings it back. The page cache outlives the process, so
the restarted node reads what it wrote; but the pages the failed write-back lost are not on
the disk and no later fdatasync writes them (Linux marked them clean): until a write touches
them again, a power loss of the node drops them (disk.py), as it would on Linux.

What the node must do meanwhile (store/flush.py): answer no put whose flush failed PUT_OK,
refuse later writes and say why in `status` (running flag FLUSH_DISK_ERROR), never flush the
CommitLog again. Judged here for SYNC_FLUSH (the only mode whose PUT_OK waits on the flush):
no send answered OK by the struck node between the failure and the restart for a record at
or past where the failed segment's durable content ended. (A later power loss of the node
drops the pages the failure lost, and the promises' judge, verdict.py, finds any PUT_OK
among them.)
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable

import attrs
import trio

from cluster.judge.history import OK, History
from store import runtime
from store.layout import COMMITLOG_DIR
from store.msg_id import decode_msg_id

from .cluster import SimNode
from .disk import SimDisk
from .events import EventLog
from .schedule import Fault
from .verdict import Observed

__all__ = ["FsyncErrors"]


@attrs.frozen
class _Failure:
    node: str
    file: str  # the segment whose fdatasync failed, relative to the node's root
    flushed: int  # where the failed segment's durable content ended: nothing past it is durable
    began: float  # wall-clock times: the failure seen, the restart begun
    ended: float


class FsyncErrors:
    """Strikes `fsync_error` faults; `judge` finds the PUT_OKs a failed flush did not cover."""

    def __init__(self, history: History, log: EventLog, observed: dict[str, Observed],
                 restart: Callable[[SimNode], Awaitable[None]]) -> None:
        self.history = history
        self.log = log
        self.observed = observed
        self.restart = restart
        self.failures: list[_Failure] = []
        self.disks: dict[str, SimDisk] = {}

    async def strike(self, fault: Fault, node: SimNode) -> None:
        disk = node.disk
        assert disk is not None, "an fsync error needs the node's disk model"
        self.disks[node.name] = disk
        failed = len(disk.failed)
        disk.fail_next_sync(COMMITLOG_DIR)
        await trio.sleep(fault.duration)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)
        disk.failing = None
        if len(disk.failed) == failed:
            self.log.add(f"no CommitLog fsync ran on {node.name}: nothing failed")
            return
        file, began, durable = disk.failed[-1]
        flushed = int(os.path.basename(file)) + durable  # the segment's synced end: nothing past it is durable
        self._report(node, file, flushed, trio.current_time() - (runtime.wall_clock() - began))
        self.failures.append(_Failure(node.name, file, flushed, began, runtime.wall_clock()))
        if not node.up and node.exited:
            self.log.add(f"{node.name}'s process had stopped: {node.exited}")
        self.log.add(f"operator restarts {node.name}'s process")
        await node.kill()
        await self.restart(node)

    def _report(self, node: SimNode, file: str, flushed: int, at: float) -> None:
        """Log the failure (at simulated time `at`) and what the node's `status` says of it."""
        self.log.add(f"fsync of {node.name}'s {file} failed (EIO) at t={at:.4f}; "
                     f"durable up to offset {flushed}")
        store = node.broker.services.store if node.broker is not None and node.broker.services is not None else None
        if store is not None:
            why = "taking writes" if store.flags.is_writeable() else store.flags.why_not_writeable()
            self.log.add(f"{node.name} status: running flags {store.flags.names()}: {why}")

    def judge(self, flush: str) -> list[str]:
        """SYNC_FLUSH: the sends the struck node answered OK for records its failed flush held."""
        if flush != "SYNC_FLUSH":
            return []
        out = []
        for failure in self.failures:
            # the window ends at the operator's restart, or sooner where a role change's new
            # term reopened the store and its recovery wrote the lost pages back (seed 7593)
            ended = min([failure.ended, *(at for rel, at in self.disks[failure.node].restored
                                          if rel == failure.file and at >= failure.began)])
            keys = []
            for op in self.history.ops:
                if op.outcome != OK or not op.msg_id or op.completed_at is None:
                    continue
                if not failure.began <= op.completed_at <= ended:
                    continue
                host, offset = decode_msg_id(op.msg_id)
                if any(o.addresses.get(host) == failure.node for o in self.observed.values()) \
                        and offset >= failure.flushed:
                    keys.append(op.key)
            if keys:
                out.append(f"{failure.node} answered {len(keys)} send(s) OK after its CommitLog flush failed, for "
                           f"records past what was durable then (offset {failure.flushed}): {keys[:3]}")
        return out
