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
import time
from pathlib import Path

import trio

from bench import compare, peers, stages


async def profile(work: Path, mode: str, case: str, seconds: float) -> dict:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    bases: list[Path] = []
    raw = work / "py-spy.txt"
    async with peers.tidemq(work / "cluster", *compare.MODES[mode], bases=bases) as target:
        master = target.master
        assert master is not None
        sampler = subprocess.Popen([spy, "record", "-p", str(master.pid), "-d", f"{seconds:g}", "-r", "250",
                                    "-f", "raw", "-o", str(raw), "--nonblocking"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        threads0 = {t.id: t.user_time + t.system_time for t in master.threads()}
        cpu0, t0 = sum(master.cpu_times()[:2]), time.perf_counter()
        argv = compare._lean_argv(target, compare.CASES[case], seconds, 0.5)
        done = await trio.run_process(argv, capture_stdout=True, check=True, cwd=peers.REPO)
        cpu1, t1 = sum(master.cpu_times()[:2]), time.perf_counter()
        threads1 = {t.id: t.user_time + t.system_time for t in master.threads()}
        _, err = sampler.communicate(timeout=60)
    if sampler.returncode != 0 or not raw.exists():
        raise RuntimeError(f"py-spy failed: {err.decode(errors='replace')[-300:]}")
    result = json.loads(done.stdout)
    msgs = result["msgs_per_s"] * (t1 - t0)  # the loaded span, warm-up included
    main_us = (threads1[master.pid] - threads0.get(master.pid, 0.0)) * 1e6 / msgs
    all_us = (cpu1 - cpu0) * 1e6 / msgs
    with raw.open() as lines:
        by_stage = stages.stages_us(lines, main_us, all_us - main_us)
    return {"mode": mode, "case": case, "msgs_per_s": result["msgs_per_s"], "cpu_us_per_msg": round(all_us, 1),
            "main_thread_us_per_msg": round(main_us, 1), "stages_us_per_msg": by_stage}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench profile", description=__doc__)
    parser.add_argument("--mode", default="tidemq-async", choices=sorted(compare.MODES))
    parser.add_argument("--case", default="16x1", choices=sorted(compare.CASES))
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        parser.error("--seconds must be > 0")
    if not (shutil.which("py-spy") or (Path(sys.executable).parent / "py-spy").exists()):
        print("scripts/bench profile needs py-spy: .venv/bin/pip install -e '.[bench]'", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="tidemq-profile-") as work:
        print(json.dumps(trio.run(profile, Path(work), args.mode, args.case, args.seconds), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
