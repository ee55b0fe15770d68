"""`tidemq cluster up/status/down/kill/start/copy-layout/make-secrets`: a local multi-process cluster (cluster/launch/launcher.py).

Exit codes (store/cli.py): a bad layout or base dir (LayoutError) is a usage error, 2; an
action that failed (a node did not start, a signal found no process) is 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import trio

from store.cli import EXIT_OK, EXIT_PROBLEM, handled, print_json
from wire.protocol import StatusReply
from wire.protocol.namesrv import NamesrvStatusReply

from ..launch import launcher
from ..launch.health import NodeStatus, cluster_status, served
from ..launch.proxies import ProxyRow
from ..launch.state import LauncherError, LayoutError
from .tables import BrokerRow, broker_table, failover_lines

Handler = Callable[[argparse.Namespace], int]


def _launcher_errors(fn: Handler) -> Handler:
    """Layout/usage problems exit 2, failed actions exit 1, each as one line on stderr."""
    return handled(fn, usage=(LayoutError,), problem=(LauncherError,))


def _cmd_up(args: argparse.Namespace) -> int:
    def show(res: launcher.UpResult) -> None:
        if not args.json:
            rec = res.record
            print(f"{res.name:<14} {res.action:<8} {_served(rec):<28} {rec.address:<22} {res.note}", flush=True)

    from ..launch.layout import skipped_files

    if not args.json and args.conf is not None and os.path.isdir(args.conf):
        for path, why in skipped_files(args.conf):
            print(f"skipped {path.name}: {why}", flush=True)
    results = launcher.up(args.conf, args.base_dir, timeout_s=args.timeout, on_result=show,
                          proxy_url=args.proxy_url, proxy_prefix=args.proxy_prefix,
                          controller=args.controller, metrics=args.metrics,
                          on_etcd=None if args.json else (lambda said: print(said, flush=True)))
    console = _start_console(args) if args.console else None
    if args.json:
        print_json({"base_dir": os.path.abspath(args.base_dir), **({"console": console} if console else {}), "nodes": [
            {"name": r.name, "action": r.action, "role": _served(r.record), "config_role": r.record.role,
             "address": r.record.address, "pid": r.record.pid, "note": r.note} for r in results]})
    else:
        if console:
            print(f"console        {console} (the web console)")
        print(f"cluster is up under {os.path.abspath(args.base_dir)}; "
              f"stop it with: tidemq cluster down --base-dir {args.base_dir}")
    return EXIT_OK


def _start_console(args: argparse.Namespace) -> str:
    """`up --console`: start the web console beside the cluster (or find it running): its URL."""
    from pathlib import Path

    from ..launch.launcher_console import console_url, start_console
    from ..launch.state import Stage, load_state

    base = Path(args.base_dir).resolve()
    state = load_state(base)
    namesrv = next((r.address for r in state.ordered() if r.stage is Stage.NAMESRV and r.pid), None) if state else None
    if namesrv is None:
        raise LauncherError("--console needs the layout's name server (namesrv.toml), which is not running")
    from ..launch.secrets import layout_secrets

    secrets = layout_secrets(state.layout) if state else None
    # a secure layout: its users log in with their own accounts; TLS to the nodes with its CA
    start_console(base, namesrv, port=args.console_port, login=secrets is not None,
                  env={"TIDEMQ_TLS_CA": str(secrets.ca_file)} if secrets else None)
    url = console_url(base)
    assert url is not None
    return url


def _cmd_make_secrets(args: argparse.Namespace) -> int:
    from store.cli import UsageError

    from ..launch.secrets import make_dev_secrets

    if not os.path.isdir(args.layout):
        raise UsageError(f"layout directory {args.layout} does not exist")
    try:
        made = make_dev_secrets(args.layout, force=args.force)
    except FileExistsError as e:
        raise UsageError(str(e)) from None
    print(f"wrote {made.directory}: ca.pem, node.pem, node-key.pem, acl.toml, broker.secret, app.secret")
    print("a client logs in as app with:")
    print("  export " + " ".join(f"{k}={v}" for k, v in made.env("app").items()))
    return EXIT_OK


def _cmd_copy_layout(args: argparse.Namespace) -> int:
    from pathlib import Path

    from store.cli import UsageError

    from ..launch.layout import copy_layout, layout_ports

    src, dst = Path(args.src), Path(args.dst)
    if not src.is_dir():
        raise UsageError(f"layout directory {src} does not exist")
    if dst.exists() and any(dst.iterdir()):
        raise UsageError(f"{dst} exists and is not empty; copy into a new directory")
    ports = None
    if args.port_offset is not None:
        old = {p for f in src.iterdir() if f.suffix in (".toml", ".properties")
               for p in layout_ports(f.read_text(encoding="utf-8"))}
        ports = {p: p + args.port_offset for p in old}
        if any(not 0 < p < 65536 for p in ports.values()):
            raise UsageError(f"--port-offset {args.port_offset} takes a port outside 1..65535")
    mapping = copy_layout(src, dst, ports=ports)
    print(f"copied {src} to {dst}: ports " + ", ".join(f"{a}->{b}" for a, b in sorted(mapping.items())))
    namesrv = dst / "namesrv.toml"
    if namesrv.is_file():
        namesrv_ports = layout_ports(namesrv.read_text(encoding="utf-8"))
        if namesrv_ports:
            print(f"its name server listens on port {namesrv_ports[0]}")
    return EXIT_OK


def _served(rec: Any) -> str:
    """A started node's role as it serves it (after a failover, not its config file's)."""
    if rec.kind != "node" or not rec.address or rec.pid is None:
        return rec.role
    return served(rec.address, rec.role)


def node_rows(rows: list[NodeStatus], base_dir: str) -> list[BrokerRow]:
    """cluster status rows as table rows (the name server is its own group)."""
    from ..launch.state import load_state

    state = load_state(base_dir)
    records = state.nodes if state else {}
    out = []
    for row in rows:
        rec = records.get(row.name)
        answer = row.answer if isinstance(row.answer, StatusReply) else None
        group = (rec.broker_name if rec and rec.broker_name else None) or row.name
        broker_id = answer.broker_id if answer else rec.broker_id if rec else None  # as served
        note = f"{row.answer.brokers} broker(s) registered" if isinstance(row.answer, NamesrvStatusReply) else ""
        out.append(BrokerRow(group=group, broker_id=broker_id, role=row.role, address=row.address,
                             answer=answer, error=row.error, node=row.name, pid=row.pid, state=row.state,
                             note=note))
    # within a group, the node that serves as master first (after a failover that is not the
    # one whose file says so): groups keep their order
    first = {r.group: i for i, r in reversed(list(enumerate(out)))}
    return sorted(out, key=lambda r: (first[r.group], r.broker_id if r.broker_id is not None else 1 << 30, r.node))


def _proxy_rows(base_dir: str) -> list[ProxyRow]:
    """The cluster's proxies as recorded and as the proxy server reports them now."""
    from ..launch import proxies
    from ..launch.state import load_state

    state = load_state(base_dir)
    if state is None or not state.proxy_url:
        return []
    return proxies.describe(state.proxy_url, state.proxies.values())


def _proxy_line(row: ProxyRow) -> str:
    if "error" in row:
        how = f"ERROR: {row['error']}"
    else:
        how = ("enabled" if row["enabled"] else "DISABLED (link cut)") + (
            f", toxics: {', '.join(row['toxics'])}" if row["toxics"] else "")
    return f"proxy {row['name']:<22} {row['listen']:<22} -> {row['upstream']:<22} {how}"


def _cmd_status(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..launch.launcher_console import console_url

    rows = trio.run(lambda: cluster_status(args.base_dir, timeout_s=args.timeout))
    proxy_rows = _proxy_rows(args.base_dir)
    console_at = console_url(Path(args.base_dir).resolve())
    if args.json:
        from ..client.insync import in_sync_sets

        doc: dict[str, Any] = {"base_dir": os.path.abspath(args.base_dir), "nodes": [r.to_json() for r in rows]}
        answers = [r.answer for r in rows if isinstance(r.answer, StatusReply)]
        doc["in_sync"] = {group: sync.to_json() for group, sync in sorted(in_sync_sets(answers).items())}
        if proxy_rows:
            doc["proxies"] = proxy_rows
        doc["metrics"] = _scrape_targets(args.base_dir)
        if console_at:
            doc["console"] = console_at
        print(json.dumps(doc, default=str))
    else:
        from rich.console import Console

        console = Console(width=None if sys.stdout.isatty() else 200)
        table_rows = node_rows(rows, args.base_dir)
        console.print(broker_table(table_rows, title=f"cluster {os.path.abspath(args.base_dir)}", processes=True))
        for line in failover_lines(table_rows):
            console.print(line, markup=False, highlight=False)
        for row in proxy_rows:
            print(_proxy_line(row))
        for name, url in _scrape_targets(args.base_dir).items():
            print(f"metrics {name:<20} {url}")
        if console_at:
            print(f"console: {console_at}")
    healthy = all(r.state == "running" and r.error is None for r in rows) and all(
        "error" not in p and p["enabled"] for p in proxy_rows)
    return EXIT_OK if healthy else EXIT_PROBLEM


def _scrape_targets(base_dir: str) -> dict[str, str]:
    """Process name → its /metrics URL, for the processes whose config serves one."""
    from ..launch.metrics import scrape_target
    from ..launch.state import load_state

    state = load_state(base_dir)
    if state is None:
        return {}
    targets = {rec.name: scrape_target(rec) for rec in state.ordered()}
    return {name: url for name, url in targets.items() if url is not None}


def _cmd_down(args: argparse.Namespace) -> int:
    def show(res: launcher.StopResult) -> None:
        how = {"stopped": f"stopped by SIGTERM in {res.seconds:.2f} s",
               "killed": f"KILLED: still alive {args.grace:g} s after SIGTERM",
               "not running": "was not running"}[res.outcome]
        abort = " (abort file left: the store will recover at next start)" if res.abort_file_left else ""
        print(f"{res.name:<14} pid {res.pid or '-':<8} {how}{abort}", flush=True)

    results = launcher.down(args.base_dir, grace_s=args.grace, on_result=show)
    if not results:
        print(f"no cluster recorded in {os.path.abspath(args.base_dir)}; nothing to stop")
    return EXIT_OK


def _cmd_kill(args: argparse.Namespace) -> int:
    print(launcher.kill(args.base_dir, args.node, args.signal))
    return EXIT_OK


def _cmd_start(args: argparse.Namespace) -> int:
    rec = launcher.start_node(args.base_dir, args.node, timeout_s=args.timeout)
    print(f"{rec.name} started: pid {rec.pid}, {_served(rec)}, {rec.address}")
    return EXIT_OK


def _base_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base-dir", default="data", metavar="DIR",
                   help="where stores, logs and cluster.json live (default ./data)")


def add_cluster_commands(subparsers: argparse._SubParsersAction) -> Any:
    """Register `tidemq cluster ...`; returns the group's action subparsers."""
    cluster = subparsers.add_parser(
        "cluster", help="run a local multi-process cluster from a layout in conf/",
        description="Start, inspect and stop a local cluster: each node (and the name server) "
        "runs as its own OS process; <base-dir>/cluster.json records them, "
        "<base-dir>/logs/<node>.out holds their output and <base-dir>/store/<node> their stores.",
    )
    cluster.set_defaults(group_parser=cluster)
    actions = cluster.add_subparsers(dest="action", metavar="ACTION")

    up = actions.add_parser(
        "up", help="start every node of a layout that is not running",
        description="Start the layout's name server (when namesrv.toml exists), its masters, then "
        "its slaves, each waited for until READY. Nodes already running are left alone, so `up` "
        "can be repeated. On a failure the nodes this call started are stopped and the failing "
        "node's log is shown (exit 1).",
    )
    up.add_argument("--conf", metavar="DIR",
                    help="layout directory, e.g. conf/1m-1s-dev (default: the one recorded in cluster.json)")
    _base_dir(up)
    up.add_argument("--timeout", type=float, default=60.0, metavar="S", help="READY deadline per stage (default 60)")
    up.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    up.add_argument("--proxy-url", metavar="URL",
                    help="route every broker's client and HA link through proxies created on this "
                    "running Toxiproxy server (real, or `tidemq chaos proxy`), e.g. http://127.0.0.1:8474; "
                    "each broker then advertises its proxies (advertisedAddress, haAdvertisedAddress)")
    up.add_argument("--proxy-prefix", default="", metavar="P",
                    help="prefix of the proxies' names, <P><node>-client and <P><node>-ha (default none)")
    up.add_argument("--controller", choices=["etcd"],
                    help="start a local etcd for automatic failover (conf/2m-2s-sync-auto; a layout "
                    "whose nodes set controllerMode = \"etcd\" starts it anyway)")
    up.add_argument("--metrics", action="store_true",
                    help="every process serves Prometheus metrics on a free port of its own "
                    "(metricsExporterType PROM); `tidemq cluster status` prints where to scrape")
    up.add_argument("--console", action="store_true",
                    help="also start the web console (tidemq console) for the cluster; `status` prints its URL "
                    "(a layout with secrets: with --login, its users log in with their accounts)")
    up.add_argument("--console-port", type=int, default=0, metavar="PORT",
                    help="the console's port on 127.0.0.1 (default: a free one)")
    up.set_defaults(handler=_launcher_errors(_cmd_up))

    secrets = actions.add_parser(
        "make-secrets", help="certificates, an ACL file and accounts for a secure layout",
        description="Write LAYOUT/secrets/ (git-ignored): a local CA and a certificate for every process, "
        "acl.toml with the accounts `broker` (admin; the nodes, the launcher and the drills log in as it) and "
        "`app` (PUB|SUB on every topic, SUB on every group), and their secrets. conf/2m-2s-secure needs it "
        "before `cluster up`. Prints the environment a client logs in as `app` with.",
    )
    secrets.add_argument("layout", metavar="LAYOUT", help="layout directory, e.g. conf/2m-2s-secure")
    secrets.add_argument("--force", action="store_true", help="replace existing secrets")
    secrets.set_defaults(handler=handled(_cmd_make_secrets))

    copy = actions.add_parser(
        "copy-layout", help="copy a layout with other ports, to run beside the original",
        description="Copy the config files of layout SRC to the new directory DST with every listen and HA "
        "port changed (and each address that names one), so both run at once: free ports, or each port "
        "plus --port-offset. Prints the port map and the copy's name server.",
    )
    copy.add_argument("src", metavar="SRC", help="layout directory, e.g. conf/1m-1s-dev")
    copy.add_argument("dst", metavar="DST", help="a new directory, e.g. conf/my-secure")
    copy.add_argument("--port-offset", type=int, metavar="N", help="each port + N (default: free ports)")
    copy.set_defaults(handler=_launcher_errors(_cmd_copy_layout))

    status = actions.add_parser(
        "status", help="each node's process, role, offsets, lag, disk and TPS",
        description="Show each recorded node: pid, whether that process is alive (a recycled pid "
        "does not count), and what it answers to `status`, one row per node grouped by broker "
        "group: role, epoch, max offset, lag in bytes and seconds, disk use, put/get TPS of the "
        "last minute and a slave's catch-up progress; then, for a cluster started with "
        "--proxy-url, each proxy: its address, upstream, whether it is enabled and its toxics. "
        "Exit 1 when a node is down or does not answer, or a proxy is missing or disabled.",
    )
    _base_dir(status)
    status.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    status.add_argument("--timeout", type=float, default=3.0, metavar="S", help="per-node answer deadline")
    status.set_defaults(handler=_launcher_errors(_cmd_status))

    down = actions.add_parser(
        "down", help="stop every node: slaves, masters, then the name server",
        description="SIGTERM every node, slaves first, then masters, then the name server; a "
        "node still alive --grace seconds after its SIGTERM gets SIGKILL. Exit 0.",
    )
    _base_dir(down)
    down.add_argument("--grace", type=float, default=15.0, metavar="S",
                      help="seconds each stage may take to exit after SIGTERM (default 15)")
    down.set_defaults(handler=_launcher_errors(_cmd_down))

    kill = actions.add_parser(
        "kill", help="signal one node (failover drills)",
        description="Send a signal to one node: KILL (default) or TERM wait for it to exit, "
        "STOP freezes it, CONT resumes it.",
    )
    kill.add_argument("node", metavar="NODE", help="node name (its config file's stem, e.g. broker-a)")
    _base_dir(kill)
    kill.add_argument("--signal", default="KILL", choices=["KILL", "TERM", "STOP", "CONT"])
    kill.set_defaults(handler=_launcher_errors(_cmd_kill))

    start = actions.add_parser(
        "start", help="(re)start one node from its recorded config",
        description="Start one node that is not running from the config recorded in "
        "cluster.json, wait for READY and record its new pid.",
    )
    start.add_argument("node", metavar="NODE", help="node name (its config file's stem, e.g. broker-a)")
    _base_dir(start)
    start.add_argument("--timeout", type=float, default=60.0, metavar="S", help="READY deadline (default 60)")
    start.set_defaults(handler=_launcher_errors(_cmd_start))
    return actions
