"""`scripts/bench recovery`: recovery and `store verify` of a killed store, timed cold,
against the data it holds (bench/recovery.py has the method). Prints JSON.

Default rows: 3 KiB in a 1 GiB CommitLog segment, the same with the segments' blocks
allocated (a store an older tidemq preallocated), and 64 MiB: the time should follow the
data, not the 1 GiB segment. The aim: under 0.2 s to recover the 3 KiB store."""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.recovery import Row, parse_size, run  # noqa: E402

AIM_SECONDS = 0.2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench recovery", description=__doc__)
    parser.add_argument("--data", default="3KiB,64MiB",
                        help="comma-separated data sizes, one row each (default 3KiB,64MiB)")
    parser.add_argument("--segment", default="1GiB", help="mappedFileSizeCommitLog (default 1GiB)")
    parser.add_argument("--flush", default="ASYNC_FLUSH", choices=("ASYNC_FLUSH", "SYNC_FLUSH"))
    parser.add_argument("--no-allocated-row", action="store_true",
                        help="leave out the row whose segments are fully allocated")
    parser.add_argument("--dir", default=None, help="work directory, kept (default: a temp dir, removed)")
    args = parser.parse_args(argv)
    segment = parse_size(args.segment)
    sizes = [parse_size(s) for s in args.data.split(",") if s.strip()]
    rows = [Row(sizes[0], segment, False, args.flush)]
    if not args.no_allocated_row:
        rows.append(Row(sizes[0], segment, True, args.flush))
    rows += [Row(size, segment, False, args.flush) for size in sizes[1:]]
    results = run(rows, args.dir)
    for r in results:
        if r["commitlog_bytes"] >= 1024 * 1024:
            r["recovered_mb_per_s"] = round(r["commitlog_bytes"] / 2**20 / r["recovery_cold_seconds"], 1)
    first = results[0]
    print(json.dumps({
        "benchmark": "recovery",
        "rows": results,
        "aim": {"recovery_cold_seconds_below": AIM_SECONDS, "row": 0,
                "met": first["recovery_cold_seconds"] < AIM_SECONDS},
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
