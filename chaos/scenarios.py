"""The chaos scenarios: each is a fault function that injects its fault into a running
FaultContext and heals it, plus what its modes promise (chaos.expectations).

The promotion scenarios (promote-under-load, old-master-returns, tx-kill-master,
tx-unreplicated) promote the slave with `Admin.promote` (docs/failover.md); from then on
broker-a-s serves as the master, the producers send to it, and the runner's catch-up wait
and checker take it as the master.
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

from cluster.client.admin import Admin
from cluster.client.transaction_producer import COMMIT, ROLLBACK
from cluster.judge.history import OK
from cluster.launch.launcher import LauncherError
from store.layout import commitlog_dir, list_segments
from store.msg_id import decode_msg_id
from wire.client import ConnectionLost, RequestTimeout, TidemqError, connect
from wire.protocol import Send, StatusReply

from . import disk
from .layout import BROKER_NAME, MASTER, MODES, NAMESRV, SLAVE
from .runner import FaultContext
from .transaction_judge import TxLog, judge
from .transactions import TX_NODE_CONFIG, TransactionLoad
from .workload import node_status, sample_node

Fault = Callable[[FaultContext], Awaitable[None]]


@attrs.frozen
class Scenario:
    name: str
    summary: str
    fault: Fault
    ci_modes: tuple[str, ...] = ("SYNC_MASTER+SYNC_FLUSH",)  # the modes CI runs it in
    lossless_in_every_mode: bool = True  # process faults: the page cache survives a SIGKILL
    slave_statuses: bool = False  # SYNC_MASTER producers must see the slave fall behind
    disk_refusal: bool = False
    slave_ahead_ok: bool = False
    overrides: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    workload: dict[str, Any] = attrs.field(factory=dict)  # WorkloadConfig fields
    tmpfs_mb: int = 0
    promotion: bool = False  # promotes the slave: losses judged by the old master's truncation report


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
    """Names of the CommitLog segments of the store at `root`, in offset order ([] before it exists)."""
    try:
        return [os.path.basename(path) for _start, path in list_segments(commitlog_dir(root))]
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


# ---------------------------------------------------------------- promotion (failover)

PROMOTE_TIMEOUT_S = 30.0
REJOIN_TIMEOUT_S = 45.0


async def promote_under_load(ctx: FaultContext) -> None:
    """SIGKILL the master, promote the slave, let the producers write to it, restart the
    old master: it must fence itself and rejoin as a slave, cutting an unreplicated tail."""
    await ctx.signal(MASTER, "KILL")
    promotion = await _promote_slave(ctx)
    await ctx.hold(ctx.schedule["fault_for"])  # load on the new master, the old one down
    await ctx.restart(MASTER)
    await _old_master_rejoins(ctx, promotion)


async def old_master_returns(ctx: FaultContext) -> None:
    """SIGSTOP the master past haHousekeepingInterval (the slave drops it), promote the
    slave, SIGCONT the old master: a write to it must be refused as fenced, it must
    acknowledge no write sent after the promotion and rejoin as a slave."""
    await ctx.signal(MASTER, "STOP")
    try:
        await ctx.hold(ctx.schedule["fault_for"])

        async def dropped() -> bool:
            status = await node_status(ctx.cluster.slave_address)
            return status is not None and not status.ha.connected

        await ctx.until(dropped, 20.0, "the slave dropping its paused master")
        promotion = await _promote_slave(ctx)
    finally:
        await ctx.signal(MASTER, "CONT")
    await _probe_fenced(ctx, promotion["epoch"])
    await _old_master_rejoins(ctx, promotion)


async def _promote_slave(ctx: FaultContext) -> dict[str, Any]:
    """Promote broker-a-s through the name server; from now on the producers send to it
    and the runner takes it as the master. Admin.promote's answer (`epoch`,
    `start_offset`) plus `promoted_at`, the wall-clock time it returned."""
    async with Admin(ctx.cluster.namesrv) as admin:
        result = await admin.promote(BROKER_NAME, 1, timeout=PROMOTE_TIMEOUT_S)
    ctx.cluster.serving_master = SLAVE
    ctx.workload.send_address = ctx.cluster.client_address  # the promoted node's client proxy
    ctx.note(f"heal: {SLAVE} promoted: epoch {result['epoch']} from CommitLog offset {result['start_offset']}")
    return {**result, "promoted_at": time.time()}


async def _probe_fenced(ctx: FaultContext, epoch: int) -> None:
    """One write straight to the resumed old master: it must be refused as fenced (naming
    the new epoch), or as a slave once it has rejoined, or lose the connection while it
    restarts; stored, or refused for another reason, is a broken promise."""
    try:
        async with connect(ctx.cluster.master_address, connect_timeout=2.0, request_timeout=5.0) as conn:
            answer = await conn.call(Send(topic=ctx.workload.cfg.topic, body=b"probe after the promotion"))
        ctx.findings.append(f"the resumed old master stored a write after the promotion: {answer.status.value}")
    except (ConnectionLost, RequestTimeout) as e:
        ctx.note(f"at: a write to the resumed old master: {e}")
    except TidemqError as e:
        ctx.note(f"at: a write to the resumed old master: {e}")
        if e.status != "SERVICE_NOT_AVAILABLE" or not (f"epoch {epoch}" in str(e) or "is a SLAVE" in str(e)):
            ctx.findings.append(f"the resumed old master refused a write but not as fenced by epoch {epoch}: {e}")


async def _old_master_rejoins(ctx: FaultContext, promotion: dict[str, Any]) -> None:
    """Wait until broker-a serves as a slave of the new master on its epoch and keep its
    truncation report for the expectations. The old master must acknowledge no write sent
    after the promotion. A send in flight at the SIGSTOP may be answered after the
    SIGCONT: whether its record survived is the loss check's (SYNC_MASTER: the new master
    holds it; ASYNC_MASTER: or the old master reported dropping it)."""
    epoch = promotion["epoch"]

    async def as_slave() -> StatusReply | None:
        status = await node_status(ctx.cluster.master_address)
        if status and status.role == "SLAVE" and status.ha.connected:
            return status
        return None

    status = await ctx.until(as_slave, REJOIN_TIMEOUT_S, f"the old master {MASTER} rejoining as a slave")
    if status.epoch != epoch:
        ctx.findings.append(f"the old master rejoined on epoch {status.epoch}, not {epoch}")
    cut = ctx.truncation = status.last_truncation
    ctx.note(f"heal: {MASTER} rejoined as a slave; " + (
        f"it dropped CommitLog [{cut.from_offset}, {cut.to_offset}): {cut.message_count} message(s)"
        if cut else "it dropped nothing"))
    address = ctx.cluster.master_address
    late = [op.key for op in ctx.history.ops if op.outcome == OK and op.invoked_at > promotion["promoted_at"]
            and op.msg_id and decode_msg_id(op.msg_id)[0] == address]
    if late:
        ctx.findings.append(f"the old master acknowledged {len(late)} write(s) sent after the promotion: {late[:3]}")


# ---------------------------------------------------------------- transactions (issue 43)

TX_SETTLE_TIMEOUT_S = 20.0


async def kill_master_mid_transaction(ctx: FaultContext, *, cut_replication: bool = False) -> None:
    """Transactions (chaos/transactions.py) beside the workload; SIGKILL the master while
    five of them wait in their local transaction, between their prepared send and their
    END: a COMMIT, a ROLLBACK and an UNKNOWN of a producer that retries a failed END, a
    COMMIT and a ROLLBACK of one that does not; release them, promote the slave, restart
    the old master (it rejoins as a slave). END retries and the new master's check service
    must resolve every transaction as the producer decided; the judge's findings
    (chaos/transaction_judge.py) join the run's."""
    load = TransactionLoad(ctx.cluster.namesrv, ctx.workload.run_id)
    await load.create_topic(ctx.cluster.master_address)
    async with trio.open_nursery() as nursery:
        await nursery.start(load.run)
        try:
            await _kill_mid_transaction(ctx, load, cut_replication)
        except (TimeoutError, LauncherError, OSError, TidemqError) as e:  # inside the nursery: not grouped
            ctx.findings.append(f"the fault could not be injected or healed: {e}")
        finally:
            load.close()


async def kill_master_mid_unreplicated_transaction(ctx: FaultContext) -> None:
    """tx-kill-master with the master↔slave link cut before the held transactions'
    prepared sends: their half messages are on the killed master only (ASYNC_MASTER
    acknowledges them), so the promoted slave never had them and the old master drops them
    when it rejoins."""
    await kill_master_mid_transaction(ctx, cut_replication=True)


async def _kill_mid_transaction(ctx: FaultContext, load: TransactionLoad, cut_replication: bool) -> None:
    await ctx.until(lambda: load.ended >= 6, 20.0, "six transactions ended before the fault")
    if cut_replication:
        await ctx.toxiproxy(ctx.cluster.proxy("ha").disable)
        ctx.note("fault: master↔slave link cut")
    held = load.hold() + load.hold((COMMIT, ROLLBACK), end_retried=False)
    await ctx.until(lambda: len(load.in_local) == len(held), 20.0, "the held transactions prepared")
    await ctx.signal(MASTER, "KILL")
    killed_at = time.time()
    ctx.note(f"at: killed with {len(load.in_local)} transaction(s) between prepare and END: "
             + ", ".join(f"{tx.key} ({tx.decision})" for tx in held))
    load.release()
    promotion = await _promote_slave(ctx)
    if cut_replication:
        await ctx.toxiproxy(ctx.cluster.proxy("ha", MASTER).enable)
        ctx.note("heal: the old master's HA link restored")
    await ctx.hold(ctx.schedule["fault_for"])  # transactions on the new master, the old one down
    await ctx.restart(MASTER)
    await _old_master_rejoins(ctx, promotion)
    load.stop_sending()
    await ctx.until(lambda: load.in_flight == 0, 30.0, "the transactions in flight ending")
    lost = set(ctx.truncation.msg_ids) if ctx.truncation else set()
    serving = ctx.cluster.address_of(ctx.cluster.serving_master)
    try:
        await ctx.until(lambda: load.settled(serving, lost), TX_SETTLE_TIMEOUT_S,
                        "every half message ended and every COMMIT delivered")
    except TimeoutError as e:
        ctx.note(f"at: {e}")  # the judge names what is left
    verdict = judge(load, await TxLog.read(serving),
                    lossless=ctx.cluster.mode.startswith("SYNC_MASTER"), lost=lost, killed_at=killed_at,
                    promoted_at=promotion["promoted_at"])
    ctx.findings.extend(verdict.findings)
    ctx.schedule["transactions"] = verdict.summary
    s = verdict.summary
    ctx.note(f"at: {s['transactions']} transaction(s) judged: {s['delivered']} delivered, {s['checks']} check(s), "
             f"{len(s['lost_with_unreplicated_tail'])} lost with the unreplicated tail")


# ---------------------------------------------------------------- network faults


async def cut_ha_link(ctx: FaultContext) -> None:
    proxy = ctx.cluster.proxy("ha")
    await ctx.toxiproxy(proxy.disable)
    ctx.note("fault: master↔slave link cut")
    await ctx.hold(ctx.schedule["fault_for"])
    await ctx.toxiproxy(proxy.enable)
    ctx.note("heal: master↔slave link restored")


async def slow_ha_link(ctx: FaultContext) -> None:
    proxy = ctx.cluster.proxy("ha")
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
    """The master's client link, which the producers and the consumer both use."""
    proxy = ctx.cluster.proxy("client")
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


async def cut_client_link(ctx: FaultContext) -> None:
    """Cut the master's client link. The producers lose it, and so does the consumer, which
    the name server routed through the proxy: it must turn to the slave (through the
    slave's own client proxy) while the link is cut, return, and by the end of the heal
    have consumed every message acknowledged before the cut."""
    proxy = ctx.cluster.proxy("client")
    acked_before = {op.key for op in ctx.history.ops if op.outcome == OK}
    await ctx.toxiproxy(proxy.disable)
    ctx.note("fault: the master's client link cut (producers and consumer)")

    def consumer_on_slave() -> bool:
        consumer = ctx.workload.consumer
        return consumer is not None and consumer.reading_from_slave(BROKER_NAME)

    try:
        await ctx.until(consumer_on_slave, max(ctx.schedule["fault_for"], 5.0),
                        "the consumer turning to the slave while its master link is cut")
        ctx.note("at: the consumer reads from the slave")
    except TimeoutError as e:
        ctx.findings.append(f"{e}: its link to the master does not go through the client proxy")
    await ctx.hold(ctx.schedule["fault_for"])
    await ctx.toxiproxy(proxy.enable)
    ctx.note("heal: the master's client link restored")

    def drained() -> bool:
        return acked_before <= ctx.workload.consumed.keys()

    try:
        await ctx.until(drained, 20.0, "the consumer having every message acknowledged before the cut")
        ctx.note(f"at: the consumer has all {len(acked_before)} messages acknowledged before the cut")
    except TimeoutError as e:
        missing = sorted(acked_before - ctx.workload.consumed.keys())
        ctx.findings.append(f"{e}: {len(missing)} not consumed, e.g. {missing[:3]}")


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
    path = os.path.join(commitlog_dir(root), name)
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
    Scenario("cut-client", "cut the master's client link: producers and the consumer lose it; the "
             "consumer reads from the slave, returns and misses nothing", cut_client_link),
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
    Scenario("promote-under-load", "SIGKILL the master, promote the slave under load, restart the old master: "
             "it rejoins as a slave", promote_under_load, promotion=True,
             ci_modes=("ASYNC_MASTER+ASYNC_FLUSH",)),
    Scenario("old-master-returns", "SIGSTOP the master, promote the slave, SIGCONT: the old master fences "
             "itself and rejoins as a slave", old_master_returns, promotion=True,
             overrides={MASTER: _HA_FAST, SLAVE: _HA_FAST}),
    Scenario("tx-kill-master", "SIGKILL the master while transactions are between prepare and END, promote "
             "the slave: END retries and checks resolve each as its producer decided", kill_master_mid_transaction,
             promotion=True, ci_modes=("SYNC_MASTER+SYNC_FLUSH", "ASYNC_MASTER+ASYNC_FLUSH"),
             overrides={MASTER: TX_NODE_CONFIG, SLAVE: TX_NODE_CONFIG}, workload={"producers": 2}),
    Scenario("tx-unreplicated", "tx-kill-master with replication cut before the held transactions: their half "
             "messages die with the old master's unreplicated tail", kill_master_mid_unreplicated_transaction,
             promotion=True, ci_modes=("ASYNC_MASTER+ASYNC_FLUSH",),
             overrides={MASTER: TX_NODE_CONFIG, SLAVE: TX_NODE_CONFIG}, workload={"producers": 2}),
]}
