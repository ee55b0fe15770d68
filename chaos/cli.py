"""`tidemq chaos ...`: list, run and soak the chaos scenarios, run the Toxiproxy server.

    tidemq chaos list
    tidemq chaos run SCENARIO --mode SYNC_MASTER+SYNC_FLUSH --seed N --duration S [--base-dir DIR] [--json]
    tidemq chaos soak --minutes M [--log FILE]
    tidemq chaos sim --seeds 1..10000 [--mode M|all] [--slaves 1|2|all] [--controller manual|etcd|all]
                     [--groups 1|2|all] [--storage]
                     [--jobs N] [--mutate NAME [--first]] [--json]
    tidemq chaos sim --seed N --mode M --slaves S --controller C --groups G [--storage] [--without I,J] [--shrink] [--events]
                     [--keep] [--mutate NAME]
    tidemq chaos proxy --port 8474

Exit codes: 0 the run met its mode's promises, 1 it did not (the table and the verdict
say which), 2 usage error (unknown scenario or mode). `sim` runs the deterministic
simulation (docs/simulation.md): 1 when a seed broke a promise.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from store.cli import until_signal

EXIT_OK, EXIT_FOUND, EXIT_USAGE = 0, 1, 2


def default_jobs() -> int:
    """`chaos sim --jobs` by default: every core but one (at least one), so a sweep leaves the
    machine usable."""
    return max(1, (os.cpu_count() or 1) - 1)


def _error(message: str) -> int:
    print(f"tidemq chaos: {message}", file=sys.stderr)
    return EXIT_USAGE


class MissingExtra(Exception):
    """The chaos suite's own dependencies (the `chaos` extra) are not installed."""

    def __init__(self, module: str | None) -> None:
        from cluster.launch.proxies import CHAOS_EXTRA_INSTALL

        super().__init__(f"the chaos suite needs {module!r} from the `chaos` extra: {CHAOS_EXTRA_INSTALL}")


def _scenarios() -> dict[str, Any]:
    try:
        from .scenarios import SCENARIOS
    except ModuleNotFoundError as e:
        raise MissingExtra(e.name) from e
    return SCENARIOS


# ---------------------------------------------------------------- list


def _cmd_list(args: argparse.Namespace) -> int:
    scenarios = _scenarios()
    if args.json:
        print(json.dumps([{"name": s.name, "summary": s.summary, "ci_modes": list(s.ci_modes)}
                          for s in scenarios.values()], indent=2))
        return EXIT_OK
    from rich.console import Console
    from rich.table import Table

    table = Table(title="chaos scenarios", title_justify="left")
    for column in ("scenario", "what it does", "CI modes"):
        table.add_column(column)
    for s in scenarios.values():
        table.add_row(s.name, s.summary, ", ".join(s.ci_modes))
    Console().print(table)
    return EXIT_OK


# ---------------------------------------------------------------- run


def _check_args(args: argparse.Namespace) -> str | None:
    from .layout import MODES

    scenarios = _scenarios()
    if args.scenario not in scenarios:
        return f"no scenario {args.scenario!r}; `tidemq chaos list` shows them: {', '.join(scenarios)}"
    if args.mode not in MODES:
        return f"unknown mode {args.mode!r}; use one of {', '.join(MODES)}"
    if not 3.0 <= args.duration <= 3600:
        return f"--duration must be 3..3600 seconds, got {args.duration:g}"
    if args.base_dir is not None and os.path.exists(args.base_dir) and (
            not os.path.isdir(args.base_dir) or os.listdir(args.base_dir)):
        return (f"--base-dir {args.base_dir} is not empty; give a new or empty directory "
                "(a passing run removes it unless --keep)")
    return None


def run_one(scenario: str, mode: str, seed: int, duration: float, *, keep: bool = False,
            progress: Callable[[float, str], None] | None = None, secure: bool = False,
            base_dir: str | None = None) -> Any:
    """One scenario run in this process (its own Toxiproxy unless TOXIPROXY_URL is set); its
    cluster's files go under `base_dir` (default a new temporary directory)."""
    import logging

    import trio

    from .network import toxiproxy
    from .runner import run_scenario

    # the client library warns about every fault the scenario injects on purpose
    logging.getLogger("tidemq.client").setLevel(logging.ERROR)
    got: dict[str, Any] = {}

    async def body() -> int:
        got["report"] = await run_scenario(_scenarios()[scenario], mode, seed, duration, client,
                                           base_dir=base_dir, keep=keep, progress=progress, secure=secure)
        return 0

    with toxiproxy() as client:
        code = trio.run(until_signal, body)  # SIGTERM/Ctrl-C: the scenario stops its cluster
    if "report" not in got:
        raise Stopped(code)
    return got["report"]


class Stopped(Exception):
    """A run stopped by SIGTERM or SIGINT; `code` is the exit code (143, 130)."""

    def __init__(self, code: int) -> None:
        super().__init__(f"stopped ({code})")
        self.code = code


def _cmd_run(args: argparse.Namespace) -> int:
    problem = _check_args(args)
    if problem:
        return _error(problem)
    if args.base_dir is not None:
        os.makedirs(args.base_dir, exist_ok=True)
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    err = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=err,
                  transient=True, disable=args.json or not err.is_terminal) as bar:
        task = bar.add_task(f"{args.scenario} {args.mode} seed {args.seed}", total=1.0)

        def progress(fraction: float, what: str) -> None:
            bar.update(task, completed=fraction, description=f"{args.scenario} seed {args.seed}: {what}")

        report = run_one(args.scenario, args.mode, args.seed, args.duration, keep=args.keep, progress=progress,
                         secure=args.secure,
                         base_dir=os.path.abspath(args.base_dir) if args.base_dir is not None else None)
    if args.json:
        print(json.dumps(report.to_json(), indent=2, default=str))
    else:
        Console().print(report_table(report))
        print(report.verdict)
    if report.skipped:
        return EXIT_OK
    return EXIT_OK if report.passed else EXIT_FOUND


def report_table(report: Any) -> Any:
    """The run's figures as a rich Table."""
    from rich.table import Table

    table = Table(title=f"{report.scenario} · {report.mode} · seed {report.seed} · {report.duration:g} s",
                  title_justify="left", show_header=False)
    table.add_column("what")
    table.add_column("value")
    c = report.check
    rows: list[tuple[str, Any]] = [("schedule", json.dumps(report.schedule)),
                                   ("faults", "; ".join(w for _, w in report.events) or "-")]
    if c is not None:
        rows += [
            ("sends", f"{c.acked} acknowledged, {c.failed} failed, {c.indeterminate} indeterminate "
                      f"({c.indeterminate_landed} landed)"),
            ("statuses", ", ".join(f"{k} {v}" for k, v in sorted(c.statuses.items()))),
            ("acknowledged but missing", len(c.acked_missing)),
            ("expired by cleanup", c.expired),
            ("duplicates / order / contiguity", f"{len(c.duplicates)} / {len(c.order_breaks)} / "
                                                f"{len(c.contiguity_breaks)}"),
            ("CRC failures / damage", f"{c.crc_failures} / {len(c.damage)}"),
            ("master/slave divergence", f"{len(c.divergence)} record(s), slave ahead {c.slave_ahead_bytes} B"),
            ("consumed (gone since)", f"{c.consumed} ({len(c.consumed_missing)})"),
        ]
    if report.expectation is not None:
        rows.append(("window at the fault" if report.expectation.truncated is None else "window (truncated on rejoin)",
                     report.expectation.window))
    rows += [("time to recover", _seconds(report.time_to_recover_s)),
             ("time until the slave caught up", _seconds(report.time_to_catch_up_s))]
    for problem in report.violations:
        rows.append(("[red]broken promise[/]", problem))
    for what, value in rows:
        table.add_row(what, str(value))
    return table


def _seconds(value: float | None) -> str:
    return "did not happen" if value is None else f"{value:.2f} s"


# ---------------------------------------------------------------- soak


def _cmd_soak(args: argparse.Namespace) -> int:
    from .layout import MODES

    scenarios = list(_scenarios().values())
    if args.scenarios:
        wanted = args.scenarios.split(",")
        unknown = [w for w in wanted if w not in _scenarios()]
        if unknown:
            return _error(f"unknown scenario(s) {', '.join(unknown)}")
        scenarios = [s for s in scenarios if s.name in wanted]
    if args.minutes <= 0:
        return _error(f"--minutes must be positive, got {args.minutes:g}")
    deadline = time.monotonic() + args.minutes * 60
    totals = {"runs": 0, "passed": 0, "skipped": 0, "faults": 0, "acked_checked": 0, "losses": 0}
    seeds: set[int] = set()
    names: set[str] = set()
    plan = itertools.count(args.seed)
    pairs = [(s, m) for s in scenarios for m in MODES]
    with open(args.log, "a", encoding="utf-8") as log:
        for seed in plan:
            if time.monotonic() >= deadline:
                break
            i = seed - args.seed
            if i % len(pairs) == 0:  # every scenario × mode pairing once per round, in a seeded order
                random.Random(seed).shuffle(pairs)
            scenario, mode = pairs[i % len(pairs)]
            report = run_one(scenario.name, mode, seed, args.duration)
            line = report.to_json()
            line["check"] = _brief(report)
            log.write(json.dumps(line, default=str) + "\n")
            log.flush()
            totals["runs"] += 1
            totals["skipped"] += bool(report.skipped)
            totals["passed"] += report.passed
            totals["faults"] += report.faults
            seeds.add(seed)
            names.add(scenario.name)
            if report.check is not None:
                totals["acked_checked"] += report.check.acked
                totals["losses"] += report.check.losses
            print(report.verdict, flush=True)
    summary = {**totals, "seeds": len(seeds), "scenarios": sorted(names),
               "failed": totals["runs"] - totals["passed"] - totals["skipped"], "log": args.log}
    print(json.dumps(summary))
    return EXIT_OK if summary["failed"] == 0 else EXIT_FOUND


def _brief(report: Any) -> dict[str, Any] | None:
    c = report.check
    if c is None:
        return None
    return {"acked": c.acked, "failed": c.failed, "indeterminate": c.indeterminate,
            "indeterminate_landed": c.indeterminate_landed, "acked_missing": len(c.acked_missing),
            "duplicates": len(c.duplicates), "order_breaks": len(c.order_breaks),
            "contiguity_breaks": len(c.contiguity_breaks), "crc_failures": c.crc_failures,
            "divergence": len(c.divergence), "statuses": c.statuses}


# ---------------------------------------------------------------- sim


def parse_seeds(text: str) -> list[int]:
    """"1..10000" (both ends included), "7" or "3,9,12"."""
    try:
        if ".." in text:
            low, high = (int(x) for x in text.split("..", 1))
            if high < low:
                raise ValueError
            return list(range(low, high + 1))
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"--seeds must be A..B, N or N,M,...; got {text!r}") from None


def _replay_command(result: dict[str, Any], without: Sequence[int] = (), mutation: str | None = None) -> str:
    """The command that replays a seed's result (SeedResult.to_json) bit for bit."""
    extra = f" --without {','.join(map(str, without))}" if without else ""
    extra += f" --mutate {mutation}" if mutation else ""
    extra += " --storage" if result.get("storage") else ""
    return (f"tidemq chaos sim --seed {result['seed']} --mode {result['mode']} --slaves {result['slaves']} "
            f"--controller {result['controller']} --groups {result['groups']}{extra}")


def _cmd_sim(args: argparse.Namespace) -> int:
    from .sim.run import MODES

    if args.mode != "all" and args.mode not in MODES:
        return _error(f"unknown mode {args.mode!r}; use one of {', '.join(MODES)} or all")
    if args.jobs < 1:
        return _error(f"--jobs must be at least 1, got {args.jobs}")
    if args.slaves != "all" and args.slaves not in ("1", "2"):
        return _error(f"--slaves must be 1, 2 or all, got {args.slaves}")
    if args.groups != "all" and args.groups not in ("1", "2"):
        return _error(f"--groups must be 1, 2 or all, got {args.groups}")
    from .sim.run import CONTROLLERS

    if args.controller != "all" and args.controller not in CONTROLLERS:
        return _error(f"--controller must be {', '.join(CONTROLLERS)} or all, got {args.controller}")
    from .sim.mutations import MUTATIONS

    if args.mutate is not None and args.mutate not in MUTATIONS:
        return _error(f"no mutation {args.mutate!r}; there are {', '.join(MUTATIONS)}")
    if (args.seed is None) == (args.seeds is None):
        return _error("give --seeds A..B (a sweep) or --seed N (one replay)")
    try:
        without = tuple(parse_seeds(args.without)) if args.without else ()
        if args.seed is not None:
            return _sim_one(args, without)
        if without or args.shrink or args.events or args.keep:
            return _error("--without, --shrink, --events and --keep go with --seed N")
        return _sim_sweep(args, parse_seeds(args.seeds))
    except ValueError as e:
        return _error(str(e))


def _sim_one(args: argparse.Namespace, without: tuple[int, ...]) -> int:
    from .sim.schedule import draw
    from .sim.sweep import controller_of, groups_of, mode_of, replay, shrink, slaves_of

    mode, slaves = mode_of(args.seed, args.mode), slaves_of(args.seed, args.slaves)
    controller, groups = controller_of(args.seed, args.controller), groups_of(args.seed, args.groups)
    if args.shrink:
        def progress(what: str) -> None:
            print(f"  {what}", file=sys.stderr, flush=True)

        without, result = shrink(args.seed, mode, base_dir=args.dir, mutation=args.mutate, slaves=slaves,
                                 controller=controller, groups=groups, storage=args.storage, progress=progress)
    else:
        result = replay(args.seed, mode, without=without, base_dir=args.dir, keep=args.keep, mutation=args.mutate,
                        slaves=slaves, controller=controller, groups=groups, storage=args.storage)
    schedule = draw(args.seed, etcd=controller == "etcd", slaves=slaves, groups=groups, storage=args.storage)
    kept = [f for i, f in enumerate(schedule.faults) if i not in without]
    if args.json:
        print(json.dumps({**result.to_json(), "schedule": [f.to_json() for f in kept],
                          "without": list(without), "events": result.log if args.events else None}, indent=2))
    else:
        if args.events:
            print("\n".join(result.log))
        print(f"seed {args.seed} · {mode} · {groups} group(s) of {slaves} slave(s) · {controller} · "
              f"{len(kept)} fault(s): {'; '.join(f.describe() for f in kept)}")
        print(f"{result.sends} sends: {result.acked} acknowledged, {result.failed} failed, "
              f"{result.indeterminate} indeterminate · {result.simulated_s:g} simulated s in {result.wall_s:g} s")
        print(f"event log sha256 {result.log_hash}")
        for v in result.violations:
            print(f"violation: {v}")
        if args.shrink and not result.ok:
            print(f"shrunk to {len(kept)} of {len(schedule.faults)} fault(s): "
                  f"{_replay_command(result.to_json(), without, args.mutate)}")
        print("passed" if result.ok else "FAILED")
    return EXIT_OK if result.ok else EXIT_FOUND


def _sim_sweep(args: argparse.Namespace, seeds: list[int]) -> int:
    from .sim.sweep import sweep

    step = max(1, len(seeds) // 20)
    shown = [0]

    def on_result(result: dict[str, Any], so_far: Any) -> None:
        if result["violations"]:
            print(f"seed {result['seed']} ({result['mode']}) broke a promise: {result['violations'][0]}\n"
                  f"  replay: {_replay_command(result, mutation=args.mutate)}", file=sys.stderr, flush=True)
        if so_far.schedules - shown[0] >= step or so_far.schedules == len(seeds):
            shown[0] = so_far.schedules
            print(f"{so_far.schedules}/{len(seeds)} schedules · {so_far.faults} faults · {so_far.sends} sends · "
                  f"{len(so_far.failing)} failing · {so_far.wall_s:.0f} s", file=sys.stderr, flush=True)

    result = sweep(seeds, mode=args.mode, jobs=args.jobs, base_dir=args.dir, mutation=args.mutate,
                   stop_at_first=args.first, slaves=args.slaves if args.slaves == "all" else int(args.slaves),
                   controller=args.controller, groups=args.groups if args.groups == "all" else int(args.groups),
                   storage=args.storage, on_result=on_result)
    summary = result.to_json()
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        groups = ", ".join([f"{n} with {k} slave(s)" for k, n in sorted(result.by_slaves.items())]
                           + [f"{n} {k}" for k, n in sorted(result.by_controller.items())]
                           + [f"{n} of {k} group(s)" for k, n in sorted(result.by_groups.items())])
        print(f"{result.schedules} schedules ({', '.join(f'{m} {n}' for m, n in sorted(result.by_mode.items()))}; "
              f"{groups}), "
              f"{result.faults} faults, {result.sends} sends ({result.acked} acknowledged), "
              f"{result.simulated_s:.0f} simulated s in {result.wall_s:.1f} s "
              f"({summary['schedules_per_minute']} schedules a minute, {args.jobs} job(s))")
        print(f"{len(result.failing)} failing seed(s), {summary['violations']} violation(s)")
        for r in result.failing:
            print(f"  seed {r['seed']}: {r['violations'][0]} · "
                  f"{_replay_command(r, mutation=args.mutate)}")
    return EXIT_OK if not result.failing else EXIT_FOUND


# ---------------------------------------------------------------- proxy


def _cmd_proxy(args: argparse.Namespace) -> int:
    from .proxy.__main__ import serve

    return serve(args.host, args.port)


# ---------------------------------------------------------------- registration


def _safe(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """The action, with a cluster or proxy that cannot start reported as a found problem
    (exit 1) and an OS error as unusable input (exit 2): a message, never a traceback,
    whichever entry point assembles this group."""

    def run(args: argparse.Namespace) -> int:
        from cluster.launch.launcher import LauncherError

        try:
            from .network import ProxyServerError
        except ModuleNotFoundError as e:
            return _error(str(MissingExtra(e.name)))
        try:
            return handler(args)
        except Stopped as e:  # until_signal said so on stderr; a soak's log keeps its runs
            return e.code
        except MissingExtra as e:
            return _error(str(e))
        except (LauncherError, ProxyServerError, TimeoutError) as e:
            print(f"tidemq chaos: {e}", file=sys.stderr)
            return EXIT_FOUND
        except OSError as e:
            return _error(f"{e.filename or ''}: {e.strerror or e}".lstrip(": "))

    return run


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register the `chaos` group (list, run, soak, proxy) on the `tidemq` parser."""
    chaos = subparsers.add_parser("chaos", help="fault scenarios against a live cluster, with a history checker",
                                  description="Process, network and disk faults against a live one-group "
                                  "cluster; see docs/chaos.md.")
    chaos.set_defaults(group_parser=chaos)
    actions = chaos.add_subparsers(dest="action", metavar="ACTION")

    listing = actions.add_parser("list", help="the scenarios and the modes CI runs them in")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=_safe(_cmd_list), offline=True)  # no login options

    run = actions.add_parser("run", help="run one scenario and check the history",
                             description="Start a proxied cluster, run the workload, inject the "
                             "scenario's seeded faults, heal, check. Exit 1 when a promise broke.")
    run.add_argument("scenario")
    run.add_argument("--mode", default="SYNC_MASTER+SYNC_FLUSH",
                     help="REPLICATION+FLUSH, e.g. ASYNC_MASTER+ASYNC_FLUSH (default %(default)s)")
    run.add_argument("--seed", type=int, default=1, help="the same seed replays the same fault schedule")
    run.add_argument("--duration", type=float, default=10.0, help="seconds of load (default %(default)s)")
    run.add_argument("--json", action="store_true", help="print the full report as JSON")
    run.add_argument("--keep", action="store_true", help="keep the run's directory even when it passed")
    run.add_argument("--base-dir", metavar="DIR",
                     help="where the run's cluster keeps its files (cluster.json, logs/, store/, the history), "
                     "as `cluster up --base-dir`; a new or empty directory (default: a new one under the "
                     "temporary directory), removed after a passing run unless --keep")
    run.add_argument("--secure", action="store_true",
                     help="accounts, permissions and TLS on every link (docs/security.md), fresh secrets")
    run.set_defaults(handler=_safe(_cmd_run))

    soak = actions.add_parser("soak", help="cycle seeded scenarios and modes for M minutes",
                              description="Run every ready scenario in turn, each mode in turn, one seed "
                              "per run, for --minutes; one JSON line per run in --log. Exit 1 when a run failed.")
    soak.add_argument("--minutes", type=float, required=True)
    soak.add_argument("--duration", type=float, default=8.0, help="seconds of load per run")
    soak.add_argument("--seed", type=int, default=1, help="the first seed")
    soak.add_argument("--scenarios", help="comma-separated names (default: every ready scenario)")
    soak.add_argument("--log", default="chaos-soak.jsonl", help="JSON-lines log (appended)")
    soak.set_defaults(handler=_safe(_cmd_soak))

    sim = actions.add_parser("sim", help="the deterministic simulation: thousands of seeded fault schedules",
                             description="A name server, a master and one or two slaves, producers and a consumer in one "
                             "process under a simulated clock and network, faults from each seed, the history "
                             "checker on every run; docs/simulation.md. Exit 1 when a seed broke a promise.")
    sim.add_argument("--seeds", help="a sweep: A..B (both included), N or N,M,...")
    sim.add_argument("--seed", type=int, help="replay one seed (same seed, same event log hash)")
    sim.add_argument("--mode", default="all",
                     help="REPLICATION+FLUSH, or all: each seed its own (default %(default)s)")
    sim.add_argument("--jobs", type=int, default=default_jobs(),
                     help="worker processes for a sweep (default: the cores but one, here %(default)s)")
    sim.add_argument("--without", help="with --seed: leave out these faults (indexes, as --shrink prints)")
    sim.add_argument("--shrink", action="store_true", help="with --seed: the fewest faults that still fail")
    sim.add_argument("--events", action="store_true", help="with --seed: print the event log")
    sim.add_argument("--keep", action="store_true", help="with --seed: keep the store files")
    sim.add_argument("--slaves", default="all",
                     help="slaves in the group: 1, 2, or all: each seed its own (default %(default)s); "
                     "faults and promotions strike the first slave (docs/simulation.md)")
    sim.add_argument("--controller", default="all",
                     help="who makes a slave master: manual (an operator promotes), etcd (the group "
                     "elects), or all: each seed its own (default %(default)s)")
    sim.add_argument("--groups", default="all",
                     help="broker groups: 1, 2 or all (default: each seed its own, sixteen seeds at a time); "
                     "with two, each fault and promotion strikes one of them (docs/simulation.md)")
    sim.add_argument("--storage", action="store_true",
                     help="storage faults too: some kills, pauses and slow disks become power losses "
                          "(docs/simulation.md, Storage faults)")
    sim.add_argument("--dir", help="where the stores go (default /dev/shm, a tmpfs)")
    sim.add_argument("--mutate", metavar="NAME",
                     help="run with a deliberate bug, to see the checker catch it: "
                     "pause-fencing, truncation, in-sync-wait or confirm-offset (docs/simulation.md)")
    sim.add_argument("--first", action="store_true", help="a sweep stops at the first seed that broke a promise")
    sim.add_argument("--json", action="store_true")
    sim.set_defaults(handler=_cmd_sim, offline=True)  # in one process: no login options

    proxy = actions.add_parser("proxy", help="run the Toxiproxy-compatible server on its own")
    proxy.add_argument("--host", default="127.0.0.1")
    proxy.add_argument("--port", type=int, default=8474)
    proxy.set_defaults(handler=_safe(_cmd_proxy), offline=True)  # logs in nowhere


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m chaos.cli ...` until the top-level `tidemq` assembles this group."""
    parser = argparse.ArgumentParser(prog="tidemq")
    add_commands(parser.add_subparsers(dest="group", metavar="COMMAND"))
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    handler = getattr(args, "handler", None)
    if handler is None:
        getattr(args, "group_parser", parser).print_usage(sys.stderr)
        return _error("an action is required")
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
