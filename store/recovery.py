"""CommitLog recovery and truncation (seed 000 §4.7, ROCKETMQ-FACTS §5), owned by CommitLog.

Recovery finds where valid data ends and cuts everything after it, as Kafka's segment
recovery lives with its log. Where valid data ends is decided by store/segment_walker.py,
the reader `tidemq store verify` and the pipeline use too, so they agree; which segments
are validated is recovery's:

- after a clean exit validation starts at the third-last segment (RocketMQ
  recoverNormally);
- after a crash it starts at the newest segment whose first record is stored no later
  than the checkpoint says is safe (recoverAbnormally, isMappedFileMatchedRecover), and
  everything from there is dispatched to the ConsumeQueues and index again.

Validation stops at the end of the data (the first position that holds no record; a
TOTALSIZE of 0 stops RocketMQ's recovery too) and never reads a segment's untouched tail:
at most segment_walker.LOOK_AHEAD bytes past the end are looked at to tell damage from
zeros, so recovering a 1 GiB segment holding 3 KB costs what 3 KB costs.

`truncate(queue, offset)` is the cut itself, shared by recovery and by
`MessageStore.truncate_to` (a rejoining old master dropping its divergent tail): it punches
a hole over the cut segment's tail (whatever lay there, read or not, is gone, and its
blocks are freed) and deletes the later segments.

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

from .damage import DamagedRanges
from .mapped_file import MappedFile
from .mapped_file_queue import MappedFileQueue
from .record_codec import (
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    Buffer,
    RecordKind,
    decode_record,
    read_store_timestamp,
    read_total_size,
)
from .segment_walker import LOOK_AHEAD, Blank, Record, first_nonzero, holds_data, skip_clean, step

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
    dropped: bool = False
    """The cut dropped bytes the log held (a torn or damaged record, or data after one):
    the log may lack what this node held, and acknowledged, before (node/failover: such a
    node does not campaign on it before it has caught up or its peers' ends are known)."""
    dropped_to: int = 0
    """Just past the last record the cut dropped whose header still reads (== end: none)."""
    dropped_msg_ids: tuple[str, ...] = ()
    """Offset msgIds of those records (a damaged record's and the good ones after it): a
    rejoining node's cut report names them too (storage seed 352)."""


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


def recover(
    queue: MappedFileQueue,
    *,
    safe_timestamp: int | None,
    check_crc: bool,
    progress: RecoveryProgress | None = None,
    damage: DamagedRanges | None = None,
) -> RecoveredLog:
    """Validate the newest segments, cut the log at the end of valid data.

    `safe_timestamp` is None after a clean exit; after a crash it is the checkpoint's safe
    store time (abnormal recovery). With `damage` (a master's), a record that fails its body
    CRC but was durable (stored no later than `safe_timestamp`; any after a clean exit) or
    that a good record follows is kept and noted there instead of cutting the log at it
    (damage.py): a flipped bit in data written whole is not a torn write, and the records
    after it are good.
    """
    files = queue.files
    if not files:
        return RecoveredLog(0, None)
    clean = safe_timestamp is None
    index = max(0, len(files) - 3) if safe_timestamp is None else abnormal_start(files, safe_timestamp)
    first = files[index]
    keep = None if damage is None else _Keep(damage, safe_timestamp)
    end = scan_valid_end(files, queue.file_size, index, check_crc=check_crc, progress=progress, keep=keep)
    dropped = holds_data_from(files, queue.file_size, end)
    dropped_to, msg_ids = readable_records_from(files, queue.file_size, end) if dropped else (end, ())
    # a cut of bytes the log held is made durable: after a power loss what the disk kept (a
    # torn record, the tail of an older term) is durable already, and a later power loss
    # would bring it back over what this term writes there (storage seeds 2756, 7968: a
    # ConsumeQueue unit then named a resurrected record of another queue offset)
    deleted = truncate(queue, end, sync=dropped)
    log.info("recovery (%s exit): CommitLog valid up to offset %d (validated from segment %s)%s",
             "clean" if clean else "abnormal", end, first.file_name,
             f"; bytes past it dropped, {len(msg_ids)} readable record(s) up to {dropped_to}" if dropped else "")
    return RecoveredLog(end, None if clean else first.file_from_offset, deleted, dropped, dropped_to, msg_ids)


def readable_records_from(files: list[MappedFile], file_size: int, offset: int) -> tuple[int, tuple[str, ...]]:
    """(end, msgIds) of the records from `offset` on whose headers read, CRC unchecked (a
    damaged record, and the good ones after it), up to the first position that holds none."""
    ids: list[str] = []
    by_start = {mf.file_from_offset: mf for mf in files}
    while (mf := by_start.get(offset - offset % file_size)) is not None:
        decoded = decode_record(mf.mm, offset % file_size, check_crc=False, read_body=False)
        if decoded.kind is RecordKind.BLANK:
            offset += file_size - offset % file_size
        elif decoded.kind is RecordKind.MESSAGE and decoded.message is not None and decoded.size > 0:
            ids.append(decoded.message.msg_id)
            offset += decoded.size
        else:
            break
    return offset, tuple(ids)


def holds_data_from(files: list[MappedFile], file_size: int, offset: int) -> bool:
    """Whether any of the log's bytes from `offset` on is non-zero (LOOK_AHEAD bytes at
    `offset` and at the start of each later segment, as the walker looks)."""
    for mf in files:
        if mf.file_from_offset + file_size <= offset:
            continue
        pos = max(offset - mf.file_from_offset, 0)
        if first_nonzero(mf.mm, pos, min(len(mf.mm), pos + LOOK_AHEAD), mf.fd) is not None:
            return True
    return False


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
    keep: _Keep | None = None,
) -> int:
    """Validate records from segment `index` on; the offset right after the last good one.

    What is valid is segment_walker's (the reader verify and the pipeline use); recovery's
    policy on top: the log ends at the first End and, with `check_crc`, at the first body
    CRC mismatch (`keep`, a master's: unless that record is kept as damage); a BLANK filler hands over to the next segment (RocketMQ), also one that
    does not reach the segment end, which is logged as damage like a PHYSICALOFFSET
    mismatch (the record's structure is intact, so it is kept)."""
    total = (len(files) - index) * file_size
    base = files[index].file_from_offset
    last = next((i for i in range(len(files) - 1, index - 1, -1) if holds_data(files[i].mm, files[i].fd)), -1)

    def report(offset: int) -> None:
        if progress is not None:
            progress(offset - base, total)

    end = None
    for i in range(index, len(files)):
        mf = files[i]
        end = _segment_end(mf, i >= last, check_crc, report if progress is not None else None, keep)
        if end is not None:
            break
        report(mf.file_from_offset + file_size)
    if progress is not None:
        progress(total, total)
    return files[-1].file_from_offset + file_size if end is None else end


@attrs.frozen
class _Keep:
    """Recovery's policy for a body CRC mismatch on a master: durable records are kept as damage."""

    damage: DamagedRanges
    safe_timestamp: int | None  # None: a clean exit, everything was flushed

    def kept(self, ev: Record, followed: bool) -> bool:
        """Whether the record that failed its CRC is kept (noted damaged) rather than cut at:
        it was durable (stored no later than the safe time) or a good record follows it (the
        writes went on past it; a lost or torn page is not followed by a whole record unless
        the lost page lies inside one body, of more than a page)."""
        if not followed and self.safe_timestamp is not None and ev.message.store_timestamp > self.safe_timestamp:
            return False  # maybe never durable: a torn or lost write, the log ends before it
        self.damage.note(ev.offset, ev.offset + ev.size, "body CRC mismatch", "recovery")
        return True


def _segment_end(mf: MappedFile, last: bool, check_crc: bool,
                 report: Callable[[int], None] | None, keep: _Keep | None = None) -> int | None:
    """Where the log's valid data ends inside `mf`, or None when the segment is whole and
    the next one follows. Clean records are skipped in bulk (`skip_clean`, compiled; it
    stops every PROGRESS_STEP bytes for `report`); `step` judges wherever it stops."""
    mm, start = mf.mm, mf.file_from_offset
    pos, next_report = 0, PROGRESS_STEP if report is not None else len(mm)
    while True:
        pos = skip_clean(mm, pos, next_report, start, check_crc)
        if report is not None and pos >= next_report:
            report(start + pos)
            next_report = pos + PROGRESS_STEP
        ev = step(mm, pos, segment_start=start, last=last, fd=mf.fd, check_crc=check_crc, read_body=False)
        if isinstance(ev, Record):
            problems = ev.problems()
            if ev.crc_ok is False and keep is not None and keep.kept(ev, _good_record_at(mm, pos + ev.size)):
                pos += ev.size
                continue
            if ev.crc_ok is False:
                log.warning("recovery: invalid record at offset %d (%s); truncating the CommitLog there",
                            ev.offset, problems[0])
                return ev.offset
            for problem in problems:
                log.warning("recovery: record at offset %d: %s (kept: its structure is intact)",
                            ev.offset, problem)
            pos += ev.size
            continue
        if isinstance(ev, Blank):
            if ev.reason is not None:
                log.warning("recovery: at offset %d: %s; going on with the next segment", ev.offset, ev.reason)
            return None
        if ev.reason is not None:
            log.warning("recovery: invalid record at offset %d (%s); truncating the CommitLog there",
                        ev.offset, ev.reason)
            return ev.offset
        if pos >= len(mm):
            return None  # records up to the segment's very end: the next segment follows
        log.info("recovery: data ends at offset %d", ev.offset)
        return ev.offset


def _good_record_at(mm: Buffer, pos: int) -> bool:
    """Whether a message record passing its CRC, or a BLANK filler, starts at `pos`."""
    return pos < len(mm) and decode_record(mm, pos, check_crc=True).kind in (RecordKind.MESSAGE, RecordKind.BLANK)


def truncate(queue: MappedFileQueue, end: int, *, sync: bool = False) -> tuple[str, ...]:
    """Cut the log at `end`: zero the tail of its segment (so cut bytes cannot come back),
    delete every later segment. Returns the names of the deleted segments. `sync`: make the
    zeroed tail durable (a rejoining node's cut; a recovery's cut of bytes the log held,
    which a power loss left on the disk)."""
    queue.flushed_where = queue.committed_where = end
    doomed = tuple(os.path.basename(mf.path) for mf in queue.files if mf.file_from_offset > end)
    holder = queue.find_by_offset(end)
    if holder is not None:  # also a whole segment starting at `end`: its records must not come back
        holder.zero_tail(end % queue.file_size)
        if sync:
            holder.sync()
    queue.truncate_dirty_files(end)
    if doomed:
        log.warning("deleted %d CommitLog segment(s) after offset %d: %s", len(doomed), end, ", ".join(doomed))
    return doomed
