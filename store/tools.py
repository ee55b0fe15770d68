"""Offline, read-only tools over a store directory: dump records, verify. Which files are
segments, and where stores are, is `store.layout`'s.

Synchronous and lock-free: nothing here takes `<root>/lock` or writes a byte, so the tools
run against the store of a live node (they then see whatever the node has written so far,
possibly a record half copied at the write position). Segments are mapped with
`mmap.ACCESS_READ`; every map is closed before the call (or the generator) ends.

The segment size is taken from the first segment file, so a store written with any
`mappedFileSizeCommitLog` is readable. Segments are read by `store.segment_walker`, the
reader recovery and the pipeline use too, so all three agree on where valid data ends.
Reads through a ConsumeQueue or the index (`dump_queue`, `query_key`) are `queue_tools.py`'s.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import mmap
import os
from collections.abc import Callable, Iterator
from typing import Any

from store.layout import StoreToolError, find_segment, iter_segments
from store.message import StoredMessage
from store.record_codec import RecordKind, decode_record
from store.segment_walker import Blank, Record, last_data_index, walk

log = logging.getLogger(__name__)

Buffer = bytes | mmap.mmap
Progress = Callable[[int, int], None]  # (segments done, segments in all)


@contextlib.contextmanager
def open_segment(path: str) -> Iterator[Buffer]:
    """Map a segment read-only (an empty file gives b"")."""
    with _open_segment(path) as (buf, _fd):
        yield buf


@contextlib.contextmanager
def _open_segment(path: str) -> Iterator[tuple[Buffer, int]]:
    """The segment mapped read-only, and its file descriptor (the walker's zero check skips
    holes with it)."""
    try:
        f = open(path, "rb")  # noqa: SIM115 (closed below, after the map)
    except OSError as e:
        raise StoreToolError(f"cannot read segment {path!r}: {e.strerror or e}") from None
    with f:
        mm: Buffer = b""
        try:
            if os.fstat(f.fileno()).st_size:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            raise StoreToolError(f"cannot read segment {path!r}: {e.strerror or e}") from None
        try:
            yield mm, f.fileno()
        finally:
            if isinstance(mm, mmap.mmap):
                mm.close()


def _segment_damage(segments: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """(offset, reason) of segments whose size differs from the first one's, or whose name
    breaks the sequence."""
    if not segments:
        return []
    out = []
    first_start, first_path = segments[0]
    size = os.path.getsize(first_path)
    if size > 0 and first_start % size:
        out.append((first_start, f"first segment starts at {first_start}, not a multiple of its size {size}"))
    for i, (start, path) in enumerate(segments):
        actual = os.path.getsize(path)
        name = os.path.basename(path)
        if actual != size:
            out.append((start, f"segment {name} is {actual} bytes; the first segment is {size} bytes"))
        expected = first_start + i * size
        if start != expected:
            out.append((start, f"segment {name} starts at {start}; expected {expected} "
                               f"(a missing or misnamed segment)"))
    return out


# ---------------------------------------------------------------------------------------
# dump


def message_to_dict(offset: int, m: StoredMessage) -> dict[str, Any]:
    """JSON-ready view of one record (camelCase keys, body in base64)."""
    return {
        "offset": offset,
        "size": m.size,
        "magicVersion": m.magic_version,
        "topic": m.topic,
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "flag": m.flag,
        "sysFlag": m.sys_flag,
        "bornTimestamp": m.born_timestamp,
        "bornHost": m.born_host,
        "storeTimestamp": m.store_timestamp,
        "storeHost": m.store_host,
        "reconsumeTimes": m.reconsume_times,
        "preparedTransactionOffset": m.prepared_transaction_offset,
        "properties": dict(m.properties),
        "keys": list(m.keys),
        "tags": m.tags,
        "msgId": m.msg_id,
        "bodyCrc": m.body_crc,
        "crcOk": m.crc_ok,
        "body": base64.b64encode(m.body).decode("ascii"),
    }


def dump(
    root: str | os.PathLike[str], from_offset: int | None = None, limit: int | None = None,
    progress: Progress | None = None,
) -> Iterator[dict[str, Any]]:
    """One dict per record, in log order: messages (see `message_to_dict`) and BLANK
    fillers as {"offset", "blank": size}.

    Stops at the first invalid record: silently at the normal end of data (zeros after
    the last record of the last segment holding data), otherwise after yielding
    {"offset", "error"}.
    A CRC mismatch does not stop the dump (the record has "crcOk": false). `from_offset`
    starts at that exact position, which must be a record start (else one error dict).
    `limit` caps the number of dicts; `progress` is called after each segment.
    Raises StoreToolError when `root` is not a store.
    """
    segments = iter_segments(root)
    if limit is not None and limit <= 0:
        return
    emitted = 0
    index, pos = 0, 0
    if from_offset is not None:
        found = find_segment(segments, from_offset)
        if found is None:
            span = (
                f"segments cover [{segments[0][0]}, "
                f"{segments[-1][0] + os.path.getsize(segments[-1][1])})"
                if segments
                else "the store has no segments"
            )
            yield {"offset": from_offset, "error": f"offset {from_offset} is in no segment; {span}"}
            return
        index, pos = found, from_offset - segments[found][0]
        with open_segment(segments[index][1]) as buf:
            d = decode_record(buf, pos, check_crc=False)
        if d.kind is RecordKind.INVALID:
            yield {"offset": from_offset, "error": f"not a record start: {d.error}"}
            return
    if not segments:
        return
    last = last_data_index([path for _, path in segments])
    end = max(last, index) + 1
    for i in range(index, end):
        if progress is not None and i > index:
            progress(i - index, end - index)
        start, path = segments[i]
        with _open_segment(path) as (buf, fd):
            for ev in walk(buf, pos if i == index else 0, segment_start=start, last=i >= last,
                           fd=fd, check_crc=True):
                if isinstance(ev, Record):
                    out: dict[str, Any] = message_to_dict(ev.offset, ev.message)
                elif isinstance(ev, Blank):
                    out = {"offset": ev.offset, "blank": ev.size}  # its damage is verify's to tell
                elif ev.reason is not None:
                    out = {"offset": ev.offset, "error": ev.reason}
                else:
                    break  # the normal end of this segment's data
                yield out
                emitted += 1
                if "error" in out or (limit is not None and emitted >= limit):
                    return
    if progress is not None:
        progress(end - index, end - index)


# ---------------------------------------------------------------------------------------
# verify


def verify(root: str | os.PathLike[str], progress: Progress | None = None) -> dict[str, Any]:
    """Walk every segment from position 0 and summarise the store's CommitLog.

    Keys: segments, segmentSize, messages (structurally intact message records, bad CRC
    included), blanks, bytes (bytes covered by those records and BLANK fillers), badCrcs,
    topics {topic: count}, endOffset (just past the last valid record or filler, None when
    no data), firstInvalidOffset (first record-level damage, None when there is none),
    damage [{"offset", "reason"}] sorted by offset, clean.

    A structural failure stops the walk of its segment; the next segment is walked from
    position 0. Segments after the last one holding data (segment_walker.holds_data: its
    start) are pre-created ones, not damage. Each segment is read up to the end of its
    data and at most segment_walker.LOOK_AHEAD bytes further, never to its end. `progress` is called after each segment. Raises StoreToolError only when
    `root` is not a readable store.
    """
    segments = iter_segments(root)
    summary: dict[str, Any] = {
        "segments": len(segments),
        "segmentSize": os.path.getsize(segments[0][1]) if segments else None,
        "messages": 0,
        "blanks": 0,
        "bytes": 0,
        "badCrcs": 0,
        "topics": {},
        "endOffset": None,
        "firstInvalidOffset": None,
        "damage": [],
        "clean": True,
    }
    damage = _segment_damage(segments)
    record_damage: list[tuple[int, str]] = []
    topics: dict[str, int] = summary["topics"]
    last = last_data_index([path for _, path in segments])
    for i in range(last + 1):
        if progress is not None:
            progress(i, last + 1)
        start, path = segments[i]
        with _open_segment(path) as (buf, fd):
            for ev in walk(buf, 0, segment_start=start, last=i == last, fd=fd, check_crc=True):
                if isinstance(ev, Record):
                    summary["messages"] += 1
                    summary["bytes"] += ev.size
                    topics[ev.message.topic] = topics.get(ev.message.topic, 0) + 1
                    if not ev.crc_ok:
                        summary["badCrcs"] += 1
                    summary["endOffset"] = ev.offset + ev.size
                    record_damage.extend((ev.offset, reason) for reason in ev.problems())
                    continue
                if isinstance(ev, Blank):
                    summary["blanks"] += 1
                    summary["bytes"] += ev.size
                    summary["endOffset"] = ev.offset + ev.size
                if ev.reason is not None:
                    record_damage.append((ev.offset, ev.reason))
    if progress is not None:
        progress(last + 1, last + 1)
    if record_damage:
        summary["firstInvalidOffset"] = min(offset for offset, _ in record_damage)
    damage.extend(record_damage)
    damage.sort(key=lambda d: d[0])
    summary["damage"] = [{"offset": offset, "reason": reason} for offset, reason in damage]
    summary["clean"] = not damage
    for offset, reason in damage:
        log.debug("damage at %d: %s", offset, reason)
    return summary
