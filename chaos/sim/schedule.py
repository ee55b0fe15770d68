"""A simulation's fault schedule, drawn from its seed: what goes wrong, to whom, when.

Faults name roles ("master", "slave", "slave2") of a group (0: broker-a, 1: broker-b),
resolved when they strike, so a schedule means the same after a promotion. Faults other than promotions run one after another (each heals
before the next strikes, with a gap); promotions land at any moment, inside another fault
or not. `--shrink` removes faults from a failing schedule (`without`) while it still fails.
"""

from __future__ import annotations

import random
from typing import Any

import attrs

__all__ = ["KINDS", "STORAGE_KINDS", "Fault", "Schedule", "draw"]

KINDS = ("kill", "pause", "cut", "cut_one_way", "delay", "slow_disk", "promote", "etcd_down")
"""kill: cancel the node as SIGKILL ends a process and restart it from its files after
`duration`; pause: freeze its sockets and timers for `duration` (SIGSTOP); cut: end every
connection between two nodes and refuse new ones; cut_one_way: hold what one node sends to
the other; delay: every send between two nodes takes `amount` s longer; slow_disk: every
blocking file operation of the node (flushes) takes `amount` s longer; promote: make the
slave the group's master (Admin.promote), as an operator would (manual mode only);
etcd_down: no node reaches etcd for `duration` (etcd mode only)."""

STORAGE_KINDS = ("power_loss", "power_loss_group", "fsync_error", "disk_full", "corrupt")
"""Drawn only with `storage` (chaos/sim/disk.py): power_loss: the node's host loses power,
every byte it had not made durable is gone (pages survive or not, the last may be torn) and
it restarts after `duration`; power_loss_group: every node of the group at once;
fsync_error: the node's next CommitLog fdatasync fails (EIO), and `duration` later the
operator restarts its process (chaos/sim/fsync.py); disk_full: the node's disk reports 99 %
used for `duration` (at least one cleanup interval), then its usual 50 % (disk.py); corrupt:
bits flip in a sector of a record of the node's CommitLog durable long ago, a read meets it,
and after `duration` a slave is restarted by the operator (chaos/sim/corrupt.py)."""
STORAGE_SHARE = 0.5  # with `storage`: the share of kill, pause and slow_disk faults that become power losses
GROUP_SHARE = 0.25  # of those: the share that cut the whole group
FSYNC_SHARE = 0.5  # with `storage`: the share of the slow_disk faults left that become fsync errors
DISK_FULL_SHARE = 0.5  # with `storage`: the share of the pause faults left that become full disks
CORRUPT_SHARE = 0.5  # with `storage`: the share of the kill faults left that become corrupt sectors


@attrs.frozen
class Fault:
    kind: str
    at: float  # seconds of simulated time after the workload starts
    duration: float = 0.0
    target: str = "master"  # a role ("master", "slave", "slave2"); a link fault's other end is `peer`
    amount: float = 0.0  # delay / slow_disk: seconds added
    peer: str = "slave"  # link faults: the other end ("slave", "namesrv", "client" or "etcd")
    group: int = 0  # the group of `target` (and of a `peer` that is a node): 0 broker-a, 1 broker-b

    def describe(self) -> str:
        of = f" of group {self.group + 1}" if self.group else ""  # (a group of its own reads as before)
        target = self.target + of
        peer = self.peer + of if self.peer in ("master", "slave", "slave2") else self.peer
        what = {"kill": f"kill {target} for {self.duration:.2f} s",
                "pause": f"pause {target} for {self.duration:.2f} s",
                "cut": f"cut {target}<->{peer} for {self.duration:.2f} s",
                "cut_one_way": f"cut {target}->{peer} for {self.duration:.2f} s",
                "delay": f"delay {target}<->{peer} by {self.amount:.3f} s for {self.duration:.2f} s",
                "slow_disk": f"slow {target}'s disk by {self.amount:.3f} s for {self.duration:.2f} s",
                "promote": f"promote the slave{of}",
                "etcd_down": f"cut every node from etcd for {self.duration:.2f} s",
                "power_loss": f"cut the power of {target} for {self.duration:.2f} s",
                "power_loss_group": f"cut the power of every node{of or ' of the group'} for {self.duration:.2f} s",
                "fsync_error": f"fail {target}'s next CommitLog fsync (EIO), restart it after {self.duration:.2f} s",
                "disk_full": f"fill {target}'s disk for {self.duration:.2f} s",
                "corrupt": f"flip bits in a sealed CommitLog sector of {target}, restart it after "
                           f"{self.duration:.2f} s if a slave",
                }[self.kind]
        return f"t={self.at:.2f} {what}"

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class Schedule:
    seed: int
    faults: tuple[Fault, ...]
    sends: int  # sends the producers make in all
    span: float  # seconds over which they are paced

    def without(self, index: int) -> Schedule:
        return attrs.evolve(self, faults=self.faults[:index] + self.faults[index + 1:])

    def describe(self) -> list[str]:
        return [f.describe() for f in self.faults]


def draw(seed: int, *, faults: tuple[int, int] = (3, 6), sends: int = 500, etcd: bool = False,
         slaves: int = 1, groups: int = 1, storage: bool = False) -> Schedule:
    """The schedule of `seed`: between faults[0] and faults[1] faults (promotions among
    them), at least `sends` sends. With `etcd` (controllerMode etcd) the group elects its
    masters: no promotions, and etcd's links and etcd as a whole can fail instead. With two
    `slaves`, faults strike the second one ("slave2") too; with two `groups`, each fault and
    promotion strikes either group (one group's schedules are drawn as before). With
    `storage`, some process faults become power losses (STORAGE_KINDS), drawn from a stream of
    their own: the schedule is otherwise the one drawn without."""
    rng = random.Random(seed)
    count = rng.randint(*faults)
    promotions = min(count - 1, rng.choice((0, 0, 1, 1, 1, 2)))
    if etcd:
        promotions = 0
    out: list[Fault] = []
    at = rng.uniform(0.5, 2.0)
    for _ in range(count - promotions):
        kind = rng.choice(KINDS[:-2] if not etcd else KINDS[:-2] + ("etcd_down",))
        duration = rng.choice((rng.uniform(0.1, 1.5), rng.uniform(1.5, 6.0)))
        target = rng.choice(("master", "master", "slave") if slaves == 1 else ("master", "master", "slave", "slave2"))
        peer = "slave" if target == "master" else "master"
        if kind in ("cut", "cut_one_way", "delay") and rng.random() < 0.25:
            peer = rng.choice(("namesrv", "client") if not etcd else ("namesrv", "client", "etcd", "etcd"))
        amount = 0.0
        if kind == "delay":
            amount = rng.choice((0.002, 0.02, 0.2, 1.5))
        elif kind == "slow_disk":
            amount = rng.choice((0.005, 0.05, 0.5))
        group = rng.randrange(groups) if groups > 1 else 0
        out.append(Fault(kind, round(at, 3), round(duration, 3), target, amount, peer, group))
        at += duration + rng.uniform(0.2, 3.0)
    span = at + 1.0
    for _ in range(promotions):
        when = round(rng.uniform(0.5, span), 3)
        out.append(Fault("promote", when, group=rng.randrange(groups) if groups > 1 else 0))
    out.sort(key=lambda f: f.at)
    if storage:
        out = _corruptions(seed, _full_disks(seed, _fsync_errors(seed, _power_losses(seed, out))))
    return Schedule(seed, tuple(out), sends, round(span, 3))


def _power_losses(seed: int, faults: list[Fault]) -> list[Fault]:
    """Turn some kill, pause and slow_disk faults into power losses of the same node (or its
    group) at the same moment; at least one, the first such fault, when none is drawn."""
    rng = random.Random(f"storage {seed}")
    able = [i for i, f in enumerate(faults) if f.kind in ("kill", "pause", "slow_disk")]
    chosen = [i for i in able if rng.random() < STORAGE_SHARE] or able[:1]
    out = list(faults)
    for i in chosen:
        kind = "power_loss_group" if rng.random() < GROUP_SHARE else "power_loss"
        out[i] = attrs.evolve(out[i], kind=kind, amount=0.0)
    return out


def _fsync_errors(seed: int, faults: list[Fault]) -> list[Fault]:
    """Turn some slow_disk faults that stayed one into fsync errors of the same node at the
    same moment, from a stream of their own (the power losses drawn stay as they were)."""
    rng = random.Random(f"fsync {seed}")
    return [attrs.evolve(f, kind="fsync_error", amount=0.0) if f.kind == "slow_disk" and rng.random() < FSYNC_SHARE
            else f for f in faults]


def _full_disks(seed: int, faults: list[Fault]) -> list[Fault]:
    """Turn some pause faults that stayed one into full disks of the same node at the same
    moment, from a stream of their own (the other storage faults drawn stay as they were)."""
    rng = random.Random(f"disk full {seed}")
    return [attrs.evolve(f, kind="disk_full") if f.kind == "pause" and rng.random() < DISK_FULL_SHARE
            else f for f in faults]


def _corruptions(seed: int, faults: list[Fault]) -> list[Fault]:
    """Turn some kill faults that stayed one into corrupt sectors of the same node at the same
    moment, from a stream of their own (the other storage faults drawn stay as they were)."""
    rng = random.Random(f"corrupt {seed}")
    return [attrs.evolve(f, kind="corrupt") if f.kind == "kill" and rng.random() < CORRUPT_SHARE
            else f for f in faults]
