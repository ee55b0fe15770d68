"""`scripts/bench node`: end-to-end throughput and latency over the client protocol.

A 1m-1s layout (conf/1m-1s-dev: name server, master, slave; copied to a temp dir with
free ports and the role/flush under test) runs as real processes started by the launcher.
Producers are `cluster.client.Producer` instances in this process (trio tasks, one
connection each, one send in flight: a synchronous send, as RocketMQ's `send()`), sending
1 KiB messages singly (`send`) or in batches of 32 (`send_batch`), routed through the name
server, round robin over the topic's 4 queues. Latency is per request (a batch counts
once). Then one `PullConsumer` reads everything back, 32 messages per pull.
Modes: ASYNC_MASTER + ASYNC_FLUSH and SYNC_MASTER + SYNC_FLUSH. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil
import trio

from cluster.client import OutgoingMessage, Producer, PullConsumer
from cluster.launch import launcher

REPO = Path(__file__).resolve().parents[1]
TOPIC = "BenchNode"
QUEUES = 4
BODY = 1024
BATCH = 32
AIM_MSGS_PER_S = 50_000  # 16 producers, batches of 32, ASYNC_MASTER + ASYNC_FLUSH


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def produce(namesrv: str, producers: int, batch: int, seconds: float) -> dict:
    """`producers` Producer instances (one connection each), each with one send in flight."""
    body = os.urandom(BODY)
    batch_msgs = [OutgoingMessage(body, tags="bench")] * batch
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    sent = 0
    t_end = 0.0

    async def producer(client: Producer) -> None:
        nonlocal sent
        while time.perf_counter() < t_end:
            t = time.perf_counter()
            if batch == 1:
                r = await client.send(TOPIC, body, tags="bench")
            else:
                r = await client.send_batch(TOPIC, batch_msgs)
            latencies.append(time.perf_counter() - t)
            statuses[r.status.value] = statuses.get(r.status.value, 0) + 1
            if r.ok:
                sent += batch

    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(Producer(namesrv=namesrv, send_timeout=10.0))
                   for _ in range(producers)]
        for client in clients:  # connect and learn the route before the clock starts
            await client.send(TOPIC, body, tags="warm-up")
        t0 = time.perf_counter()
        t_end = t0 + seconds
        async with trio.open_nursery() as nursery:
            for client in clients:
                nursery.start_soon(producer, client)
        elapsed = time.perf_counter() - t0
    return {
        "producers": producers, "batch": batch, "msgs": sent, "seconds": round(elapsed, 2),
        "msgs_per_s": round(sent / elapsed), "requests": len(latencies),
        "p50_ms": round(_pct(latencies, 0.50) * 1000, 2), "p99_ms": round(_pct(latencies, 0.99) * 1000, 2),
        "statuses": statuses,
    }


async def consume(namesrv: str, limit_s: float) -> dict:
    """One PullConsumer reads every queue from its first offset, 32 per pull, round robin,
    until it has everything that was produced (or `limit_s` passes)."""
    async with PullConsumer(namesrv=namesrv, group="bench-consumer", topic=TOPIC) as consumer:
        queues = await consumer.queues(refresh=True)
        ends = {q: await consumer.max_offset(q) for q in queues}
        got = pulls = 0
        t0 = time.perf_counter()
        left = [q for q in queues if ends[q] > 0]
        while left and time.perf_counter() - t0 < limit_s:
            for q in list(left):
                r = await consumer.pull(q, 32, timeout_ms=0)
                pulls += 1
                got += len(r.messages)
                if r.next_begin_offset >= ends[q]:
                    # the node may still have been dispatching when the ends were read
                    ends[q] = max(ends[q], await consumer.max_offset(q))
                    if r.next_begin_offset >= ends[q]:
                        left.remove(q)
        elapsed = time.perf_counter() - t0
    return {"msgs": got, "of": sum(ends.values()), "pulls": pulls, "seconds": round(elapsed, 2),
            "msgs_per_s": round(got / elapsed) if elapsed else 0}


def _cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def _mode(work: Path, role: str, flush: str, seconds: float) -> dict:
    name = f"{role}-{flush}".lower()
    conf, base = work / name / "conf", work / name / "data"
    launcher.copy_layout(REPO / "conf" / "1m-1s-dev", conf, overrides={
        "broker-a": {"brokerRole": role, "flushDiskType": flush},
        "broker-a-s": {"flushDiskType": flush},
    })
    results = launcher.up(conf, base)
    try:
        namesrv = next(r.record.address for r in results if r.record.stage is launcher.Stage.NAMESRV)
        procs = {r.record.name: psutil.Process(r.record.pid) for r in results if r.record.pid}
        procs["bench (producers)"] = psutil.Process()
        runs = []
        for producers in (1, 16):
            for batch in (1, BATCH):
                before = {name: _cpu_seconds(p) for name, p in procs.items()}
                t0 = time.perf_counter()
                run = trio.run(produce, namesrv, producers, batch, seconds)
                wall = time.perf_counter() - t0
                # CPU cores each process used: a node pinned at 1.0 is CPU-bound (one event loop)
                run["cpu_cores"] = {name: round((_cpu_seconds(p) - before[name]) / wall, 2)
                                    for name, p in procs.items()}
                runs.append(run)
        consumer = trio.run(consume, namesrv, 30.0)
    finally:
        launcher.down(base)
    return {"role": role, "flush": flush, "produce": runs, "consume": consumer}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench node", description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each producer run")
    parser.add_argument("--dir", help="work directory (default: a temp dir, removed afterwards)")
    args = parser.parse_args(argv)
    work = Path(args.dir or tempfile.mkdtemp(prefix="tidemq-bench-node-"))
    t0 = time.perf_counter()
    try:
        modes = [_mode(work, "ASYNC_MASTER", "ASYNC_FLUSH", args.seconds),
                 _mode(work, "SYNC_MASTER", "SYNC_FLUSH", args.seconds)]
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    best = next(r["msgs_per_s"] for r in modes[0]["produce"] if r["producers"] == 16 and r["batch"] == BATCH)
    print(json.dumps({
        "benchmark": "node", "message_body_bytes": BODY, "topic_queues": QUEUES, "cpus": os.cpu_count(),
        "modes": modes,
        "aim": {"msgs_per_s_16_producers_batch_async": AIM_MSGS_PER_S, "measured": best,
                "met": best >= AIM_MSGS_PER_S},
        "total_seconds": round(time.perf_counter() - t0, 1),
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
