"""One seed's simulation: a cluster, a workload and a fault schedule in one trio run under a
MockClock, checked at the end; the same seed gives the same event log, byte for byte.

What makes a run a function of its seed: the schedule comes from the seed
(chaos/sim/schedule.py); trio's MockClock jumps to the next timer whenever every task
waits (autojump), so simulated seconds cost no wall time and timeouts fire in order; trio's
scheduler is made deterministic and seeded (it shuffles each batch of runnable tasks with
its module random generator, seeded here, as its Hypothesis plugin does); Python's `random`
is seeded; blocking file work runs inline (store/runtime.py); the wall clock is a fixed
epoch plus the simulated time. Python's string hashing must be fixed too (PYTHONHASHSEED):
the CLI sees to that for replays in another process.

The event log is what a run did, in order: each fault struck and healed, each role and
epoch change a node went through, each truncation, each send's outcome, the verdict. Its
SHA-256 is the run's fingerprint.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import random
import shutil
import tempfile
import time
import traceback
from typing import Any

import attrs
import trio
import trio.testing

from cluster.client.admin import Admin
from cluster.client.consumer import PullConsumer
from cluster.client.producer import Producer
from node.failover.promotion import ASK_TIMEOUT_S
from store import runtime
from wire.client import OutcomeUnknown, TidemqError, connect
from wire.protocol import Send, TopicCreate

from ..checker import check
from ..history import FAIL, INFO, OK, History, Op
from ..workload import consume, record_send
from .cluster import CLIENT_HOST, NAMESRV_ADDRESS, SimCluster, SimGroup, SimNode
from .etcd_link import ETCD_HOST
from .mutations import MUTATIONS, mutated
from .network import SimNetwork
from .schedule import Fault, Schedule, draw
from .verdict import Observed, verdict

__all__ = ["CONTROLLERS", "GROUPS", "MODES", "SeedResult", "run_seed"]

MODES = ("SYNC_MASTER+ASYNC_FLUSH", "SYNC_MASTER+SYNC_FLUSH", "ASYNC_MASTER+ASYNC_FLUSH", "ASYNC_MASTER+SYNC_FLUSH")
CONTROLLERS = ("manual", "etcd")  # who makes a slave master: an operator (Admin.promote), or etcd's election
GROUPS = (1, 2)  # broker groups in the cluster
TOPIC = "SimTopic"
QUEUES = 4
GROUP = "sim-consumer"
EPOCH_S = 1_767_225_600.0  # the wall clock at simulated time 0 (2026-01-01)
SYNC_PRODUCERS = 2
PIPELINE_LANES = 4  # one connection, this many sends in flight
GROUP_LANES = SYNC_PRODUCERS + PIPELINE_LANES  # the producer processes that write to one group's master
RETRYING = GROUP_LANES  # the retrying producer's process (broker-a's lanes come first, broker-b's after it)
RETRIES = 2  # the retrying producer: the client library's Producer, as applications send
SEND_TIMEOUT_S = 3.0
SETTLE_S = 120.0  # after the last fault: how long the cluster may take to serve and converge
MAX_SIMULATED_S = 900.0  # a run still going then is stuck: a finding
SPIN_PASSES = 100_000  # passes of trio's run loop without the clock moving: a spin (a busy instant takes a few thousand)
SPIN_SAMPLE = 1_000  # the last passes of a spin, whose task steps name what spun
ADMIN_HOST = "10.0.1.2"
PULL_INTERVAL_MS = 500  # the consumer's pause after a round with messages: fuller pulls, fewer steps
MONITOR_S = 0.1  # how often the run notes each node's role and epoch


@attrs.define
class SeedResult:
    seed: int
    mode: str
    faults: int
    slaves: int = 1
    controller: str = "manual"
    groups: int = 1
    sends: int = 0
    acked: int = 0
    failed: int = 0
    indeterminate: int = 0
    violations: list[str] = attrs.field(factory=list)
    known: list[str] = attrs.field(factory=list)  # findings of the known gap, not broken promises
    log_hash: str = ""
    simulated_s: float = 0.0
    wall_s: float = 0.0
    log: list[str] = attrs.field(factory=list, repr=False)

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> dict[str, Any]:
        out = attrs.asdict(self)
        del out["log"]
        return out


class SpinGuard(trio.abc.Instrument):
    """Ends a run whose tasks keep running while the simulated clock stands still: a loop
    that never waits (a timeout that is due at once, forever) would otherwise spin without
    end, as it spins a real CPU until the real clock moves on. It counts passes of the run
    loop (a hook per pass, not per task step: a sixth of a run's steps cost); the last
    passes of a spin add a `_Sampler` that names the tasks that ran."""

    def __init__(self, clock: trio.testing.MockClock, limit: int = SPIN_PASSES) -> None:
        self.clock = clock
        self.limit = limit
        self.scope: trio.CancelScope | None = None
        self.spinning: str | None = None  # the task that spun, once caught
        self._at = -1.0
        self._passes = 0
        self._sampler: _Sampler | None = None

    def before_io_wait(self, timeout: float) -> None:
        now = self.clock.current_time()
        if now != self._at:
            self._at, self._passes = now, 0
            if self._sampler is not None:
                trio.lowlevel.remove_instrument(self._sampler)
                self._sampler = None
            return
        self._passes += 1
        if self._passes == max(0, self.limit - SPIN_SAMPLE):
            self._sampler = _Sampler()
            trio.lowlevel.add_instrument(self._sampler)
        if self._passes == self.limit and self.scope is not None:
            names = self._sampler.names if self._sampler is not None else {}
            self.spinning = ", ".join(f"{name} ({n})" for name, n in
                                      sorted(names.items(), key=lambda kv: -kv[1])[:3]) or "?"
            self.scope.cancel()


class _Sampler(trio.abc.Instrument):
    """Counts the task steps of a spin's last passes by task name."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.names[task.name] = self.names.get(task.name, 0) + 1


class EventLog:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, what: str) -> None:
        self.lines.append(f"{trio.current_time():10.4f} {what}")

    def digest(self) -> str:
        h = hashlib.sha256()
        for line in self.lines:
            h.update(line.encode())
            h.update(b"\n")
        return h.hexdigest()


def _seed_trio(seed: int) -> None:
    """trio's run loop shuffles each batch of runnable tasks with this generator; ordered by
    task creation first, the shuffle is a function of the seed (what trio's Hypothesis
    plugin does to make scheduling reproducible)."""
    from trio._core import _run  # no public switch for this

    _run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    _run._r.seed(seed)


def run_seed(seed: int, *, mode: str = MODES[0], schedule: Schedule | None = None, base_dir: str | None = None,
             keep: bool = False, mutation: str | None = None, slaves: int = 1,
             controller: str = "manual", groups: int = 1) -> SeedResult:
    """Simulate `seed` (or `schedule`) in `mode`, in `groups` groups of a master and `slaves`
    slaves whose master an operator promotes (`controller` "manual") or etcd elects ("etcd"), with a
    deliberate bug (`mutation`, chaos/sim/mutations.py) or none; the store files go to a
    fresh directory under `base_dir` (default: /dev/shm when it exists), removed unless `keep`."""
    if slaves not in (1, 2):
        raise ValueError(f"slaves must be 1 or 2, got {slaves}")
    if groups not in GROUPS:
        raise ValueError(f"groups must be 1 or 2, got {groups}")
    if controller not in CONTROLLERS:
        raise ValueError(f"controller must be one of {', '.join(CONTROLLERS)}, got {controller!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mutation is not None and mutation not in MUTATIONS:
        raise ValueError(f"no mutation {mutation!r}; there are {', '.join(MUTATIONS)}")
    schedule = schedule or draw(seed, etcd=controller == "etcd", slaves=slaves, groups=groups)
    random.seed(seed)
    _seed_trio(seed)
    base = tempfile.mkdtemp(prefix=f"tidemq-sim-{seed}-", dir=base_dir or _default_base())
    result = SeedResult(seed, mode, len(schedule.faults), slaves, controller, groups)
    began = time.perf_counter()
    sim = Simulation(schedule, mode, base, slaves=slaves, etcd=controller == "etcd", groups=groups)
    clock = trio.testing.MockClock(autojump_threshold=0)
    sim.spin_guard = SpinGuard(clock)
    try:
        with _quiet_logs(), mutated(mutation):
            trio.run(sim.main, clock=clock, instruments=[sim.spin_guard])
    except BaseException as e:  # a crash of the simulated cluster is a finding, not the runner's end
        if isinstance(e, KeyboardInterrupt):
            raise
        sim.log.lines.append(f"crashed: {''.join(traceback.format_exception_only(e)).strip()}")
        sim.violations.append(f"the simulation crashed: {type(e).__name__}: {e}")
        sim.crash = "".join(traceback.format_exception(e))
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)
    result.violations = sim.violations
    result.known = sim.known
    counts = sim.history.counts()
    result.sends, result.acked = len(sim.history.ops), counts["ok"]
    result.failed, result.indeterminate = counts["fail"], counts["info"]
    result.simulated_s = round(sim.ended_at, 3)
    result.log = sim.log.lines + ([sim.crash] if sim.crash else [])
    result.log_hash = sim.log.digest()
    result.wall_s = round(time.perf_counter() - began, 3)
    return result


def _default_base() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


@contextlib.contextmanager
def _quiet_logs() -> Any:
    """The nodes' warnings (fencing, truncation, lost connections) are the faults doing their
    work: the event log keeps what matters."""
    root = logging.getLogger("tidemq")
    before = root.level
    root.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        root.setLevel(before)


class Simulation:
    def __init__(self, schedule: Schedule, mode: str, base: str, *, slaves: int = 1, etcd: bool = False,
                 groups: int = 1) -> None:
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
        addresses = {n.address: n.name for n in self.cluster.nodes}
        self.observed = {g.name: Observed(first_master=g.master.name, addresses=addresses)
                         for g in self.cluster.groups}  # what the run saw of each group
        self.violations: list[str] = []
        self.known: list[str] = []  # findings of the known gap (verdict.py)
        self.consumed: dict[str, int] = {}
        self.consumed_by: dict[str, dict[str, int]] = {}  # group → what the consumer read from it
        self.read_offsets: dict[str, set[int]] = {}  # group → every CommitLog offset the consumer read
        self.retried_to: dict[str, str] = {}  # the retrying producer's acknowledged keys → the group that stored them
        self.crash = ""
        self.ended_at = 0.0
        self.phase = "starting"  # what the run is doing, for a run that gets stuck
        self.spin_guard: SpinGuard | None = None
        self._truncations: dict[str, Any] = {}
        self._nursery: trio.Nursery | None = None

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
            sends_done = trio.Event()
            stop_consumer = trio.Event()
            nursery.start_soon(self._monitor)
            nursery.start_soon(self._consume, stop_consumer)
            async with trio.open_nursery() as load:
                load.start_soon(self._producers, sends_done)
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
            await self._drain_consumer()
            stop_consumer.set()
            for group in self.cluster.groups:
                self.observed[group.name].committed = self._committed(group)
            self.ended_at = trio.current_time()
            self.phase = "stopping the nodes"
            await self.cluster.stop()
            nursery.cancel_scope.cancel()

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
        try:
            async with Admin(NAMESRV_ADDRESS, net=self.network.host(ADMIN_HOST)) as admin:
                answer = await admin.promote(group.name, broker_id, timeout=30.0)
        except TidemqError as e:
            self.log.add(f"promotion of {slave.name} failed: {e.status}")
            return
        group.master = slave
        self.observed[group.name].promotions.append((runtime.wall_clock(), slave.name, answer["epoch"]))
        self.log.add(f"promoted {slave.name}: epoch {answer['epoch']} from offset {answer['start_offset']}")

    # ---------------------------------------------------------------- workload

    async def _producers(self, done: trio.Event) -> None:
        """Each group's master gets sync producers and a pipelined one (processes 0-5 write to
        broker-a, 7-12 to broker-b); the retrying producer (6) writes wherever the name
        server's routes lead it."""
        groups = self.cluster.groups
        per_lane = -(-self.schedule.sends // (len(groups) * GROUP_LANES + 1))
        interval = self.schedule.span / per_lane
        async with trio.open_nursery() as nursery:
            for group in groups:
                first = self._first_lane(group)
                for p in range(first, first + SYNC_PRODUCERS):
                    nursery.start_soon(self._producer, group, [p], per_lane, interval)
                nursery.start_soon(self._producer, group, list(range(first + SYNC_PRODUCERS, first + GROUP_LANES)),
                                   per_lane, interval)
            nursery.start_soon(self._retrying_producer, RETRYING, per_lane, interval)
        done.set()

    def _first_lane(self, group: SimGroup) -> int:
        index = self.cluster.groups.index(group)
        return index * GROUP_LANES + (1 if index else 0)  # (the retrying producer is 6)

    async def _retrying_producer(self, p: int, quota: int, interval: float) -> None:
        """The client library's `Producer`: routes from the name server, any queue, and a send
        that failed or timed out is tried again (RETRIES), so a message whose first attempt's
        outcome was unknown may be stored more than once (`Op.copies`)."""
        async with Producer(NAMESRV_ADDRESS, retries=RETRIES, send_timeout=SEND_TIMEOUT_S, connect_timeout=2.0,
                            net=self.network.host(CLIENT_HOST)) as producer:
            for seq in range(quota):
                op = self.history.invoke(p, seq, f"sim-p{p}-{seq}")
                try:
                    r = await producer.send(TOPIC, op.key.encode().ljust(200, b"."), keys=[op.key])
                except OutcomeUnknown as e:  # every attempt failed, one or more of them unknown
                    self.history.complete(op, INFO, status=e.status, error=str(e)[:200], copies=1 + RETRIES)
                except TidemqError as e:
                    self.history.complete(op, FAIL, status=e.status, error=str(e)[:200])
                else:
                    self.history.complete(op, OK, status=r.status.value, msg_id=r.msg_id, queue_id=r.queue_id,
                                          queue_offset=r.queue_offset, commitlog_offset=r.commitlog_offset,
                                          copies=1 + r.unknown_attempts)
                    self.retried_to[op.key] = r.broker_name
                self.log.add(_op_line(op, self.retried_to.get(op.key) if len(self.cluster.groups) > 1 else None))
                await trio.sleep(interval)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)

    async def _producer(self, group: SimGroup, processes: list[int], quota: int, interval: float) -> None:
        """One connection to the group's master; each send goes out from every process in
        `processes` at once (one process: a sync producer; several: a pipelined one)."""
        seq = 0
        net = self.network.host(CLIENT_HOST)
        while seq < quota:
            address = group.master.address
            try:
                async with connect(address, connect_timeout=2.0, request_timeout=SEND_TIMEOUT_S, net=net) as conn:
                    while seq < quota:
                        good = await self._send_round(conn, processes, seq)
                        seq += 1
                        await trio.sleep(interval)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)
                        if not good or address != group.master.address:
                            break  # a new connection, to the master (etcd mode: another may be elected)
            except TidemqError:
                await trio.sleep(0.2)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)

    async def _send_round(self, conn: Any, processes: list[int], seq: int) -> bool:
        good = [True]

        async def one(p: int) -> None:
            op = self.history.invoke(p, seq, f"sim-p{p}-{seq}")
            request = Send(topic=TOPIC, body=op.key.encode().ljust(200, b"."), keys=[op.key], queue_id=seq % QUEUES)
            if not await record_send(self.history, conn, op, request):
                good[0] = False
            self.log.add(_op_line(op))

        if len(processes) == 1:  # a sync producer: no nursery, fewer task steps
            await one(processes[0])
            return good[0]
        async with trio.open_nursery() as nursery:
            for p in processes:
                nursery.start_soon(one, p)
        return good[0]

    async def _consume(self, stop: trio.Event) -> None:
        await consume(stop, self.consumed, lambda: PullConsumer(
            NAMESRV_ADDRESS, group=GROUP, topic=TOPIC, request_timeout=3.0, master_retry_s=0.5,
            net=self.network.host(CLIENT_HOST)), poll_ms=1000, pull_interval_ms=PULL_INTERVAL_MS,
            by_group=self.consumed_by, read=self.read_offsets)

    async def _drain_consumer(self) -> None:
        """Let the consumer reach the end of every queue of every group (bounded)."""
        def caught_up(group: SimGroup) -> bool:
            broker = group.master.broker
            if broker is None or broker.services is None:
                return False
            store = broker.services.store
            return all((broker.offsets.fetch(GROUP, TOPIC, q) or 0) == store.get_max_offset_in_queue(TOPIC, q)
                       for q in range(QUEUES))

        with trio.move_on_after(30.0) as waiting:
            while not all(caught_up(group) for group in self.cluster.groups):
                await trio.sleep(0.1)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)
        if waiting.cancelled_caught:
            self.log.add("the consumer did not reach the end of every queue")

    def _committed(self, group: SimGroup) -> dict[int, int]:
        broker = group.master.broker
        if broker is None:
            return {}
        return {q: o for q in range(QUEUES) if (o := broker.offsets.fetch(GROUP, TOPIC, q)) is not None}

    # ---------------------------------------------------------------- watching

    async def _monitor(self) -> None:
        """Each node's role and epoch as they change, and every truncation it reports."""
        seen: dict[str, Any] = {}
        while True:
            for node in self.cluster.nodes:
                now = node.serving()
                if now != seen.get(node.name):
                    seen[node.name] = now
                    self.log.add(f"{node.name}: {now[0] + ' epoch ' + str(now[1]) if now else 'down'}")
                    if now is not None:
                        self.observed[node.group].terms.append((trio.current_time(), node.name, now[0], now[1]))
                self._note_truncation(node)
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
        if node is not group.master:
            group.master = node
            self.observed[group.name].promotions.append((runtime.wall_clock(), node.name, epoch))
            self.log.add(f"elected {node.name}: epoch {epoch}")

    def _note_truncation(self, node: SimNode) -> None:
        """The node's last truncation report (Failover.last_truncation), if it is a new one."""
        cut = node.broker.failover.last_truncation if node.broker is not None else None
        if cut is None or cut is self._truncations.get(node.name):
            return
        self._truncations[node.name] = cut
        observed = self.observed[node.group]
        observed.truncated.update(cut["msg_ids"])
        observed.truncated_ranges.append((cut["from_offset"], cut["to_offset"]))
        self.log.add(f"{node.name} dropped [{cut['from_offset']}, {cut['to_offset']}): "
                     f"{cut['message_count']} message(s)")

    async def _converge(self) -> None:
        """Wait until each group's master serves and every other node of it is its caught-up slave."""
        def converged(group: SimGroup) -> bool:
            master = group.master
            serving = master.serving()
            if serving is None or serving[0] == "SLAVE":
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
        """Each group judged on its own stores, its share of the history and what the run
        observed of it; with two groups, then what no group can see alone (copies across groups)."""
        groups = self.cluster.groups
        stored: dict[str, dict[str, int]] = {}
        for group in groups:
            history, consumed = self.history, self.consumed
            if len(groups) > 1:
                history = self._history_of(group)
                consumed = self.consumed_by.get(group.name, {})
            report = check(history, {n.name: n.root for n in group.nodes}, master=group.master.name, topic=TOPIC,
                           queues=QUEUES, consumed=consumed)
            observed = self.observed[group.name]
            observed.epochs = {n.name: _epochs(n.root) for n in group.nodes}
            found, known = verdict(report, history, observed, replication=self.replication,
                                   master=group.master.name, consumed=consumed,
                                   read_offsets=self.read_offsets.get(group.name, set()))
            prefix = f"{group.name}: " if len(groups) > 1 else ""
            self.violations.extend(prefix + f for f in found)
            self.known.extend(prefix + k for k in known)
            stored[group.name] = report.stored
        if len(groups) > 1:
            self.violations.extend(self._across(stored))
        counts = self.history.counts()
        self.log.lines.append(f"verdict: {counts} consumed {len(self.consumed)}; "
                              f"{len(self.violations)} violation(s)")
        self.log.lines.extend(f"violation: {v}" for v in self.violations)
        self.log.lines.extend(f"known gap: {k}" for k in self.known)

    def _history_of(self, group: SimGroup) -> History:
        """The ops the group's stores answer for: its own producers' and the retrying
        producer's. A retried send another group acknowledged is, for this one, a send that
        may have landed once per attempt of unknown outcome, or else a failed one."""
        first = self._first_lane(group)
        out = History()
        for op in self.history.ops:
            if op.process == RETRYING and op.outcome == OK and self.retried_to.get(op.key) != group.name:
                op = attrs.evolve(op, outcome=INFO if op.copies > 1 else FAIL, copies=max(1, op.copies - 1))
            elif op.process != RETRYING and not first <= op.process < first + GROUP_LANES:
                continue
            out.ops.append(op)
        return out

    def _across(self, stored: dict[str, dict[str, int]]) -> list[str]:
        """A send stored in a group its producer did not write to, or more often in all
        groups than its attempts allow (a retried send's copies can land in either group)."""
        out = []
        for op in self.history.ops:
            places = {g: n for g, copies in stored.items() if (n := copies.get(op.key, 0))}
            if op.process != RETRYING:
                own = next(g.name for g in self.cluster.groups
                           if self._first_lane(g) <= op.process < self._first_lane(g) + GROUP_LANES)
                if set(places) - {own}:
                    out.append(f"{op.key} (sent to {own}) stored in {sorted(places)}")
            elif sum(places.values()) > op.copies:
                out.append(f"{op.key} stored {sum(places.values())} times across groups ({places}), "
                           f"may be stored {op.copies}x")
        return [f"{len(out)} send(s) stored across groups beyond their attempts: {out[:3]}"] if out else []


def _op_line(op: Op, group: str | None = None) -> str:
    where = f" {op.queue_id}@{op.queue_offset} {op.commitlog_offset}" if op.outcome == "ok" else ""
    where += f" on {group}" if group else ""
    copies = f" (may be stored {op.copies}x)" if op.copies > 1 else ""
    return f"send p{op.process} {op.seq}: {op.outcome} {op.status or ''}{where}{copies}"


def _epochs(root: str) -> list[tuple[int, int]]:
    from store.epoch_file import EPOCH_FILE_NAME, EpochFileCache

    path = os.path.join(root, EPOCH_FILE_NAME)
    if not os.path.exists(path):
        return []
    return [(e.epoch, e.start_offset) for e in EpochFileCache.load(path).entries]
