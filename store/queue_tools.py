"""Offline, read-only tools that go through a store's ConsumeQueues and index: one queue's
records (`dump_queue`) and the records of a key (`query_key`), with the index geometry
worked out from the files (`index_geometry`). Lock-free like `tools.py`, whose segment
readers they use.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from store.consume_queue import UNIT, is_blank_unit
from store.index_file import _ENTRY as _INDEX_ENTRY
from store.index_file import _HEADER as _INDEX_HEADER
from store.index_file import (
    HASH_SLOT_SIZE,
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    IndexFile,
    build_key,
    index_file_size,
)
from store.message import StoredMessage
from store.record_codec import RecordKind, decode_record

from .layout import (
    StoreToolError,
    consumequeue_dir,
    find_segment,
    index_dir,
    iter_segments,
    queue_dir,
    segment_names,
)
from .tools import Buffer, message_to_dict, open_segment


class _SegmentReader:
    """Reads records by physical offset, keeping each segment's read-only map open once."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.segments = iter_segments(root)
        self._stack = contextlib.ExitStack()
        self._maps: dict[int, Buffer] = {}

    def __enter__(self) -> _SegmentReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def record(self, offset: int) -> tuple[StoredMessage | None, str]:
        index = find_segment(self.segments, offset)
        if index is None:
            return None, f"offset {offset} is in no CommitLog segment (removed or not written)"
        if index not in self._maps:
            self._maps[index] = self._stack.enter_context(open_segment(self.segments[index][1]))
        decoded = decode_record(self._maps[index], offset - self.segments[index][0], check_crc=False)
        if decoded.kind is not RecordKind.MESSAGE:
            return None, f"no message at offset {offset}: {decoded.error or decoded.kind.value}"
        return decoded.message, ""


def dump_queue(
    root: str | os.PathLike[str], topic: str, queue_id: int, limit: int | None = None
) -> Iterator[dict[str, Any]]:
    """The messages of one topic-queue in queue order, read through its ConsumeQueue files.

    Each dict is `message_to_dict`'s plus "queueOffset" from the unit; a unit whose record
    is gone or disagrees gives {"queueOffset", "offset", "error"} and the walk goes on.
    """
    qdir = queue_dir(consumequeue_dir(root), topic, queue_id)
    if not os.path.isdir(qdir):
        raise StoreToolError(f"no ConsumeQueue for {topic}-{queue_id} under {os.fspath(root)}")
    names = segment_names(os.listdir(qdir))
    emitted = 0
    with _SegmentReader(root) as reader:
        for name in names:
            with open_segment(os.path.join(qdir, name)) as buf:
                for pos in range(0, len(buf) - len(buf) % UNIT.size, UNIT.size):
                    phy, size, _code = UNIT.unpack_from(buf, pos)
                    if phy < 0 or size <= 0 or (phy == 0 and size == 0):
                        break  # end of written units
                    if is_blank_unit(phy, size):
                        continue
                    queue_offset = (int(name) + pos) // UNIT.size
                    msg, error = reader.record(phy)
                    if msg is not None and (msg.size != size or msg.queue_offset != queue_offset):
                        error = f"record at {phy} is size {msg.size} queue offset {msg.queue_offset}"
                        msg = None
                    if msg is None:
                        yield {"queueOffset": queue_offset, "offset": phy, "error": error}
                    else:
                        yield {**message_to_dict(phy, msg), "queueOffset": queue_offset}
                    emitted += 1
                    if limit is not None and emitted >= limit:
                        return


def _read_properties(path: str) -> dict[str, str]:
    """key=value lines of a RocketMQ .properties file ('#' comments); {} when absent."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


BROKER_PROPERTIES = os.path.join("config", "broker.properties")


def _geometry_fits(path: str, size: int, slots: int, entries: int) -> bool:
    """Whether the header and the last written entry make sense under this geometry."""
    if index_file_size(slots, entries) != size:
        return False
    with open(path, "rb") as f:
        header = f.read(INDEX_HEADER_SIZE)
        if len(header) < INDEX_HEADER_SIZE:
            return False
        _bts, _ets, begin_phy, end_phy, slot_count, count = _INDEX_HEADER.unpack(header)
        if not (0 <= count <= entries and 0 <= slot_count <= slots):
            return False
        if count <= 1:
            return True
        f.seek(INDEX_HEADER_SIZE + slots * HASH_SLOT_SIZE + (count - 1) * INDEX_ENTRY_SIZE)
        last = f.read(INDEX_ENTRY_SIZE)
    if len(last) < INDEX_ENTRY_SIZE:
        return False
    _hash, phy, time_diff, prev = _INDEX_ENTRY.unpack(last)
    return bool(begin_phy <= phy <= end_phy and time_diff >= 0 and 0 <= prev < count - 1)


def index_geometry(root: str | os.PathLike[str], path: str) -> tuple[int, int]:
    """(maxHashSlotNum, maxIndexNum) of the index file at `path`, which the file does not
    record: from `<root>/config/broker.properties` (the node writes it at start), else
    from the file's size under RocketMQ's 1:4 slot/entry ratio, checked against its
    header and last entry. StoreToolError when neither works."""
    size = os.path.getsize(path)
    props = _read_properties(os.path.join(os.fspath(root), BROKER_PROPERTIES))
    with contextlib.suppress(KeyError, ValueError):
        slots, entries = int(props["maxHashSlotNum"]), int(props["maxIndexNum"])
        if index_file_size(slots, entries) == size:
            return slots, entries
    body = size - INDEX_HEADER_SIZE
    unit = HASH_SLOT_SIZE + 4 * INDEX_ENTRY_SIZE
    if body > 0 and body % unit == 0 and _geometry_fits(path, size, body // unit, 4 * (body // unit)):
        return body // unit, 4 * (body // unit)
    raise StoreToolError(
        f"cannot tell the geometry of index file {path} ({size} bytes): no "
        f"{BROKER_PROPERTIES} beside the store and not RocketMQ's 1:4 slot/entry ratio; "
        "pass the store's --max-hash-slot-num and --max-index-num"
    )


def query_key(
    root: str | os.PathLike[str],
    topic: str,
    key: str,
    *,
    max_num: int = 64,
    hash_slot_num: int | None = None,
    index_num: int | None = None,
) -> list[dict[str, Any]]:
    """Messages of `topic` with KEYS or UNIQ_KEY `key`, newest first, through the index
    files. Their geometry is worked out per file (`index_geometry`) unless given.
    Candidates are re-read, so hash collisions never return another key."""
    idir = index_dir(root)
    if not os.path.isdir(idir):
        raise StoreToolError(f"no index directory under {os.fspath(root)}")
    candidates: list[int] = []
    for name in sorted((n for n in os.listdir(idir) if n.isdigit()), reverse=True):
        path = os.path.join(idir, name)
        if hash_slot_num is not None and index_num is not None:
            slots, entries = hash_slot_num, index_num
        else:
            slots, entries = index_geometry(root, path)
        try:
            index_file = IndexFile(path, slots, entries)
        except ValueError as e:  # SegmentSizeError: another geometry
            raise StoreToolError(f"{e} (pass the store's --max-hash-slot-num and --max-index-num)") from None
        try:
            index_file.select_phy_offsets(candidates, build_key(topic, key), max_num, 0, 2**63 - 1)
        finally:
            index_file.close()
        if len(candidates) >= max_num:
            break
    found = []
    with _SegmentReader(root) as reader:
        for offset in candidates:
            msg, _error = reader.record(offset)
            if msg is not None and msg.topic == topic and (key in msg.keys or msg.uniq_key == key):
                found.append(message_to_dict(offset, msg))
    return found
