"""`scripts/bench ha`: replication over loopback with the slave in its own OS process.

Measures catch-up throughput (MB/s) of a slave joining a filled master, put latency
p50/p99 and puts/s for ASYNC_MASTER and SYNC_MASTER with 1 and 16 producers, the
slave's lag (bytes) sampled under the steady 16-producer load, and the delivery latency
(a put's start to its ConsumeQueue unit: what a consumer may read) per mode with the
confirm offset (the default) and with readUnCommitted (the limit off: RocketMQ 4's way). Each figure is the median
of `--runs` runs (every run's value is listed too): this 2-core VM's timing varies by tens
of percent from one run to the next. Prints JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator

import trio

from ha.master import HAService
from ha.slave import HAClient
from store import Message, StoreConfig, open_store
from store.message_store import MessageStore

SEGMENT = 256 * 1024 * 1024


def _config(root: str, role: str, **kw) -> StoreConfig:
    return StoreConfig(store_path_root_dir=root, broker_role=role, mapped_file_size_commit_log=SEGMENT,
                       ha_listen_port=0, **kw)


async def _slave_main(root: str, port: int, until: int) -> None:
    """A slave store in this process; with `until` > 0 it prints DISPATCHED <wall time>
    once its ConsumeQueues and index cover the log up to that offset."""
    config = _config(root, "SLAVE", ha_master_address=f"127.0.0.1:{port}")
    async with open_store(config) as store, trio.open_nursery() as nursery:
        await nursery.start(HAClient(store.replica_log, store.config).run)
        print("READY", flush=True)
        if until:
            while store.reput.reput_from_offset < until:
                await store.reput.wait_dispatched()
            print(f"DISPATCHED {time.time()}", flush=True)
        await trio.sleep_forever()


def _start_slave(root: str, port: int, until: int = 0) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "scripts.bench_ha", "slave", root, str(port), str(until)],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if line.strip() != "READY":
        proc.kill()
        raise RuntimeError(f"slave process did not start: {line!r}")
    return proc


async def _wait(pred, timeout: float) -> None:
    with trio.fail_after(timeout):
        while not pred():
            await trio.sleep(0.005)  # poll: the bench samples progress


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _remove_stores(work: str, name: str) -> None:
    """A run's master and slave stores go once it is measured (a catch-up's take ~1 GiB)."""
    for side in ("-m", "-s"):
        shutil.rmtree(os.path.join(work, name + side), ignore_errors=True)


def _median_run(results: list[dict], key: str, runs_field: str) -> dict:
    """The median run's figures (by `key`), with every run's `key` listed under `runs_field`."""
    median = sorted(results, key=lambda r: r[key])[len(results) // 2]
    return {**median, runs_field: [r[key] for r in results]}


async def catch_up(work: str, mb: int, body_bytes: int, run: int = 0) -> dict:
    body = os.urandom(body_bytes)
    batch = max(1, 32 * 1024 // body_bytes)
    name = f"c{body_bytes}-{run}"
    async with open_store(_config(os.path.join(work, name + "-m"), "ASYNC_MASTER")) as master, \
            trio.open_nursery() as nursery:
        ha = HAService(master.replica_log, master.config, port=0)
        await nursery.start(ha.run)
        n = 0
        while master.get_max_phy_offset() < mb * 2**20:
            r = await master.put_messages([Message("BenchHA", body, queue_id=(n // 32) % 4) for _ in range(batch)])
            assert r.ok
            n += batch
        # a new slave reporting 0 starts at the newest segment: join before the first roll
        total = master.get_max_phy_offset()
        await _wait(lambda: not master.reput.dispatch_behind_bytes(), 300)  # a quiet master
        # and a quiet disk: the fill's (and earlier runs') dirty pages written back first, so
        # kernel writeback threads do not take this 2-core machine's CPU during the run
        await trio.to_thread.run_sync(os.sync)
        proc = _start_slave(os.path.join(work, name + "-s"), ha.port, total)
        t0, wall0 = time.perf_counter(), time.time()  # the interpreter's start-up is not replication
        try:
            await _wait(lambda: ha.push2slave_max_offset >= total, 300)
            seconds = time.perf_counter() - t0
            line = await trio.to_thread.run_sync(proc.stdout.readline)
            dispatched = float(line.split()[1]) - wall0 if line.startswith("DISPATCHED") else float("nan")
        finally:
            proc.kill()
            proc.wait()
        nursery.cancel_scope.cancel()
    _remove_stores(work, name)
    return {"message_body_bytes": body_bytes, "bytes": total, "seconds": round(seconds, 2),
            "mb_per_s": round(total / 2**20 / seconds, 1),
            # the slave's ConsumeQueue and index trail its log and catch up afterwards
            "slave_dispatch_done_s": round(dispatched, 2),
            "slave_dispatch_mb_per_s": round(total / 2**20 / dispatched, 1)}


@contextlib.asynccontextmanager
async def _with_slave(work: str, name: str, config: StoreConfig) -> AsyncIterator[tuple[MessageStore, HAService]]:
    """A master store with its HA service and a connected slave in its own process; the
    slave is killed and both stores removed afterwards."""
    async with open_store(config) as master, trio.open_nursery() as nursery:
        ha = HAService(master.replica_log, master.config, port=0)
        await nursery.start(ha.run)
        proc = _start_slave(os.path.join(work, name + "-s"), ha.port)
        try:
            await _wait(lambda: ha.connection_count > 0 and ha.push2slave_max_offset >= 0, 30)
            yield master, ha
        finally:
            proc.kill()
            proc.wait()
        nursery.cancel_scope.cancel()
    _remove_stores(work, name)


async def put_latency(work: str, role: str, producers: int, count: int, run: int = 0) -> dict:
    body = os.urandom(1024)
    name = f"{role.lower()}-{producers}-{run}"
    lags: list[int] = []
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    async with _with_slave(work, name, _config(os.path.join(work, name + "-m"), role)) as (master, ha):

        async def producer(k: int) -> None:
            for i in range(count // producers):
                t = time.perf_counter()
                r = await master.put_message(Message("BenchHA", body, queue_id=(k + i) % 4))
                latencies.append(time.perf_counter() - t)
                statuses[r.status.value] = statuses.get(r.status.value, 0) + 1

        async def sample_lag(cancel: trio.CancelScope) -> None:
            with cancel:
                while True:
                    lags.append(master.get_max_phy_offset() - ha.push2slave_max_offset)
                    await trio.sleep(0.02)  # poll: lag sampling

        t0 = time.perf_counter()
        sampler = trio.CancelScope()
        async with trio.open_nursery() as inner:
            inner.start_soon(sample_lag, sampler)
            async with trio.open_nursery() as prods:
                for k in range(producers):
                    prods.start_soon(producer, k)
            sampler.cancel()
        seconds = time.perf_counter() - t0
    return {
        "role": role, "producers": producers, "puts": len(latencies),
        "puts_per_s": round(len(latencies) / seconds),
        "p50_ms": round(_pct(latencies, 0.50) * 1000, 3), "p99_ms": round(_pct(latencies, 0.99) * 1000, 3),
        "statuses": statuses,
        "slave_lag_bytes": {"p50": int(statistics.median(lags)) if lags else 0,
                            "p99": int(_pct(lags, 0.99)) if lags else 0, "max": max(lags, default=0)},
    }


async def delivery_latency(work: str, role: str, read_un_committed: bool, count: int, run: int = 0) -> dict:
    """One producer's puts, each timed from its start until its unit is in the ConsumeQueue
    (dispatched, so readable), with a slave connected: the confirm offset makes a record
    wait for the slave's ack in every mode (issue 42); readUnCommitted turns that off."""
    body = os.urandom(1024)
    name = f"d-{role.lower()}-{int(read_un_committed)}-{run}"
    config = _config(os.path.join(work, name + "-m"), role, read_un_committed=read_un_committed)
    latencies: list[float] = []
    async with _with_slave(work, name, config) as (master, _ha):
        for i in range(count):
            queue_id = i % 4
            t = time.perf_counter()
            r = await master.put_message(Message("BenchHA", body, queue_id=queue_id))
            assert r.append is not None
            while master.get_max_offset_in_queue("BenchHA", queue_id) <= r.append.queue_offset:
                await master.reput.wait_dispatched("BenchHA", queue_id)
            latencies.append(time.perf_counter() - t)
    return {"role": role, "read_un_committed": read_un_committed, "puts": len(latencies),
            "p50_ms": round(_pct(latencies, 0.50) * 1000, 3), "p99_ms": round(_pct(latencies, 0.99) * 1000, 3)}


async def delivery_runs(work: str, count: int, runs: int) -> list[dict]:
    """Delivery latency per mode, confirm offset on and off, runs interleaved (as the puts'),
    `count` / 10 puts each; the median run's figures."""
    setups = [(role, unc) for role in ("ASYNC_MASTER", "SYNC_MASTER") for unc in (False, True)]
    measured: dict[tuple[str, bool], list[dict]] = {setup: [] for setup in setups}
    for i in range(runs):
        for role, unc in setups:
            measured[(role, unc)].append(await delivery_latency(work, role, unc, max(1, count // 10), i))
    return [_median_run(measured[setup], "p50_ms", "runs_p50_ms") for setup in setups]


async def catch_up_runs(work: str, mb: int, body_bytes: int, runs: int) -> dict:
    """`runs` catch-ups (fresh stores each); the median run's figures, and every run's MB/s."""
    return _median_run([await catch_up(work, mb, body_bytes, i) for i in range(runs)], "mb_per_s", "runs_mb_per_s")


async def bench(work: str, mb: int, count: int, runs: int, only_delivery: bool = False) -> dict:
    out: dict = {"benchmark": "ha", "message_body_bytes": 1024}
    if only_delivery:
        return {**out, "delivery": await delivery_runs(work, count, runs)}
    # the slave acks once the bytes are in its log; its dispatch (ConsumeQueue + index per
    # record) shares the event loop and finishes later with small records
    out["catch_up"] = [await catch_up_runs(work, mb, 1024, runs), await catch_up_runs(work, mb, 16 * 1024, runs)]
    # runs interleave the four set-ups, so a slow spell of the machine hits them alike;
    # each figure is the median run's, with every run's puts/s listed
    setups = [(role, producers) for role in ("ASYNC_MASTER", "SYNC_MASTER") for producers in (1, 16)]
    results: dict[tuple[str, int], list[dict]] = {setup: [] for setup in setups}
    for i in range(runs):
        for role, producers in setups:
            results[(role, producers)].append(await put_latency(work, role, producers, count, i))
    out["puts"] = [_median_run(results[setup], "puts_per_s", "runs_puts_per_s") for setup in setups]
    by = {(p["role"], p["producers"]): p["puts_per_s"] for p in out["puts"]}
    out["sync_vs_async_at_16"] = round(by[("SYNC_MASTER", 16)] / by[("ASYNC_MASTER", 16)], 2)
    out["delivery"] = await delivery_runs(work, count, runs)
    out["aims"] = {"sync_vs_async_at_16": 0.5, "catch_up_mb_per_s": 200}
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "slave":
        trio.run(_slave_main, argv[1], int(argv[2]), int(argv[3]))
        return 0
    parser = argparse.ArgumentParser(prog="scripts/bench ha", description=__doc__)
    parser.add_argument("--catch-up-mb", type=int, default=200)
    parser.add_argument("--puts", type=int, default=20000, help="puts per latency run")
    parser.add_argument("--runs", type=int, default=3,
                        help="runs of each catch-up and put set-up (the median run is reported)")
    parser.add_argument("--only-delivery", action="store_true",
                        help="only the delivery latency (confirm offset on and off, per mode)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    work = tempfile.mkdtemp(prefix="tidemq-bench-ha-")
    try:
        print(json.dumps(trio.run(bench, work, args.catch_up_mb, args.puts, args.runs, args.only_delivery), indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
