"""Run one scenario: start a cluster whose links go through proxies, run the workload, inject the scenario's
seeded faults, heal, measure recovery and catch-up, stop the cluster cleanly, check the
stores against the history and the mode's expectations.

Everything random in a run (when the fault starts, how long it lasts, which signal,
toxic sizes) comes from `random.Random(f"{scenario}:{seed}")`, so a failing seed replays
the same fault schedule; the schedule is part of the report.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import trio
from requests import RequestException
from toxiproxy import Toxiproxy

from cluster.judge.checker import CheckReport, check
from cluster.judge.history import OK, History
from cluster.launch.launcher import LauncherError
from cluster.launch.secrets import forget_layout_secrets
from wire.client import TidemqError
from wire.protocol import WireTruncation

from .expectations import Expectation, expectation, violations
from .layout import MASTER, NAMESRV, SLAVE, ChaosCluster, write_cluster
from .workload import Workload, WorkloadConfig, sample_node

RECOVER_TIMEOUT_S = 30.0
CATCH_UP_TIMEOUT_S = 60.0


class ScenarioSkipped(Exception):
    """The scenario cannot run on this machine (the message says why)."""


@attrs.define
class RunReport:
    scenario: str
    mode: str
    seed: int
    duration: float
    schedule: dict[str, Any]
    events: list[tuple[float, str]]
    counts: dict[str, int]
    check: CheckReport | None
    expectation: Expectation | None
    violations: list[str]
    time_to_recover_s: float | None = None
    time_to_catch_up_s: float | None = None
    skipped: str | None = None
    base_dir: str = ""
    elapsed_s: float = 0.0  # wall time of the whole run: start, load, heal, catch-up, stop, check

    @property
    def faults(self) -> int:
        return sum(1 for _, what in self.events if what.startswith("fault:"))

    @property
    def passed(self) -> bool:
        return self.skipped is None and not self.violations

    @property
    def verdict(self) -> str:
        if self.skipped:
            return f"SKIPPED {self.scenario} ({self.skipped})"
        if self.passed:
            lost = self.check.losses if self.check else 0  # a promotion's: within the truncated tail
            return (f"PASS {self.scenario} {self.mode} seed {self.seed}: {self.counts.get(OK, 0)} acknowledged, "
                    f"{lost} lost{' (in the window)' if lost else ''}, {self.faults} fault(s)")
        return f"FAIL {self.scenario} {self.mode} seed {self.seed}: " + "; ".join(self.violations[:3])

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario, "mode": self.mode, "seed": self.seed, "duration": self.duration,
            "schedule": self.schedule, "events": [{"t": t, "what": w} for t, w in self.events],
            "counts": self.counts, "faults": self.faults, "passed": self.passed, "verdict": self.verdict,
            "violations": self.violations, "time_to_recover_s": self.time_to_recover_s,
            "time_to_catch_up_s": self.time_to_catch_up_s, "skipped": self.skipped, "base_dir": self.base_dir,
            "elapsed_s": self.elapsed_s,
            "expectation": attrs.asdict(self.expectation) if self.expectation else None,
            "check": self.check.to_json() if self.check else None,
        }


@attrs.define
class FaultContext:
    """What a scenario's fault function works with."""

    cluster: ChaosCluster
    rng: random.Random
    schedule: dict[str, Any]
    workload: Workload
    history: History
    t0: float
    events: list[tuple[float, str]] = attrs.field(factory=list)
    findings: list[str] = attrs.field(factory=list)  # broken promises a fault function saw itself
    disk_resumed: bool = True  # full disk: writes were accepted again after the space was freed
    truncation: WireTruncation | None = None  # a promotion: the old master's `last_truncation` on rejoin

    def note(self, what: str) -> None:
        self.events.append((round(time.monotonic() - self.t0, 3), what))

    async def hold(self, seconds: float) -> None:
        """Let a fault last `seconds` (the schedule's length, not a synchronization)."""
        await trio.sleep(seconds)  # poll: a fault's scheduled length

    async def until(self, check: Callable[[], Any], timeout: float, what: str) -> Any:
        """Poll `check` (sync or async) until truthy; TimeoutError naming `what`."""
        deadline = trio.current_time() + timeout
        while True:
            value = check()
            if hasattr(value, "__await__"):
                value = await value
            if value:
                return value
            if trio.current_time() > deadline:
                raise TimeoutError(f"{what}: not within {timeout:g} s")
            await trio.sleep(0.02)  # poll

    async def signal(self, node: str, sig: str) -> None:
        self.note(f"fault: SIG{sig} {node}" if sig != "CONT" else f"heal: SIGCONT {node}")
        await trio.to_thread.run_sync(self.cluster.signal, node, sig)

    async def restart(self, node: str) -> None:
        await trio.to_thread.run_sync(self.cluster.start, node)
        self.note(f"heal: {node} restarted")

    async def toxiproxy(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """Call the (blocking) toxiproxy-python client off the event loop."""
        return await trio.to_thread.run_sync(lambda: fn(*args, **kw))


def make_schedule(rng: random.Random, duration: float) -> dict[str, Any]:
    return {"fault_at": round(duration * rng.uniform(0.2, 0.35), 2),
            "fault_for": round(min(duration * 0.3, rng.uniform(1.2, 2.5)), 2)}


@contextlib.contextmanager
def mounted_tmpfs(path: Path, size_mb: int) -> Any:
    """A tmpfs of `size_mb` at `path` (root only); else a loop-mounted ext4 file; else
    ScenarioSkipped saying why neither worked."""
    path.mkdir(parents=True, exist_ok=True)
    attempts = []
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        attempts.append(f"tmpfs: {r.stderr.strip() or r.returncode}")
        image = path.with_suffix(".img")
        with open(image, "wb") as f:
            f.truncate(size_mb * 1024 * 1024)
        mk = subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True, text=True)
        r = subprocess.run(["mount", "-o", "loop", str(image), str(path)], capture_output=True, text=True) \
            if mk.returncode == 0 else mk
        if r.returncode != 0:
            attempts.append(f"loop ext4: {r.stderr.strip() or r.returncode}")
            raise ScenarioSkipped("cannot mount a small file system (" + "; ".join(attempts) + ")")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


async def _wait_slave_connected(cluster: ChaosCluster, timeout: float = 30.0) -> None:
    deadline = trio.current_time() + timeout
    while trio.current_time() < deadline:
        sample = await sample_node(cluster.master_address)
        if sample is not None and sample.slave_ack is not None and sample.slave_ack >= 0:
            return
        await trio.sleep(0.05)  # poll
    raise TimeoutError("the slave did not connect to the master")


async def _caught_up(cluster: ChaosCluster, timeout: float) -> float | None:
    """Seconds until the slave's max offset equals the master's and it serves all of it (the
    nodes serving so now: swapped after a promotion), None at the deadline. A slave serves
    only up to the confirm offset it learned (docs/failover.md): the master sends it after the
    slave's ack, so a slave stopped just after its ack would hold its last records back."""
    t0 = trio.current_time()
    while trio.current_time() - t0 < timeout:
        master = await sample_node(cluster.address_of(cluster.serving_master))
        slave = await sample_node(cluster.address_of(cluster.serving_slave))
        if master and slave and slave.max_phy_offset == master.max_phy_offset \
                and (master.slave_ack is None or master.slave_ack >= master.max_phy_offset) \
                and slave.dispatch_behind_bytes == 0:
            return round(trio.current_time() - t0, 3)
        await trio.sleep(0.05)  # poll
    return None


async def run_scenario(
    scenario: Any, mode: str, seed: int, duration: float, client: Toxiproxy, *,
    base_dir: str | None = None, keep: bool = False, progress: Callable[[float, str], None] | None = None,
    workload_cfg: WorkloadConfig | None = None, secure: bool = False,
) -> RunReport:
    """One run of `scenario` in `mode`; see the module docstring."""
    rng = random.Random(f"{scenario.name}:{seed}")
    schedule = make_schedule(rng, duration)
    base = Path(base_dir or tempfile.mkdtemp(prefix=f"tidemq-chaos-{scenario.name}-"))
    report = RunReport(scenario.name, mode, seed, duration, schedule, [], {}, None, None, [], base_dir=str(base))
    say = progress or (lambda _f, _w: None)
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        store_roots: dict[str, str] = {}
        if scenario.tmpfs_mb:
            try:
                mount = stack.enter_context(mounted_tmpfs(base / "smalldisk", scenario.tmpfs_mb))
            except ScenarioSkipped as e:
                report.skipped = str(e)
                return report
            store_roots[MASTER] = str(mount / MASTER)
        cluster = write_cluster(base, mode, client, overrides=scenario.overrides, store_roots=store_roots,
                                secure=secure)
        try:
            await _run(scenario, cluster, rng, schedule, report, say, workload_cfg)
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(cluster.down)
            if secure:
                forget_layout_secrets()
    report.elapsed_s = round(time.monotonic() - started, 2)
    if report.passed and not keep:
        shutil.rmtree(base, ignore_errors=True)
    return report


async def _run(scenario: Any, cluster: ChaosCluster, rng: random.Random, schedule: dict[str, Any],
               report: RunReport, say: Callable[[float, str], None], workload_cfg: WorkloadConfig | None) -> None:
    say(0.0, "starting the cluster")
    await trio.to_thread.run_sync(cluster.up)
    history = History(cluster.base_dir / "history.jsonl")
    run_id = f"r{rng.randrange(16**6):06x}"
    workload = Workload(cluster.client_address, cluster.namesrv,
                        {MASTER: cluster.master_address, SLAVE: cluster.slave_address}, history, run_id,
                        workload_cfg or WorkloadConfig(**scenario.workload))
    await workload.create_topic()
    await _wait_slave_connected(cluster)
    t0 = time.monotonic()
    ctx = FaultContext(cluster, rng, schedule, workload, history, t0)
    stop = trio.Event()
    duration = report.duration
    before = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(workload.run, stop)

        async def ticker() -> None:
            while not stop.is_set():
                say(min(1.0, (time.monotonic() - t0) / duration), "load and faults")
                with trio.move_on_after(0.25):
                    await stop.wait()

        nursery.start_soon(ticker)
        await ctx.hold(schedule["fault_at"])
        before = workload.samples.get(MASTER)
        try:
            await scenario.fault(ctx)
        except (TimeoutError, LauncherError, OSError, RequestException, TidemqError) as e:
            ctx.findings.append(f"the fault could not be injected or healed: {e}")
        await trio.to_thread.run_sync(cluster.heal_proxies)
        healed = time.time()
        ctx.note("healed")
        await ctx.hold(max(0.0, t0 + duration - time.monotonic()))

        def first_ack_after_heal() -> float | None:
            return next((op.completed_at for op in history.ops
                         if op.outcome == OK and (op.completed_at or 0) >= healed), None)

        with contextlib.suppress(TimeoutError):
            acked_at = await ctx.until(first_ack_after_heal, RECOVER_TIMEOUT_S, "a write acknowledged after healing")
            report.time_to_recover_s = round(acked_at - healed, 3)
        stop.set()
    history.close()
    say(1.0, "waiting for the slave to catch up")
    for node in (NAMESRV, MASTER, SLAVE):  # a fault function heals; make sure nothing stayed down
        if not cluster.alive(node):
            ctx.note(f"heal: {node} was down at the end; restarting")
            try:
                await ctx.restart(node)
            except LauncherError as e:
                ctx.findings.append(f"{node} does not start again: {e}")
    report.time_to_catch_up_s = await _caught_up(cluster, CATCH_UP_TIMEOUT_S)
    say(1.0, "stopping the cluster and checking the stores")
    await trio.to_thread.run_sync(cluster.down)
    roots = {MASTER: cluster.store_roots[MASTER], SLAVE: cluster.store_roots[SLAVE]}
    checked = await trio.to_thread.run_sync(
        lambda: check(history, roots, master=cluster.serving_master, topic=workload.cfg.topic, queues=workload.cfg.queues,
                      consumed=workload.consumed))
    report.events = ctx.events
    report.counts = history.counts()
    report.check = checked
    report.expectation = expectation(scenario, cluster.mode, before, ctx.truncation)
    disk_refusals = sum(1 for op in history.ops if op.status == "SERVICE_NOT_AVAILABLE" and "disk" in (op.error or "").lower())
    report.violations = violations(
        checked, report.expectation, master=cluster.serving_master, caught_up=report.time_to_catch_up_s is not None,
        recovered=report.time_to_recover_s is not None, disk_refusals=disk_refusals,
        resumed_after_disk=ctx.disk_resumed,
    ) + ctx.findings
