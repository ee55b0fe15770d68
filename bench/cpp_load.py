"""The C++ client's own throughput as a user sees it: `--processes` processes, each one
RocketMQ C++ producer (PyPI `rocketmq`, client-cpp 1.2.3: one client instance per process)
calling send_sync in a loop with a 1 KiB body. Not lean: the figure includes the client's
cost, which is the point (what an application gets); bench/lean.py's remoting codec
measures the server alone.

`python -m bench.cpp_load --namesrv ADDR [--processes N] [--seconds S] [--warmup W]`
prints one JSON object with the fields bench/lean.py prints. Each worker starts its
producer and sends once (the route), says it is ready, and starts its clock when the
parent says go, so every process loads the node over the same window.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from typing import Any

from .lean import BODY_BYTES, TOPIC, percentile

__all__ = ["main"]

READY_TIMEOUT_S = 60.0


def _worker(namesrv: str, topic: str, seconds: float, warmup: float) -> None:
    from rocketmq.client import Message, Producer

    producer = Producer(f"bench-cpp-{os.getpid()}", timeout=5000)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    body = "b" * BODY_BYTES  # set_body stops at a NUL: printable bytes

    def one() -> None:
        msg = Message(topic)
        msg.set_tags("bench")
        msg.set_body(body)
        producer.send_sync(msg)

    one()  # the route and the connection
    print("ready", flush=True)
    sys.stdin.readline()  # go
    latencies: list[float] = []
    failed = 0
    errors: dict[str, int] = {}
    cpu0 = time.process_time()
    start = time.perf_counter()
    lo, hi = start + warmup, start + warmup + seconds
    while (now := time.perf_counter()) < hi:
        try:
            one()
        except Exception as e:
            if now >= lo:
                failed += 1
                key = f"{type(e).__name__}: {e}"[:200]
                errors[key] = errors.get(key, 0) + 1
            continue
        if now >= lo:
            latencies.append(time.perf_counter() - now)
    cpu = time.process_time() - cpu0
    producer.shutdown()
    print(json.dumps({"requests": len(latencies), "failed": failed, "errors": errors, "cpu": cpu,
                      "latencies": latencies}), flush=True)


def drive(namesrv: str, processes: int, seconds: float, warmup: float, topic: str = TOPIC) -> dict[str, Any]:
    argv = [sys.executable, "-m", "bench.cpp_load", "--worker", "--namesrv", namesrv, "--topic", topic,
            "--seconds", f"{seconds:g}", "--warmup", f"{warmup:g}"]
    workers = [subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
               for _ in range(processes)]
    try:
        for w in workers:
            assert w.stdout is not None
            if w.stdout.readline().strip() != "ready":
                raise RuntimeError(f"a C++ producer did not start (exit {w.wait(READY_TIMEOUT_S)})")
        for w in workers:
            assert w.stdin is not None
            w.stdin.write("go\n")
            w.stdin.flush()
        outs = [json.loads(w.communicate(timeout=warmup + seconds + READY_TIMEOUT_S)[0].strip().splitlines()[-1])
                for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    latencies = [t for o in outs for t in o["latencies"]]
    errors: dict[str, int] = {}
    for o in outs:
        for k, v in o["errors"].items():
            errors[k] = errors.get(k, 0) + v
    return {
        "connections": processes, "in_flight": 1, "msgs_per_request": 1, "seconds": seconds,
        "requests": len(latencies), "failed": sum(o["failed"] for o in outs),
        "msgs_per_s": round(len(latencies) / seconds),
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 3),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 3),
        "client_cpu_cores": round(sum(o["cpu"] for o in outs) / (warmup + seconds), 2),
        "errors": errors,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpp_load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--topic", default=TOPIC)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if importlib.util.find_spec("rocketmq") is None:
        print("bench.cpp_load needs PyPI `rocketmq` (the C++ client; the test extra)", file=sys.stderr)
        return 2
    if args.worker:
        _worker(args.namesrv, args.topic, args.seconds, args.warmup)
        sys.stdout.flush()
        os._exit(0)  # skip interpreter teardown under the library's threads
    try:
        result = drive(args.namesrv, args.processes, args.seconds, args.warmup, args.topic)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"bench.cpp_load: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"kind": "cpp", "batch": 1, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
