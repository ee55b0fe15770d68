"""The systems `scripts/bench compare` drives, each started for a round and stopped after.

Each `async with` yields a `Target`: the lean client's kind and ports, and the processes
whose CPU (and, for a tidemq master, RSS) is sampled. Every system runs in the round's
work directory; its servers are `Processes`' (own process group) or, for tidemq, the
launcher's (`launcher.down` in a finally).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import psutil
import trio

from cluster.launch import launcher
from cluster.launch.metrics import scrape_target
from cluster.launch.secrets import NAMESRV_KEYS, NODE_KEYS, forget_layout_secrets, make_dev_secrets
from store.address import split_host_port
from wire.client import connect
from wire.protocol import GetStatus, StatusReply

from .lean import NatsCodec, RespCodec
from .procs import Processes, Started, free_port, wait_port

__all__ = ["Target", "floor", "jetstream", "redis", "tidemq", "tidemq_groups", "tidemq_status"]

REPO = Path(__file__).resolve().parents[1]
SEGMENT_BYTES = 1 << 30  # 1 GiB CommitLog segments: the memory goal's setting
READY_TIMEOUT_S = 30.0


@attrs.define(eq=False)
class Target:
    system: str
    kind: str  # the lean client's codec: tidemq, redis, nats
    ports: list[int]
    procs: dict[str, psutil.Process]
    replicas: int = 0  # redis: WAIT for this many
    master: psutil.Process | None = None  # tidemq: the node whose RSS is sampled
    address: str = ""  # tidemq: the master's client address
    base: Path | None = None  # tidemq: the launcher's base dir
    lean_args: tuple[str, ...] = ()  # tidemq-secure: the lean client's login and CA
    serving: str = ""  # the process (a key of procs) that answers the client: its CPU per message
    serving_all: tuple[str, ...] = ()  # several processes answer (tidemq_groups): their CPU together
    namesrv: str = ""  # tidemq: the name server's address (the C++ client's route)


def _ps(started: Started) -> psutil.Process:
    return psutil.Process(started.pid)


@contextlib.asynccontextmanager
async def floor(procs: Processes, work: Path) -> AsyncIterator[Target]:
    port = free_port()
    s = procs.start("floor", [sys.executable, "-m", "bench.floor", "--port", str(port)], cwd=REPO)
    try:
        await wait_port(port, s)
        yield Target("trio floor", "tidemq", [port], {"floor": _ps(s)}, serving="floor")
    finally:
        procs.stop([s])


def _layout(work: Path, flush: str, role: str, *, secure: bool = False, keys: Mapping[str, Any] | None = None,
            slave: bool = False) -> Path:
    """conf/1m-1s-dev copied with free ports, the mode and 1 GiB segments; without the
    slave for an ASYNC_MASTER (master alone) unless `slave`; `secure`: accounts, permissions
    and TLS on (docs/security.md), with fresh secrets; `keys`: more keys for both nodes."""
    conf = work / "conf"
    size = {"mappedFileSizeCommitLog": SEGMENT_BYTES, "flushDiskType": flush, **(NODE_KEYS if secure else {}),
            **(keys or {})}
    launcher.copy_layout(REPO / "conf" / "1m-1s-dev", conf,
                         overrides={"broker-a": {**size, "brokerRole": role}, "broker-a-s": size,
                                    "namesrv": NAMESRV_KEYS if secure else {}})
    if secure:
        make_dev_secrets(conf)
    (conf / "broker-a.properties").unlink(missing_ok=True)  # the .toml twin is the one used
    if role == "ASYNC_MASTER" and not slave:
        (conf / "broker-a-s.toml").unlink()
    return conf


def _mode_name(flush: str, role: str, secure: bool = False) -> str:
    return f"tidemq {flush.split('_')[0]} flush, {role.split('_')[0]} master{', TLS + login' if secure else ''}"


@contextlib.asynccontextmanager
async def tidemq_groups(work: Path, flush: str, *, bases: list[Path]) -> AsyncIterator[Target]:
    """Two broker groups on this host (conf/2m-noslave: two ASYNC_MASTERs, each its own process
    and so its own core), the lean client's connections spread over both masters' ports: how
    throughput adds up when a host runs one group per core (docs/bench-compare.md). The server
    CPU per message is both masters' (`serving_all`; cpu_cores lists each)."""
    work.mkdir(parents=True, exist_ok=True)
    conf, base = work / "conf", work / "data"
    keys = {"mappedFileSizeCommitLog": SEGMENT_BYTES, "flushDiskType": flush}
    launcher.copy_layout(REPO / "conf" / "2m-noslave", conf, overrides={"broker-a": keys, "broker-b": keys})
    bases.append(base)
    try:
        results = await trio.to_thread.run_sync(lambda: launcher.up(conf, base, timeout_s=60.0))
        masters = [r.record for r in results if r.record.stage is launcher.Stage.MASTER]
        nodes = {r.record.name: psutil.Process(r.record.pid) for r in results if r.record.pid}
        namesrv = next((r.record.address for r in results if r.record.kind == "namesrv"), "")
        yield Target(f"tidemq {flush.split('_')[0]} flush, 2 groups", "tidemq",
                     [split_host_port(m.address)[1] for m in masters], nodes, master=nodes[masters[0].name],
                     address=masters[0].address, base=base, serving=masters[0].name,
                     serving_all=tuple(m.name for m in masters), namesrv=namesrv)
    finally:
        await trio.to_thread.run_sync(launcher.down, base)
        bases.remove(base)


@contextlib.asynccontextmanager
async def tidemq(work: Path, flush: str, role: str, *, bases: list[Path], secure: bool = False,
                 metrics: bool = False, keys: Mapping[str, Any] | None = None,
                 slave: bool = False) -> AsyncIterator[Target]:
    """A name server, a master and (SYNC_MASTER) its slave as real processes. `bases`
    records the launcher base dir so the harness can stop it whatever happens. `secure`:
    every connection uses TLS and logs in (the lean client as the layout's `app` account).
    `metrics`: `cluster up --metrics`, and a scraper reads the master's /metrics every second.
    `slave`: an ASYNC_MASTER gets its slave too."""
    work.mkdir(parents=True, exist_ok=True)
    conf, base = _layout(work, flush, role, secure=secure, keys=keys, slave=slave), work / "data"
    bases.append(base)
    lean_args: tuple[str, ...] = ()
    scraper: subprocess.Popen[bytes] | None = None
    if secure:
        secrets = conf / "secrets"
        lean_args = ("--user", "app", "--secret-file", str(secrets / "app.secret"), "--tls-ca", str(secrets / "ca.pem"))
    try:
        results = await trio.to_thread.run_sync(lambda: launcher.up(conf, base, timeout_s=60.0, metrics=metrics))
        master = next(r.record for r in results if r.record.stage is launcher.Stage.MASTER)
        url = scrape_target(master) if metrics else None
        if url is not None:
            scraper = subprocess.Popen([sys.executable, "-m", "bench.scrape", url, "--interval", "1"], cwd=REPO,
                                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        nodes = {r.record.name: psutil.Process(r.record.pid) for r in results if r.record.pid}
        namesrv = next((r.record.address for r in results if r.record.kind == "namesrv"), "")
        yield Target(_mode_name(flush, role, secure), "tidemq", [split_host_port(master.address)[1]],
                     nodes, master=nodes[master.name], address=master.address, base=base, lean_args=lean_args,
                     serving=master.name, namesrv=namesrv or "")
    finally:
        if scraper is not None:
            scraper.terminate()
            await trio.to_thread.run_sync(scraper.wait)
        await trio.to_thread.run_sync(launcher.down, base)
        bases.remove(base)
        if secure:  # launcher.up logged this process in with the layout's secrets: undo it
            forget_layout_secrets()


async def tidemq_status(address: str) -> StatusReply:
    async with connect(address) as conn:
        return await conn.call(GetStatus(), timeout=10.0)


# ---------------------------------------------------------------- Redis


async def _resp(port: int, *args: str) -> bytes:
    """One Redis command over a fresh connection; the raw reply (enough for INFO/CONFIG)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(RespCodec.command(*args))
        data = b""
        while True:
            data += await stream.receive_some(65536)
            if data.startswith(b"$"):
                head, _, rest = data.partition(b"\r\n")
                if len(rest) >= int(head[1:]) + 2:
                    return rest[: int(head[1:])]
            elif data.endswith(b"\r\n"):
                return data


def _redis_argv(port: int, data: Path, fsync: str) -> list[str]:
    return ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
            "--appendonly", "yes", "--appendfsync", fsync, "--save", "", "--daemonize", "no",
            "--protected-mode", "no"]


@contextlib.asynccontextmanager
async def redis(procs: Processes, work: Path, fsync: str, *, replica: bool) -> AsyncIterator[Target]:
    """Redis 7 with AOF (`appendfsync` everysec or always); with `replica`, a second
    redis-server replicating it (same AOF setting) and the client WAITs for it."""
    started: list[Started] = []
    try:
        port = free_port()
        (work / "redis").mkdir(parents=True, exist_ok=True)
        master = procs.start("redis", _redis_argv(port, work / "redis", fsync))
        started.append(master)
        await wait_port(port, master)
        watched = {"redis": _ps(master)}
        if replica:
            rport = free_port()
            (work / "redis-replica").mkdir(parents=True, exist_ok=True)
            argv = _redis_argv(rport, work / "redis-replica", fsync) + ["--replicaof", "127.0.0.1", str(port)]
            rep = procs.start("redis-replica", argv)
            started.append(rep)
            await wait_port(rport, rep)
            with trio.fail_after(READY_TIMEOUT_S):
                while b"master_link_status:up" not in await _resp(rport, "INFO", "replication"):
                    await trio.sleep(0.1)  # poll: the first sync takes a moment
            watched["redis replica"] = _ps(rep)
        name = f"Redis {fsync}" + (" + replica, WAIT 1" if replica else "")
        yield Target(name, "redis", [port], watched, replicas=1 if replica else 0, serving="redis")
    finally:
        procs.stop(list(reversed(started)))


# ---------------------------------------------------------------- NATS JetStream


async def _create_stream(port: int, replicas: int, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Create the JetStream stream BENCH (subject `bench`, file storage, R`replicas`),
    retrying while the cluster elects its meta leader."""
    config = json.dumps({"name": "BENCH", "subjects": ["bench"], "storage": "file", "retention": "limits",
                         "num_replicas": replicas, "max_bytes": 1 << 30, "discard": "old"}).encode()
    last = "no reply"
    with trio.move_on_after(timeout_s):
        while True:
            codec = NatsCodec(body=config, subject="$JS.API.STREAM.CREATE.BENCH")
            async with await trio.open_tcp_stream("127.0.0.1", port) as stream:
                await stream.send_all(codec.handshake() + codec.request(0))
                done: list[tuple[int, bool]] = []
                with trio.move_on_after(5.0):
                    while not done:
                        chunk = await stream.receive_some(65536)
                        if not chunk:
                            break
                        done = codec.feed(chunk)
            if done and done[0][1]:
                return
            last = next(iter(codec.errors), last)
            await trio.sleep(0.5)  # poll: JetStream answers once its meta leader is elected
    raise RuntimeError(f"cannot create the JetStream stream (R{replicas}): {last}")


@contextlib.asynccontextmanager
async def jetstream(procs: Processes, work: Path, replicas: int) -> AsyncIterator[Target]:
    """NATS JetStream: one server (R1) or a 3-server cluster (R3), stream BENCH."""
    started: list[Started] = []
    try:
        ports = [free_port() for _ in range(replicas)]
        routes = [free_port() for _ in range(replicas)]
        for i, port in enumerate(ports):
            store = work / f"nats-{i}"
            store.mkdir(parents=True, exist_ok=True)
            argv = ["nats-server", "-a", "127.0.0.1", "-p", str(port), "-n", f"bench-{i}", "-js", "-sd", str(store)]
            if replicas > 1:
                argv += ["--cluster_name", "bench", "--cluster", f"nats://127.0.0.1:{routes[i]}", "--routes",
                         ",".join(f"nats://127.0.0.1:{r}" for j, r in enumerate(routes) if j != i)]
            started.append(procs.start(f"nats-{i}", argv))
        for s, port in zip(started, ports, strict=True):
            await wait_port(port, s)
        await _create_stream(ports[0], replicas)
        yield Target(f"JetStream R{replicas}", "nats", ports,
                     {f"nats-{i}": _ps(s) for i, s in enumerate(started)}, serving="nats-0")
    finally:
        procs.stop(list(reversed(started)))


def clean(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
