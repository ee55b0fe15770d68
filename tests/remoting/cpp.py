"""Apache's RocketMQ C++ client (PyPI `rocketmq` 0.4.4: librocketmq, client-cpp 1.2.3) run in
a child process per action, so its threads, its process-wide client instance and any crash
stay out of pytest. `python -m tests.remoting.cpp ACTION --namesrv ADDR ...` prints one JSON
object on stdout; `run_cpp` runs it and returns that object.

Actions: `produce` (send_sync of `--count` messages, with keys and tags)."""

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
            try:
                r = p.send_sync(m)
            except Exception as e:  # a refused send (--record-errors): what the client said
                if not args.record_errors:
                    raise
                sent.append({"error": f"{type(e).__name__}: {e}", "body": f"{args.prefix}-{i}"})
                continue
            sent.append({"status": int(r.status), "msg_id": r.msg_id, "offset": r.offset, "body": f"{args.prefix}-{i}"})
    finally:
        p.shutdown()
    return {"sent": sent}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.remoting.cpp")
    parser.add_argument("action", choices=["produce"])
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--topic", default="RmqTest")
    parser.add_argument("--group", default="rmq-test-group")
    parser.add_argument("--tags", default="TagA")
    parser.add_argument("--prefix", default="m")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--timeout-ms", type=int, default=5000)
    parser.add_argument("--access-key", default="")
    parser.add_argument("--secret-key", default="")
    parser.add_argument("--record-errors", action="store_true", help="a failed send is an entry with 'error'")
    args = parser.parse_args()
    out = {"produce": _produce}[args.action](args)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
