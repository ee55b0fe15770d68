"""`tidemq drill NAME` (and `python -m cluster.drills.cli NAME`, what scripts/drill runs): the
command line of the drill framework (cluster/drills/framework.py). Importing it registers every drill
(cluster/drills/basic.py), so the framework itself imports none of them."""

from __future__ import annotations

import argparse
import json
import logging
import sys

import trio

from store.cli import positive_int, until_signal

from ..launch import launcher
from . import basic  # noqa: F401  (registers the drills)
from .framework import CLIENTS, DRILLS, LAYOUTS, DrillUnavailable, run_drill

__all__ = ["add_commands", "main"]


def _cmd_drill(args: argparse.Namespace) -> int:
    if args.name not in DRILLS:
        print(f"tidemq drill: unknown drill {args.name!r}; one of {', '.join(sorted(DRILLS))}", file=sys.stderr)
        return 2
    if args.secure and args.name in LAYOUTS:
        print(f"tidemq drill: {args.name} runs its own layout; --secure runs the drills of the 2m-2s layout",
              file=sys.stderr)
        return 2
    got = {}

    async def body() -> int:
        got["report"] = await run_drill(args.name, base_dir=args.base_dir, keep=args.keep,
                                        heartbeat_s=args.heartbeat, rebalance_s=args.rebalance,
                                        rate=args.rate, rounds=args.rounds, seed=args.seed,
                                        channel_expired_s=args.channel_expired, secure=args.secure,
                                        client=args.client)
        return 0

    try:
        code = trio.run(until_signal, body)  # SIGTERM/Ctrl-C: the drill stops its cluster first
    except DrillUnavailable as e:
        print(f"tidemq drill {args.name}: cannot run: {e}", file=sys.stderr)
        return 2
    except (launcher.LauncherError, OSError, ValueError) as e:
        print(f"tidemq drill {args.name}: cannot run: {e}", file=sys.stderr)
        return 2
    if "report" not in got:
        return code
    report = got["report"]
    print(json.dumps(report.to_json(), indent=2) if args.json else report.table())
    return 0 if report.ok else 1


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register `drill NAME` on the `tidemq` parser."""
    p = subparsers.add_parser(
        "drill", help="run a failover drill on a scratch 2m-2s-sync cluster",
        description="Start a local 2m-2s-sync cluster in a scratch directory, put producers and a "
        "2-member consumer group on it, inject one fault and report what it cost. Drills: "
        + "; ".join(f"{n}: {h}" for n, (h, _) in sorted(DRILLS.items()))
        + ". Exit 1 when a promise is broken, 2 when the drill could not run.",
    )
    p.add_argument("name", metavar="NAME", help="one of: " + ", ".join(sorted(DRILLS)))
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--base-dir", metavar="DIR", help="run the cluster here and keep it (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory")
    p.add_argument("--secure", action="store_true",
                   help="run on conf/2m-2s-secure: accounts, permissions and TLS on, fresh secrets")
    p.add_argument("--heartbeat", type=float, metavar="S",
                   help="members' heartbeat interval (default: the client's 30 s for rebalance, else 0.5 s)")
    p.add_argument("--rebalance", type=float, metavar="S",
                   help="members' rebalance interval (default: the client's 20 s for rebalance, else 2 s)")
    p.add_argument("--channel-expired", type=float, metavar="S",
                   help="the nodes' channelExpiredTimeout (default theirs, 120 s): when a silent member is dropped")
    p.add_argument("--client", choices=CLIENTS, default="tidemq",
                   help="whose producers load the cluster: tidemq's client, or RocketMQ's C++ client over the "
                   "remoting protocol (PyPI `rocketmq`, one child process per producer)")
    p.add_argument("--rate", type=float, default=50.0, metavar="N", help="sends per second per producer")
    p.add_argument("--rounds", type=positive_int, default=20, metavar="N",
                   help="faults of a repeating drill (auto-soak; default 20)")
    p.add_argument("--seed", type=int, default=14, metavar="S", help="seed of a repeating drill's faults")
    p.set_defaults(handler=_cmd_drill)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    parser = argparse.ArgumentParser(prog="tidemq")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["drill", *(argv if argv is not None else sys.argv[1:])])
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
