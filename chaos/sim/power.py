"""Power losses in a simulated run: a node (or a whole group) goes down as SIGKILL leaves it,
then its files lose what was never made durable (disk.py), then it restarts and recovers.

What the run notes for the judge (verdict.py): each node's CommitLog window the power loss
took, [recovered end, end before), and the acknowledged sends whose records lay in it; and,
judged here at once, whether the checkpoint on disk claimed more than was durable: every
CommitLog record stored before its physic timestamp must be in the segments' durable images,
and every record a ConsumeQueue indexes stored before its logics timestamp must have its unit
in a durable ConsumeQueue image.
"""

from __future__ import annotations

import os
import random
import struct
from collections.abc import Awaitable, Callable

from cluster.judge.history import OK, History
from store import runtime
from store.layout import COMMITLOG_DIR, CONSUMEQUEUE_DIR, segment_names
from store.msg_id import decode_msg_id
from store.segment_walker import Record, walk
from store.sysflag import TRANSACTION_NOT, SysFlag, transaction_type

from .cluster import SimNode
from .events import EventLog
from .schedule import Fault
from .verdict import Observed

__all__ = ["PowerLosses", "checkpoint_claims", "logics_claims", "records"]

_PHYSIC = struct.Struct(">q")
_UNIT = struct.Struct(">qiq")  # a ConsumeQueue unit: CommitLog offset, size, tags hash
CHECKPOINT = "checkpoint"


def records(segments: dict[str, bytes], *, dispatched: bool = False) -> dict[int, int]:
    """CommitLog offset → store timestamp of every CRC-clean record in `segments` (segment
    name → content), each segment walked from its start until its data ends; with
    `dispatched`, only those that get a ConsumeQueue unit (not a prepared or rolled back
    transaction's)."""
    out: dict[int, int] = {}
    for name in segment_names(segments):
        buf = segments[name]
        for ev in walk(buf, segment_start=int(name), last=True, check_crc=True, read_body=True):
            if type(ev) is not Record:
                break
            if dispatched and transaction_type(ev.message.sys_flag) not in (TRANSACTION_NOT, SysFlag.TRANSACTION_COMMIT):
                continue
            if ev.crc_ok and not ev.problems():
                out[ev.offset] = ev.message.store_timestamp
    return out


def checkpoint_claims(disk_images: dict[str, bytes], current: dict[int, int]) -> list[int]:
    """The records (CommitLog offsets) stored before the durable checkpoint's physic
    timestamp that are not in the durable CommitLog: what the checkpoint claimed beyond it."""
    image = disk_images.get(CHECKPOINT)
    if image is None or len(image) < _PHYSIC.size:
        return []
    (physic,) = _PHYSIC.unpack_from(image, 0)
    durable = records({os.path.basename(rel): data for rel, data in disk_images.items()
                       if os.path.dirname(rel) == COMMITLOG_DIR})
    return sorted(o for o, ts in current.items() if ts < physic and o not in durable)


def logics_claims(disk_images: dict[str, bytes], current: dict[int, int]) -> list[int]:
    """The records (CommitLog offsets; `current` holds those a ConsumeQueue indexes) stored
    before the durable checkpoint's logics timestamp whose unit no durable ConsumeQueue image
    holds: what the checkpoint claimed of the queues beyond what they made durable."""
    image = disk_images.get(CHECKPOINT)
    if image is None or len(image) < 2 * _PHYSIC.size:
        return []
    (logics,) = _PHYSIC.unpack_from(image, _PHYSIC.size)
    units = set()
    for rel, data in disk_images.items():
        if rel.split(os.sep, 1)[0] != CONSUMEQUEUE_DIR:
            continue
        for pos in range(0, len(data) - _UNIT.size + 1, _UNIT.size):
            offset, size, _tags = _UNIT.unpack_from(data, pos)
            if size > 0:
                units.add(offset)
    return sorted(o for o, ts in current.items() if ts < logics and o not in units)


def _current_records(root: str, *, dispatched: bool = False) -> dict[int, int]:
    folder = os.path.join(root, COMMITLOG_DIR)
    segments = {}
    for name in segment_names(os.listdir(folder)) if os.path.isdir(folder) else []:
        with open(os.path.join(folder, name), "rb") as f:
            segments[name] = f.read()
    return records(segments, dispatched=dispatched)


class PowerLosses:
    """Strikes `power_loss` and `power_loss_group` faults and notes what they took."""

    def __init__(self, seed: int, history: History, log: EventLog, observed: dict[str, Observed],
                 restart: Callable[[SimNode], Awaitable[None]]) -> None:
        self.seed = seed
        self.history = history
        self.log = log
        self.observed = observed
        self.restart = restart
        self.violations: list[str] = []

    async def strike(self, fault: Fault, nodes: list[SimNode], wait: Callable[[], Awaitable[None]]) -> None:
        """Cut the power of `nodes` at once, wait (`wait`: the fault's duration), restart them."""
        before = {n.name: n.store_max_offset() for n in nodes}
        struck_at = runtime.wall_clock()
        if len(nodes) > 1:
            self.observed[nodes[0].group].group_power_losses.append(runtime.wall_clock())
        for node in nodes:
            await node.kill()
        for node in nodes:
            self._lose(fault, node)
        await wait()
        for node in nodes:
            await self.restart(node)
            self.observed[node.group].powered_off.append((node.name, struck_at, runtime.wall_clock()))
            self._note_window(node, before[node.name], struck_at)

    def _lose(self, fault: Fault, node: SimNode) -> None:
        """Drop what `node` never made durable; log each file's pages kept, dropped and torn."""
        assert node.disk is not None, "a power loss needs the node's disk model"
        current = _current_records(node.root)
        claimed = checkpoint_claims(node.disk.images, current)
        if claimed:
            self.violations.append(f"{node.name}'s checkpoint claimed {len(claimed)} record(s) past the durable "
                                   f"CommitLog at a power loss (offsets {claimed[:3]})")
        queued = logics_claims(node.disk.images, _current_records(node.root, dispatched=True))
        if queued:
            self.violations.append(f"{node.name}'s checkpoint claimed {len(queued)} ConsumeQueue unit(s) past the "
                                   f"durable queues at a power loss (records at {queued[:3]})")
        rng = random.Random(f"power {self.seed} {fault.at} {node.name}")
        losses = node.disk.power_loss(rng)
        self.log.add(f"power lost on {node.name}: {len(losses)} file(s) lost unsynced bytes")
        for loss in losses:
            self.log.add(f"  {node.name} {loss.describe()}")

    def _note_window(self, node: SimNode, end_before: int | None, struck_at: float) -> None:
        """The CommitLog bytes the loss took from `node` and the acknowledged sends among them."""
        after = node.recovered_end()
        if end_before is None or after is None or after >= end_before:
            self.log.add(f"{node.name} recovered to {after}: its CommitLog lost nothing")
            return
        observed = self.observed[node.group]
        observed.power_windows.append((node.name, after, end_before))
        observed.power_struck.append((struck_at, node.name, after, end_before))
        keys = set()
        for op in self.history.ops:
            if op.outcome == OK and op.msg_id:
                host, offset = decode_msg_id(op.msg_id)
                if observed.addresses.get(host) == node.name and after <= offset < end_before:
                    keys.add(op.key)
        observed.power_lost.update(keys)
        self.log.add(f"{node.name} recovered to {after}: the power loss took [{after}, {end_before}), "
                     f"{len(keys)} acknowledged send(s) in it")
