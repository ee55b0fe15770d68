"""Where a tidemq master's CPU goes per message, by stage of the request path.

`scripts/bench profile` samples the master with py-spy (raw stacks) while the lean client
loads it, measures the CPU of its main thread and of its worker threads with psutil, and
shares the main thread's CPU out over the stages its samples fall in. A sample is placed by
its innermost frame (self time); samples of a thread waiting (epoll, a condition) are idle
and left out. Worker threads (the async flush's fdatasync, ...) are counted by their CPU,
not their samples: py-spy cannot tell a thread waiting in fdatasync from one working.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

__all__ = ["STAGES", "stage_of", "stages_us"]

STAGES = (
    "socket reads and writes (syscalls)",
    "event loop (trio scheduling, cancel scopes)",
    "server (read loop, turns, answers)",
    "frames (CBOR decode / encode)",
    "request parsing and replies",
    "send handling (checks, message, failover)",
    "store append (encode, CommitLog write)",
    "dispatch (ConsumeQueue, index)",
    "HA push (the master's writer, HA frames)",
    "HA acks (the master's reader, waiting puts)",
    "HA receive (the slave's reader, its reports)",
    "counting (node/stats.py, node/metrics/: status and /metrics)",
    "other",
)
WORKERS = "worker threads (the async flush's fdatasync, ...)"
_IDLE = ("EpollIOManager._epoll_wait", "EpollIOManager.get_events", "Condition.wait", "WorkerThread._work")
_FILE = re.compile(r"\(([^:()]+):\d+\)$")
_COUNTING = re.compile(r"\((?:[^:();]*/)?node/(?:stats\.py|metrics/)")
"""A frame in the counters or the exporter, anywhere in the stack (what issue 46 bounds at 2 %)."""
_HA_PUSH = ("HAService._write_loop", "HAService._read_batch", "HAService._wait_for_data",
            "HAService._wake_writers", "HAService._on_append", "HAService._take_offsets")
"""The master's functions that ship bytes to a slave; the rest of ha/master.py takes its acks."""
_BY_MODULE = (  # (path prefixes, stage): first match wins
    (("ha/master", "store/waiters"), "HA acks (the master's reader, waiting puts)"),
    (("ha/",), "HA receive (the slave's reader, its reports)"),
    (("wire/framing",), "frames (CBOR decode / encode)"),
    (("wire/protocol",), "request parsing and replies"),
    (("node/server",), "server (read loop, turns, answers)"),
    (("node/ops/", "node/failover", "node/tables/topics", "store/schedule"),
     "send handling (checks, message, failover)"),
    (("store/reput", "store/consume_queue", "store/index_file", "store/replica_log", "store/queue_tools"),
     "dispatch (ConsumeQueue, index)"),
    (("store/",), "store append (encode, CommitLog write)"),
    (("trio/", "contextlib", "outcome/"), "event loop (trio scheduling, cancel scopes)"),
)


def stage_of(stack: str) -> str | None:
    """The stage of one main-thread sample (frames joined by ';', innermost last); None
    for an idle one."""
    leaf = stack.rsplit(";", 1)[-1]
    function = leaf.split(" (", 1)[0]
    if function in _IDLE:
        return None
    if _COUNTING.search(stack):
        return "counting (node/stats.py, node/metrics/: status and /metrics)"
    if function in ("_SocketType._nonblocking_helper", "ClientServer._deliver") or "sock_method_wrapper" in function:
        return "socket reads and writes (syscalls)"
    match = _FILE.search(leaf)
    path = match.group(1) if match else ""
    if (path.startswith("ha/master") and function in _HA_PUSH) or (
            path.startswith("ha/protocol") and function.startswith("encode_transfer")):
        return "HA push (the master's writer, HA frames)"
    if path.startswith("ha/protocol") and function.startswith("ReportDecoder."):
        return "HA acks (the master's reader, waiting puts)"
    for prefixes, stage in _BY_MODULE:
        if path.startswith(prefixes):
            return stage
    if "wire.protocol" in leaf:  # attrs-generated methods of the request and reply classes
        return "request parsing and replies"
    if "node.ops" in leaf or "store.message" in leaf:
        return "send handling (checks, message, failover)"
    return "other"


def stages_us(raw_lines: Iterable[str], main_us: float, workers_us: float) -> dict[str, float]:
    """µs per message by stage: `main_us` (the main thread's CPU per message) shared out
    by the main thread's non-idle samples in py-spy's raw format ("stack count" lines),
    plus the worker threads' CPU per message."""
    counts: Counter[str] = Counter()
    for line in raw_lines:
        stack, _, n = line.rstrip().rpartition(" ")
        if not stack or stack.startswith("Thread._bootstrap"):  # a worker thread's
            continue
        stage = stage_of(stack)
        if stage is not None:
            counts[stage] += int(n)
    total = sum(counts.values())
    out = {s: round(main_us * counts[s] / total, 1) for s in STAGES if counts[s]} if total else {}
    out[WORKERS] = round(workers_us, 1)
    return out
