"""CommitLog recovery and truncation (seed 000 §4.7, ROCKETMQ-FACTS §5), owned by CommitLog.

Recovery finds where valid data ends and cuts everything after it, as Kafka's segment
recovery lives with its log:

- after a clean exit validation starts at the third-last segment (RocketMQ
  recoverNormally);
- after a crash it starts at the newest segment whose first record is stored no later
  than the checkpoint says is safe (recoverAbnormally, isMappedFileMatchedRecover), and
  everything from there is dispatched to the ConsumeQueues and index again.

`truncate(queue, offset)` is the cut itself, shared by recovery and by
`MessageStore.truncate_to` (a rejoining old master dropping its divergent tail).

Progress: a `RecoveryProgress` callback gets (validated_bytes, total_bytes) after each
segment and every PROGRESS_STEP bytes inside one, and (total, total) at the end; total is
the mapped size of the segments being validated. It runs on the recovery thread (the
store loads in a worker thread).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import attrs

from .mapped_file import MappedFile
from .mapped_file_queue import MappedFileQueue
from .message import (  # the record layout's structs: validation reads the fields in place
    _HEAD,
    _I8,
    _I16,
    _I32,
    _SIZE_MAGIC,
    _TAIL,
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    STOREHOST_V6_FLAG,
    SYSFLAG_POSITION,
    RecordKind,
    masked_crc32,
    read_store_timestamp,
    read_total_size,
    torn_end_error,
)

log = logging.getLogger("tidemq.store")

RecoveryProgress = Callable[[int, int], None]
"""(validated_bytes, total_bytes) while the CommitLog is validated."""

PROGRESS_STEP = 16 * 1024 * 1024
"""Bytes validated between two progress reports inside one segment."""


@attrs.frozen
class RecoveredLog:
    """Where the CommitLog's valid data ends, and where dispatch must start again."""

    end: int
    dispatch_from: int | None
    """Abnormal exit: the first offset to dispatch again; None after a clean exit."""
    deleted_segments: tuple[str, ...] = ()


@attrs.frozen
class TruncateReport:
    """What `MessageStore.truncate_to` dropped: CommitLog bytes [from_offset, to_offset)."""

    from_offset: int
    to_offset: int
    """The CommitLog's max offset before the cut (== from_offset: nothing was dropped)."""
    message_count: int
    msg_ids: tuple[str, ...]
    """Offset msgIds of the dropped messages, oldest first."""
    deleted_segments: tuple[str, ...] = ()

    @property
    def dropped_bytes(self) -> int:
        return self.to_offset - self.from_offset


def validate_record(
    buf: bytes | bytearray | memoryview, pos: int, limit: int, *, check_crc: bool = True
) -> tuple[RecordKind, int, str]:
    """Recovery's check of the record at `pos`: (kind, size, error), without building a
    message. Checks the magic, that the field lengths add up to TOTALSIZE, that the record
    does not end in zeroed bytes (`torn_end_error`), and the body CRC."""
    avail = limit - pos
    if avail < 8:
        return RecordKind.INVALID, -1, f"only {avail} bytes left, no record header"
    total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    if magic == BLANK_MAGIC_CODE:
        if total < 8 or total > avail:
            return RecordKind.INVALID, -1, f"BLANK filler with impossible size {total}"
        return RecordKind.BLANK, total, ""
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        if total == 0 and magic == 0:
            return RecordKind.INVALID, -1, "zeroed bytes (end of written data)"
        return RecordKind.INVALID, -1, f"illegal magic code 0x{magic:08X}"
    if total < _HEAD.size + 16 + _TAIL.size or total > avail:
        return RecordKind.INVALID, -1, f"record size {total} does not fit the {avail} bytes left"
    body_crc = _I32.unpack_from(buf, pos + 8)[0]
    sys_flag = _I32.unpack_from(buf, pos + SYSFLAG_POSITION)[0]
    p = pos + _HEAD.size + (20 if sys_flag & BORNHOST_V6_FLAG else 8) + 8
    p += (20 if sys_flag & STOREHOST_V6_FLAG else 8) + 12
    end = pos + total
    if p + 4 > end:
        return RecordKind.INVALID, -1, "record too short for its hosts"
    body_len = _I32.unpack_from(buf, p)[0]
    p += 4
    if body_len < 0 or p + body_len + 3 > end:
        return RecordKind.INVALID, -1, f"body length {body_len} runs past the record"
    body_at = p
    p += body_len
    if magic == MESSAGE_MAGIC_CODE:
        topic_len = _I8.unpack_from(buf, p)[0]
        p += 1 + topic_len
    else:
        topic_len = _I16.unpack_from(buf, p)[0]
        p += 2 + topic_len
    if topic_len < 0 or p + 2 > end:
        return RecordKind.INVALID, -1, f"topic length {topic_len} runs past the record"
    props_len = _I16.unpack_from(buf, p)[0]
    p += 2 + props_len
    if props_len < 0 or p != end:
        return RecordKind.INVALID, -1, f"TOTALSIZE {total} differs from the {p - pos} bytes its fields take"
    torn = torn_end_error(buf, end, topic_len, props_len)
    if torn:
        return RecordKind.INVALID, -1, torn
    if check_crc:
        with memoryview(buf) as view:
            computed = masked_crc32(view[body_at : body_at + body_len])
        if computed != body_crc:
            return RecordKind.INVALID, -1, f"body CRC mismatch: stored {body_crc}, computed {computed}"
    return RecordKind.MESSAGE, total, ""


def recover(
    queue: MappedFileQueue,
    *,
    safe_timestamp: int | None,
    check_crc: bool,
    progress: RecoveryProgress | None = None,
) -> RecoveredLog:
    """Validate the newest segments, cut the log at the end of valid data.

    `safe_timestamp` is None after a clean exit; after a crash it is the checkpoint's safe
    store time (abnormal recovery).
    """
    files = queue.files
    if not files:
        return RecoveredLog(0, None)
    clean = safe_timestamp is None
    index = max(0, len(files) - 3) if clean else abnormal_start(files, safe_timestamp)
    first = files[index]
    end = scan_valid_end(files, queue.file_size, index, check_crc=check_crc, progress=progress)
    deleted = truncate(queue, end)
    log.info("recovery (%s exit): CommitLog valid up to offset %d (validated from segment %s)",
             "clean" if clean else "abnormal", end, first.file_name)
    return RecoveredLog(end, None if clean else first.file_from_offset, deleted)


def abnormal_start(files: list[MappedFile], safe_timestamp: int) -> int:
    """Index of the newest segment whose first record is stored no later than
    `safe_timestamp` (RocketMQ isMappedFileMatchedRecover); 0 when none is."""
    for i in range(len(files) - 1, -1, -1):
        mm = files[i].mm
        _size, magic = read_total_size(mm, 0)
        if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
            continue
        ts = read_store_timestamp(mm, 0)
        if ts != 0 and ts <= safe_timestamp:
            log.info("abnormal recovery starts at segment %s (first record stored at %d <= %d)",
                     files[i].file_name, ts, safe_timestamp)
            return i
    return 0


def scan_valid_end(
    files: list[MappedFile],
    file_size: int,
    index: int,
    *,
    check_crc: bool,
    progress: RecoveryProgress | None = None,
) -> int:
    """Validate records from segment `index` on; the offset right after the last good one."""
    total = (len(files) - index) * file_size
    base = files[index].file_from_offset
    offset = base
    end = None
    while index < len(files):
        mf = files[index]
        pos = 0
        next_report = PROGRESS_STEP
        while True:
            kind, rec_size, error = validate_record(mf.mm, pos, file_size, check_crc=check_crc)
            if kind is RecordKind.MESSAGE:
                pos += rec_size
                if progress is not None and pos >= next_report:
                    progress(mf.file_from_offset - base + pos, total)
                    next_report = pos + PROGRESS_STEP
                continue
            if kind is RecordKind.BLANK:
                break
            end = mf.file_from_offset + pos
            if error.startswith("zeroed"):
                log.info("recovery: data ends at offset %d", end)
            else:
                log.warning("recovery: invalid record at offset %d (%s); truncating the CommitLog there",
                            end, error)
            break
        if end is not None:
            break
        index += 1
        offset = mf.file_from_offset + file_size
        if progress is not None:
            progress(offset - base, total)
    if progress is not None:
        progress(total, total)
    return offset if end is None else end


def truncate(queue: MappedFileQueue, end: int) -> tuple[str, ...]:
    """Cut the log at `end`: zero the tail of its segment (so cut bytes cannot come back),
    delete every later segment. Returns the names of the deleted segments."""
    queue.flushed_where = queue.committed_where = end
    doomed = tuple(os.path.basename(mf.path) for mf in queue.files if mf.file_from_offset > end)
    holder = queue.find_by_offset(end)
    if holder is not None:  # also a whole segment starting at `end`: its records must not come back
        holder.zero_tail(end % queue.file_size)
    queue.truncate_dirty_files(end)
    if doomed:
        log.warning("deleted %d CommitLog segment(s) after offset %d: %s", len(doomed), end, ", ".join(doomed))
    return doomed
