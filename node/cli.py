"""The `tidemq` console script.

Commands are grouped: `tidemq <group> <action> ...`. Each group registers its actions in an
`_add_<group>_commands(subparsers)` function; each action sets `handler` to a function
taking the parsed arguments and returning the exit code.

Exit codes: 0 success, 1 the command ran but found a problem (e.g. a damaged store),
2 usage errors and unusable inputs (a message on stderr, never a traceback).

Groups:
  store   offline, read-only tools over a store directory (dump, verify)
  node    run a node in the foreground (start)
  cluster a local multi-process cluster (up, status, down, kill, start)
  namesrv, send, consume, query, status   (cluster/cli.py: name server and client commands)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from store import tools
from store.tools import StoreToolError

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_USAGE = 2

Handler = Callable[[argparse.Namespace], int]


class CommandError(Exception):
    """A command cannot run (bad input, missing directory): reported on stderr, exit 2."""


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, separators=(",", ":")))


def _error(message: str) -> None:
    print(f"tidemq: error: {message}", file=sys.stderr)


def _non_negative_int(text: str) -> int:
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


# ---------------------------------------------------------------------------------------
# store: offline tools (store/tools.py)


def _store_dir(path: str) -> str:
    if not os.path.isdir(path):
        raise CommandError(f"store directory {path!r} does not exist")
    return path


def _cmd_store_dump(args: argparse.Namespace) -> int:
    status = EXIT_OK
    if (args.topic is None) != (args.queue is None):
        raise CommandError("--topic and --queue go together")
    if args.topic is not None:
        records = tools.dump_queue(_store_dir(args.dir), args.topic, args.queue, limit=args.limit)
    else:
        records = tools.dump(_store_dir(args.dir), from_offset=args.from_offset, limit=args.limit)
    for record in records:
        _print_json(record)
        if "error" in record:
            status = EXIT_PROBLEM
    sys.stdout.flush()
    return status


def _cmd_store_query(args: argparse.Namespace) -> int:
    found = tools.query_key(
        _store_dir(args.dir), args.topic, args.key, max_num=args.max,
        hash_slot_num=args.max_hash_slot_num, index_num=args.max_index_num,
    )
    for record in found:
        _print_json(record)
    sys.stdout.flush()
    return EXIT_OK if found else EXIT_PROBLEM


def _cmd_store_verify(args: argparse.Namespace) -> int:
    summary = tools.verify(_store_dir(args.dir))
    _print_json(summary)
    sys.stdout.flush()
    return EXIT_OK if summary["clean"] else EXIT_PROBLEM


def _add_store_commands(subparsers: argparse._SubParsersAction) -> None:
    store = subparsers.add_parser(
        "store",
        help="offline, read-only tools over a store directory",
        description="Offline, read-only tools over a store directory. They take no lock "
        "and can run while a node uses the store.",
    )
    store.set_defaults(group_parser=store)
    actions = store.add_subparsers(dest="action", metavar="ACTION")

    dump = actions.add_parser(
        "dump",
        help="print every CommitLog record as one JSON object per line",
        description="Print every CommitLog record as one JSON object per line (BLANK "
        "fillers as {\"offset\",\"blank\"}); stops at the end of data or at the first "
        "invalid record (printed as {\"offset\",\"error\"}, exit 1).",
    )
    dump.add_argument("dir", metavar="DIR", help="store root directory (storePathRootDir)")
    dump.add_argument(
        "--from", dest="from_offset", metavar="OFFSET", type=_non_negative_int,
        help="start at this CommitLog offset; it must be a record start",
    )
    dump.add_argument(
        "--limit", metavar="N", type=_non_negative_int, help="print at most N records"
    )
    dump.add_argument("--topic", help="dump one topic-queue through its ConsumeQueue (with --queue)")
    dump.add_argument("--queue", type=_non_negative_int, metavar="QUEUE_ID", help="queue id (with --topic)")
    dump.set_defaults(handler=_cmd_store_dump)

    query = actions.add_parser(
        "query",
        help="find messages by key through the index files",
        description="Print, newest first, the messages of TOPIC whose KEYS or UNIQ_KEY is KEY, "
        "found through the index and re-checked against the CommitLog.",
    )
    query.add_argument("dir", metavar="DIR", help="store root directory (storePathRootDir)")
    query.add_argument("--topic", required=True)
    query.add_argument("--key", required=True)
    query.add_argument("--max", type=_non_negative_int, default=64, help="at most this many (default 64)")
    query.add_argument("--max-hash-slot-num", type=_non_negative_int, default=5_000_000,
                       help="the store's maxHashSlotNum (default 5000000)")
    query.add_argument("--max-index-num", type=_non_negative_int, default=20_000_000,
                       help="the store's maxIndexNum (default 20000000)")
    query.set_defaults(handler=_cmd_store_query)

    verify = actions.add_parser(
        "verify",
        help="check the CommitLog and print a JSON summary (exit 1 when damaged)",
        description="Walk every CommitLog segment, check record structure and body CRCs, "
        "and print one JSON summary. Exit 0 when clean, 1 when damaged.",
    )
    verify.add_argument("dir", metavar="DIR", help="store root directory (storePathRootDir)")
    verify.set_defaults(handler=_cmd_store_verify)


# ---------------------------------------------------------------------------------------
# node: run one node in the foreground (node/broker.py)


def _cmd_node_start(args: argparse.Namespace) -> int:
    import trio

    from node.broker import Broker
    from node.config import ConfigError, check_ports_free, load_config
    from node.jsonfile import ConfigFileError
    from node.logs import setup_logging
    from store.message_store import StoreLockedError

    try:
        cfg = load_config(args.config, base_dir=args.base_dir)
        check_ports_free(cfg)
    except ConfigError as e:
        raise CommandError(str(e)) from None
    setup_logging(cfg)
    node = Broker(cfg)
    serving = False

    async def serve() -> None:
        nonlocal serving
        async with trio.open_nursery() as nursery:
            address = await nursery.start(node.run)
            serving = True
            # the launcher and tests wait for this line
            print(f"READY {cfg.broker_name} {cfg.broker_id} {address}", flush=True)

    try:
        trio.run(serve)
    except KeyboardInterrupt:  # Ctrl-C before the signal handler was installed
        return 130
    except Exception as e:
        cause = _single_cause(e)
        if isinstance(cause, StoreLockedError | ConfigFileError):
            raise CommandError(str(cause)) from None
        if isinstance(cause, OSError) and not serving:  # e.g. a port taken since the check
            raise CommandError(f"{cfg.source}: cannot start: {cause}") from None
        raise
    return EXIT_OK


def _single_cause(exc: BaseException) -> BaseException:
    """The one exception inside nested one-member groups (trio nurseries wrap start-up errors)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _add_node_commands(subparsers: argparse._SubParsersAction) -> None:
    node = subparsers.add_parser(
        "node", help="run a node", description="Run one tidemq node (master or slave)."
    )
    node.set_defaults(group_parser=node)
    actions = node.add_subparsers(dest="action", metavar="ACTION")
    start = actions.add_parser(
        "start",
        help="run a node in the foreground until SIGTERM/SIGINT",
        description="Start the node described by a broker config file (.toml or "
        ".properties) in the foreground. Prints 'READY <brokerName> <brokerId> <address>' "
        "on stdout once it serves clients; SIGTERM or SIGINT stops it gracefully (exit 0). "
        "Exit 2 on a config error or when a port or the store is in use.",
    )
    start.add_argument("-c", "--config", required=True, metavar="FILE", help="broker config file")
    start.add_argument(
        "--base-dir", metavar="DIR",
        help="resolve a relative storePathRootDir against DIR (default: the working directory)",
    )
    start.set_defaults(handler=_cmd_node_start)


# ---------------------------------------------------------------------------------------
# cluster: a local multi-process cluster (cluster/launcher.py)


def _launcher_call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a launcher function; layout/usage problems exit 2, failed actions exit 1."""
    from cluster.launcher import LauncherError, LayoutError

    try:
        return fn(*args, **kwargs)
    except LayoutError as e:
        raise CommandError(str(e)) from None
    except LauncherError as e:
        raise _ClusterFailed(str(e)) from None


class _ClusterFailed(Exception):
    """A cluster action failed (a node did not start, a signal found no process): exit 1."""


def _cluster_handler(fn: Handler) -> Handler:
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except _ClusterFailed as e:
            _error(str(e))
            return EXIT_PROBLEM

    return run


def _cmd_cluster_up(args: argparse.Namespace) -> int:
    from cluster import launcher

    def show(res: launcher.UpResult) -> None:
        if not args.json:
            rec = res.record
            print(f"{res.name:<14} {res.action:<8} {rec.role:<13} {rec.address:<22} {res.note}", flush=True)

    results = _launcher_call(launcher.up, args.conf, args.base_dir, timeout_s=args.timeout, on_result=show)
    if args.json:
        _print_json({"base_dir": os.path.abspath(args.base_dir), "nodes": [
            {"name": r.name, "action": r.action, "role": r.record.role, "address": r.record.address,
             "pid": r.record.pid, "note": r.note} for r in results]})
    else:
        print(f"cluster is up under {os.path.abspath(args.base_dir)}; "
              f"stop it with: tidemq cluster down --base-dir {args.base_dir}")
    return EXIT_OK


def _cmd_cluster_status(args: argparse.Namespace) -> int:
    from cluster import launcher

    rows = _launcher_call(launcher.status, args.base_dir, timeout_s=args.timeout)
    if args.json:
        print(json.dumps({"base_dir": os.path.abspath(args.base_dir),
                          "nodes": [r.to_json() for r in rows]}, default=str))
    else:
        from rich.console import Console

        console = Console(width=None if sys.stdout.isatty() else 160)
        console.print(launcher.status_table(rows, title=f"cluster {os.path.abspath(args.base_dir)}"))
    healthy = all(r.state == "running" and r.error is None for r in rows)
    return EXIT_OK if healthy else EXIT_PROBLEM


def _cmd_cluster_down(args: argparse.Namespace) -> int:
    from cluster import launcher

    def show(res: launcher.StopResult) -> None:
        how = {"stopped": f"stopped by SIGTERM in {res.seconds:.2f} s",
               "killed": f"KILLED: still alive {args.grace:g} s after SIGTERM",
               "not running": "was not running"}[res.outcome]
        abort = " (abort file left: the store will recover at next start)" if res.abort_file_left else ""
        print(f"{res.name:<14} pid {res.pid or '-':<8} {how}{abort}", flush=True)

    results = _launcher_call(launcher.down, args.base_dir, grace_s=args.grace, on_result=show)
    if not results:
        print(f"no cluster recorded in {os.path.abspath(args.base_dir)}; nothing to stop")
    return EXIT_OK


def _cmd_cluster_kill(args: argparse.Namespace) -> int:
    from cluster import launcher

    print(_launcher_call(launcher.kill, args.base_dir, args.node, args.signal))
    return EXIT_OK


def _cmd_cluster_start(args: argparse.Namespace) -> int:
    from cluster import launcher

    rec = _launcher_call(launcher.start_node, args.base_dir, args.node, timeout_s=args.timeout)
    print(f"{rec.name} started: pid {rec.pid}, {rec.role}, {rec.address}")
    return EXIT_OK


def _add_cluster_commands(subparsers: argparse._SubParsersAction) -> None:
    cluster = subparsers.add_parser(
        "cluster", help="run a local multi-process cluster from a layout in conf/",
        description="Start, inspect and stop a local cluster: each node (and the name server) "
        "runs as its own OS process; <base-dir>/cluster.json records them and "
        "<base-dir>/logs/<node>.out holds their output.",
    )
    cluster.set_defaults(group_parser=cluster)
    actions = cluster.add_subparsers(dest="action", metavar="ACTION")

    def base_dir(p: argparse.ArgumentParser) -> None:
        p.add_argument("--base-dir", default="data", metavar="DIR",
                       help="where stores, logs and cluster.json live (default ./data)")

    up = actions.add_parser(
        "up", help="start every node of a layout that is not running",
        description="Start the layout's name server (when namesrv.toml exists and this "
        "installation has `tidemq namesrv`), its masters, then its slaves, each waited for "
        "until READY. Nodes already running are left alone, so `up` can be repeated. On a "
        "failure the nodes this call started are stopped and the failing node's log is shown "
        "(exit 1).",
    )
    up.add_argument("--conf", metavar="DIR",
                    help="layout directory, e.g. conf/1m-1s-dev (default: the one recorded in cluster.json)")
    base_dir(up)
    up.add_argument("--timeout", type=float, default=60.0, metavar="S", help="READY deadline per stage (default 60)")
    up.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    up.set_defaults(handler=_cluster_handler(_cmd_cluster_up))

    status = actions.add_parser(
        "status", help="show each node's process and its `status` answer",
        description="Show each recorded node: pid, whether that process is alive (a recycled "
        "pid does not count), role, address and what the node answers to `status`. Exit 1 when "
        "a node is down or does not answer.",
    )
    base_dir(status)
    status.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    status.add_argument("--timeout", type=float, default=3.0, metavar="S", help="per-node answer deadline")
    status.set_defaults(handler=_cluster_handler(_cmd_cluster_status))

    down = actions.add_parser(
        "down", help="stop every node: slaves, masters, then the name server",
        description="SIGTERM every node, slaves first, then masters, then the name server; a "
        "node still alive --grace seconds after its SIGTERM gets SIGKILL. Exit 0.",
    )
    base_dir(down)
    down.add_argument("--grace", type=float, default=15.0, metavar="S",
                      help="seconds each stage may take to exit after SIGTERM (default 15)")
    down.set_defaults(handler=_cluster_handler(_cmd_cluster_down))

    kill = actions.add_parser(
        "kill", help="signal one node (failover drills)",
        description="Send a signal to one node: KILL (default) or TERM wait for it to exit, "
        "STOP freezes it, CONT resumes it.",
    )
    kill.add_argument("node", metavar="NODE", help="node name (its config file's stem, e.g. broker-a)")
    base_dir(kill)
    kill.add_argument("--signal", default="KILL", choices=["KILL", "TERM", "STOP", "CONT"])
    kill.set_defaults(handler=_cluster_handler(_cmd_cluster_kill))

    start = actions.add_parser(
        "start", help="(re)start one node from its recorded config",
        description="Start one node that is not running from the config recorded in "
        "cluster.json, wait for READY and record its new pid.",
    )
    start.add_argument("node", metavar="NODE", help="node name (its config file's stem, e.g. broker-a)")
    base_dir(start)
    start.add_argument("--timeout", type=float, default=60.0, metavar="S", help="READY deadline (default 60)")
    start.set_defaults(handler=_cluster_handler(_cmd_cluster_start))


# ---------------------------------------------------------------------------------------
# other groups register here: _add_cluster_commands, ...


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tidemq", description="tidemq: a replicated, RocketMQ-style message store."
    )
    groups = parser.add_subparsers(dest="group", metavar="COMMAND")
    _add_store_commands(groups)
    _add_node_commands(groups)
    _add_cluster_commands(groups)
    # namesrv, send, consume, query, status live in cluster/cli.py; imported late so node/
    # does not depend on cluster/ at import time (DESIGN: store <- ha <- node <- cluster)
    from cluster.cli import add_commands as _add_client_commands

    _add_client_commands(groups)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line `argv` (default sys.argv[1:]) and return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2)
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:  # no command at all, or a group without an action
        getattr(args, "group_parser", parser).print_usage(sys.stderr)
        _error(f"{args.group!r} needs an action" if args.group else "a command is required")
        return EXIT_USAGE
    try:
        return handler(args)
    except (CommandError, StoreToolError) as e:
        _error(str(e))
        return EXIT_USAGE
    except BrokenPipeError:
        # the reader went away (e.g. `| head`): not an error; keep Python quiet at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except OSError as e:
        _error(f"{e.filename or ''}: {e.strerror or e}".lstrip(": "))
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
