"""`scripts/bench recovery`: what a store's segments cost on disk, and how long a killed
store takes to recover and to verify, against how much data it holds.

Each row builds a store in a child process (1 GiB CommitLog segments unless told
otherwise), puts 1 KiB messages until the CommitLog holds the row's data size, and kills it
with SIGKILL: the abort file stays, so the next load is an abnormal recovery (and the
segment the allocator pre-created stays on disk, as after a real crash). Then, with the
store's pages dropped from the page cache (fdatasync + POSIX_FADV_DONTNEED on each of its
files, nothing global), it times `tools.verify` (what `tidemq store verify` runs) and then
`MessageStore.load()` (the recovery itself). Disk use is st_blocks × 512.

A row marked `allocated` has every CommitLog segment's blocks allocated (posix_fallocate)
before the timings: a store written by an older tidemq that preallocated its segments.

Timings, not tests: the aim is recovery time following data size, not segment size.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import attrs

from store import Message, StoreConfig, tools
from store.layout import ABORT_FILE, iter_segments
from store.message_store import MessageStore

__all__ = ["Row", "parse_size", "run_row"]

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
REPO = Path(__file__).resolve().parents[1]
BODY = 1024
TOPIC = "BenchRecovery"

_UNITS = {"": 1, "b": 1, "k": KiB, "kb": KiB, "kib": KiB, "m": MiB, "mb": MiB, "mib": MiB,
          "g": GiB, "gb": GiB, "gib": GiB}


def parse_size(text: str) -> int:
    """'3KiB', '64MiB', '1GiB', '4096' → bytes (binary units; KB = KiB)."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if not m or m[2].lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (e.g. 3KiB, 64MiB)")
    return int(m[1]) * _UNITS[m[2].lower()]


@attrs.frozen
class Row:
    data_bytes: int
    segment_bytes: int = GiB
    allocated: bool = False
    flush: str = "ASYNC_FLUSH"


def _config(root: Path, row: Row) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=row.segment_bytes,
                       flush_disk_type=row.flush)


# ---------------------------------------------------------------------------------------
# the child: fill, say so, wait to be killed


async def _fill(root: str, segment_bytes: int, data_bytes: int, flush: str) -> None:
    import trio

    from store import open_store

    config = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=segment_bytes,
                         flush_disk_type=flush)
    body = os.urandom(BODY)
    async with open_store(config) as store:
        n = 0
        while store.get_max_phy_offset() < data_bytes:
            left = data_bytes - store.get_max_phy_offset()
            batch = [Message(TOPIC, body, queue_id=(n // 32) % 4, keys=[f"k{n + i}"])
                     for i in range(max(1, min(32, left // (BODY + 200))))]
            result = await store.put_messages(batch)
            assert result.ok, result.error
            n += len(batch)
        while store.reput.reput_from_offset < store.get_max_phy_offset():
            await trio.sleep(0.01)  # dispatched: the ConsumeQueues and index hold it too
        await trio.sleep(0.2)  # the allocator's pre-created next segment is on disk
        print(f"FILLED {store.get_max_phy_offset()} {n}", flush=True)
        await trio.sleep_forever()


def child_main(argv: list[str]) -> None:
    import trio

    root, segment_bytes, data_bytes, flush = argv
    trio.run(_fill, root, int(segment_bytes), int(data_bytes), flush)


def fill_and_kill(root: Path, row: Row, timeout: float = 600.0) -> tuple[int, int]:
    """Fill a store in a child process and SIGKILL it; (CommitLog bytes, messages)."""
    code = "import sys; from bench.recovery import child_main; child_main(sys.argv[1:])"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(root), str(row.segment_bytes), str(row.data_bytes), row.flush],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("FILLED") or not line:
                break
        if not line.startswith("FILLED"):
            raise RuntimeError(f"the filling process ended without filling the store (exit {proc.poll()})")
        _, end, count = line.split()
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    return int(end), int(count)


# ---------------------------------------------------------------------------------------
# measuring


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def disk_bytes(path: Path) -> int:
    st = path.stat()
    return st.st_blocks * 512


def drop_cache(root: Path) -> None:
    """The store's pages out of the page cache (written back first): a cold read follows."""
    for p in _files(root):
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def allocate_segments(root: Path) -> None:
    for _start, p in iter_segments(root):
        fd = os.open(p, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, os.fstat(fd).st_size)
        finally:
            os.close(fd)


def usage(root: Path) -> dict:
    segments = [Path(p) for _start, p in iter_segments(root)]
    return {
        "commitlog_segments": len(segments),
        "commitlog_segment_disk_bytes": [disk_bytes(p) for p in segments],
        "store_disk_bytes": sum(disk_bytes(p) for p in _files(root)),
    }


def timed_verify(root: Path) -> tuple[float, dict]:
    drop_cache(root)
    t0 = time.perf_counter()
    summary = tools.verify(root)
    return time.perf_counter() - t0, summary


def timed_recovery(root: Path, row: Row) -> tuple[float, MessageStore]:
    drop_cache(root)
    store = MessageStore(_config(root, row))
    t0 = time.perf_counter()
    store.load()
    seconds = time.perf_counter() - t0
    return seconds, store


def _root(work: Path, row: Row) -> Path:
    return work / f"store-{row.data_bytes}{'-allocated' if row.allocated else ''}"


def run_row(work: Path, row: Row) -> dict:
    root = _root(work, row)
    t0 = time.perf_counter()
    end, messages = fill_and_kill(root, row)
    fill_s = time.perf_counter() - t0
    if row.allocated:
        allocate_segments(root)
    assert (root / ABORT_FILE).exists(), "the killed store left no abort file"
    before = usage(root)
    verify_s, summary = timed_verify(root)
    recovery_s, store = timed_recovery(root, row)
    try:
        recovered_end = store.get_max_phy_offset()
        last_exit_ok = store.last_exit_ok
    finally:
        store.close()
    after = usage(root)
    return {
        "data_bytes": row.data_bytes,
        "commitlog_bytes": end,
        "messages": messages,
        "segment_bytes": row.segment_bytes,
        "flush": row.flush,
        "segments_allocated_before_kill": row.allocated,
        "fill_seconds": round(fill_s, 2),
        "after_kill": before,
        "verify_cold_seconds": round(verify_s, 4),
        "verify_messages": summary["messages"],
        "verify_clean": summary["clean"],
        "recovery": "normal" if last_exit_ok else "abnormal",
        "recovery_cold_seconds": round(recovery_s, 4),
        "recovered_end": recovered_end,
        "recovered_all": recovered_end == end,
        "after_recovery": after,
    }


def run(rows: list[Row], work: str | None = None) -> list[dict]:
    """Every row in turn; with no `work` directory, a temporary one whose stores are
    removed row by row (given one, the stores stay there to look at)."""
    keep = work is not None
    with contextlib.ExitStack() as stack:
        if work is None:
            work = stack.enter_context(tempfile.TemporaryDirectory(prefix="tidemq-bench-recovery-"))
        base = Path(work)
        base.mkdir(parents=True, exist_ok=True)
        out = []
        for row in rows:
            out.append(run_row(base, row))
            if not keep:
                shutil.rmtree(_root(base, row), ignore_errors=True)
        return out
