"""`scripts/bench profile`: a tidemq master's CPU per message by stage of the request path.

Starts the mode's layout (as `scripts/bench compare` does), loads the master with the lean
client for one case, samples it with py-spy meanwhile (the `bench` extra installs it) and
prints JSON: msgs/s, the client's p50/p99, CPU µs per message (all threads, the main thread)
and the main thread's µs per message by stage (bench/stages.py says how samples are placed).
A mode with a slave profiles the slave the same way (`slaves`): at 1 × 1 a send's round trip
is serial, so each node's CPU per message is its share of the round trip's time.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import trio

from bench import compare, peers, stages

WARMUP_S = 0.5


def _py_spy() -> str | None:
    """py-spy on PATH or beside this interpreter (the `bench` extra installs it there)."""
    beside = Path(sys.executable).parent / "py-spy"
    return shutil.which("py-spy") or (str(beside) if beside.exists() else None)


async def profile(spy: str, work: Path, mode: str, case: str, seconds: float) -> dict:
    bases: list[Path] = []
    async with peers.tidemq(work / "cluster", *compare.MODES[mode], bases=bases, secure=mode in compare.SECURE,
                            metrics=mode in compare.METRICS,
                            keys={"syncFlushInline": False} if mode in compare.THREAD else None) as target:
        master = target.master
        assert master is not None
        # every broker of the layout, the master first: with a slave (SYNC_MASTER) a send's
        # round trip runs through both, so where it goes needs both profiles
        nodes = {name: proc for name, proc in target.procs.items() if name != "namesrv" and proc.pid != master.pid}
        nodes = {target.serving: master, **nodes}
        samplers = {name: _sample(spy, proc.pid, work / f"py-spy-{name}.txt", seconds) for name, proc in nodes.items()}
        before = {name: (compare.cpu_seconds(proc), _thread_cpu(proc, proc.pid)) for name, proc in nodes.items()}
        result = await compare.run_case(target, compare.CASES[case], seconds, WARMUP_S)
        after = {name: (compare.cpu_seconds(proc), _thread_cpu(proc, proc.pid)) for name, proc in nodes.items()}
        for name, sampler in samplers.items():
            _, err = sampler.communicate(timeout=60)
            if sampler.returncode != 0 or not (work / f"py-spy-{name}.txt").exists():
                raise RuntimeError(f"py-spy on {name} failed: {err.decode(errors='replace')[-300:]}")
    sent = result["msgs_per_s"] * (WARMUP_S + seconds)
    by_node = {}
    for name in nodes:
        all_us = (after[name][0] - before[name][0]) * 1e6 / sent
        main_us = (after[name][1] - before[name][1]) * 1e6 / sent
        with (work / f"py-spy-{name}.txt").open() as lines:
            by_stage = stages.stages_us(lines, main_us, all_us - main_us)
        by_node[name] = {"cpu_us_per_msg": round(all_us, 1), "main_thread_us_per_msg": round(main_us, 1),
                         "stages_us_per_msg": by_stage}
    first = by_node.pop(target.serving)
    out = {"mode": mode, "case": case, "msgs_per_s": result["msgs_per_s"], "p50_ms": result.get("p50_ms"),
           "p99_ms": result.get("p99_ms"), **first}
    if by_node:
        out["slaves"] = by_node
    return out


def _sample(spy: str, pid: int, raw: Path, seconds: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen([spy, "record", "-p", str(pid), "-d", f"{seconds:g}", "-r", "250",
                             "-f", "raw", "-o", str(raw), "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _thread_cpu(process: psutil.Process, thread_id: int) -> float:
    return next((t.user_time + t.system_time for t in process.threads() if t.id == thread_id), 0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench profile", description=__doc__)
    parser.add_argument("--mode", default="tidemq-async", choices=sorted(compare.MODES))
    parser.add_argument("--case", default="16x1", choices=sorted(compare.CASES))
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--raw-dir", type=Path, help="keep py-spy's raw samples (one file a node) here")
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        parser.error("--seconds must be > 0")
    spy = _py_spy()
    if spy is None:
        print("scripts/bench profile needs py-spy: .venv/bin/pip install -e '.[bench]'", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="tidemq-profile-") as work:
        print(json.dumps(trio.run(profile, spy, Path(work), args.mode, args.case, args.seconds), indent=2))
        if args.raw_dir is not None:
            args.raw_dir.mkdir(parents=True, exist_ok=True)
            for raw in Path(work).glob("py-spy-*.txt"):
                shutil.copy(raw, args.raw_dir / raw.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
