"""The demo behind `scripts/run`: a local cluster, used through the `tidemq` CLI.

`scripts/run` starts (or reuses) the cluster of a layout under a base dir with `tidemq
cluster up --console`, sends a few messages with keys, consumes them with a consumer group
(committing its offsets, so a second run consumes only what it sent), looks one up by key,
prints `tidemq cluster status` and the web console's URL, and leaves the cluster running. `--stop` stops it.
Each step prints the command it runs, so the output doubles as a tutorial.

`--embedded` runs the older demo instead: the storage engine in this process, no sockets.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time

import trio

from store import GetMessageStatus, Message, StoreConfig, open_store

TOPIC = "DemoTopic"
GROUP = "demo-group"
ORDERS = [("paid", "order {} paid"), ("shipped", "order {} shipped"), ("delivered", "order {} delivered")]


def _tidemq(*args: str, capture: bool = False) -> str:
    """Run one `tidemq` command, showing it; stop the demo (exit 1) when it fails."""
    print(f"$ tidemq {shlex.join(args)}", flush=True)
    proc = subprocess.run([sys.executable, "-m", "tidemq", *args], text=True,
                          stdout=subprocess.PIPE if capture else None)
    if capture and proc.stdout:
        print(proc.stdout, end="", flush=True)
    if proc.returncode != 0:
        raise SystemExit(f"scripts/run: `tidemq {args[0]} {args[1] if len(args) > 1 else ''}` "
                         f"failed (exit {proc.returncode})")
    return proc.stdout or ""


def _namesrv_address(base_dir: str) -> str:
    from cluster.launch.launcher import load_state

    state = load_state(base_dir)
    rec = state.nodes.get("namesrv") if state else None
    if rec is None or rec.pid is None:
        raise SystemExit(f"scripts/run: no name server is running under {base_dir}")
    return rec.address


def cluster_demo(conf: str, base_dir: str) -> int:
    _tidemq("cluster", "up", "--conf", conf, "--base-dir", base_dir, "--console")
    namesrv = _namesrv_address(base_dir)
    run = time.strftime("%H%M%S")
    keys = []
    for i, (tag, text) in enumerate(ORDERS, start=1):
        key = f"order-{run}-{i}"
        keys.append(key)
        _tidemq("send", "--namesrv", namesrv, "--topic", TOPIC, "--tags", tag, "--keys", key,
                text.format(f"{run}-{i}"), capture=True)
    seen: set[str] = set()
    for attempt in range(5):  # a pull may return fewer than asked; stop once all are back
        # the group has usually committed everything before this run's sends, so the first
        # try stops at as many messages as were sent instead of idling --timeout-ms after
        # them; a later try drains whatever else the group had left (a run that failed
        # before it consumed)
        most = str(len(keys)) if attempt == 0 else "100"
        out = _tidemq("consume", "--namesrv", namesrv, "--topic", TOPIC, "--group", GROUP,
                      "--max", most, "--timeout-ms", "3000", "--commit", capture=True)
        for line in out.splitlines():
            with_keys = json.loads(line) if line.startswith("{") else {}
            seen.update(k for k in with_keys.get("keys", []) or [] if k in keys)
        if seen >= set(keys):
            break
    if not seen >= set(keys):
        raise SystemExit(f"scripts/run: consumed {sorted(seen)}, expected {keys}")
    _tidemq("query", "--namesrv", namesrv, "--topic", TOPIC, "--key", keys[0], capture=True)
    print(f"$ tidemq cluster status --base-dir {shlex.quote(base_dir)}", flush=True)
    # exit 1 means a node is unhealthy: shown in the table, and scripts/run fails with it
    code = subprocess.run([sys.executable, "-m", "tidemq", "cluster", "status", "--base-dir", base_dir]).returncode
    print()
    print(f"The cluster keeps running under {os.path.abspath(base_dir)} "
          f"(name server {namesrv}); logs are in {os.path.join(base_dir, 'logs')}.")
    where = "" if os.path.abspath(base_dir) == os.path.abspath("data") else \
        f"TIDEMQ_BASE_DIR={shlex.quote(base_dir)} "
    print(f"Stop it with: {where}scripts/run --stop")
    print("Run tidemq yourself with scripts/tidemq (e.g. `scripts/tidemq status --namesrv "
          f"{namesrv}`), or put it on your PATH with: . .venv/bin/activate")
    from cluster.launch.launcher_console import console_url

    url = console_url(base_dir)
    if url:
        print(f"Web console (docs/console.md): {url}")
    return code


async def embedded_demo(root: str, count: int) -> dict:
    config = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=16 * 1024 * 1024,
                         mapped_file_size_consume_queue=30_000 * 20)
    async with open_store(config) as store:
        start_max = store.get_max_offset_in_queue("DemoTopic", 0)
        t0 = time.perf_counter()
        last = None
        for i in range(count):
            last = await store.put_message(
                Message("DemoTopic", f"hello tidemq #{i}".encode(), queue_id=0, tags="demo", keys=[f"demo-{i}"])
            )
            if not last.ok:
                raise SystemExit(f"put failed: {last.status.value}: {last.error}")
        put_s = time.perf_counter() - t0
        await store.wait_for_message("DemoTopic", 0, start_max + count - 1, timeout=5)
        got = store.get_message("demo", "DemoTopic", 0, start_max, 32)
        assert got.status is GetMessageStatus.FOUND, got.status
        by_key = store.query_message("DemoTopic", f"demo-{count - 1}", 1)
        return {
            "store": os.path.abspath(root),
            "sent": count,
            "puts_per_s": round(count / put_s),
            "last_msg_id": last.msg_id,
            "read_back": [m.body.decode() for m in got.messages[:3]],
            "read_status": got.status.value,
            "by_key": [m.body.decode() for m in by_key],
            "queue": {"min": got.min_offset, "max": got.max_offset},
            "commitlog": {"min": store.get_min_phy_offset(), "max": store.get_max_phy_offset()},
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conf", default="conf/1m-1s-dev", help="layout (default conf/1m-1s-dev; env TIDEMQ_CONF)")
    parser.add_argument("--base-dir", default="data", help="cluster base dir (default ./data; env TIDEMQ_BASE_DIR)")
    parser.add_argument("--stop", action="store_true", help="stop the cluster scripts/run started")
    parser.add_argument("--embedded", action="store_true", help="run the embedded-store demo instead")
    parser.add_argument("--dir", default="data/demo", help="--embedded: store root (default ./data/demo)")
    parser.add_argument("--count", type=int, default=1000, help="--embedded: messages to write")
    args = parser.parse_args(argv)
    if args.stop:
        _tidemq("cluster", "down", "--base-dir", args.base_dir)
        return 0
    if args.embedded:
        print(json.dumps(trio.run(embedded_demo, args.dir, args.count), indent=2))
        return 0
    return cluster_demo(args.conf, args.base_dir)


if __name__ == "__main__":
    sys.exit(main())
