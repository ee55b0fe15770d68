"""Disk faults on a stopped node's store: a torn tail (the last record cut short, as a
crash mid-write leaves it) and a garbage tail (junk after the last record), plus a filler
file that fills a small file system. Offsets come from store.tools, read-only."""

from __future__ import annotations

import os
import random

from store.layout import iter_segments
from store.tools import dump, verify


def _last_record(root: str) -> tuple[int, int, str, int]:
    """(offset, size, segment path, segment start) of the last message record."""
    segments = iter_segments(root)
    end = verify(root)["endOffset"]
    if end is None:
        raise ValueError(f"{root} holds no records")
    start, path = next((s, p) for s, p in reversed(segments) if s < end)
    last = None
    for rec in dump(root, from_offset=start):
        if "error" in rec:
            break
        if "blank" not in rec:
            last = rec
    if last is None:
        raise ValueError(f"the segment {path} holds no message record")
    return last["offset"], last["size"], path, start


def tear_tail(root: str, rng: random.Random) -> str:
    """Zero the second part of the last record, as a crash that wrote only its first
    part would leave it; returns what was done."""
    offset, size, path, start = _last_record(root)
    cut = rng.randint(1, size - 1)
    with open(path, "r+b") as f:
        f.seek(offset - start + cut)
        f.write(bytes(size - cut))
        f.flush()
        os.fsync(f.fileno())
    return f"tore the record at {offset} ({size} B) after {cut} B in {os.path.basename(path)}"


def garbage_tail(root: str, rng: random.Random) -> str:
    """Write random bytes right after the last record (inside its segment)."""
    offset, size, path, start = _last_record(root)
    at = offset + size - start
    room = os.path.getsize(path) - at
    n = min(room, rng.randint(16, 512))
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(rng.randbytes(n))
        f.flush()
        os.fsync(f.fileno())
    return f"wrote {n} B of garbage at {offset + size} in {os.path.basename(path)}"


def fill(directory: str, target_ratio: float) -> tuple[str, int]:
    """Write a filler file until the file system of `directory` is `target_ratio` used
    (or full); returns its path and size."""
    import psutil

    usage = psutil.disk_usage(directory)
    want = max(0, int(usage.total * target_ratio) - usage.used)
    path = os.path.join(directory, "chaos-filler")
    written = 0
    chunk = b"\xa5" * (256 * 1024)
    with open(path, "wb") as f:
        try:
            while written < want:
                written += f.write(chunk[: min(len(chunk), want - written)])
            f.flush()
            os.fsync(f.fileno())
        except OSError:  # ENOSPC: as full as it gets
            pass
    return path, written
