"""Apache's RocketMQ C++ client (PyPI `rocketmq` 0.4.4: librocketmq, client-cpp 1.2.3) run in
a child process per action, so its threads, its process-wide client instance and any crash
stay out of pytest. `python -m tests.remoting.cpp ACTION --namesrv ADDR ...` prints one JSON
object on stdout; `run_cpp` runs it and returns that object.

Actions: `produce` (send_sync of `--count` messages, with keys and tags), `pull` (a
PullConsumer reads the topic's queues from offset 0 until `--count` messages or none new)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

from tests.node.nodeproc import REPO

__all__ = ["run_cpp"]


def run_cpp(action: str, *args: str, timeout: float = 60.0) -> dict[str, Any]:
    """Run an action in a child process; its JSON output (AssertionError with its stderr if
    it fails)."""
    proc = subprocess.run([sys.executable, "-m", "tests.remoting.cpp", action, *args], capture_output=True,
                          timeout=timeout, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    if proc.returncode != 0:
        raise AssertionError(f"C++ client {action} exited {proc.returncode}:\n{proc.stderr.decode(errors='replace')}")
    out: dict[str, Any] = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    return out


def _producer(args: argparse.Namespace) -> Any:
    from rocketmq.client import Producer

    p = Producer(args.group, timeout=args.timeout_ms)
    p.set_namesrv_addr(args.namesrv)
    if args.access_key:
        p.set_session_credentials(args.access_key, args.secret_key, "")
    p.start()
    return p


def _produce(args: argparse.Namespace) -> dict[str, Any]:
    from rocketmq.client import Message

    p = _producer(args)
    sent = []
    try:
        for i in range(args.count):
            m = Message(args.topic)
            m.set_keys(f"{args.prefix}-k{i}")
            m.set_tags(args.tags)
            m.set_body(f"{args.prefix}-{i}")
            r = p.send_sync(m)
            sent.append({"status": int(r.status), "msg_id": r.msg_id, "offset": r.offset, "body": f"{args.prefix}-{i}"})
    finally:
        p.shutdown()
    return {"sent": sent}


def _pull(args: argparse.Namespace) -> dict[str, Any]:
    """PullConsumer.pull walks every queue until NO_NEW_MSG (its offsets: a class-level
    table, from 0); passes repeat until `--count` messages came (or 15 s passed)."""
    import time

    from rocketmq.client import PullConsumer

    c = PullConsumer(args.group)
    c.set_namesrv_addr(args.namesrv)
    if args.access_key:
        c.set_session_credentials(args.access_key, args.secret_key, "")
    c.start()
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + 15
    try:
        while True:
            for m in c.pull(args.topic, args.expression, args.max_num):  # read each one before the next pull frees it
                got.append({"topic": m.topic, "id": m.id, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
                            "commit_log_offset": m.commit_log_offset, "store_size": m.store_size,
                            "body": m.body.decode(), "tags": m.tags.decode(), "keys": m.keys.decode(),
                            "uniq_key": (m.get_property("UNIQ_KEY") or b"").decode()})
            if len(got) >= args.count or time.monotonic() > deadline:
                break
            time.sleep(0.1)  # poll: another pass over the queues
    finally:
        c.shutdown()
    return {"received": got}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.remoting.cpp")
    parser.add_argument("action", choices=["produce", "pull"])
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--topic", default="RmqTest")
    parser.add_argument("--group", default="rmq-test-group")
    parser.add_argument("--tags", default="TagA")
    parser.add_argument("--prefix", default="m")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--max-num", type=int, default=32)
    parser.add_argument("--expression", default="*")
    parser.add_argument("--timeout-ms", type=int, default=5000)
    parser.add_argument("--access-key", default="")
    parser.add_argument("--secret-key", default="")
    args = parser.parse_args()
    out = {"produce": _produce, "pull": _pull}[args.action](args)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
