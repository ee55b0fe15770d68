"""`scripts/bench stall`: does a SYNC_FLUSH master's fdatasync stall its pulls and its
slave? (bench/stall.py says how it is measured.) Runs an ASYNC_FLUSH master, SYNC_FLUSH in
the event loop (the default) and SYNC_FLUSH in a worker thread, each an ASYNC_MASTER with a
slave, interleaved `--runs` times under the lean client's `--case` load; prints JSON with
every run and fio's fdatasync latency on the same disk.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

from bench import compare, disk, peers, stall

SETUPS = {  # name -> (flushDiskType, more keys)
    "async-flush": ("ASYNC_FLUSH", {}),
    "sync-flush-loop": ("SYNC_FLUSH", {}),
    "sync-flush-thread": ("SYNC_FLUSH", {"syncFlushInline": False}),
}


async def bench(work: Path, case: str, runs: int, seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {"benchmark": "stall", "case": case, "seconds": seconds,
                           "runs": {name: [] for name in SETUPS}}
    if shutil.which("fio"):
        out["fio"] = await disk.fio_fdatasync(work / "fio", 2.0)
    for i in range(runs):
        for name, (flush, keys) in SETUPS.items():
            bases: list[Path] = []
            async with peers.tidemq(work / f"r{i}-{name}", flush, "ASYNC_MASTER", bases=bases, keys=keys,
                                    slave=True) as target:
                out["runs"][name].append(await stall.measure(target, compare.CASES[case], seconds, 0.5))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench stall", description=__doc__)
    parser.add_argument("--case", default="16x1", choices=sorted(compare.CASES))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    if args.runs < 1 or args.seconds <= 0:
        parser.error("--runs must be >= 1 and --seconds > 0")
    with tempfile.TemporaryDirectory(prefix="tidemq-bench-stall-") as work:
        print(json.dumps(trio.run(bench, Path(work), args.case, args.runs, args.seconds), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
