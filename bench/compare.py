"""`scripts/bench compare`: tidemq side by side with its floor and its peers, in one run.

Rounds (3 by default) each start every system in turn, drive its cases with the lean
client (`python -m bench.lean`, its own process) and stop it again, so the runs of one
case are interleaved with the others' and a slow minute of this shared machine does not
land on one system only. Figures are the medians over the rounds. Per case the CPU cores
each server process used are recorded (psutil), and a tidemq master's RSS is sampled.
Everything started is stopped at the end, on an error and on Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import signal
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import psutil
import trio

from cluster.launch import launcher

from . import disk, peers
from .procs import Processes, ensure_tools

__all__ = ["CASES", "CASES_ALL", "CLIENT_CASES", "REMOTING_CASES", "SYSTEMS", "Settings", "run"]

REPO = peers.REPO
RSS_SAMPLE_S = 0.25


@attrs.frozen
class Case:
    key: str
    title: str
    connections: int
    in_flight: int
    batch: int = 1  # tidemq / floor: messages per send_batch
    short: str = ""  # the chart's label
    kind: str = ""
    """The load: "" the lean client with the target's codec, "remoting" the lean client
    with RocketMQ remoting frames carrying the CBOR rows' message, "remoting-uniq" those
    with the C++ client's UNIQ_KEY too, "cpp" the C++ client's own send_sync loop
    (bench/cpp_load.py, `connections` processes), "client" the system's own client library
    sending one message after another (bench/client_load.py)."""


CASES = {
    "1x1": Case("1x1", "1 connection, 1 in flight", 1, 1, short="1 × 1"),
    "16x1": Case("16x1", "16 connections, 1 in flight each", 16, 1, short="16 × 1"),
    "1x64": Case("1x64", "1 connection, 64 single sends in flight", 1, 64, short="1 × 64 in flight"),
    "16xB": Case("16xB", "16 connections, send_batch 32 (Redis: 64 pipelined XADD)", 16, 1, 32,
                 short="16 × send_batch 32\n(Redis: 64 pipelined)"),
}
ALL = tuple(CASES)
FAN_IN = ("16x1",)
SPREAD = ("16x1", "16xB")
"""The cases with connections to spread over two groups' masters (one connection reaches one)."""
REMOTING_CASES = {
    "rmq-1x1": Case("rmq-1x1", "remoting: 1 connection, 1 in flight", 1, 1, kind="remoting"),
    "rmq-16x1": Case("rmq-16x1", "remoting: 16 connections, 1 in flight each", 16, 1, kind="remoting"),
    "rmq-1x64": Case("rmq-1x64", "remoting: 1 connection, 64 SEND_MESSAGE in flight", 1, 64, kind="remoting"),
    "rmq-1x64-uniq": Case("rmq-1x64-uniq", "remoting: 1 connection, 64 in flight, each with the C++ client's UNIQ_KEY",
                          1, 64, kind="remoting-uniq"),
    "cpp-1": Case("cpp-1", "C++ client: 1 process, send_sync in a loop", 1, 1, kind="cpp"),
    "cpp-4": Case("cpp-4", "C++ client: 4 processes, send_sync in a loop", 4, 1, kind="cpp"),
}
"""RocketMQ's remoting protocol against the same node, beside its CBOR rows (the
`*-rmq` systems run both, interleaved)."""
CLIENT_CASES = {
    "client": Case("client", "client library, sequential sends (tidemq Producer.send; Redis redis-py XADD)", 1, 1,
                   kind="client"),
}
"""The client libraries as users meet them (issue 48 item 5), beside the lean client's 1 × 1
against the same server (`*-client` systems)."""
CASES_ALL = {**CASES, **REMOTING_CASES, **CLIENT_CASES}
CLIENT = ("1x1", "client")
RMQ = ("1x1", "rmq-1x1", "16x1", "rmq-16x1", "1x64", "rmq-1x64", "rmq-1x64-uniq", "cpp-1", "cpp-4")


@attrs.frozen
class System:
    key: str
    cases: tuple[str, ...]
    tools: tuple[str, ...] = ()


SYSTEMS = {
    s.key: s for s in (
        System("floor", ALL),
        System("tidemq-async", ALL),
        System("tidemq-syncflush", ALL),
        System("tidemq-syncmaster", ALL),
        System("tidemq-both", ALL),
        System("tidemq-secure", ALL),
        System("tidemq-async-metrics", ALL),
        System("tidemq-syncflush-thread", ALL),
        System("tidemq-both-thread", ALL),
        System("tidemq-async-2groups", SPREAD),
        System("tidemq-syncflush-2groups", SPREAD),
        System("redis-everysec", ALL, ("redis-server",)),
        System("redis-always", ALL, ("redis-server",)),
        System("redis-everysec-wait", FAN_IN, ("redis-server",)),
        System("redis-always-wait", FAN_IN, ("redis-server",)),
        System("js-r1", FAN_IN, ("nats-server",)),
        System("js-r3", FAN_IN, ("nats-server",)),
        System("tidemq-async-rmq", RMQ),
        System("tidemq-syncflush-rmq", RMQ),
        System("tidemq-async-client", CLIENT),
        System("redis-everysec-client", CLIENT, ("redis-server",)),
        System("fio", (), ("fio",)),
        System("catchup", ()),
    )
}
MODES = {  # system key -> (flushDiskType, brokerRole)
    "tidemq-async": ("ASYNC_FLUSH", "ASYNC_MASTER"),
    "tidemq-syncflush": ("SYNC_FLUSH", "ASYNC_MASTER"),
    "tidemq-syncmaster": ("ASYNC_FLUSH", "SYNC_MASTER"),
    "tidemq-both": ("SYNC_FLUSH", "SYNC_MASTER"),
    "tidemq-secure": ("ASYNC_FLUSH", "ASYNC_MASTER"),  # tidemq-async with TLS and logins on
    "tidemq-async-metrics": ("ASYNC_FLUSH", "ASYNC_MASTER"),  # tidemq-async with /metrics scraped every second
    "tidemq-syncflush-thread": ("SYNC_FLUSH", "ASYNC_MASTER"),  # tidemq-syncflush, fdatasync in a worker thread
    "tidemq-both-thread": ("SYNC_FLUSH", "SYNC_MASTER"),  # tidemq-both, fdatasync in a worker thread
}
RMQ_MODES = {  # CBOR and remoting rows against one node of the mode
    "tidemq-async-rmq": MODES["tidemq-async"],
    "tidemq-syncflush-rmq": MODES["tidemq-syncflush"],
}
CLIENT_MODES = {  # the client library's row: Producer.send against an async master
    "tidemq-async-client": MODES["tidemq-async"],
}
SECURE = {"tidemq-secure"}
METRICS = {"tidemq-async-metrics"}
"""Rows run only when named (`--only floor,tidemq-async,tidemq-async-metrics`): the cost of
/metrics beside tidemq-async (docs/metrics.md)."""
THREAD = {"tidemq-syncflush-thread", "tidemq-both-thread"}
"""Rows run only when named (`--only tidemq-syncflush,tidemq-syncflush-thread,...`): SYNC_FLUSH
with `syncFlushInline = false` (the fdatasync in a worker thread, as before issue 48) beside
the default, the event loop's (docs/request-path.md)."""
GROUPS = {"tidemq-async-2groups": "ASYNC_FLUSH", "tidemq-syncflush-2groups": "SYNC_FLUSH"}
"""Two broker groups on this host (peers.tidemq_groups), run when named beside tidemq-async /
tidemq-syncflush: how throughput adds up per host (issue 48 item 4, docs/bench-compare.md)."""


ONLY_WHEN_NAMED = {*RMQ_MODES, *METRICS, *THREAD, *GROUPS, *CLIENT_MODES, "redis-everysec-client"}
"""Rows a default run leaves out (each is a question of its own, asked with `--only`): the
remoting rows, the metrics cost, the thread flush, two groups per host, the client libraries."""


@attrs.frozen
class Settings:
    systems: tuple[str, ...] = tuple(k for k in SYSTEMS if k not in ONLY_WHEN_NAMED)
    """Every system but those run only when named in `--only`."""
    runs: int = 3
    seconds: float = 3.0
    warmup: float = 0.5
    catch_up_mb: int = 256
    fio_mb: int = 256
    fio_sync_seconds: float = 3.0
    soak_minutes: float = 0.0
    budget_s: float = 15 * 60
    install: bool = True


def _system(key: str, procs: Processes, work: Path, bases: list[Path]) -> contextlib.AbstractAsyncContextManager:
    if key == "floor":
        return peers.floor(procs, work)
    if key in MODES:
        return peers.tidemq(work, *MODES[key], bases=bases, secure=key in SECURE, metrics=key in METRICS,
                            keys={"syncFlushInline": False} if key in THREAD else None)
    if key in RMQ_MODES:
        return peers.tidemq(work, *RMQ_MODES[key], bases=bases)
    if key in CLIENT_MODES:
        return peers.tidemq(work, *CLIENT_MODES[key], bases=bases)
    if key in GROUPS:
        return peers.tidemq_groups(work, GROUPS[key], bases=bases)
    if key.startswith("redis-"):
        return peers.redis(procs, work, key.split("-")[1], replica=key.endswith("-wait"))
    if key.startswith("js-r"):
        return peers.jetstream(procs, work, int(key[4:]))
    raise ValueError(f"not a load system: {key}")


def _lean_argv(target: peers.Target, case: Case, seconds: float, warmup: float) -> list[str]:
    if case.kind == "cpp":
        return [sys.executable, "-m", "bench.cpp_load", "--namesrv", target.namesrv, "--processes",
                str(case.connections), "--seconds", f"{seconds:g}", "--warmup", f"{warmup:g}"]
    if case.kind == "client":
        where = ["--namesrv", target.namesrv] if target.kind == "tidemq" else ["--port", str(target.ports[0])]
        return [sys.executable, "-m", "bench.client_load", target.kind, *where, "--seconds", f"{seconds:g}",
                "--warmup", f"{warmup:g}"]
    if case.kind in ("remoting", "remoting-uniq"):
        return [sys.executable, "-m", "bench.lean", "remoting", "--port", ",".join(map(str, target.ports)),
                "--connections", str(case.connections), "--in-flight", str(case.in_flight),
                "--seconds", f"{seconds:g}", "--warmup", f"{warmup:g}",
                *(["--uniq-key"] if case.kind == "remoting-uniq" else [])]
    in_flight, batch = case.in_flight, case.batch
    if target.kind != "tidemq" and batch > 1:  # peers without send_batch pipeline instead
        in_flight, batch = 64, 1
    return [sys.executable, "-m", "bench.lean", target.kind, "--port", ",".join(map(str, target.ports)),
            "--connections", str(case.connections), "--in-flight", str(in_flight), "--batch", str(batch),
            "--replicas", str(target.replicas), "--seconds", f"{seconds:g}", "--warmup", f"{warmup:g}",
            *target.lean_args]


def cpu_seconds(p: psutil.Process) -> float:
    """User + system CPU seconds of `p` (NaN once it is gone)."""
    try:
        return sum(p.cpu_times()[:2])
    except psutil.Error:
        return math.nan


async def _sample_rss(proc: psutil.Process, into: list[float], anon: list[float] | None = None) -> None:
    """RSS samples (MB); `anon` gets RSS less its file-backed/shared part (mapped segments
    that are resident count in RSS, and the goal wants them not to be)."""
    while True:
        with contextlib.suppress(psutil.Error):
            mem = proc.memory_info()
            into.append(mem.rss / 1e6)
            if anon is not None:
                anon.append((mem.rss - mem.shared) / 1e6)
        await trio.sleep(RSS_SAMPLE_S)  # poll: a periodic sample, cancelled when the case ends


async def run_case(target: peers.Target, case: Case, seconds: float, warmup: float) -> dict[str, Any]:
    """One lean-client run against `target`; its JSON plus server CPU cores and master RSS."""
    before = {name: cpu_seconds(p) for name, p in target.procs.items()}
    rss: list[float] = []
    anon: list[float] = []
    async with trio.open_nursery() as nursery:
        if target.master is not None:
            nursery.start_soon(_sample_rss, target.master, rss, anon)
        done = await trio.run_process(_lean_argv(target, case, seconds, warmup), capture_stdout=True,
                                      capture_stderr=True, check=False, cwd=REPO, start_new_session=True)
        nursery.cancel_scope.cancel()
    if done.returncode != 0:
        raise RuntimeError(f"lean client against {target.system} ({case.key}) failed: "
                           f"{done.stderr.decode(errors='replace')[-400:]}")
    result = json.loads(done.stdout)
    loaded = warmup + seconds  # the servers are idle while the client starts and drains
    result["cpu_cores"] = {name: round((cpu_seconds(p) - before[name]) / loaded, 2) for name, p in target.procs.items()}
    if target.serving and result.get("msgs_per_s"):
        # CPU seconds of the serving process (its master; every master of tidemq_groups) over the
        # messages it answered
        spent = sum(cpu_seconds(target.procs[name]) - before[name] for name in target.serving_all or (target.serving,))
        result["server_us_per_msg"] = round(spent * 1e6 / (result["msgs_per_s"] * loaded), 1)
    if rss:
        result["master_rss_mb"] = {"max": round(max(rss), 1), "last": round(rss[-1], 1),
                                   "anon_max": round(max(anon), 1)}
    return result


async def _soak(target: peers.Target, minutes: float, log: Callable[[str], None]) -> dict[str, Any]:
    """16 × send_batch load on a master for `minutes`, its RSS sampled throughout."""
    rss: list[float] = []
    anon: list[float] = []
    t_end = time.monotonic() + minutes * 60
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_sample_rss, target.master, rss, anon)
        while (left := t_end - time.monotonic()) > 1:
            await run_case(target, CASES["16xB"], min(30.0, left), 0.0)
            log(f"soak: {minutes * 60 - max(0.0, t_end - time.monotonic()):.0f} s, RSS {rss[-1]:.0f} MB")
        nursery.cancel_scope.cancel()
    tenth = max(1, len(rss) // 10)
    early, late = statistics.median(rss[tenth:2 * tenth + 1]), statistics.median(rss[-tenth:])
    return {"minutes": minutes, "samples": len(rss), "rss_mb_max": round(max(rss), 1),
            "anon_mb_max": round(max(anon), 1),
            "rss_mb_early": round(early, 1), "rss_mb_late": round(late, 1),
            "grows": late > early * 1.10 + 20}


async def _round(i: int, settings: Settings, procs: Processes, work: Path, bases: list[Path],
                 out: dict[str, Any], deadline: float, log: Callable[[str], None]) -> None:
    for key in settings.systems:
        system = SYSTEMS[key]
        if time.monotonic() > deadline:
            out["skipped"].append(f"round {i + 1}: {key} (time budget)")
            continue
        sub = work / f"r{i}-{key}"
        t0 = time.monotonic()
        if key == "fio":
            seq = await disk.fio_sequential(sub, settings.fio_mb)
            sync = await disk.fio_fdatasync(sub, settings.fio_sync_seconds)
            out["fio"].append({"run": i + 1, "sequential": seq, "fdatasync_4k": sync})
        elif key == "catchup":
            out["catch_up"].append({"run": i + 1, **await disk.catch_up(sub, settings.catch_up_mb, bases=bases)})
        else:
            async with _system(key, procs, sub, bases) as target:
                for case_key in system.cases:
                    if CASES_ALL[case_key].kind == "cpp" and importlib.util.find_spec("rocketmq") is None:
                        if i == 0:
                            out["skipped"].append(f"{key} {case_key} (PyPI `rocketmq`, the C++ client, is not installed)")
                        continue
                    r = await run_case(target, CASES_ALL[case_key], settings.seconds, settings.warmup)
                    out["runs"].append({"run": i + 1, "system": key, "name": target.system, "case": case_key, **r})
                if key == "tidemq-async" and settings.soak_minutes and i == 0:
                    out["soak"] = await _soak(target, settings.soak_minutes, log)
        peers.clean(sub)
        log(f"round {i + 1}/{settings.runs}: {key} done in {time.monotonic() - t0:.1f} s")


async def _run(settings: Settings, work: Path, procs: Processes, bases: list[Path],
               log: Callable[[str], None]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": [], "fio": [], "catch_up": [], "skipped": []}
    deadline = time.monotonic() + settings.budget_s

    async def on_sigterm(scope: trio.CancelScope) -> None:
        with trio.open_signal_receiver(signal.SIGTERM) as signals:
            async for _ in signals:
                out["interrupted"] = "SIGTERM"
                scope.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(on_sigterm, nursery.cancel_scope)
        for i in range(settings.runs):
            await _round(i, settings, procs, work, bases, out, deadline, log)
        nursery.cancel_scope.cancel()
    return out


def _one(group: BaseExceptionGroup) -> BaseException:
    """What to report of a group: Ctrl-C if it is in there, else its only (first) error."""
    interrupted, _ = group.split(KeyboardInterrupt)
    if interrupted is not None:
        return KeyboardInterrupt()
    leaves: list[BaseException] = []

    def walk(e: BaseException) -> None:
        if isinstance(e, BaseExceptionGroup):
            for inner in e.exceptions:
                walk(inner)
        else:
            leaves.append(e)

    walk(group)
    return leaves[0]


def run(settings: Settings, work: Path, log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Run the comparison in `work` (created, left for the caller to remove); returns the
    raw results. Every process started is stopped before this returns or raises."""
    unknown = [s for s in settings.systems if s not in SYSTEMS]
    if unknown:
        raise ValueError(f"unknown system(s) {', '.join(unknown)}; choose from {', '.join(SYSTEMS)}")
    tools = sorted({t for s in settings.systems for t in SYSTEMS[s].tools})
    installed = ensure_tools(tools, install=settings.install)
    work.mkdir(parents=True, exist_ok=True)
    procs = Processes(work / "logs")
    bases: list[Path] = []
    t0 = time.monotonic()
    try:
        out = trio.run(_run, settings, work, procs, bases, log)
    except BaseExceptionGroup as group:  # trio's nurseries group what their tasks raised
        raise _one(group) from None
    finally:
        procs.stop_all()
        for base in list(bases):
            with contextlib.suppress(Exception):
                launcher.down(base)
    out["installed"] = installed
    out["total_seconds"] = round(time.monotonic() - t0, 1)
    out["settings"] = attrs.asdict(settings)
    out["machine"] = {"cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
                      "python": sys.version.split()[0], "platform": sys.platform}
    return out
