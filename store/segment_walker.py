"""One reader of a CommitLog segment (Kafka's LogSegment/FileRecords): what lies at each
position of a segment (a message record, a BLANK filler, or the end of its data) and
whether that end is normal or damage.

Recovery (recovery.py), `tidemq store verify`/`dump` (tools.py) and the pipeline's store
scan all read segments through here, so they cannot disagree about where valid data ends
or why. A record's own validity is `message.decode_record`'s (its compiled twin keeps the
same rules); this module adds the rules between records:

- a BLANK filler ends the segment's data (the next segment follows); one that does not
  reach the segment end is damage, as nothing explains the bytes after it;
- zeros are the normal end of data only in the last segment holding data; in an earlier
  one they are a missing BLANK filler;
- anything else that is not a record is damage, named (torn, corrupt, garbage, not a
  CommitLog segment).

The end of data is where records stop (a TOTALSIZE of 0 stops RocketMQ's recovery too); to
tell the normal end from damage, the walker looks at most LOOK_AHEAD bytes past it (one
maximum-size message: a zeroed or torn record, or garbage right after the data, shows up
there) and never reads the rest of the segment, so the cost of finding the end follows the
data, not the 1 GiB segment. A segment holds data when its first LOOK_AHEAD bytes do (a
segment is written from its start). What lies further is not judged: recovery zeroes it
when it cuts the log at the end.

A record whose structure is intact but whose body CRC or PHYSICALOFFSET is wrong is still a
`Record`; `Record.problems` names what is wrong and each caller applies its policy
(recovery cuts at a bad CRC, but on a master keeps a durable one or one a good record
follows as damage, store/damage.py; verify and the pipeline report both and read on).

The hop (`record_starts_at`, `hop`, `store_timestamp_at`, `data_at`) finds record starts by
reading 8 bytes per record, judging nothing: the pipeline cuts large segments into partitions
and prunes them by time with it, and `step` judges every record when a partition is read.

`skip_clean` is the bulk path: it hops over clean records without building anything
(compiled in store/_accel.pyx, as the pipeline's column scan is) and stops where `step`
must look, so the fast paths end exactly where these rules take over.
"""

from __future__ import annotations

import errno
import mmap
import os
from collections.abc import Iterator, Sequence

import attrs

from .accel import COMPILED
from .message import StoredMessage
from .record_codec import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    PHYSICAL_OFFSET_POSITION,
    Buffer,
    RecordKind,
    decode_record,
    masked_crc32,
    message_extent,
    read_physical_offset,
    read_store_timestamp,
    read_total_size,
)

_ZERO_CHUNK = 1 << 20
_ZEROS = bytes(_ZERO_CHUNK)

LOOK_AHEAD = 4 * 1024 * 1024
"""Bytes past the end of data (and at a segment's start) checked for non-zero bytes: one
message of RocketMQ's default maxMessageSize (4 MiB)."""


@attrs.frozen
class Record:
    """A message record whose structure is intact, at CommitLog `offset`."""

    offset: int
    size: int
    message: StoredMessage
    computed_crc: int | None = None
    """The body's masked CRC when it was checked (then message.crc_ok says whether it matches)."""

    @property
    def crc_ok(self) -> bool | None:
        """None when the CRC was not checked."""
        return None if self.computed_crc is None else self.computed_crc == self.message.body_crc

    def problems(self) -> list[str]:
        """What is wrong with a structurally intact record: a body CRC mismatch (when
        checked), then a PHYSICALOFFSET field other than the record's position."""
        m = self.message
        out = []
        if self.computed_crc is not None and self.computed_crc != m.body_crc:
            out.append(f"body CRC mismatch: stored {m.body_crc}, computed {self.computed_crc}")
        if m.commitlog_offset != self.offset:
            out.append(f"PHYSICALOFFSET field {m.commitlog_offset} differs from the record's "
                       f"position {self.offset}")
        return out


@attrs.frozen
class Blank:
    """A BLANK filler: the segment's data ends here and the next segment follows. `reason`
    is set when it does not reach the segment end (damage)."""

    offset: int
    size: int
    reason: str | None = None


@attrs.frozen
class End:
    """The segment's data ends at `offset` without a filler. `reason` None is the normal end
    (zeros after the last record of the last segment holding data, or the segment's very
    end); a string names the damage found there."""

    offset: int
    reason: str | None = None


def step(
    buf: Buffer,
    pos: int,
    *,
    segment_start: int = 0,
    last: bool = True,
    fd: int | None = None,
    check_crc: bool = False,
    read_body: bool = True,
) -> Record | Blank | End:
    """What lies at byte `pos` of the segment `buf`, whose byte 0 is CommitLog offset
    `segment_start`.

    `last` says whether this is the last segment holding data (where zeros are the normal
    end). At the end of data at most LOOK_AHEAD more bytes are read, to tell damage from
    zeros. `fd`, the segment file's descriptor, lets that zero check skip a sparse file's
    holes instead of reading them. `check_crc` computes the body CRC (reading the body
    whatever `read_body` says).
    """
    n = len(buf)
    offset = segment_start + pos
    if pos >= n:
        return End(offset)
    d = decode_record(buf, pos, check_crc=False, read_body=read_body or check_crc)
    if d.kind is RecordKind.MESSAGE:
        m = d.message
        assert m is not None
        computed = None
        if check_crc:
            computed = masked_crc32(m.body)
            if computed != m.body_crc:
                m = attrs.evolve(m, crc_ok=False)
        return Record(offset, d.size, m, computed)
    if d.kind is RecordKind.BLANK:
        left = n - pos
        reason = None
        if d.size != left:
            reason = f"BLANK filler of size {d.size} does not reach the segment end ({left} bytes left)"
        return Blank(offset, d.size, reason)
    return End(offset, _end_reason(buf, pos, segment_start, d.error, last, fd))


def walk(
    buf: Buffer,
    pos: int = 0,
    *,
    segment_start: int = 0,
    last: bool = True,
    fd: int | None = None,
    check_crc: bool = False,
    read_body: bool = True,
) -> Iterator[Record | Blank | End]:
    """`step` from `pos` on: each Record, then the Blank or End that finishes the segment."""
    while True:
        ev = step(buf, pos, segment_start=segment_start, last=last, fd=fd, check_crc=check_crc,
                  read_body=read_body)
        yield ev
        if type(ev) is not Record:
            return
        pos += ev.size


def _end_reason(buf: Buffer, pos: int, segment_start: int, error: str, last: bool,
                fd: int | None) -> str | None:
    """Why the bytes at `pos`, which are no record, are damage; None when they are the
    normal end of data. `error` is the decoder's complaint about them. Reads at most
    LOOK_AHEAD bytes from `pos`."""
    n = len(buf)
    left = n - pos
    nonzero = first_nonzero(buf, pos, min(n, pos + LOOK_AHEAD), fd)
    if nonzero is None:
        if last:
            return None
        return f"segment ends without a BLANK filler: zeroed bytes with {left} bytes left"
    if nonzero >= pos + 8:
        return (f"{'garbage after valid end' if last else 'zeroed record header'}: "
                f"non-zero data at offset {segment_start + nonzero}")
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
    if pos == 0:
        return f"not a CommitLog segment: no record at its start ({error})"
    return f"garbage after valid end: {error}" if last else f"invalid record: {error}"


# ---------------------------------------------------------------------------------------
# zeros: the unwritten end of a segment


def first_nonzero(buf: Buffer, start: int, end: int | None = None, fd: int | None = None) -> int | None:
    """Position of the first non-zero byte of buf[start:end], or None when all are zero.

    With the file's `fd`, holes of a sparse file (a segment's unwritten tail often is one)
    are skipped with SEEK_DATA / SEEK_HOLE instead of read; data is compared 1 MiB at a time
    (a slice compare runs at memory speed, a byte loop 30 times slower).
    """
    end = len(buf) if end is None else end
    pos = start
    while pos < end:
        data_end = end
        if fd is not None:
            try:
                pos = os.lseek(fd, pos, os.SEEK_DATA)
                data_end = min(end, os.lseek(fd, pos, os.SEEK_HOLE))
            except OSError:  # ENXIO: only a hole after pos (or no SEEK_DATA support)
                if _seek_data_supported(fd):
                    return None
                data_end = end
            if pos >= end:
                return None
        while pos < data_end:
            n = min(data_end - pos, _ZERO_CHUNK)
            chunk = bytes(buf[pos : pos + n])  # no copy for mmap and bytes slices
            if chunk != (_ZEROS if n == _ZERO_CHUNK else _ZEROS[:n]):
                return pos + n - len(chunk.lstrip(b"\0"))
            pos += n
    return None


def _seek_data_supported(fd: int) -> bool:
    try:
        os.lseek(fd, 0, os.SEEK_DATA)
        return True
    except OSError as e:
        return e.errno == errno.ENXIO  # an all-hole file: supported, nothing there


def holds_data(buf: Buffer, fd: int | None = None) -> bool:
    """Whether the segment holds data: a non-zero byte among its first LOOK_AHEAD bytes
    (records are written from a segment's start; else it is pre-created, never written).
    The rest of the segment is not read."""
    return first_nonzero(buf, 0, min(len(buf), LOOK_AHEAD), fd) is not None


def last_data_index(paths: Sequence[str]) -> int:
    """Index of the last segment file holding data (`holds_data`), -1 when none does (the
    later ones are pre-created). A file that cannot be read counts as holding data, so
    whoever reads it next reports why."""
    for i in range(len(paths) - 1, -1, -1):
        try:
            with open(paths[i], "rb") as f:
                if os.fstat(f.fileno()).st_size == 0:
                    continue
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                    if holds_data(mm, f.fileno()):
                        return i
        except (OSError, ValueError):
            return i
    return -1


# ---------------------------------------------------------------------------------------
# the hop: record starts without decoding (the pipeline's partition planning)


_MESSAGE_MAGICS = (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2)


def record_starts_at(buf: Buffer, pos: int, segment_start: int) -> bool:
    """Whether a message record that names its own place starts at byte `pos`: MAGIC, a
    TOTALSIZE that fits the segment and PHYSICALOFFSET = segment_start + pos are checked,
    nothing else. The pipeline checks a cut it took from a ConsumeQueue unit with it; the
    record itself is judged by `step` when it is read."""
    n = len(buf)
    if pos < 0 or pos + PHYSICAL_OFFSET_POSITION + 8 > n:
        return False
    total, magic = read_total_size(buf, pos)
    return (magic in _MESSAGE_MAGICS and 0 < total <= n - pos
            and read_physical_offset(buf, pos) == segment_start + pos)


def hop(buf: Buffer, pos: int, target: int) -> int | None:
    """The first record start at or past `target`, hopping TOTALSIZE by TOTALSIZE from the
    record at `pos` (8 bytes read per record, so a 1 GiB segment is cut without reading it);
    None at the end of data or at damage, which `step` names when the range is read."""
    n = len(buf)
    while pos < target:
        if pos + 8 > n:
            return None
        total, magic = read_total_size(buf, pos)
        if magic not in _MESSAGE_MAGICS or total <= 0 or pos + total > n:
            return None
        pos += total
    return pos if pos + 8 <= n and read_total_size(buf, pos)[1] in _MESSAGE_MAGICS else None


def store_timestamp_at(buf: Buffer, pos: int) -> int | None:
    """STORETIMESTAMP of the record at `pos`, None when no record that holds one is there
    (the pipeline prunes ranges by time with it, and never on a guess)."""
    try:
        return read_store_timestamp(buf, pos) if read_total_size(buf, pos)[0] >= 64 else None
    except Exception:
        return None


def data_at(path: str, pos: int) -> bool:
    """Whether data (a record or damage, not zeros and not a BLANK filler) starts at byte
    `pos` of the segment file at `path`; True when the file cannot be read, so its reader
    reports why."""
    try:
        with open(path, "rb") as f:
            f.seek(pos)
            head = f.read(8)
    except OSError:
        return True
    if len(head) < 8 or head == bytes(8):
        return False
    return read_total_size(head, 0)[1] != BLANK_MAGIC_CODE


# ---------------------------------------------------------------------------------------
# the bulk path


def skip_clean(buf: Buffer, pos: int, stop: int, segment_start: int, check_crc: bool) -> int:
    """Hop over clean message records from `pos`, building nothing per record; return the
    first record start at or past `stop`, or the first position `step` must judge: no
    message there, a PHYSICALOFFSET other than the position, or (with `check_crc`) a body
    CRC mismatch. Recovery's fast path; store/_accel.pyx has the compiled twin."""
    while pos < stop:
        extent = message_extent(buf, pos, check_crc=check_crc)
        if extent is None or extent[1] != segment_start + pos:
            break
        pos += extent[0]
    return pos


py_skip_clean = skip_clean
if COMPILED is not None:
    COMPILED.bind_walker(py_skip_clean)
    skip_clean = COMPILED.skip_clean  # noqa: F811
