"""`scripts/bench profile`: a tidemq master's CPU per message by stage of the request path.

Starts the mode's layout (as `scripts/bench compare` does), loads the master with the lean
client for one case, samples it with py-spy meanwhile (the `bench` extra installs it) and
prints JSON: msgs/s, CPU µs per message (all threads, the main thread) and the main
thread's µs per message by stage (bench/stages.py says how samples are placed).
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
    raw = work / "py-spy.txt"
    async with peers.tidemq(work / "cluster", *compare.MODES[mode], bases=bases, secure=mode in compare.SECURE,
                            metrics=mode in compare.METRICS,
                            keys={"syncFlushInline": False} if mode in compare.THREAD else None) as target:
        master = target.master
        assert master is not None
        sampler = subprocess.Popen([spy, "record", "-p", str(master.pid), "-d", f"{seconds:g}", "-r", "250",
                                    "-f", "raw", "-o", str(raw), "--nonblocking"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        main0 = _thread_cpu(master, master.pid)
        result = await compare.run_case(target, compare.CASES[case], seconds, WARMUP_S)
        main1 = _thread_cpu(master, master.pid)
        _, err = sampler.communicate(timeout=60)
    if sampler.returncode != 0 or not raw.exists():
        raise RuntimeError(f"py-spy failed: {err.decode(errors='replace')[-300:]}")
    all_us = result["server_us_per_msg"]  # run_case's: the CPU over the loaded span's messages
    main_us = (main1 - main0) * 1e6 / (result["msgs_per_s"] * (WARMUP_S + seconds))
    with raw.open() as lines:
        by_stage = stages.stages_us(lines, main_us, all_us - main_us)
    return {"mode": mode, "case": case, "msgs_per_s": result["msgs_per_s"], "cpu_us_per_msg": all_us,
            "main_thread_us_per_msg": round(main_us, 1), "stages_us_per_msg": by_stage}


def _thread_cpu(process: psutil.Process, thread_id: int) -> float:
    return next((t.user_time + t.system_time for t in process.threads() if t.id == thread_id), 0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench profile", description=__doc__)
    parser.add_argument("--mode", default="tidemq-async", choices=sorted(compare.MODES))
    parser.add_argument("--case", default="16x1", choices=sorted(compare.CASES))
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        parser.error("--seconds must be > 0")
    spy = _py_spy()
    if spy is None:
        print("scripts/bench profile needs py-spy: .venv/bin/pip install -e '.[bench]'", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="tidemq-profile-") as work:
        print(json.dumps(trio.run(profile, spy, Path(work), args.mode, args.case, args.seconds), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
