"""Batch scan of store directories: partition planning (driver) and partition reads
(executors), on the store's own segment reader (`store.segment_walker`, which recovery and
`tidemq store verify` use too, so the three agree on where valid data ends and why). No Spark here, so the same code is tested and benchmarked
without a JVM. Clean records are read in bulk: as Arrow column buffers by the compiled
accelerator (`store._accel.scan_columns`, docs/accelerator.md) or as row tuples
(`store.record_rows.scan_rows`); any other record goes through the one-record path below.

Partitions are one per CommitLog segment, or, for a segment holding more than
`max_partition_bytes`, byte ranges whose cuts are record starts found by hopping from
TOTALSIZE to TOTALSIZE (8 bytes read per record: the walker's `hop`). ConsumeQueue units
come from store's reader (`consume_queue.written_units`): no byte layout is known here.
Pruning never decides what a row holds, only which ranges need not be read at all:

- time: a range's records were stored between its first record's store time and the next
  range's (a node's CommitLog is appended in store-time order), so a range wholly before
  `start_time` or after `end_time` is skipped;
- topics: when the store has ConsumeQueues, the units of the wanted topics name every
  CommitLog offset holding them; a range with none of those offsets is skipped, but only
  below the dispatched end (the furthest offset any ConsumeQueue covers), so records the
  store had not yet dispatched are still read.

Rows are then filtered exactly. Damage is never skipped silently: FAILFAST raises
`StoreReadError` naming the file and the offset; PERMISSIVE emits a row whose `_corrupt`
column says where and why, and goes on with the next partition.
"""

from __future__ import annotations

import datetime as dt
import functools
import glob
import mmap
import os
from collections.abc import Callable, Iterator

import attrs
import numpy as np
import pyarrow as pa

from pipeline.columns import batch_from_columns
from pipeline.schema import BatchBuilder
from store.accel import COMPILED
from store.consume_queue import written_units
from store.layout import StoreToolError, consumequeue_dir, iter_segments, list_queue_dirs
from store.record_rows import scan_rows
from store.segment_walker import (
    Record,
    data_at,
    hop,
    last_data_index,
    record_starts_at,
    step,
    store_timestamp_at,
)

DEFAULT_MAX_PARTITION_BYTES = 128 * 1024 * 1024


class StoreReadError(Exception):
    """A store file cannot be read as CommitLog data; the message names file and offset."""


@attrs.frozen
class ScanOptions:
    topics: frozenset[str] | None = None
    start_time: int | None = None  # ms since the epoch, inclusive
    end_time: int | None = None  # ms since the epoch, inclusive
    verify_crc: bool = True
    include_body: bool = True
    permissive: bool = False
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    batch_rows: int = 8192

    @classmethod
    def from_options(cls, options: dict[str, str]) -> ScanOptions:
        """Spark reader options (names case-insensitive) → ScanOptions; ValueError says
        which option is wrong."""
        o = {k.lower(): v for k, v in options.items()}
        topics = o.get("topics") or o.get("topic")
        mode = (o.get("mode") or "FAILFAST").upper()
        if mode not in ("FAILFAST", "PERMISSIVE"):
            raise ValueError(f"mode must be FAILFAST or PERMISSIVE, got {o['mode']!r}")
        return cls(
            topics=frozenset(t.strip() for t in topics.split(",") if t.strip()) if topics else None,
            start_time=parse_time(o["starttime"], "startTime") if o.get("starttime") else None,
            end_time=parse_time(o["endtime"], "endTime") if o.get("endtime") else None,
            verify_crc=parse_bool(o.get("verifycrc", "true"), "verifyCrc"),
            include_body=parse_bool(o.get("includebody", "true"), "includeBody"),
            permissive=mode == "PERMISSIVE",
            max_partition_bytes=parse_positive(
                o.get("maxpartitionbytes", str(DEFAULT_MAX_PARTITION_BYTES)), "maxPartitionBytes"
            ),
        )


def parse_bool(value: str, name: str) -> bool:
    v = str(value).strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise ValueError(f"option {name} must be true or false, got {value!r}")


def parse_positive(value: str, name: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"option {name} must be a whole number, got {value!r}") from None
    if n <= 0:
        raise ValueError(f"option {name} must be positive, got {n}")
    return n


def parse_time(value: str, name: str) -> int:
    """Milliseconds since the epoch, or an ISO-8601 time (UTC when it names no zone)."""
    v = str(value).strip()
    if v.lstrip("-").isdigit():
        return int(v)
    try:
        t = dt.datetime.fromisoformat(v)
    except ValueError:
        raise ValueError(
            f"option {name} must be milliseconds since the epoch or an ISO-8601 time, got {value!r}"
        ) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)


@attrs.frozen
class StorePartition:
    """Bytes [begin, end) of one CommitLog segment file (picklable, sent to executors)."""

    source: str  # the storePathRootDir
    path: str
    segment_start: int  # CommitLog offset of the file's byte 0
    begin: int
    end: int
    last_data: bool  # the last segment holding data: zeros after its records are its end


def expand_paths(spec: str) -> list[str]:
    """A comma-separated list of store roots, each possibly a glob → existing roots."""
    roots: list[str] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        matches = sorted(glob.glob(part)) if glob.has_magic(part) else [part]
        if not matches:
            raise StoreToolError(f"no store directory matches {part!r}")
        roots.extend(matches)
    if not roots:
        raise StoreToolError("no store directory given (load(path) with a path, a glob or a list)")
    return roots


def plan(roots: list[str], opts: ScanOptions) -> list[StorePartition]:
    """Partitions of every store root, after pruning. Raises StoreToolError for a root that
    is not a store and, in FAILFAST mode, StoreReadError for a segment it cannot read."""
    parts: list[StorePartition] = []
    for root in roots:
        parts.extend(_plan_root(root, opts))
    return parts


@attrs.frozen
class _Range:
    part: StorePartition
    first_ts: int | None  # store time of its first record, when readable


def _plan_root(root: str, opts: ScanOptions) -> list[StorePartition]:
    segments = iter_segments(root)
    last = last_data_index([path for _, path in segments])
    # the ConsumeQueues are read only when a segment is cut or topics prune
    queues = functools.cache(lambda: _QueueUnits.load(root))
    ranges: list[_Range] = []
    for i, (start, path) in enumerate(segments[: last + 1]):
        try:
            size = os.path.getsize(path)
        except OSError as e:
            raise StoreReadError(f"{path}: cannot read the segment: {e.strerror or e}") from None
        ranges.extend(_cut_segment(root, path, start, size, i == last, opts, queues))
    keep = []
    for j, r in enumerate(ranges):
        after = ranges[j + 1].first_ts if j + 1 < len(ranges) else None
        if opts.start_time is not None and after is not None and after < opts.start_time:
            continue
        if opts.end_time is not None and r.first_ts is not None and r.first_ts > opts.end_time:
            continue
        keep.append(r.part)
    if opts.topics:
        keep = _prune_by_topics(keep, opts.topics, queues())
    return keep


@attrs.frozen
class _QueueUnits:
    """The written ConsumeQueue units of a store, per queue: CommitLog offsets of record
    starts, read from the queue files without touching the CommitLog."""

    phys: dict[str, list[np.ndarray]]  # topic → per queue, ascending offsets
    dispatched_end: int  # the furthest CommitLog offset a unit covers; -1 with none

    @classmethod
    def load(cls, root: str) -> _QueueUnits:
        phys: dict[str, list[np.ndarray]] = {}
        end = -1
        for topic, _queue_id, qdir in list_queue_dirs(consumequeue_dir(root)):
            offsets, sizes = written_units(qdir)
            if offsets:
                end = max(end, offsets[-1] + sizes[-1])
                phys.setdefault(topic, []).append(np.frombuffer(offsets, dtype=np.int64))
        return cls(phys, end)

    def first_at_or_after(self, targets: np.ndarray) -> np.ndarray:
        """Per target, the smallest unit offset >= it (of any queue); -1 where none is."""
        best = np.full(len(targets), np.iinfo(np.int64).max, np.int64)
        for queues in self.phys.values():
            for offsets in queues:
                i = np.searchsorted(offsets, targets)
                found = i < len(offsets)
                best[found] = np.minimum(best[found], offsets[i[found]])
        return np.where(best == np.iinfo(np.int64).max, -1, best)


def _cut_segment(
    root: str, path: str, start: int, size: int, last: bool, opts: ScanOptions,
    queues: Callable[[], _QueueUnits],
) -> list[_Range]:
    """Ranges of one segment: the whole file, or cuts at record starts every
    max_partition_bytes. The cuts come from the ConsumeQueues (each checked to be a record
    that says it starts there); where they cover no record near a cut, hop from record to
    record. A cut never goes past damage (the reader reports it)."""
    cuts: list[tuple[int, int | None]] = []
    step_bytes = opts.max_partition_bytes
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            if record_starts_at(buf, 0, start):
                cuts.append((0, store_timestamp_at(buf, 0)))
            targets = np.arange(step_bytes, size, step_bytes, dtype=np.int64)
            found = queues().first_at_or_after(targets + start) if len(targets) else targets
            pos = 0
            for target, unit in zip(targets.tolist(), found.tolist(), strict=True):
                if not cuts or target <= pos:
                    continue
                cut = unit - start if 0 <= unit - start < size else -1
                if cut < 0 or not (pos < cut < target + step_bytes and record_starts_at(buf, cut, start)):
                    cut = hop(buf, pos, target)  # not dispatched there: hop
                if cut is None:
                    break
                if cut > pos:
                    cuts.append((cut, store_timestamp_at(buf, cut)))
                    pos = cut
    except (OSError, ValueError):
        cuts = []  # unreadable or empty: one partition, whose reader reports it
    if not cuts or cuts[0][0] != 0:
        cuts = [(0, None)]
    out = []
    for k, (begin, ts) in enumerate(cuts):
        end = cuts[k + 1][0] if k + 1 < len(cuts) else size
        out.append(_Range(StorePartition(root, path, start, begin, end, last), ts))
    return out


def _prune_by_topics(
    parts: list[StorePartition], topics: frozenset[str], queues: _QueueUnits
) -> list[StorePartition]:
    """Drop partitions holding no unit of `topics` below the ConsumeQueues' dispatched end."""
    if queues.dispatched_end < 0:
        return parts
    wanted = [o for t in topics for o in queues.phys.get(t, ())]
    phys = np.sort(np.concatenate(wanted)) if wanted else np.empty(0, np.int64)
    keep = []
    for p in parts:
        lo, hi = p.segment_start + p.begin, p.segment_start + p.end
        if hi > queues.dispatched_end and data_at(p.path, max(lo, queues.dispatched_end) - p.segment_start):
            keep.append(p)  # records the ConsumeQueues do not cover yet: read it
            continue
        i = int(np.searchsorted(phys, lo))
        if i < len(phys) and phys[i] < hi:
            keep.append(p)
    return keep


# ---------------------------------------------------------------------------------------
# reading a partition


def read_partition(part: StorePartition, opts: ScanOptions) -> Iterator[pa.RecordBatch]:
    """Arrow record batches of the partition's messages that pass the filters."""
    builder = BatchBuilder(permissive=opts.permissive, batch_rows=opts.batch_rows)
    for ready in _walk(part, opts, builder):
        batch = builder.flush()
        if batch is not None:
            yield batch
        if ready is not None:
            yield ready
    batch = builder.flush()
    if batch is not None:
        yield batch


def _walk(
    part: StorePartition, opts: ScanOptions, b: BatchBuilder
) -> Iterator[pa.RecordBatch | None]:
    """Add the partition's rows to `b`, yielding None whenever it is full, or a batch made
    from column buffers (after the rows `b` holds)."""
    try:
        f = open(part.path, "rb")  # noqa: SIM115 (closed below, with the map)
    except OSError as e:
        _damage(part, 0, f"cannot open the segment: {e.strerror or e}", opts, b)
        return
    with f:
        try:
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:
            _damage(part, 0, f"cannot map the segment: {e}", opts, b)
            return
        with buf:
            yield from _walk_buffer(part, opts, b, buf, f.fileno())


def _walk_buffer(
    part: StorePartition, opts: ScanOptions, b: BatchBuilder, buf: mmap.mmap, fd: int
) -> Iterator[pa.RecordBatch | None]:
    pos = part.begin
    topics, t0, t1 = opts.topics, opts.start_time, opts.end_time
    need_body = opts.include_body or opts.verify_crc
    extra = (part.source, None)  # the source and _corrupt columns
    scan_columns = COMPILED.scan_columns if COMPILED is not None else None
    while pos < part.end:
        if scan_columns is not None and not b.rows:
            # clean rows as column buffers (compiled); the record it stops at goes below
            pos, count, cols = scan_columns(
                buf, pos, part.end, part.segment_start, opts.batch_rows,
                verify_crc=opts.verify_crc, include_body=opts.include_body, topics=topics,
                start_time=t0, end_time=t1)
            if count:
                yield batch_from_columns(b.schema, count, cols, part.source, verify_crc=opts.verify_crc)
                continue
            if pos >= part.end:
                return
        # clean rows as tuples (in bulk when pure, one record after the columns stopped)
        pos = scan_rows(buf, pos, part.end, part.segment_start, b.rows,
                        b.batch_rows if scan_columns is None else len(b.rows) + 1,
                        verify_crc=opts.verify_crc, include_body=opts.include_body, topics=topics,
                        start_time=t0, end_time=t1, extra=extra)
        if b.full or (scan_columns is not None and b.rows):
            yield None
            continue
        if pos >= part.end:
            return
        ev = step(buf, pos, segment_start=part.segment_start, last=part.last_data, fd=fd,
                  check_crc=opts.verify_crc, read_body=need_body)
        if isinstance(ev, Record):
            m = ev.message
            pos += ev.size
            if topics is not None and m.topic not in topics:
                continue
            ts = m.store_timestamp
            if (t0 is not None and ts < t0) or (t1 is not None and ts > t1):
                continue
            problems = ev.problems()  # one _corrupt text: the last (PHYSICALOFFSET over CRC)
            if problems:
                if not opts.permissive:
                    raise StoreReadError(_where(part, ev.offset) + problems[-1])
                b.add_stored(m, part.source, crc_ok=ev.crc_ok, include_body=opts.include_body,
                             corrupt=_where(part, ev.offset) + problems[-1])
            else:
                b.add_stored(m, part.source, crc_ok=ev.crc_ok, include_body=opts.include_body)
            if b.full:
                yield
            continue
        if ev.reason is not None:  # a Blank that does not reach the segment end, or damage
            _damage(part, pos, ev.reason, opts, b)
        return


def _where(part: StorePartition, offset: int) -> str:
    return f"{part.path}: at CommitLog offset {offset} (byte {offset - part.segment_start} of the file): "


def _damage(part: StorePartition, pos: int, reason: str, opts: ScanOptions, b: BatchBuilder) -> None:
    offset = part.segment_start + pos
    if not opts.permissive:
        raise StoreReadError(_where(part, offset) + reason)
    b.add_corrupt(part.source, offset, _where(part, offset) + reason)


def scan(roots: list[str], opts: ScanOptions) -> Iterator[pa.RecordBatch]:
    """Every partition in order, in this process (tests, the benchmark's baseline)."""
    for part in plan(roots, opts):
        yield from read_partition(part, opts)
