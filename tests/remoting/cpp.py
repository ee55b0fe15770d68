"""Apache's RocketMQ C++ client (PyPI `rocketmq` 0.4.4: librocketmq, client-cpp 1.2.3) run in
a child process per action, so its threads, its process-wide client instance and any crash
stay out of pytest. `python -m tests.remoting.cpp ACTION --namesrv ADDR ...` prints one JSON
object on stdout; `run_cpp` runs it and returns that object.

Actions: `raw` (one message of `--body` with `--keys`); `produce` (send_sync of `--count` messages, with keys and tags); `send` (`--mode`
sync, oneway, orderly or batch, with `--delay-level`, `--body-size`, `--orders` and
`--extra-key`); `pull` (a PullConsumer reads the topic's queues from offset 0 until `--count`
messages or none new); `push` (a PushConsumer on `--topic` writes each message it is given
as a JSON line to `--out` until `--stop-file` exists; `start_cpp` runs it alongside the
test; `--broadcast` makes it a BROADCASTING member, `--home` its HOME). Bodies are text: the wrapper's `set_body` cuts a body at its first NUL."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

from tests.node.nodeproc import REPO

__all__ = ["run_cpp", "start_cpp"]


def run_cpp(action: str, *args: str, timeout: float = 60.0) -> dict[str, Any]:
    """Run an action in a child process; its JSON output (AssertionError with its stderr if
    it fails)."""
    proc = subprocess.run([sys.executable, "-m", "tests.remoting.cpp", action, *args], capture_output=True,
                          timeout=timeout, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    if proc.returncode != 0:
        raise AssertionError(f"C++ client {action} exited {proc.returncode}:\n{proc.stderr.decode(errors='replace')}")
    out: dict[str, Any] = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    return out


def start_cpp(action: str, *args: str) -> subprocess.Popen[bytes]:
    """Start an action in a child process and return at once (a push consumer the test
    stops through its `--stop-file`); stdout and stderr are pipes."""
    return subprocess.Popen([sys.executable, "-m", "tests.remoting.cpp", action, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


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


def _text_body(prefix: str, i: int, size: int) -> str:
    """`prefix-i`, or a text of exactly `size` bytes that starts so (C++ deflates ≥ 4096)."""
    head = f"{prefix}-{i}"
    if size <= len(head):
        return head
    filler = "".join(chr(ord("a") + (j * 7 + i) % 26) for j in range(size))
    return (head + ":" + filler)[:size]


def _send(args: argparse.Namespace) -> dict[str, Any]:
    """`--count` messages by `--mode`: message i has key `prefix-ki` (plus `--extra-key`),
    tags `--tags`, a text body; orderly sends pass order `i % --orders` as the selector's
    argument (the wrapper's hashing selector picks queue `arg % n`)."""
    from rocketmq.client import Message

    p = _producer(args)
    out: dict[str, Any] = {"mode": args.mode, "sent": []}
    try:
        messages = []
        for i in range(args.count):
            m = Message(args.topic)
            key = f"{args.prefix}-k{i}"
            m.set_keys(f"{key} {args.extra_key}" if args.extra_key else key)
            m.set_tags(args.tags)
            body = _text_body(args.prefix, i, args.body_size)
            m.set_body(body)
            if args.delay_level:
                m.set_delay_time_level(args.delay_level)
            entry: dict[str, Any] = {"key": key, "body": body, "order": i % args.orders}
            if args.mode == "sync":
                r = p.send_sync(m)
            elif args.mode == "orderly":
                r = p.send_orderly(m, i % args.orders)
            elif args.mode == "oneway":
                p.send_oneway(m)
                r = None
            else:
                messages.append(m)
                r = None
            if r is not None:
                entry.update(status=int(r.status), msg_id=r.msg_id, offset=r.offset)
            out["sent"].append(entry)
        if messages:
            r = p.send_batch(messages)
            out["batch"] = {"status": int(r.status), "msg_id": r.msg_id, "offset": r.offset}
    finally:
        p.shutdown()
    return out
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


def _push(args: argparse.Namespace) -> dict[str, Any]:
    """Consume until the stop file appears (or `--seconds` pass). A message whose body is
    `--fail-body` makes the callback raise (RECONSUME_LATER: the client sends it back)
    while its reconsume_times is below `--fail-times`."""
    from rocketmq.client import PushConsumer

    lock = threading.Lock()
    count = 0
    out = open(args.out, "a")  # noqa: SIM115 -- open until shutdown, written by the client's threads

    def on_message(msg: Any) -> None:
        nonlocal count
        body = msg.body.decode(errors="replace")
        fail = bool(args.fail_body) and body == args.fail_body and msg.reconsume_times < args.fail_times
        record = {"body": body, "topic": msg.topic.decode() if isinstance(msg.topic, bytes) else msg.topic,
                  "queue_id": msg.queue_id, "queue_offset": msg.queue_offset, "reconsume_times": msg.reconsume_times,
                  "instance": args.instance, "failed": fail}
        with lock:
            count += 1
            out.write(json.dumps(record) + "\n")
            out.flush()
        if fail:
            raise RuntimeError("consume failed on purpose: RECONSUME_LATER")

    if args.broadcast:  # offsets in the client's own file: $HOME/.rocketmq_offsets/<clientId>/<group>/
        from rocketmq.client import MessageModel

        c = PushConsumer(args.group, orderly=args.orderly, message_model=MessageModel.BROADCASTING)
    else:
        c = PushConsumer(args.group, orderly=args.orderly)
    c.set_namesrv_addr(args.namesrv)
    if args.access_key:
        c.set_session_credentials(args.access_key, args.secret_key, "")
    if args.instance:
        c.set_instance_name(args.instance)
    c.subscribe(args.topic, on_message)
    c.start()
    deadline = time.monotonic() + args.seconds
    try:
        while not os.path.exists(args.stop_file) and time.monotonic() < deadline:
            time.sleep(0.05)  # poll: the test creates the stop file
    finally:
        c.shutdown()
        out.close()
    return {"received": count}


def _raw(args: argparse.Namespace) -> dict[str, Any]:
    """One message with the body `--body` and the keys `--keys` (space separated), as a
    RocketMQ client's trace producer sends a trace message."""
    from rocketmq.client import Message

    p = _producer(args)
    try:
        m = Message(args.topic)
        m.set_keys(args.keys)
        m.set_body(args.body)
        r = p.send_sync(m)
    finally:
        p.shutdown()
    return {"status": int(r.status), "msg_id": r.msg_id, "offset": r.offset}


ACTIONS = {"produce": _produce, "send": _send, "pull": _pull, "push": _push, "raw": _raw}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.remoting.cpp")
    parser.add_argument("action", choices=sorted(ACTIONS))
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
    parser.add_argument("--record-errors", action="store_true", help="a failed send is an entry with 'error'")
    parser.add_argument("--mode", choices=["sync", "oneway", "orderly", "batch"], default="sync")
    parser.add_argument("--delay-level", type=int, default=0)
    parser.add_argument("--body-size", type=int, default=0)
    parser.add_argument("--orders", type=int, default=1)
    parser.add_argument("--extra-key", default="")
    parser.add_argument("--body", default="", help="raw: the body (text)")
    parser.add_argument("--keys", default="", help="raw: the keys, space separated")
    parser.add_argument("--out", default="")
    parser.add_argument("--stop-file", default="")
    parser.add_argument("--instance", default="")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--fail-body", default="")
    parser.add_argument("--fail-times", type=int, default=1)
    parser.add_argument("--orderly", action="store_true")
    parser.add_argument("--broadcast", action="store_true", help="push: MessageModel.BROADCASTING")
    parser.add_argument("--home", default="", help="HOME for the client (where broadcasting keeps offsets)")
    args = parser.parse_args()
    if args.home:
        os.environ["HOME"] = args.home
    out = ACTIONS[args.action](args)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
