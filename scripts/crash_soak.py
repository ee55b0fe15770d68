"""Runs chaos.store_crash rounds; see scripts/crash-soak."""

from __future__ import annotations

import collections
import json
import shutil
import sys
import tempfile
import time

from chaos.store_crash import run_iteration


def main(argv: list[str]) -> int:
    rounds = int(argv[0]) if argv else 500
    first = int(argv[1]) if len(argv) > 1 else 1000
    failures = 0
    per_mode: collections.Counter[str] = collections.Counter()
    acked = 0
    t0 = time.perf_counter()
    for seed in range(first, first + rounds):
        root = tempfile.mkdtemp(prefix="tidemq-soak-")
        try:
            report = run_iteration(f"{root}/store", seed)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        per_mode[report.mode] += 1
        acked += report.acked
        if not report.ok:
            failures += 1
            print(json.dumps({"seed": seed, "mode": report.mode, "problems": report.problems[:10]}), flush=True)
    print(json.dumps({
        "rounds": rounds, "first_seed": first, "failures": failures, "modes": dict(per_mode),
        "acknowledged_messages_checked": acked, "seconds": round(time.perf_counter() - t0, 1),
    }))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
