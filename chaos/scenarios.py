"""The chaos scenarios: each is a fault function that injects its fault into a running
FaultContext and heals it, plus what its modes promise (chaos.expectations).

Scenarios that need slave promotion (promotion under load, a returning old master) are
listed with `fault=None` and a `pending` reason until the failover feature lands; they
slot in here as ordinary fault functions using cluster.failover.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from cluster.admin import Admin
from cluster.launcher import LauncherError
from node.client import TidemqError

from . import disk
from .layout import BROKER_NAME, MASTER, MODES, NAMESRV, SLAVE
from .runner import FaultContext
from .workload import sample_node

Fault = Callable[[FaultContext], Awaitable[None]]


@attrs.frozen
class Scenario:
    name: str
    summary: str
    fault: Fault | None
    ci_modes: tuple[str, ...] = ("SYNC_MASTER+SYNC_FLUSH",)  # the modes CI runs it in
    lossless_in_every_mode: bool = True  # process faults: the page cache survives a SIGKILL
    slave_statuses: bool = False  # SYNC_MASTER producers must see the slave fall behind
    disk_refusal: bool = False
    slave_ahead_ok: bool = False
    overrides: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    workload: dict[str, Any] = attrs.field(factory=dict)  # WorkloadConfig fields
    tmpfs_mb: int = 0
    pending: str = ""


# ---------------------------------------------------------------- process faults


async def kill_master(ctx: FaultContext) -> None:
    sig = "KILL" if ctx.rng.random() < 0.75 else "TERM"
    ctx.schedule["signal"] = sig
    await ctx.signal(MASTER, sig)
    await ctx.hold(ctx.schedule["fault_for"])
    await ctx.restart(MASTER)


async def kill_slave(ctx: FaultContext) -> None:
    await ctx.signal(SLAVE, "KILL")
    await ctx.hold(ctx.schedule["fault_for"])
    await ctx.restart(SLAVE)


async def kill_namesrv(ctx: FaultContext) -> None:
    await ctx.signal(NAMESRV, "KILL")
    await ctx.hold(ctx.schedule["fault_for"])
    await ctx.restart(NAMESRV)

    async def broker_registered() -> bool:
        try:
            async with Admin(ctx.cluster.namesrv) as admin:
                return any(b.broker_name == BROKER_NAME for b in await admin.cluster_info())
        except (TidemqError, OSError):
            return False

    await ctx.until(broker_registered, 20.0, "the restarted name server learning broker-a again")
    ctx.note("heal: broker-a registered with the restarted name server")


async def pause_master(ctx: FaultContext) -> None:
    """SIGSTOP longer than haHousekeepingInterval: both HA ends give up on the link."""
    await ctx.signal(MASTER, "STOP")
    await ctx.hold(ctx.schedule["fault_for"])
    await ctx.signal(MASTER, "CONT")


def _segments(root: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(os.path.join(root, "commitlog")) if n.isdigit())
    except FileNotFoundError:
        return []


async def kill_during_roll(ctx: FaultContext) -> None:
    """SIGKILL the master the moment a new CommitLog segment appears."""
    root = ctx.cluster.store_roots[MASTER]
    before = _segments(root)[-1:]
    await ctx.until(lambda: _segments(root)[-1:] != before, 30.0, "a CommitLog roll on the master")
    await ctx.signal(MASTER, "KILL")
    ctx.note(f"at: killed as segment {_segments(root)[-1]} appeared")
    await ctx.hold(ctx.schedule["fault_for"] / 2)
    await ctx.restart(MASTER)


async def kill_during_cleanup(ctx: FaultContext) -> None:
    """SIGKILL the master the moment cleanup removes a CommitLog segment."""
    root = ctx.cluster.store_roots[MASTER]
    await ctx.until(lambda: len(_segments(root)) >= 3, 30.0, "three CommitLog segments on the master")
    first = _segments(root)[0]
    await ctx.until(lambda: (_segments(root) or [first])[0] != first, 30.0, "cleanup removing a segment")
    await ctx.signal(MASTER, "KILL")
    ctx.note(f"at: killed as cleanup removed segment {first}")
    await ctx.hold(ctx.schedule["fault_for"] / 2)
    await ctx.restart(MASTER)
    await _resync_stranded_slave(ctx)


async def _resync_stranded_slave(ctx: FaultContext) -> None:
    """Forced cleanup deletes segments whatever the slave has (as RocketMQ's does), so a
    slave that fell behind during the kill can be left below the master's min offset; the
    master then refuses it. The documented remedy: clear the slave's store and restart it,
    and it resyncs from the master's newest segment."""
    seen: dict[str, Any] = {}

    async def settled() -> bool:
        master = await sample_node(ctx.cluster.master_address)
        slave = await sample_node(ctx.cluster.slave_address)
        if master is None or slave is None:
            return False
        seen.update(master=master, slave=slave)
        stranded = slave.max_phy_offset < master.min_phy_offset
        return stranded or (master.slave_ack or -1) >= master.max_phy_offset - 64 * 1024

    with contextlib.suppress(TimeoutError):  # neither: the runner's catch-up wait reports it
        await ctx.until(settled, 15.0, "the slave replicating again or found stranded")
    master, slave = seen.get("master"), seen.get("slave")
    if master is None or slave is None or slave.max_phy_offset >= master.min_phy_offset:
        return
    ctx.note(f"at: slave stranded at {slave.max_phy_offset}, below the master's min offset "
             f"{master.min_phy_offset}; clearing its store")
    await trio.to_thread.run_sync(ctx.cluster.signal, SLAVE, "TERM")
    await trio.to_thread.run_sync(shutil.rmtree, ctx.cluster.store_roots[SLAVE])
    await ctx.restart(SLAVE)


# ---------------------------------------------------------------- network faults


async def cut_ha_link(ctx: FaultContext) -> None:
    proxy = ctx.cluster.proxies["ha"]
    await ctx.toxiproxy(proxy.disable)
    ctx.note("fault: master↔slave link cut")
    await ctx.hold(ctx.schedule["fault_for"])
    await ctx.toxiproxy(proxy.enable)
    ctx.note("heal: master↔slave link restored")


async def slow_ha_link(ctx: FaultContext) -> None:
    proxy = ctx.cluster.proxies["ha"]
    latency = ctx.rng.randrange(600, 1200)
    ctx.schedule["ha_latency_ms"] = latency
    await ctx.toxiproxy(proxy.add_toxic, name="slow", type="latency", stream="downstream",
                        attributes={"latency": latency, "jitter": latency // 10})
    await ctx.toxiproxy(proxy.add_toxic, name="narrow", type="bandwidth", stream="downstream",
                        attributes={"rate": 8})
    ctx.note(f"fault: master→slave data delayed {latency} ms, limited to 8 KB/s")
    await ctx.hold(ctx.schedule["fault_for"] * 1.5)
    for name in ("slow", "narrow"):
        await ctx.toxiproxy(proxy.destroy_toxic, name)
    ctx.note("heal: toxics removed")


async def slice_client_link(ctx: FaultContext) -> None:
    proxy = ctx.cluster.proxies["client"]
    size = ctx.rng.randrange(3, 24)
    ctx.schedule["slice_bytes"] = size
    for stream in ("upstream", "downstream"):
        await ctx.toxiproxy(proxy.add_toxic, name=f"slice-{stream}", type="slicer", stream=stream,
                            attributes={"average_size": size, "size_variation": size // 2, "delay": 300})
        await ctx.toxiproxy(proxy.add_toxic, name=f"delay-{stream}", type="latency", stream=stream,
                            attributes={"latency": 40, "jitter": 20})
    ctx.note(f"fault: client link sliced into ~{size} B pieces and delayed 40±20 ms")
    await ctx.hold(ctx.schedule["fault_for"] * 1.5)
    for stream in ("upstream", "downstream"):
        for name in (f"slice-{stream}", f"delay-{stream}"):
            await ctx.toxiproxy(proxy.destroy_toxic, name)
    ctx.note("heal: toxics removed")


# ---------------------------------------------------------------- disk faults


async def torn_tail(ctx: FaultContext) -> None:
    """Stop the slave, cut its last record short, restart it: recovery truncates the torn
    record and the slave fetches it again from the master."""
    await ctx.signal(SLAVE, "KILL")
    done = await trio.to_thread.run_sync(disk.tear_tail, ctx.cluster.store_roots[SLAVE], ctx.rng)
    ctx.note(f"fault: {done}")
    await ctx.restart(SLAVE)


async def garbage_tail(ctx: FaultContext) -> None:
    """Stop the master, write garbage after its last record, restart it: recovery stops at
    the garbage and nothing acknowledged is lost."""
    await ctx.signal(MASTER, "KILL")
    done = await trio.to_thread.run_sync(disk.garbage_tail, ctx.cluster.store_roots[MASTER], ctx.rng)
    ctx.note(f"fault: {done}")
    await ctx.restart(MASTER)


async def unreadable_segment(ctx: FaultContext) -> None:
    """Stop the slave and cut one of its full segments to half its size (root reads any
    file, so a wrong size stands in for an unreadable one): the restart must refuse with
    a message naming the file; with the segment back, it starts and catches up."""
    root = ctx.cluster.store_roots[SLAVE]
    await ctx.until(lambda: len(_segments(root)) >= 2, 30.0, "two CommitLog segments on the slave")
    await ctx.signal(SLAVE, "KILL")
    name = _segments(root)[0]
    path = os.path.join(root, "commitlog", name)
    backup = path + ".chaos-backup"
    os.replace(path, backup)
    with open(backup, "rb") as src, open(path, "wb") as dst:
        dst.write(src.read(os.path.getsize(backup) // 2))
    ctx.note(f"fault: slave segment {name} cut to half its size")
    try:
        await ctx.restart(SLAVE)
        ctx.findings.append(f"the slave started on a CommitLog segment {name} of the wrong size")
        await trio.to_thread.run_sync(ctx.cluster.signal, SLAVE, "KILL")
    except LauncherError as e:
        if name not in str(e):
            ctx.findings.append(f"the slave refused the damaged segment without naming it: {str(e)[:300]}")
        ctx.note(f"at: the slave refused to start: {name} named in the error")
    os.replace(backup, path)
    await ctx.restart(SLAVE)


async def full_disk(ctx: FaultContext) -> None:
    """Fill the master's small file system past diskSpaceWarningLevelRatio under load;
    sends must be refused with the disk message; free the space; sends must resume."""
    mount = os.path.dirname(ctx.cluster.store_roots[MASTER])
    path, size = await trio.to_thread.run_sync(disk.fill, mount, 0.97)
    ctx.note(f"fault: filled the master's file system with {size} B")

    def refused() -> bool:
        return any(op.status == "SERVICE_NOT_AVAILABLE" and "disk" in (op.error or "").lower()
                   for op in ctx.history.ops[-200:])

    try:
        await ctx.until(refused, 15.0, "a send refused with the disk-full message")
    except TimeoutError as e:
        ctx.findings.append(str(e))
    await ctx.hold(ctx.schedule["fault_for"])
    os.remove(path)
    freed = time.time()
    ctx.note("heal: filler removed")

    def resumed() -> bool:
        return any(op.outcome == "ok" and (op.completed_at or 0) > freed for op in ctx.history.ops[-200:])

    try:
        await ctx.until(resumed, 20.0, "a send acknowledged after the space was freed")
    except TimeoutError:
        ctx.disk_resumed = False


async def fuzz(ctx: FaultContext) -> None:
    """Hypothesis-generated client and HA frames against the live master, under load."""
    from .fuzz import fuzz_node

    ctx.note("fault: fuzzing the master's client and HA ports")
    seconds = ctx.schedule["fault_for"] * 2
    try:
        counts = await trio.to_thread.run_sync(lambda: fuzz_node(
            ctx.cluster.master_address, ctx.cluster.master_ha_address, seconds=seconds,
            seed=ctx.rng.randrange(2**32)))
        ctx.schedule["fuzz"] = counts
        ctx.note(f"heal: fuzzing done: {counts}")
    except AssertionError as e:
        ctx.findings.append(f"fuzz: {e}")


# ---------------------------------------------------------------- registry

_HA_FAST = {"haHousekeepingInterval": 1000}
_PROMOTION = "needs slave promotion (the failover issue); add it when cluster failover has landed"

SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    Scenario("kill-master", "SIGKILL (sometimes SIGTERM) the master mid-load, restart it", kill_master,
             ci_modes=MODES),
    Scenario("kill-slave", "SIGKILL the slave mid-load, restart it", kill_slave, slave_statuses=True),
    Scenario("kill-roll", "SIGKILL the master as a new CommitLog segment appears", kill_during_roll,
             overrides={MASTER: {"mappedFileSizeCommitLog": 64 * 1024},
                        SLAVE: {"mappedFileSizeCommitLog": 64 * 1024}}),
    Scenario("kill-cleanup", "SIGKILL the master while cleanup removes CommitLog segments", kill_during_cleanup,
             overrides={MASTER: {"mappedFileSizeCommitLog": 64 * 1024, "diskSpaceCleanForciblyRatio": 0.01,
                                 "diskMaxUsedSpaceRatio": 10, "cleanResourceInterval": 200},
                        SLAVE: {"mappedFileSizeCommitLog": 64 * 1024}}),
    Scenario("kill-namesrv", "SIGKILL the name server, restart it, wait for re-registration", kill_namesrv),
    Scenario("pause-master", "SIGSTOP the master beyond haHousekeepingInterval, then SIGCONT", pause_master,
             overrides={MASTER: _HA_FAST, SLAVE: _HA_FAST}),
    Scenario("cut-ha", "cut the master↔slave link (proxy disabled), restore it", cut_ha_link,
             slave_statuses=True),
    Scenario("slow-ha", "delay and throttle master→slave data until the slave falls behind", slow_ha_link,
             slave_statuses=True, overrides={MASTER: {"slaveTimeout": 500}}),
    Scenario("slice-client", "slice the client link into tiny pieces and delay them", slice_client_link,
             workload={"send_timeout": 8.0}),
    Scenario("torn-tail", "SIGKILL the slave, tear its last record, restart it", torn_tail),
    Scenario("garbage-tail", "SIGKILL the master, write garbage after its last record, restart it",
             garbage_tail),
    Scenario("unreadable-segment", "SIGKILL the slave, damage an old segment: the restart must refuse, "
             "naming it", unreadable_segment, overrides={MASTER: {"mappedFileSizeCommitLog": 128 * 1024},
                                                         SLAVE: {"mappedFileSizeCommitLog": 128 * 1024}}),
    Scenario("full-disk", "fill the master's small tmpfs under load, then free it", full_disk,
             disk_refusal=True, tmpfs_mb=8,
             overrides={MASTER: {"mappedFileSizeCommitLog": 256 * 1024, "diskMaxUsedSpaceRatio": 95,
                                 "diskSpaceCleanForciblyRatio": 0.99, "cleanResourceInterval": 200},
                        SLAVE: {"mappedFileSizeCommitLog": 256 * 1024}}),
    Scenario("fuzz", "hypothesis-mutated client-protocol and HA frames against the live master", fuzz),
    Scenario("promote-under-load", "promote the slave while producers write", None, pending=_PROMOTION),
    Scenario("old-master-returns", "the old master rejoins as a slave after a promotion", None,
             pending=_PROMOTION),
]}
