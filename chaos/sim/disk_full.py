"""Full disks in a simulated run (the fault `disk_full`): a node's disk model reports its
partition 99 % used (disk.py FULL) for the fault's duration, at least one cleanup interval
so the store's probe (store/cleanup.py, every cleanResourceInterval) sees it, then its usual
50 % again.

What the node must do (the chaos suite's full-disk scenario checks the same on real
processes): set DISK_FULL, refuse puts with SERVICE_NOT_AVAILABLE and say why in `status`,
take writes again after the first cleanup pass that sees the space back. The event log shows
each change of the node's running flags while the fault lasts and after it; the judge's
usual promises (nothing acknowledged lost, the producers finish, the group converges) hold
across it.
"""

from __future__ import annotations

import trio

from .cluster import SimNode
from .disk import FULL, USED
from .events import EventLog
from .schedule import Fault

__all__ = ["FullDisks"]

POLL_S = 0.1  # how often the node's running flags are looked at while the fault lasts


class FullDisks:
    """Strikes `disk_full` faults."""

    def __init__(self, log: EventLog) -> None:
        self.log = log

    async def strike(self, fault: Fault, node: SimNode) -> None:
        disk = node.disk
        assert disk is not None, "a full disk needs the node's disk model"
        interval = node.cfg.store.clean_resource_interval / 1000
        hold = max(fault.duration, interval + POLL_S)
        disk.used = FULL
        seen = self._flags(node, None)
        deadline = trio.current_time() + hold
        while trio.current_time() < deadline:
            await trio.sleep(POLL_S)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)
            seen = self._flags(node, seen)
        disk.used = USED
        self.log.add(f"{node.name}'s disk has space again")
        deadline = trio.current_time() + interval + POLL_S
        while trio.current_time() < deadline and seen:
            await trio.sleep(POLL_S)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)
            seen = self._flags(node, seen)

    def _flags(self, node: SimNode, before: tuple[str, ...] | None) -> tuple[str, ...]:
        """The node's running flags now, logged with its `status` reason when they changed."""
        broker = node.broker
        store = broker.services.store if broker is not None and broker.services is not None else None
        if store is None:
            return before or ()
        now = tuple(store.flags.names())
        if before is not None and now != before:
            why = "taking writes" if store.flags.is_writeable() else store.flags.why_not_writeable()
            self.log.add(f"{node.name} status: running flags {list(now)}: {why}")
        return now
