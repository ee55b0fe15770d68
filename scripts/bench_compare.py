"""`scripts/bench compare`: tidemq's four modes beside the trio floor, Redis 7 Streams,
NATS JetStream and fio on this machine, in one bounded run (bench/compare.py does it).

Writes bench-results/compare.json, compare.md and compare.png; prints the Markdown.
Installs redis-server, nats-server and fio with apt-get when they are missing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench import compare, report

QUICK = {"runs": 1, "seconds": 1.0, "warmup": 0.3, "catch_up_mb": 32, "fio_mb": 64, "fio_sync_seconds": 1.0}


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, compare.Settings]:
    parser = argparse.ArgumentParser(prog="scripts/bench compare", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one run of 1 s per case: a ~2-minute smoke run")
    parser.add_argument("--only", help=f"comma-separated systems, of: {', '.join(compare.SYSTEMS)}")
    parser.add_argument("--runs", type=int, help="interleaved runs per case (default 3)")
    parser.add_argument("--seconds", type=float, help="measured seconds per case (default 3)")
    parser.add_argument("--soak-minutes", type=float, default=0.0,
                        help="also load the async master this long, sampling its RSS (the 'does not grow' check)")
    parser.add_argument("--budget-minutes", type=float, default=15.0,
                        help="start no new system after this long (default 15)")
    parser.add_argument("--no-install", action="store_true", help="never run apt-get")
    parser.add_argument("--out", default="bench-results", help="output directory (default bench-results)")
    parser.add_argument("--dir", help="work directory (default: a temp dir, removed afterwards)")
    args = parser.parse_args(argv)
    fields = dict(QUICK) if args.quick else {}
    if args.only:
        systems = tuple(s.strip() for s in args.only.split(",") if s.strip())
        unknown = [s for s in systems if s not in compare.SYSTEMS]
        if unknown:
            parser.error(f"unknown system(s) {', '.join(unknown)}; choose from {', '.join(compare.SYSTEMS)}")
        fields["systems"] = systems
    if args.runs is not None:
        if args.runs < 1:
            parser.error("--runs must be >= 1")
        fields["runs"] = args.runs
    if args.seconds is not None:
        if args.seconds <= 0:
            parser.error("--seconds must be > 0")
        fields["seconds"] = args.seconds
    if args.soak_minutes < 0 or args.budget_minutes <= 0:
        parser.error("--soak-minutes must be >= 0 and --budget-minutes > 0")
    fields |= {"soak_minutes": args.soak_minutes, "budget_s": args.budget_minutes * 60,
               "install": not args.no_install}
    return args, compare.Settings(**fields)


def main(argv: list[str] | None = None) -> int:
    args, settings = parse(argv)
    work = Path(args.dir or tempfile.mkdtemp(prefix="tidemq-bench-compare-"))
    out = Path(args.out)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    try:
        raw = compare.run(settings, work, lambda line: print(line, file=sys.stderr, flush=True))
    except KeyboardInterrupt:
        print("scripts/bench compare: interrupted; every server it started is stopped", file=sys.stderr)
        return 130
    except (RuntimeError, ValueError, OSError) as e:
        print(f"scripts/bench compare: {e}", file=sys.stderr)
        return 1
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    summary = report.summarize(raw)
    goal_rows = report.goals(summary)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps(
        {"benchmark": "compare", "when": when, "summary": summary, "goals": goal_rows, "raw": raw}, indent=2))
    text = report.markdown(raw, summary, goal_rows, when)
    if report.chart(summary, out / "compare.png", when):
        text += f"\n![scripts/bench compare]({'compare.png'})\n"
    (out / "compare.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
