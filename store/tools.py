"""Offline, read-only tools over a store directory: list segments, dump records, verify.

Synchronous and lock-free: nothing here takes `<root>/lock` or writes a byte, so the tools
run against the store of a live node (they then see whatever the node has written so far,
possibly a record half copied at the write position). Segments are mapped with
`mmap.ACCESS_READ`; every map is closed before the call (or the generator) ends.

The segment size is taken from the first segment file, so a store written with any
`mappedFileSizeCommitLog` is readable. Records are decoded by `store.message.decode_record`.
Reads through a ConsumeQueue or the index (`dump_queue`, `query_key`) are `queue_tools.py`'s.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import mmap
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from store.message import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    RecordKind,
    StoredMessage,
    decode_record,
    masked_crc32,
    read_total_size,
)

log = logging.getLogger(__name__)

COMMITLOG_DIR = "commitlog"
SEGMENT_NAME = re.compile(r"^\d{20}$")
_ZERO_SCAN_CHUNK = 1 << 20

Buffer = bytes | mmap.mmap
Progress = Callable[[int, int], None]  # (segments done, segments in all)


WHERE_STORES_ARE = (
    "a store is a node's storePathRootDir; a local cluster keeps each node's under "
    "<base-dir>/store/<node>, e.g. data/store/broker-a (give that, or the base dir to walk "
    "every node's store)"
)


class StoreToolError(Exception):
    """The directory cannot be read as a store (missing, not a store, unreadable)."""


def commitlog_dir(root: str | os.PathLike[str]) -> str:
    return os.path.join(os.fspath(root), COMMITLOG_DIR)


def iter_segments(root: str | os.PathLike[str]) -> list[tuple[int, str]]:
    """CommitLog segments of the store at `root` as (start offset, path), in name order.

    Files whose name is not a 20-digit offset are ignored. Raises StoreToolError when
    `root` or `root/commitlog` is not a directory.
    """
    root = os.fspath(root)
    if not os.path.isdir(root):
        raise StoreToolError(f"store directory {root!r} does not exist")
    cl = commitlog_dir(root)
    if not os.path.isdir(cl):
        raise StoreToolError(f"{root!r} is not a store directory: it has no {COMMITLOG_DIR}/; {WHERE_STORES_ARE}")
    try:
        names = sorted(os.listdir(cl))
    except OSError as e:
        raise StoreToolError(f"cannot list {cl!r}: {e.strerror or e}") from None
    segments = []
    for name in names:
        path = os.path.join(cl, name)
        if not SEGMENT_NAME.match(name) or not os.path.isfile(path):
            log.debug("ignoring %s: not a CommitLog segment", path)
            continue
        segments.append((int(name), path))
    return segments


def is_store(path: str | os.PathLike[str]) -> bool:
    return os.path.isdir(commitlog_dir(path))


def find_stores(path: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """The stores at `path` as (name, root): the store itself, or every store under a
    local cluster's base dir (`<base>/store/<node>`) or under a directory of stores.

    StoreToolError says where stores live when there is none."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise StoreToolError(f"store directory {path!r} does not exist")
    if is_store(path):
        return [(os.path.basename(os.path.normpath(path)) or path, path)]
    for parent in (os.path.join(path, "store"), path):
        if os.path.isdir(parent):
            found = [(name, os.path.join(parent, name)) for name in sorted(os.listdir(parent))
                     if is_store(os.path.join(parent, name))]
            if found:
                return found
    raise StoreToolError(
        f"{path!r} is not a store directory (it has no {COMMITLOG_DIR}/) and holds no stores; "
        f"{WHERE_STORES_ARE}"
    )


@contextlib.contextmanager
def open_segment(path: str) -> Iterator[Buffer]:
    """Map a segment read-only (an empty file gives b"")."""
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                yield b""
                return
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise StoreToolError(f"cannot read segment {path!r}: {e.strerror or e}") from None
    try:
        yield mm
    finally:
        mm.close()


def _first_nonzero(buf: Buffer, start: int, end: int | None = None) -> int | None:
    """Position of the first non-zero byte in buf[start:end], or None if all zero."""
    end = len(buf) if end is None else end
    pos = start
    while pos < end:
        chunk = buf[pos : min(end, pos + _ZERO_SCAN_CHUNK)]
        rest = chunk.lstrip(b"\x00")
        if rest:
            return pos + len(chunk) - len(rest)
        pos += len(chunk)
    return None


# ---------------------------------------------------------------------------------------
# the walk shared by dump and verify


@attrs.frozen
class _Event:
    """One step of a walk: a message, a BLANK filler, or damage at an offset."""

    kind: str  # "message" | "blank" | "damage"
    offset: int
    size: int = 0
    message: StoredMessage | None = None
    reason: str = ""
    fatal: bool = False  # the walk of this segment stops here


def _damage(offset: int, reason: str, fatal: bool = False) -> _Event:
    return _Event("damage", offset, reason=reason, fatal=fatal)


def _invalid_reason(buf: Buffer, pos: int, seg_start: int, error: str, last: bool) -> str | None:
    """Why the INVALID record at `pos` is damage, or None when it is the normal end of data."""
    n = len(buf)
    left = n - pos
    nonzero = _first_nonzero(buf, pos)
    if nonzero is None:
        if last:
            return None
        return f"segment ends without a BLANK filler: zeroed bytes with {left} bytes left"
    if nonzero >= pos + 8:
        return (
            f"{'garbage after valid end' if last else 'zeroed record header'}: "
            f"non-zero data at offset {seg_start + nonzero}"
        )
    if left >= 8:
        total, magic = read_total_size(buf, pos)
        if magic in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
            if total > left:
                return f"torn record: size {total} does not fit the {left} bytes left"
            return f"corrupt record: {error}"
        if magic == BLANK_MAGIC_CODE:
            return f"corrupt BLANK filler: {error}"
    elif last:
        return f"torn record: only {left} bytes left, no record header"
    return f"garbage after valid end: {error}" if last else f"invalid record: {error}"


def _walk_segment(buf: Buffer, seg_start: int, pos: int, last: bool) -> Iterator[_Event]:
    """Walk one segment from `pos` until a BLANK filler, the segment end, or bad data.

    A CRC or PHYSICALOFFSET mismatch is non-fatal damage: the record structure is intact
    and the walk goes on. `last` says whether this is the last segment holding data (where
    an all-zero remainder is the normal end of data).
    """
    n = len(buf)
    while pos < n:
        offset = seg_start + pos
        d = decode_record(buf, pos, check_crc=False)
        if d.kind is RecordKind.MESSAGE:
            m = d.message
            assert m is not None
            computed = masked_crc32(m.body)
            crc_ok = computed == m.body_crc
            if not crc_ok:
                m = attrs.evolve(m, crc_ok=False)
            yield _Event("message", offset, d.size, message=m)
            if not crc_ok:
                yield _damage(
                    offset, f"body CRC mismatch: stored {m.body_crc}, computed {computed}"
                )
            if m.commitlog_offset != offset:
                yield _damage(
                    offset,
                    f"PHYSICALOFFSET field {m.commitlog_offset} differs from the record's "
                    f"position {offset}",
                )
            pos += d.size
        elif d.kind is RecordKind.BLANK:
            yield _Event("blank", offset, d.size)
            if pos + d.size != n:
                yield _damage(
                    offset,
                    f"BLANK filler of size {d.size} does not reach the segment end "
                    f"({n - pos} bytes left)",
                )
            return
        else:
            reason = _invalid_reason(buf, pos, seg_start, d.error, last)
            if reason is not None:
                yield _damage(offset, reason, fatal=True)
            return


def _last_data_index(segments: list[tuple[int, str]]) -> int:
    """Index of the last segment holding any non-zero byte (later ones are pre-allocated)."""
    for i in range(len(segments) - 1, -1, -1):
        with open_segment(segments[i][1]) as buf:
            if _first_nonzero(buf, 0) is not None:
                return i
    return -1


def _segment_damage(segments: list[tuple[int, str]]) -> list[_Event]:
    """Segments whose size differs from the first one's, or whose name breaks the sequence."""
    if not segments:
        return []
    out = []
    first_start, first_path = segments[0]
    size = os.path.getsize(first_path)
    if size > 0 and first_start % size:
        out.append(
            _damage(
                first_start,
                f"first segment starts at {first_start}, not a multiple of its size {size}",
            )
        )
    for i, (start, path) in enumerate(segments):
        actual = os.path.getsize(path)
        name = os.path.basename(path)
        if actual != size:
            out.append(
                _damage(
                    start,
                    f"segment {name} is {actual} bytes; the first segment is {size} bytes",
                )
            )
        expected = first_start + i * size
        if start != expected:
            out.append(
                _damage(
                    start,
                    f"segment {name} starts at {start}; expected {expected} "
                    f"(a missing or misnamed segment)",
                )
            )
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


def find_segment(segments: list[tuple[int, str]], offset: int) -> int | None:
    for i, (start, path) in enumerate(segments):
        if start <= offset < start + os.path.getsize(path):
            return i
    return None


def dump(
    root: str | os.PathLike[str], from_offset: int | None = None, limit: int | None = None,
    progress: Progress | None = None,
) -> Iterator[dict[str, Any]]:
    """One dict per record, in log order: messages (see `message_to_dict`) and BLANK
    fillers as {"offset", "blank": size}.

    Stops at the first invalid record: silently at the normal end of data (zeros up to the
    end of the last segment holding data), otherwise after yielding {"offset", "error"}.
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
    last = _last_data_index(segments)
    end = max(last, index) + 1
    for i in range(index, end):
        if progress is not None and i > index:
            progress(i - index, end - index)
        start, path = segments[i]
        with open_segment(path) as buf:
            for ev in _walk_segment(buf, start, pos if i == index else 0, i >= last):
                if ev.kind == "message":
                    assert ev.message is not None
                    out: dict[str, Any] = message_to_dict(ev.offset, ev.message)
                elif ev.kind == "blank":
                    out = {"offset": ev.offset, "blank": ev.size}
                elif ev.fatal:
                    out = {"offset": ev.offset, "error": ev.reason}
                else:
                    continue  # CRC and offset mismatches show in the record itself
                yield out
                emitted += 1
                if ev.fatal or (limit is not None and emitted >= limit):
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
    position 0. All-zero segments after the last one holding data are pre-allocated ones,
    not damage. `progress` is called after each segment. Raises StoreToolError only when
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
    record_damage: list[_Event] = []
    topics: dict[str, int] = summary["topics"]
    last = _last_data_index(segments)
    for i in range(last + 1):
        if progress is not None:
            progress(i, last + 1)
        start, path = segments[i]
        with open_segment(path) as buf:
            for ev in _walk_segment(buf, start, 0, i == last):
                if ev.kind == "message":
                    assert ev.message is not None
                    summary["messages"] += 1
                    summary["bytes"] += ev.size
                    topics[ev.message.topic] = topics.get(ev.message.topic, 0) + 1
                    if not ev.message.crc_ok:
                        summary["badCrcs"] += 1
                    summary["endOffset"] = ev.offset + ev.size
                elif ev.kind == "blank":
                    summary["blanks"] += 1
                    summary["bytes"] += ev.size
                    summary["endOffset"] = ev.offset + ev.size
                else:
                    record_damage.append(ev)
    if progress is not None:
        progress(last + 1, last + 1)
    if record_damage:
        summary["firstInvalidOffset"] = min(ev.offset for ev in record_damage)
    damage.extend(record_damage)
    damage.sort(key=lambda ev: ev.offset)
    summary["damage"] = [{"offset": ev.offset, "reason": ev.reason} for ev in damage]
    summary["clean"] = not damage
    for ev in damage:
        log.debug("damage at %d: %s", ev.offset, ev.reason)
    return summary
