"""One run of the simulated cluster: start it, strike the schedule's faults while the
workload (load.py) runs, heal, let every group converge and the consumer drain, stop the
nodes cleanly, then judge (judge.py). The event log (events.py) records what happened, as
it happened; `run_seed` (run.py) sets up the seeded clock and scheduler around it.
"""

from __future__ import annotations

import random
from typing import Any

import trio

from cluster.client.admin import Admin
from cluster.judge.history import History
from node.failover.promotion import ASK_TIMEOUT_S
from store import runtime
from wire.client import BadRequest, TidemqError, connect
from wire.protocol import TopicCreate

from .cluster import CLIENT_HOST, NAMESRV_ADDRESS, SimCluster, SimGroup, SimNode
from .corrupt import Corruptions
from .disk import SimDisk
from .disk_full import FullDisks
from .etcd_link import ETCD_HOST
from .events import EventLog
from .fsync import FsyncErrors
from .judge import judge
from .load import GROUP, QUEUES, TOPIC, SimLoad
from .network import SimNetwork
from .orderly import SimOrderly, judge_orderly
from .power import PowerLosses
from .schedule import STORAGE_KINDS, Fault, Schedule
from .spin import SPIN_PASSES, SpinGuard
from .transactions import SimTransactions
from .verdict import Observed

__all__ = ["Simulation"]

EPOCH_S = 1_767_225_600.0  # the wall clock at simulated time 0 (2026-01-01)
SETTLE_S = 120.0  # after the last fault: how long the cluster may take to serve and converge
MAX_SIMULATED_S = 900.0  # a run still going then is stuck: a finding
ADMIN_HOST = "10.0.1.2"
MONITOR_S = 0.1  # how often the run notes each node's role and epoch
UNCLEAN_SHARE = 0.1
"""Of the schedule's promotions: the share that go uncleanly, drawn from a stream of its own
so the seeds' other draws stay put. The operator first cuts the slave off its master until
the master's in-sync set drops it (the master then confirms alone what consumers read),
tries the plain promote (refused) and forces it (`--unclean`)."""
UNCLEAN_MARGIN_S = 2.0  # past haMaxTimeSlaveNotCatchup, so the in-sync set has dropped the slave


class Simulation:
    def __init__(self, schedule: Schedule, mode: str, base: str, *, slaves: int = 1, etcd: bool = False,
                 groups: int = 1, orderly: bool = False, storage: bool = False) -> None:
        self.schedule = schedule
        self.mode = mode
        self.replication, self.flush = mode.split("+")
        self.base = base
        self.network = SimNetwork()
        self.etcd = etcd  # the group elects its masters: no operator promotions
        self.cluster = SimCluster(base, self.network, replication=self.replication, flush=self.flush,
                                  slaves=slaves, etcd=etcd, groups=groups)
        self.history = History()
        self.log = EventLog()
        self.load = SimLoad(self.cluster, self.network, schedule, self.history, self.log)
        self.transactions = SimTransactions(self.cluster, self.network, schedule, self.log)
        self.orderly = SimOrderly(self.network, schedule) if orderly else None  # orderly.py
        self.tx_violations: list[str] = []  # judged before the nodes stop (transactions.py)
        addresses = {n.address: n.name for n in self.cluster.nodes}
        self.observed = {g.name: Observed(first_master=g.master.name, addresses=addresses,
                                          nodes=frozenset(n.name for n in g.nodes))
                         for g in self.cluster.groups}  # what the run saw of each group
        self.violations: list[str] = []
        self.crash = ""
        self.ended_at = 0.0
        self.phase = "starting"  # what the run is doing, for a run that gets stuck
        self.spin_guard: SpinGuard | None = None
        self._truncations: dict[str, Any] = {}
        self._unclean = random.Random(f"unclean {schedule.seed}")
        self._nursery: trio.Nursery | None = None
        self.power = PowerLosses(schedule.seed, self.history, self.log, self.observed, self._restart)
        self.fsync = FsyncErrors(self.history, self.log, self.observed, self._restart)
        self.full_disks = FullDisks(self.log)
        self.corruptions = Corruptions(schedule.seed, self.log, self.observed, self.network, self._restart)
        if storage or any(f.kind in STORAGE_KINDS for f in schedule.faults):  # model what each node's files made durable (disk.py), for the power losses
            for node in self.cluster.nodes:
                node.disk = SimDisk(node.root)

    # ---------------------------------------------------------------- the run

    async def main(self) -> None:
        with runtime.simulated(EPOCH_S), trio.move_on_after(MAX_SIMULATED_S) as limit:
            if self.spin_guard is not None:
                self.spin_guard.scope = limit
            await self._run()
        if limit.cancelled_caught:
            self.ended_at = trio.current_time()
            spinning = self.spin_guard.spinning if self.spin_guard is not None else None
            if spinning is not None:
                problem = (f"tasks ran {SPIN_PASSES} passes of the run loop without the clock moving "
                           f"({self.phase}): {spinning}")
            else:
                problem = f"the run did not end within {MAX_SIMULATED_S:.0f} simulated seconds ({self.phase})"
            self.violations.append(problem)
            self.log.add(f"stuck: {problem}")
            return
        self._check()

    async def _run(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await self.cluster.start(nursery)
            self.phase = "creating the topic"
            await self._create_topic()
            await self.transactions.create_topic()
            sends_done = trio.Event()
            stop_consumer = trio.Event()
            stop_transactions = trio.Event()
            nursery.start_soon(self._monitor)
            nursery.start_soon(self.load.consume, stop_consumer)
            nursery.start_soon(self.transactions.run, stop_transactions)
            stop_orderly = trio.Event()
            if self.orderly is not None:
                nursery.start_soon(self.orderly.run, stop_orderly)
            async with trio.open_nursery() as load:
                load.start_soon(self.load.producers, sends_done)
                load.start_soon(self._promotions)
                self.phase = "striking faults"
                await self._faults()
                self.log.add("faults over")
                self.phase = "waiting for the producers"
                with trio.move_on_after(SETTLE_S) as waiting:
                    await sends_done.wait()
                if waiting.cancelled_caught:
                    self.violations.append(f"the producers could not finish {SETTLE_S:.0f} s after the last fault")
                    load.cancel_scope.cancel()
            self.phase = "converging"
            await self._converge()
            self.phase = "draining the consumer"
            await self.load.drain_consumer()
            stop_consumer.set()
            stop_orderly.set()
            self._note_moves_back()
            self.phase = "resolving the transactions"
            await self.transactions.drain()
            self.tx_violations = self.transactions.judge(self.observed, replication=self.replication,
                                                         flush=self.flush)
            stop_transactions.set()
            for group in self.cluster.groups:
                self.observed[group.name].committed = self.load.committed(group)
                self.observed[group.name].commits = self.load.commits.get(group.name, [])
            self.ended_at = trio.current_time()
            self.phase = "stopping the nodes"
            await self.cluster.stop()
            nursery.cancel_scope.cancel()

    def _note_moves_back(self) -> None:
        """The consumer's moves back to a divergence point (after an unclean promotion), if any."""
        for consumer in self.load.consumers:
            for queue, was, back in consumer.moved_back:
                self.log.add(f"consumer moved back on {queue.broker_name}:{queue.queue_id} from {was} to {back}")

    async def _create_topic(self) -> None:
        for group in self.cluster.groups:
            async with connect(group.master.address, net=self.network.host(CLIENT_HOST)) as conn:
                await conn.request(TopicCreate(topic=TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES))

    # ---------------------------------------------------------------- faults

    async def _faults(self) -> None:
        for fault in self.schedule.faults:
            if fault.kind == "promote":
                continue
            await trio.sleep_until(fault.at)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)
            self.phase = f"striking {fault.describe()}"
            await self._strike(fault)

    async def _promotions(self) -> None:
        for fault in self.schedule.faults:
            if fault.kind == "promote":
                await trio.sleep_until(fault.at)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)
                await self._promote(self.cluster.groups[fault.group])

    async def _strike(self, fault: Fault) -> None:
        net, cluster = self.network, self.cluster
        group = cluster.groups[fault.group]
        self.log.add(f"fault: {fault.describe()}")
        if fault.kind == "kill":
            node = group.role_node(fault.target)
            await node.kill()
            self.log.add(f"killed {node.name}")
            await trio.sleep(fault.duration)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)
            await self._restart(node)
            return
        if fault.kind == "disk_full":
            await self.full_disks.strike(fault, group.role_node(fault.target))
            self.log.add("healed: disk_full")
            return
        if fault.kind == "fsync_error":
            await self.fsync.strike(fault, group.role_node(fault.target))
            return
        if fault.kind == "corrupt":
            await self.corruptions.strike(fault, group.role_node(fault.target))
            return
        if fault.kind in ("power_loss", "power_loss_group"):
            nodes = group.nodes if fault.kind == "power_loss_group" else [group.role_node(fault.target)]
            await self.power.strike(fault, nodes, lambda: trio.sleep(fault.duration))  # poll: simulated time
            return
        if fault.kind == "etcd_down":
            hosts = [n.host for n in cluster.nodes]
            for host in hosts:
                net.cut(host, ETCD_HOST)
            await trio.sleep(fault.duration)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)
            for host in hosts:
                net.heal(host, ETCD_HOST)
        elif fault.kind == "slow_disk":
            node = group.role_node(fault.target)
            node.disk_delay = fault.amount
            await trio.sleep(fault.duration)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)
            node.disk_delay = 0.0
        elif fault.kind == "pause":
            host = cluster.host_of(fault.target, fault.group)
            net.pause(host)
            await trio.sleep(fault.duration)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)
            net.resume(host)
        else:
            a, b = cluster.host_of(fault.target, fault.group), cluster.host_of(fault.peer, fault.group)
            began, struck = runtime.wall_clock(), group.role_node(fault.target)
            if fault.kind == "delay":
                net.delay(a, b, fault.amount)
                await trio.sleep(fault.duration)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)
                net.delay(a, b, 0)
            else:
                net.cut(a, b, one_way=fault.kind == "cut_one_way")
                await trio.sleep(fault.duration)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)
                net.heal(a, b)
            if not self.etcd and fault.peer == "namesrv" and (fault.kind != "delay"
                                                              or 2 * fault.amount >= ASK_TIMEOUT_S / 2):
                self.observed[group.name].cut_off.append((struck.name, began, runtime.wall_clock()))
        self.log.add(f"healed: {fault.kind}")

    async def _restart(self, node: SimNode) -> None:
        assert self._nursery is not None
        await self.cluster.restart(self._nursery, node)
        self.log.add(f"restarted {node.name}")

    async def _promote(self, group: SimGroup) -> None:
        slave = group.role_node("slave")
        serving = slave.serving()
        if serving is None or serving[0] != "SLAVE":
            self.log.add(f"promotion skipped: {slave.name} is not serving as a slave ({serving})")
            return
        broker_id = slave.broker.cfg.broker_id if slave.broker else 1
        epoch_before = serving[1]
        forced = self._unclean.random() < UNCLEAN_SHARE
        if forced:
            self.log.add(f"operator: cut {slave.name} off {group.master.name} until its in-sync set drops it")
            cut = (group.master.host, slave.host)
            self.network.cut(*cut)
            await trio.sleep(slave.cfg.ha_max_time_slave_not_catchup / 1000 + UNCLEAN_MARGIN_S)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)
            self.network.heal(*cut)  # the slave's check reaches the master now (cut off, it could not know)
        try:
            async with Admin(NAMESRV_ADDRESS, net=self.network.host(ADMIN_HOST)) as admin:
                # the schedule's operator promotes as `tidemq admin promote` does by default: a
                # slave outside the in-sync set or behind the confirm offset is refused
                try:
                    answer = await admin.promote(group.name, broker_id, timeout=30.0)
                except BadRequest as e:
                    if not forced or "refused" not in str(e):
                        raise
                    self.log.add(f"promotion of {slave.name} refused; promoting it --unclean")
                    asked = runtime.wall_clock()  # the old master may rejoin, and cut, before the answer
                    answer = await admin.promote(group.name, broker_id, timeout=30.0, unclean=True)
                    self.observed[group.name].unclean.append((asked, slave.name, answer["start_offset"]))
        except TidemqError as e:
            now = slave.serving()
            if now is None or now[0] == "SLAVE" or now[1] <= epoch_before:
                self.log.add(f"promotion of {slave.name} failed: {e.status}")
                return
            # the answer was lost (the slave killed mid-promotion, say) but the promotion took:
            # it serves as master in a newer epoch, as an operator who looks would see (seed
            # 800: taken as failed, the judge went on holding the old master as the group's)
            self.log.add(f"promotion of {slave.name} answered {e.status}, but it serves as {now[0]} in epoch {now[1]}")
            answer = {"epoch": now[1], "start_offset": None}
        group.master = slave
        self.observed[group.name].promotions.append((runtime.wall_clock(), slave.name, answer["epoch"]))
        self.log.add(f"promoted {slave.name}: epoch {answer['epoch']} from offset {answer['start_offset']}")


    # ---------------------------------------------------------------- watching

    async def _monitor(self) -> None:
        """Each node's role and epoch as they change, and every truncation it reports."""
        seen: dict[str, Any] = {}
        last_role: dict[str, str] = {}  # node → the role it last served in
        streamed: dict[str, int] = {}  # node → its restart count when a master last streamed it its table
        newest: dict[str, int] = {}  # group → the newest epoch a master of it served in
        last_tick = runtime.wall_clock()
        while True:
            for node in self.cluster.nodes:
                now = node.serving()
                if now != seen.get(node.name):
                    seen[node.name] = now
                    self.log.add(f"{node.name}: {now[0] + ' epoch ' + str(now[1]) if now else 'down'}")
                    if now is not None:
                        self.observed[node.group].terms.append((runtime.wall_clock(), node.name, now[0], now[1]))
                    if now is not None and now[0] != "SLAVE" and (now[1] or 0) > newest.get(node.group, -1):
                        newest[node.group] = now[1] or 0
                        # a promoted slave (not a restarted master) that a master streamed its table to
                        # since it (re)started (else its table is its file's: docs/failover.md, Limits)
                        if last_role.get(node.name) == "SLAVE" and streamed.get(node.name) == node.restarts:
                            self._note_takeover(node, last_tick)
                    if now is not None:
                        last_role[node.name] = now[0]
                services = node.broker.services if node.broker is not None else None
                if services is not None and services.ha_client is not None and services.ha_client.offsets_streamed():
                    streamed[node.name] = node.restarts
                self._note_truncation(node)
            last_tick = runtime.wall_clock()
            if self.etcd:
                for group in self.cluster.groups:
                    self._follow_election(group)
            await trio.sleep(MONITOR_S)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)

    def _follow_election(self, group: SimGroup) -> None:
        """etcd mode: the group's node serving as master with the newest epoch is the one
        producers write to; a new one counts as a promotion (when the run saw it serve)."""
        masters = [(s[1] or 0, n) for n in group.nodes if (s := n.serving()) is not None and s[0] != "SLAVE"]
        if not masters:
            return
        epoch, node = max(masters, key=lambda m: m[0])
        followed = self.observed[group.name].promotions
        if followed and epoch < max(e for _at, _n, e in followed):
            # an old master not fenced yet (it learns of the newer epoch at its next etcd
            # tick; its lease is gone, so it takes no write), while the newest one is down:
            # not an election (seeds 1258, 2926: it was taken for one in epoch 1 after 2)
            return
        if node is not group.master:
            group.master = node
            self.observed[group.name].promotions.append((runtime.wall_clock(), node.name, epoch))
            self.log.add(f"elected {node.name}: epoch {epoch}")

    def _note_takeover(self, node: SimNode, before: float) -> None:
        """The group's committed offsets on a slave that began serving as master in a newer
        epoch, for the verdict's check that it holds every commit answered before. (A master
        killed and elected again has the table it last wrote, up to 5 s old: docs/failover.md.)"""
        broker = node.broker
        if broker is None:
            return
        offsets = {q: o for q in range(QUEUES) if (o := broker.offsets.fetch(GROUP, TOPIC, q)) is not None}
        self.observed[node.group].takeovers.append((before, node.name, offsets))

    def _note_truncation(self, node: SimNode) -> None:
        """The node's last truncation report (Failover.last_truncation), if it is a new one."""
        cut = node.broker.failover.last_truncation if node.broker is not None else None
        if cut is None or cut is self._truncations.get(node.name):
            return
        self._truncations[node.name] = cut
        observed = self.observed[node.group]
        observed.truncated.update(cut["msg_ids"])
        observed.cuts.append((cut["at_ms"] / 1000, frozenset(cut["msg_ids"])))
        observed.truncated_ranges.append((cut["from_offset"], cut["to_offset"]))
        self.log.add(f"{node.name} dropped [{cut['from_offset']}, {cut['to_offset']}): "
                     f"{cut['message_count']} message(s)")

    async def _converge(self) -> None:
        """Wait until each group's master serves and every other node of it is its caught-up
        slave, every node having dispatched what it holds (a slave whose checkpoint kept no
        confirm offset waits for its master's: seed 61 with --storage ended before it came)."""
        def converged(group: SimGroup) -> bool:
            master = group.master
            serving = master.serving()
            if serving is None or serving[0] == "SLAVE" or not all(node.dispatched() for node in group.nodes):
                return False
            end = master.store_max_offset()
            for node in group.nodes:
                if node is master:
                    continue
                s = node.serving()
                if s is None or s[0] != "SLAVE" or node.store_max_offset() != end:
                    return False
            return True

        with trio.move_on_after(SETTLE_S) as waiting:
            while not all(converged(group) for group in self.cluster.groups):
                await trio.sleep(0.1)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)
        for node in self.cluster.nodes:  # a truncation in the last poll interval
            self._note_truncation(node)
        states = ", ".join(f"{n.name} {n.serving()} at {n.store_max_offset()}" for n in self.cluster.nodes)
        if waiting.cancelled_caught:
            self.violations.append(f"the group did not converge {SETTLE_S:.0f} s after the load: {states}")
        masters = ", ".join(g.master.name for g in self.cluster.groups)
        self.log.add(f"end: master {masters}; {states}")


    # ---------------------------------------------------------------- verdict

    def _check(self) -> None:
        """The judge's findings (judge.py), then the verdict's lines in the event log."""
        self.violations.extend(self.power.violations)
        self.violations.extend(self.fsync.judge(self.flush))
        self.violations.extend(self.corruptions.violations)
        self.violations.extend(judge(self.load, self.observed, replication=self.replication, flush=self.flush))
        self.violations.extend(self.tx_violations)
        if self.orderly is not None:
            self.log.lines.append(f"orderly: {len(self.orderly.calls)} handler call(s)")
            self.violations.extend(judge_orderly(self.orderly.calls))
        counts = self.history.counts()
        self.log.lines.append(f"verdict: {counts} consumed {len(self.load.consumed)}; {self.transactions.summary()}; "
                              f"{len(self.violations)} violation(s)")
        self.log.lines.extend(f"violation: {v}" for v in self.violations)
