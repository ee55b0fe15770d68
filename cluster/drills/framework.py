"""Failover drills: a local 2m-2s-sync cluster under load, one fault, a report.

`tidemq drill NAME` (or `scripts/drill NAME`) copies conf/2m-2s-sync to a scratch
directory with free ports, starts it (cluster/launch/launcher.py), creates a topic with 4 queues
on each group, runs producers that send unique keys (UNIQ_KEY) and a consumer group of 2
members (cluster/client/push_consumer.py), then runs the drill's script (cluster/drills/basic.py)
against it, stops the producers, lets the group drain and prints the report: sent,
acknowledged (PUT_OK), failed, consumed, duplicates by UNIQ_KEY, acknowledged-but-lost,
time until producers recovered, time until every queue was consumed again, and the
promises checked. Exit 1 when a promise is broken, 2 when the drill could not run.
Every send is an op of a History, judged against what the group consumed by the checker
the chaos suite uses (history.py, checker.py `check_consumption`).

A drill is `async def drill(run: DrillRun) -> None` registered with `@drill("name",
"help")`: it injects faults through `run.kill` / `run.start`, marks the fault with
`run.fault()`, waits with `run.wait_until`, and records promises with `run.promise`.
The `promote` and `partition` drills slot in the same way.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import trio

from wire.client import OutcomeUnknown, TidemqError
from wire.protocol import OffsetList, OffsetListReply

from ..client.admin import Admin
from ..client.base import ReceivedMessage
from ..client.producer import Producer
from ..client.push_consumer import Consumer
from ..client.rebalance import HEARTBEAT_INTERVAL_S, REBALANCE_INTERVAL_S, allocate_averagely
from ..client.routing import MessageQueue
from ..judge.checker import ConsumptionReport, check_consumption
from ..judge.history import FAIL, INFO, OK, History, Op
from ..launch import launcher
from ..launch.secrets import forget_layout_secrets, make_dev_secrets
from . import rocketmq_producer

log = logging.getLogger("tidemq.drill")

__all__ = ["CLIENTS", "DRILLS", "DrillUnavailable", "DrillReport", "DrillRun", "drill", "run_drill"]

REPO = Path(__file__).resolve().parents[2]
LAYOUT = REPO / "conf" / "2m-2s-sync"
SECURE_LAYOUT = REPO / "conf" / "2m-2s-secure"  # LAYOUT with aclEnable and tlsMode enforcing
TOPIC = "DrillTopic"
GROUP = "drill-group"
QUEUES = 4
DRAIN_TIMEOUT_S = 40.0
PROMISED = ("PUT_OK",)  # the acknowledgements a drill promises to keep (the others count as stored, unconfirmed)
# small segments: four nodes start fast and use little disk
# a paused master is dropped by its slave after 3 s (partition drill); heartbeats keep an idle
# connection inside that
NODE_OVERRIDES = {"mappedFileSizeCommitLog": 16 * 1024 * 1024, "mappedFileSizeConsumeQueue": 60_000,
                  "messageDelayLevel": " ".join(["1s"] * 18),
                  "haHousekeepingInterval": 3000, "haSendHeartbeatInterval": 1000}

CLIENTS = ("tidemq", "rocketmq")
"""Whose producers a drill's load runs (`--client`)."""


class DrillUnavailable(Exception):
    """The drill cannot run here (a client library is missing)."""


DrillFn = Callable[["DrillRun"], Awaitable[None]]
DRILLS: dict[str, tuple[str, DrillFn]] = {}
LAYOUTS: dict[str, Path] = {}
"""A drill's layout when not LAYOUT (the auto-failover drills run conf/2m-2s-sync-auto)."""


def drill(name: str, help: str, *, layout: Path | None = None) -> Callable[[DrillFn], DrillFn]:
    """Register a drill under `name` (what `tidemq drill NAME` runs)."""
    def register(fn: DrillFn) -> DrillFn:
        DRILLS[name] = (help, fn)
        if layout is not None:
            LAYOUTS[name] = layout
        return fn
    return register


@attrs.define
class Consumption:
    at: float
    member: str
    queue: MessageQueue
    from_slave: bool
    queue_offset: int = -1
    """Where in its queue the message lies (-1: not known, a member process's line)."""


@attrs.define
class DrillReport:
    drill: str
    sent: int = 0
    acknowledged: int = 0
    stored_unconfirmed: int = 0
    indeterminate: int = 0
    """Sends whose outcome is unknown (timed out, lost after writing, INDETERMINATE): each
    may or may not be stored; never counted as failed."""
    acknowledged_after_fault: int = 0
    """Sends begun after the fault and acknowledged: the load resumed."""
    failed: int = 0
    """Sends that were not stored (the drill checks that none was consumed)."""
    failed_stored: list[str] = attrs.field(factory=list)
    consumed: int = 0
    duplicates: int = 0
    lost: list[str] = attrs.field(factory=list)
    producers_recovered_s: float | None = None
    consumption_recovered_s: float | None = None
    takeovers: dict[str, float | None] = attrs.field(factory=dict)
    """rebalance: seconds from a member change until the masters' lock tables held the new
    allocation (None: not within the drill's limit)."""
    consumed_from_slave: int = 0
    redelivered_after_fault: int | None = None
    """Messages of broker-a's queues consumed before the fault and again after it (the
    promote drill: messages delivered again after the promotion); None: not measured."""
    consumed_not_committed: int | None = None
    """Of broker-a's messages consumed before the fault, those at or past their queue's
    committed offset as broker-a's master held it then: what a group may consume again."""
    committed_offsets_lost: int | None = None
    """broker-a's queues whose committed offset (the master's at the fault) the slave that
    serves them afterwards does not have (0 promised under SYNC_MASTER)."""
    order_violations: int | None = None
    """The orderly drill: messages first consumed after a later one of their key."""
    double_holders: int | None = None
    """The orderly drill: handler calls of two members on one queue at once."""
    promises: dict[str, bool] = attrs.field(factory=dict)
    events: list[tuple[float, str]] = attrs.field(factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and all(self.promises.values())

    def to_json(self) -> dict[str, Any]:
        out = attrs.asdict(self)
        out["acknowledged_but_lost"] = len(self.lost)
        out["failed_stored"] = self.failed_stored[:100]
        out["lost"] = self.lost[:100]
        out["events"] = [{"t": round(t, 3), "event": e} for t, e in self.events]
        out["ok"] = self.ok
        return out

    def table(self) -> str:
        def fmt(v: float | None) -> str:
            return "-" if v is None else f"{v:.2f} s"
        rows = [
            ("sent", self.sent), ("acknowledged (PUT_OK)", self.acknowledged),
            ("stored, unconfirmed", self.stored_unconfirmed),
            ("acknowledged, sent after the fault", self.acknowledged_after_fault),
            ("indeterminate (outcome unknown)", self.indeterminate), ("failed", self.failed),
            ("failed but stored", len(self.failed_stored)),
            ("consumed", self.consumed), ("duplicates (UNIQ_KEY)", self.duplicates),
            ("acknowledged but lost", len(self.lost)), ("consumed from a slave", self.consumed_from_slave),
            ("producers recovered after", fmt(self.producers_recovered_s)),
            ("every queue consumed again after", fmt(self.consumption_recovered_s)),
            *((f"{what} after", fmt(took)) for what, took in self.takeovers.items()),
            *((k, v) for k, v in (("delivered again after the fault", self.redelivered_after_fault),
                                  ("consumed, uncommitted at the fault", self.consumed_not_committed),
                                  ("committed offsets lost", self.committed_offsets_lost),
                                  ("order violations", self.order_violations),
                                  ("double holders", self.double_holders)) if v is not None),
        ]
        lines = [f"drill {self.drill}", ""] + [f"  {k:<34} {v}" for k, v in rows] + ["", "promises:"]
        lines += [f"  [{'ok' if v else 'BROKEN'}] {k}" for k, v in self.promises.items()]
        if self.error:
            lines.append(f"error: {self.error}")
        lines += ["", "events:"] + [f"  {t:7.2f} s  {e}" for t, e in self.events]
        return "\n".join(lines)


class DrillRun:
    """The running cluster, the load on it and what was observed; see the module docstring."""

    def __init__(self, name: str, base: Path, namesrv: str, nursery: trio.Nursery, *,
                 heartbeat_s: float, rebalance_s: float, rate: float, rounds: int = 1, seed: int = 0,
                 channel_expired_s: float = 120.0, client: str = "tidemq") -> None:
        self.name = name
        self.client = client
        """Whose producers load the cluster: "tidemq" (cluster/client) or "rocketmq" (the C++
        client over remoting, cluster/drills/rocketmq_producer.py)."""
        self.base = base
        self.namesrv = namesrv
        self.nursery = nursery
        self.heartbeat_s = heartbeat_s
        self.rebalance_s = rebalance_s
        self.channel_expired_s = channel_expired_s
        """The nodes' channelExpiredTimeout: a silent member is dropped after it."""
        self.rate = rate
        self.rounds = rounds
        """Faults for drills that repeat one (auto-soak), each drawn from `seed`."""
        self.seed = seed
        self.report = DrillReport(name)
        self.t0 = trio.current_time()
        self.fault_at: float | None = None
        self.committed_at_fault: dict[MessageQueue, int] | None = None
        """broker-a's master's committed offsets of the drill group just before the fault."""
        self.history = History()  # every send and what the producer was told
        self.send_log: list[tuple[float, float, bool]] = []  # start, end, ok
        self.consumed: dict[str, list[Consumption]] = {}
        self.consumed_msg_ids: set[str] = set()
        """The store msgIds the in-process members received (a truncation report names the
        msgIds it cut)."""
        self.members: dict[str, Consumer] = {}
        self.processes: dict[str, trio.Process] = {}
        self.lock_samples: list[tuple[float, float, dict[MessageQueue, str], dict[str, int]]] = []
        """(asked at, answered at, queue → holder, broker → group version) as the masters'
        lock tables said (monitor_locks)."""
        """Members run as their own processes (cluster/drills/member.py): faults a process takes."""
        self.overlaps: list[str] = []
        self.gate = trio.Event()
        self.gate.set()
        self._stop_members: dict[str, trio.Event] = {}
        self._producing = True
        self.sends_in_flight = 0
        self.producers_running = 0
        """Producers not yet ended: a C++ producer's process sends until it exits."""

    # ---- observation -------------------------------------------------------------------

    def now(self) -> float:
        return trio.current_time() - self.t0

    def event(self, text: str) -> None:
        self.report.events.append((self.now(), text))
        log.info("drill %s: %s", self.name, text)

    def promise(self, text: str, kept: bool) -> bool:
        self.report.promises[text] = bool(kept)
        if not kept:
            self.event(f"BROKEN: {text}")
        return bool(kept)

    def fault(self, text: str) -> None:
        """Mark the fault: recovery times are measured from here."""
        self.fault_at = self.now()
        self.event(text)

    async def wait_until(self, check: Callable[[], Awaitable[bool] | bool], timeout: float, what: str) -> bool:
        """Poll `check` until true or `timeout`; records the event either way."""
        with trio.move_on_after(timeout):
            while True:
                try:
                    result = check()
                    if not isinstance(result, bool):
                        result = await result
                except TidemqError:
                    result = False
                if result:
                    self.event(what)
                    return True
                await trio.sleep(0.05)  # poll
        self.event(f"timed out after {timeout:g} s waiting for: {what}")
        return False

    # ---- the cluster -------------------------------------------------------------------

    async def kill(self, node: str, sig: str = "KILL") -> None:
        self.event(await trio.to_thread.run_sync(launcher.kill, self.base, node, sig))

    async def start(self, node: str) -> None:
        rec = await trio.to_thread.run_sync(launcher.start_node, self.base, node)
        self.event(f"{node} restarted (pid {rec.pid})")

    def node_log(self, node: str) -> str:
        return (self.base / "logs" / f"{node}.out").read_text(errors="replace")

    def address(self, node: str) -> str:
        state = launcher.load_state(self.base)
        assert state is not None
        return state.node(node).address or ""

    # ---- load --------------------------------------------------------------------------

    async def produce(self, producer_id: int) -> None:
        self.producers_running += 1
        try:
            if self.client == "rocketmq":
                await self.produce_rocketmq(producer_id)
            else:
                await self._produce(producer_id)
        finally:
            self.producers_running -= 1

    async def _produce(self, producer_id: int) -> None:
        async with Producer(namesrv=self.namesrv, send_timeout=3.0, retries=2, route_ttl_s=3.0) as producer:
            seq = 0
            while self._producing:
                key = f"p{producer_id}-{seq}"
                op = self.history.invoke(producer_id, seq, key)
                seq += 1
                started = self.now()
                self.sends_in_flight += 1
                try:
                    result = await producer.send(TOPIC, key.encode(), keys=[key], properties={"UNIQ_KEY": key})
                except OutcomeUnknown as e:  # may be stored: neither acknowledged nor failed
                    self.history.complete(op, INFO, status=e.status, error=str(e)[:200])
                    self.send_log.append((started, self.now(), False))
                    log.info("send %s: outcome unknown: %s", key, e)
                    continue
                except TidemqError as e:
                    self.history.complete(op, FAIL, status=e.status, error=str(e)[:200])
                    self.send_log.append((started, self.now(), False))
                    log.info("send %s failed: %s", key, e)
                    continue
                finally:
                    self.sends_in_flight -= 1
                self.history.complete(op, OK, status=result.status.value, msg_id=result.msg_id,
                                      queue_id=result.queue_id, queue_offset=result.queue_offset,
                                      commitlog_offset=result.commitlog_offset, copies=1 + result.unknown_attempts)
                self.send_log.append((started, self.now(), True))
                await trio.sleep(1 / self.rate)  # poll: the producer's pace

    async def produce_rocketmq(self, producer_id: int) -> None:
        """The C++ producer in a child process (rocketmq_producer.py): each line it prints
        is an op of the history; it stops when its stdin closes."""
        argv = [sys.executable, "-m", "cluster.drills.rocketmq_producer", self.namesrv, TOPIC, f"p{producer_id}",
                str(self.rate)]
        proc = await trio.lowlevel.open_process(argv, cwd=str(REPO), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO)})
        self.event(f"C++ producer p{producer_id} started as process {proc.pid}")
        ops: dict[str, tuple[Op, float]] = {}
        seq = 0
        assert proc.stdout is not None and proc.stdin is not None

        async def stop_when_told() -> None:
            while self._producing and proc.returncode is None:
                await trio.sleep(0.05)  # poll
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await proc.stdin.aclose()  # type: ignore[union-attr]

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stop_when_told)
                buffer = b""
                async for chunk in proc.stdout:
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        event = json.loads(line)
                        if "invoke" in event:
                            ops[event["invoke"]] = (self.history.invoke(producer_id, seq, event["invoke"]), self.now())
                            seq += 1
                            self.sends_in_flight += 1
                        elif "outcome" in event:
                            op, started = ops.pop(event["key"])
                            self.sends_in_flight -= 1
                            ok = event["outcome"] == "ok"
                            if ok:
                                self.history.complete(op, OK, status="PUT_OK", msg_id=event["msg_id"],
                                                      queue_offset=event["offset"])
                            else:
                                self.history.complete(op, INFO, status="UNKNOWN", error=event.get("error"))
                            self.send_log.append((started, self.now(), ok))
                nursery.cancel_scope.cancel()
        finally:
            self.sends_in_flight -= len(ops)  # in flight when it ended: indeterminate
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
        if self._producing:
            self.event(f"C++ producer p{producer_id} exited early ({proc.returncode})")

    def _handler(self, member: str) -> Callable[[ReceivedMessage], Awaitable[None]]:
        async def handle(msg: ReceivedMessage) -> None:
            await self.gate.wait()
            consumer = self.members.get(member)
            from_slave = bool(consumer and consumer.reading_from_slave(msg.broker_name or ""))
            # the drill's key: its KEYS (a C++ producer draws a new UNIQ_KEY per attempt)
            key = msg.keys[0] if msg.keys else msg.properties.get("UNIQ_KEY", msg.msg_id)
            self.consumed_msg_ids.add(msg.msg_id)
            self.consumed.setdefault(key, []).append(
                Consumption(self.now(), member, msg.queue, from_slave, msg.queue_offset))
        return handle

    async def start_member(self, member: str) -> None:
        """Start a group member (in this process, its own client and heartbeats)."""
        stop = trio.Event()
        self._stop_members[member] = stop
        started = trio.Event()

        async def run() -> None:
            async with Consumer(GROUP, TOPIC, self._handler(member), namesrv=self.namesrv,
                                heartbeat_interval_s=self.heartbeat_s, rebalance_interval_s=self.rebalance_s,
                                poll_ms=300, client_id=f"127.0.0.1@drill@{member}", route_ttl_s=3.0,
                                master_retry_max_s=2.0) as consumer:
                self.members[member] = consumer
                started.set()
                await stop.wait()
            self.members.pop(member, None)

        self.nursery.start_soon(run)
        await started.wait()
        self.event(f"member {member} started")

    async def stop_member(self, member: str) -> None:
        """A clean close: commits, unlocks, unregisters."""
        self._stop_members.pop(member).set()
        await self.wait_until(lambda: member not in self.members, 30, f"member {member} closed")

    @staticmethod
    def client_id(member: str) -> str:
        return f"127.0.0.1@drill@{member}"

    async def start_member_process(self, member: str) -> None:
        """Start a group member as its own process (same client, same intervals); what it
        consumes is counted from its `MSG` lines."""
        argv = [sys.executable, "-m", "cluster.drills.member", self.namesrv, GROUP, TOPIC, self.client_id(member),
                str(self.heartbeat_s), str(self.rebalance_s)]
        proc = await trio.lowlevel.open_process(argv, cwd=str(REPO), stdout=subprocess.PIPE,
                                                stderr=subprocess.DEVNULL,
                                                env={**os.environ, "PYTHONPATH": str(REPO)})
        self.processes[member] = proc
        self.nursery.start_soon(self._read_member, member, proc)
        self.event(f"member {member} started as process {proc.pid}")

    async def _read_member(self, member: str, proc: trio.Process) -> None:
        assert proc.stdout is not None
        buffer = b""
        async for chunk in proc.stdout:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                parts = line.decode(errors="replace").split()
                if len(parts) == 4 and parts[0] == "MSG":
                    queue = MessageQueue(TOPIC, parts[2], int(parts[3]))
                    self.consumed.setdefault(parts[1], []).append(Consumption(self.now(), member, queue, False))

    def signal_member(self, member: str, sig: signal.Signals) -> None:
        self.processes[member].send_signal(sig)
        self.event(f"member {member}: {sig.name}")

    async def lock_view(self) -> dict[MessageQueue, str]:
        """Who holds each queue of the topic, as the masters' lock tables say (consumer_list)."""
        async with Admin(namesrv=self.namesrv) as admin:
            return self._holders(await admin.consumer_list(GROUP))

    @staticmethod
    def _holders(views: dict[str, Any]) -> dict[MessageQueue, str]:
        out = {}
        for broker_name, view in views.items():
            for key, holder in view.locks.items():
                topic, _, queue_id = key.rpartition(":")
                if topic == TOPIC:
                    out[MessageQueue(TOPIC, broker_name, int(queue_id))] = holder
        return out

    async def monitor_locks(self, every_s: float = 0.1) -> None:
        """Sample the masters' lock tables for `broker_overlaps`."""
        async with Admin(namesrv=self.namesrv) as admin:
            while True:
                with contextlib.suppress(TidemqError):
                    asked = self.now()
                    views = await admin.consumer_list(GROUP)
                    self.lock_samples.append((asked, self.now(), self._holders(views),
                                              {name: v.version for name, v in views.items()}))
                await trio.sleep(every_s)  # poll: the brokers have no change feed for locks

    def broker_overlaps(self) -> list[str]:
        """Consumptions of a queue by a member while the brokers' lock tables, sampled before
        (answered before the consumption) and after (asked after it) with no change to the
        group in between (the same version: a holder can change only through a leave, a drop
        or an unlock, each of which bumps it), gave the queue to another member: two members
        consuming one queue at once, seen from the brokers' side."""
        found = []
        answered = [a for _, a, _, _ in self.lock_samples]
        for key, consumptions in self.consumed.items():
            for c in consumptions:
                i = bisect.bisect_right(answered, c.at)  # samples [0, i) were answered by then
                later = next((s for s in self.lock_samples[i:] if s[0] >= c.at), None)
                if i == 0 or later is None:
                    continue
                mine = self.client_id(c.member)
                first = self.lock_samples[i - 1]
                if first[3].get(c.queue.broker_name) != later[3].get(c.queue.broker_name):
                    continue  # the group changed in between: who held it when is not known
                before, after = first[2].get(c.queue), later[2].get(c.queue)
                if before not in (None, mine) and after not in (None, mine):
                    found.append(f"{c.at:.2f} s: {c.member} consumed {key} from {c.queue} while the brokers "
                                 f"gave {c.queue} to {before}")
        return found

    async def takeover(self, what: str, members: list[str], limit: float, since: float | None = None) -> float | None:
        """Seconds from `since` (now) until the lock tables hold the averagely allocated
        queues of `members` (RocketMQ's AllocateMessageQueueAveragely), recorded in the report."""
        start = self.now() if since is None else since
        queues = sorted(self.all_queues())
        ids = sorted(self.client_id(m) for m in members)
        wanted = {q: cid for cid in ids for q in allocate_averagely(queues, ids, cid)}

        async def allocated() -> bool:
            return await self.lock_view() == wanted

        took = self.now() - start if await self.wait_until(allocated, limit, f"{what}: the new allocation held") else None
        self.report.takeovers[what] = took
        return took

    async def monitor_ownership(self) -> None:
        """Sample the members' queues: a queue held by two members at once is an overlap."""
        while True:
            seen: dict[MessageQueue, str] = {}
            for name, consumer in list(self.members.items()):
                for queue in consumer.owned:
                    if queue in seen and len(self.overlaps) < 100:
                        self.overlaps.append(f"{self.now():.2f} s: {queue} owned by {seen[queue]} and {name}")
                    seen[queue] = name
            await trio.sleep(0.02)  # poll

    # ---- committed offsets across the fault ----------------------------------------------

    async def committed(self, address: str, broker_name: str) -> dict[MessageQueue, int]:
        """The drill group's committed offsets on TOPIC as the node at `address` holds them."""
        async with Admin(namesrv=self.namesrv) as admin:
            answer: OffsetListReply = await admin.pool.call(address, OffsetList())
        return {MessageQueue(TOPIC, broker_name, e["queue_id"]): e["offset"] for e in answer.offsets
                if e.get("group") == GROUP and e.get("topic") == TOPIC}

    async def hold_and_note_commits(self, master: str) -> None:
        """Before a fault of broker-a's master: hold the handlers a moment (the commits of
        what was consumed are answered meanwhile), then note the master's committed offsets."""
        self.gate = trio.Event()
        await trio.sleep(1.0)  # poll: commits in flight are answered
        try:
            self.committed_at_fault = await self.committed(master, "broker-a")
        except TidemqError as e:
            self.event(f"cannot read broker-a's committed offsets before the fault: {e}")
        else:
            self.event(f"broker-a's master holds committed offsets {self._offsets_text(self.committed_at_fault)}")

    async def judge_commits_on(self, address: str, node: str) -> None:
        """After the fault: the committed offsets `node` (at `address`) serves broker-a's
        queues with, against the master's at the fault (`committed_offsets_lost`)."""
        if self.committed_at_fault is None:
            return
        try:
            held = await self.committed(address, "broker-a")
        except TidemqError as e:
            self.event(f"cannot read {node}'s committed offsets: {e}")
            return
        lost = [q for q, offset in self.committed_at_fault.items() if held.get(q, -1) < offset]
        self.report.committed_offsets_lost = len(lost)
        self.event(f"{node} holds committed offsets {self._offsets_text(held)}"
                   + (f"; behind the master's on {len(lost)} queue(s)" if lost else ""))

    @staticmethod
    def _offsets_text(table: dict[MessageQueue, int]) -> str:
        return "{" + ", ".join(f"{q.queue_id}: {o}" for q, o in sorted(table.items(), key=lambda i: i[0].queue_id)) + "}"

    def _redelivery(self) -> tuple[int, int, set[str]]:
        """(messages of broker-a consumed before the fault and again after it, those of them
        consumed but not committed at the fault, keys delivered again that were committed)."""
        fault, committed = self.fault_at, self.committed_at_fault or {}
        assert fault is not None
        again = uncommitted = 0
        committed_again = set()
        for key, cs in self.consumed.items():
            before = [c for c in cs if c.at < fault and c.queue.broker_name == "broker-a"]
            if not before:
                continue
            not_committed = any(c.queue_offset < 0 or c.queue_offset >= committed.get(c.queue, 0) for c in before)
            uncommitted += not_committed
            if any(c.at >= fault for c in cs):
                again += 1
                if not not_committed:
                    committed_again.add(key)
        return again, uncommitted, committed_again

    def queues_consumed_since(self, t: float) -> set[MessageQueue]:
        return {c.queue for cs in self.consumed.values() for c in cs if c.at >= t and c.queue.topic == TOPIC}

    def all_queues(self) -> set[MessageQueue]:
        return {MessageQueue(TOPIC, b, q) for b in ("broker-a", "broker-b") for q in range(QUEUES)}

    def stop_producing(self) -> None:
        self._producing = False

    async def wind_down(self) -> None:
        """Stop the producers and close every member (committing)."""
        self.stop_producing()
        for proc in self.processes.values():
            if proc.returncode is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        with trio.move_on_after(30):
            for proc in self.processes.values():
                await proc.wait()
        for proc in self.processes.values():
            if proc.returncode is None:
                proc.kill()
        for stop in self._stop_members.values():
            stop.set()
        self._stop_members.clear()
        with trio.move_on_after(30):
            while self.members:
                await trio.sleep(0.05)  # poll

    # ---- the report --------------------------------------------------------------------

    def judged(self) -> ConsumptionReport:
        """The history against what the group consumed, so far."""
        return check_consumption(self.history, {k: len(v) for k, v in self.consumed.items()}, promised=PROMISED)

    def finish(self) -> DrillReport:
        """The report's figures, from the history and the judge (also mid-drill: so far)."""
        r = self.report
        counts, judged = self.history.counts(), self.judged()
        r.sent = len(self.history.ops)
        r.acknowledged = judged.acked
        r.stored_unconfirmed = counts[OK] - judged.acked
        r.indeterminate = counts[INFO]  # a send still in flight included: its outcome is unknown
        r.failed = counts[FAIL]
        r.consumed = sum(len(v) for v in self.consumed.values())
        r.duplicates = judged.duplicates
        r.lost = judged.lost
        r.failed_stored = judged.failed_consumed
        r.consumed_from_slave = sum(1 for cs in self.consumed.values() for c in cs if c.from_slave)
        if self.fault_at is not None:
            fails = [end for _, end, ok in self.send_log if not ok and end >= self.fault_at]
            after = max(fails, default=self.fault_at)
            firsts = [end for start, end, ok in self.send_log if ok and start >= after]
            r.producers_recovered_s = (min(firsts) - self.fault_at) if firsts else None
            r.acknowledged_after_fault = sum(1 for start, _, ok in self.send_log if ok and start >= self.fault_at)
            if self.committed_at_fault is not None:
                r.redelivered_after_fault, r.consumed_not_committed, _ = self._redelivery()
        return r

    def redelivered_committed(self) -> set[str]:
        """Keys delivered again after the fault though committed at it (promised: none)."""
        return self._redelivery()[2] if self.fault_at is not None and self.committed_at_fault is not None else set()


INTERVALS: dict[str, tuple[float, float]] = {"rebalance": (HEARTBEAT_INTERVAL_S, REBALANCE_INTERVAL_S)}
"""A drill's members' heartbeat and rebalance intervals when not given: the rebalance drill
measures the client's defaults (RocketMQ's); the failover drills use short ones (0.5 s, 2 s)."""


async def run_drill(name: str, *, base_dir: str | None = None, keep: bool = False, heartbeat_s: float | None = None,
                    rebalance_s: float | None = None, rate: float = 50.0, producers: int = 2, rounds: int = 1,
                    seed: int = 0, channel_expired_s: float | None = None, secure: bool = False,
                    client: str = "tidemq") -> DrillReport:
    """Start the cluster, run drill `name` under load, stop everything; the report.
    `channel_expired_s`: the nodes' channelExpiredTimeout (default: theirs, 120 s).
    `secure`: on conf/2m-2s-secure (accounts, permissions and TLS on; fresh secrets), the
    drill's clients logging in as its admin account. `client`: whose producers load it,
    "tidemq" or "rocketmq" (the C++ client over remoting; needs PyPI `rocketmq`)."""
    if client not in CLIENTS:
        raise ValueError(f"unknown client {client!r}; one of {', '.join(CLIENTS)}")
    if client == "rocketmq" and not rocketmq_producer.available():
        raise DrillUnavailable(rocketmq_producer.MISSING)
    if client == "rocketmq" and secure:
        raise ValueError("the RocketMQ client load runs without accounts; drop --secure")
    if name not in DRILLS:
        raise ValueError(f"unknown drill {name!r}; one of {', '.join(sorted(DRILLS))}")
    if secure and name in LAYOUTS:
        raise ValueError(f"drill {name!r} runs its own layout; --secure runs the drills of {LAYOUT.name}")
    default_hb, default_rb = INTERVALS.get(name, (0.5, 2.0))
    heartbeat_s = default_hb if heartbeat_s is None else heartbeat_s
    rebalance_s = default_rb if rebalance_s is None else rebalance_s
    base = Path(base_dir) if base_dir else Path(tempfile.mkdtemp(prefix=f"tidemq-drill-{name}-"))
    conf = base / "conf"
    layout = SECURE_LAYOUT if secure else LAYOUTS.get(name, LAYOUT)
    stems = [p.stem for p in layout.glob("broker-*.toml")]
    overrides = dict(NODE_OVERRIDES)
    if channel_expired_s is not None:
        overrides["channelExpiredTimeout"] = int(channel_expired_s * 1000)
    launcher.copy_layout(layout, conf, overrides={s: overrides for s in stems})
    saved_env: dict[str, str | None] = {}
    if secure:  # launcher.up logs this process in with them; member processes read the environment
        env = make_dev_secrets(conf).env("broker")
        saved_env = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
    try:
        await trio.to_thread.run_sync(lambda: launcher.up(conf, base))
        state = launcher.load_state(base)
        assert state is not None
        namesrv = next(r.address for r in state.nodes.values() if r.kind == "namesrv")
        async with trio.open_nursery() as nursery:
            run = DrillRun(name, base, namesrv, nursery, heartbeat_s=heartbeat_s, rebalance_s=rebalance_s,
                           rate=rate, rounds=rounds, seed=seed,
                           channel_expired_s=120.0 if channel_expired_s is None else channel_expired_s,
                           client=client)
            try:
                await _drive(run, DRILLS[name][1], producers)
            except (TidemqError, launcher.LauncherError, OSError) as e:
                run.report.error = f"{type(e).__name__}: {e}"
            finally:
                await run.wind_down()
                nursery.cancel_scope.cancel()
        return run.finish()
    finally:
        with trio.CancelScope(shield=True):  # a SIGTERM'd drill still stops its cluster
            await trio.to_thread.run_sync(lambda: launcher.down(base))
        if secure:  # this process's connections go back to logging in as they did
            forget_layout_secrets()
            for key, value in saved_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        if not keep and not base_dir:
            shutil.rmtree(base, ignore_errors=True)


async def _drive(run: DrillRun, fn: DrillFn, producers: int) -> None:
    async with Admin(namesrv=run.namesrv) as admin:
        async def two_masters() -> bool:
            return len({b.broker_name for b in await admin.cluster_info() if b.is_master}) == 2
        if not await run.wait_until(two_masters, 30, "both masters registered"):
            raise launcher.LauncherError("the masters did not register with the name server")
        await admin.create_topic(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)

        async def routed() -> bool:
            return len((await admin.route(TOPIC, refresh=True)).groups) == 2
        await run.wait_until(routed, 30, f"{TOPIC} routed on both groups")
    for i in range(producers):
        run.nursery.start_soon(run.produce, i)
    run.nursery.start_soon(run.monitor_ownership)
    await run.start_member("m1")
    await run.start_member("m2")
    await run.wait_until(lambda: run.queues_consumed_since(0) == run.all_queues(), 30,
                         "every queue consumed (warm-up)")
    await fn(run)
    run.stop_producing()
    # a send in flight may still be acknowledged: the drain check covers it too
    await run.wait_until(lambda: run.sends_in_flight == 0 and not run.producers_running, 30, "producers stopped")

    def drained() -> bool:
        return not run.judged().lost
    run.promise("every acknowledged message is consumed (nothing lost)",
                await run.wait_until(drained, DRAIN_TIMEOUT_S, "the group consumed every acknowledged message"))
    stored = run.judged().failed_consumed
    run.promise(f"no send reported failed was stored ({len(stored)} were: {', '.join(stored[:5]) or '-'})",
                not stored)
