"""The master–slave HA wire protocol, sans-IO: bytes in, events out (like h11 or wsproto).

This module never touches a socket, a clock or an event loop, so the framing rules can be
tested exhaustively with plain bytes and reused by any transport.

The wire is byte-compatible with RocketMQ 4.x (`HAService`, `HAConnection`); 5.x's default
HA keeps the same wire. There is no handshake, no magic and no framing beyond this:

- **Slave → master (reports):** a stream of 8-byte big-endian signed int64 values, each the
  slave's current max CommitLog offset. The master acts on the newest complete value only.
- **Master → slave (transfers):** frames of a 12-byte header, big-endian int64 ``offset``
  then int32 ``size``, followed by ``size`` bytes of raw CommitLog data starting at
  ``offset``. ``size == 0`` is a heartbeat carrying the master's next transfer offset. A body
  is at most ``haTransferBatchSize`` (32 KiB) and is not message-aligned.

**tidemq's confirm-offset extension** (between tidemq peers only; docs/failover.md). A tidemq
slave offers it as soon as a frame has arrived (the master has taken its first report) and
it holds data, in its ack of that frame (or at once, after a heartbeat): three
reports in one write, ``E, 0, E`` (E its max offset), plain 4.x
reports, which a RocketMQ 4.x master takes as acks (its push2SlaveMaxOffset only grows,
so the 0 in between changes nothing) and so ignores. A tidemq master knows the 0 after a
positive report for the offer (a 4.x slave's reports never go down on one connection) and
from then on sends, between frames, a confirm frame: a header with offset ``CONFIRM_MARK``
(-1) and size 8, then the confirm offset as an int64. A 4.x slave never offers, so never
sees one; a 4.x master never sends one: both sides' bytes stay RocketMQ 4.x's.

The same extension carries **consumer-offset commits** (docs/formats.md): a tidemq master
that takes the offer sends its whole committed-offset table once, then every commit, in
offsets frames (header offset ``OFFSETS_MARK``, -2, then `encode_offsets`' body, each
tagged with the master's commit sequence number). The slave applies a batch and answers
with an offsets ack, a report of ``-seq``: negative, so never an ack of CommitLog bytes, and
sent only to a master that sent offsets frames (so a 4.x master never reads one).

Because the stream has no resynchronisation point, a bad value means the connection must be
closed: the decoders raise `ProtocolError` and are unusable afterwards. Frames decoded from
the same chunk before the bad one are dropped with it; that is harmless, since after a
reconnect the slave reports its offset again and the master resends from there.
"""

from __future__ import annotations

import struct

import attrs

REPORT_SIZE = 8
HEADER_SIZE = 12
DEFAULT_BATCH_SIZE = 32 * 1024

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1

_REPORT = struct.Struct(">q")
_HEADER = struct.Struct(">qi")
assert _REPORT.size == REPORT_SIZE
assert _HEADER.size == HEADER_SIZE

CONFIRM_MARK = -1
"""The header offset of a confirm frame (the extension above; never a CommitLog offset)."""
CONFIRM_SIZE = 8


OFFSETS_MARK = -2
"""The header offset of an offsets frame (consumer-offset commits; the extension above)."""
OFFSETS_MAX_BODY = 256 * 1024
"""The largest offsets frame body: a table is split into frames of at most this size."""
OFFSETS_REPLACE = 0x01
"""Offsets frame flag: this batch is the master's whole table (replace, do not merge)."""
OFFSETS_MORE = 0x02
"""Offsets frame flag: more frames of this batch follow (apply and ack after the last)."""
OFFSETS_RAISE = 0x04
"""Offsets frame flag, only with `OFFSETS_REPLACE`: the table is the master's file's (a
restarted master, up to 5 s old): raise each offset to it, lower and drop none."""
MAX_NAME_BYTES = 0xFFFF

_OFFSETS_HEAD = struct.Struct(">qBI")  # seq, flags, entry count
_ENTRY_HEAD = struct.Struct(">iqH")  # queue_id, offset, group length (then group, topic length, topic)
_NAME_LEN = struct.Struct(">H")


class ProtocolError(ValueError):
    """The peer (or the caller) produced a value the HA wire cannot carry; close the connection."""


def _check_offset(offset: int, where: str) -> None:
    if offset < 0:
        raise ProtocolError(f"negative offset {offset} in {where}")
    if offset > INT64_MAX:
        raise ProtocolError(f"offset {offset} in {where} does not fit in an int64")


def encode_report(offset: int) -> bytes:
    """Encode a slave's max CommitLog offset as the 8 bytes the master expects."""
    _check_offset(offset, "slave report")
    return _REPORT.pack(offset)


def encode_transfer_header(offset: int, size: int) -> bytes:
    """Encode a 12-byte master header; lets the sender write a body without copying it."""
    _check_offset(offset, "master header")
    if size < 0:
        raise ProtocolError(f"negative body size {size} in master header")
    if size > INT32_MAX:
        raise ProtocolError(f"body size {size} in master header does not fit in an int32")
    return _HEADER.pack(offset, size)


def encode_transfer(offset: int, body: bytes | bytearray | memoryview) -> bytes:
    """Encode one master frame: header then the CommitLog bytes starting at ``offset``."""
    body_len = body.nbytes if isinstance(body, memoryview) else len(body)
    return b"".join((encode_transfer_header(offset, body_len), body))


def encode_heartbeat(offset: int) -> bytes:
    """Encode a master heartbeat: a header with size 0 carrying the next transfer offset."""
    return encode_transfer_header(offset, 0)


def encode_confirm(offset: int) -> bytes:
    """A confirm frame (the extension): the master's confirm offset, for a slave that offered."""
    _check_offset(offset, "confirm offset")
    return _HEADER.pack(CONFIRM_MARK, CONFIRM_SIZE) + _REPORT.pack(offset)


def encode_offer(offset: int) -> bytes:
    """A slave's offer of the extension at max offset `offset` (> 0): three plain reports."""
    if offset <= 0:
        raise ProtocolError(f"an offer needs a positive max offset, got {offset}")
    report = encode_report(offset)
    return report + encode_report(0) + report


@attrs.frozen
class OffsetCommit:
    """One consumer group's committed offset on one queue, as an offsets frame carries it."""

    group: str
    topic: str
    queue_id: int
    offset: int


@attrs.frozen
class OffsetsBatch:
    """A complete batch of commits: the master's whole table (`replace`) or commits since
    the previous batch, all committed up to sequence number `seq`. `raise_only` (with
    `replace`): the table may be behind the slave's, which keeps any higher offset."""

    seq: int
    replace: bool
    entries: tuple[OffsetCommit, ...]
    raise_only: bool = False


def _encode_entry(entry: OffsetCommit) -> bytes:
    group, topic = entry.group.encode(), entry.topic.encode()
    if len(group) > MAX_NAME_BYTES or len(topic) > MAX_NAME_BYTES:
        raise ProtocolError(f"group or topic name of {entry} longer than {MAX_NAME_BYTES} bytes")
    if not -(2**31) <= entry.queue_id < 2**31:
        raise ProtocolError(f"queue id {entry.queue_id} does not fit in an int32")
    _check_offset(entry.offset, "offset commit")
    return b"".join((_ENTRY_HEAD.pack(entry.queue_id, entry.offset, len(group)), group,
                     _NAME_LEN.pack(len(topic)), topic))


def encode_offsets(seq: int, entries: list[OffsetCommit] | tuple[OffsetCommit, ...], *, replace: bool,
                   raise_only: bool = False, max_body: int = OFFSETS_MAX_BODY) -> bytes:
    """One batch of commits as offsets frames of at most `max_body` body bytes each (all but
    the last flagged `OFFSETS_MORE`); an empty table is one frame with no entries."""
    if raise_only and not replace:
        raise ProtocolError("only a whole table (replace) is sent to raise offsets")
    if seq <= 0:
        raise ProtocolError(f"offsets sequence number {seq} must be positive")
    _check_offset(seq, "offsets sequence number")
    room = max_body - _OFFSETS_HEAD.size
    chunks: list[list[bytes]] = [[]]
    used = 0
    for entry in entries:
        encoded = _encode_entry(entry)
        if len(encoded) > room:
            raise ProtocolError(f"offset commit {entry} does not fit in an offsets frame of {max_body} bytes")
        if used + len(encoded) > room:
            chunks.append([])
            used = 0
        chunks[-1].append(encoded)
        used += len(encoded)
    out: list[bytes] = []
    for i, chunk in enumerate(chunks):
        flags = ((OFFSETS_REPLACE if replace else 0) | (OFFSETS_RAISE if raise_only else 0)
                 | (OFFSETS_MORE if i < len(chunks) - 1 else 0))
        body = _OFFSETS_HEAD.pack(seq, flags, len(chunk)) + b"".join(chunk)
        out += (_HEADER.pack(OFFSETS_MARK, len(body)), body)
    return b"".join(out)


def decode_offsets_body(body: bytes | memoryview) -> tuple[int, int, list[OffsetCommit]]:
    """(seq, flags, entries) of one offsets frame body; ProtocolError when it is malformed."""
    size = len(body)
    if size < _OFFSETS_HEAD.size:
        raise ProtocolError(f"offsets frame of {size} bytes (at least {_OFFSETS_HEAD.size})")
    seq, flags, count = _OFFSETS_HEAD.unpack_from(body, 0)
    if seq <= 0:
        raise ProtocolError(f"offsets frame with sequence number {seq}")
    if flags & ~(OFFSETS_REPLACE | OFFSETS_MORE | OFFSETS_RAISE):
        raise ProtocolError(f"offsets frame with unknown flags {flags:#x}")
    if flags & OFFSETS_RAISE and not flags & OFFSETS_REPLACE:
        raise ProtocolError(f"offsets frame flagged RAISE without REPLACE (flags {flags:#x})")
    pos = _OFFSETS_HEAD.size
    entries = []
    try:
        for _ in range(count):
            queue_id, offset, group_len = _ENTRY_HEAD.unpack_from(body, pos)
            pos += _ENTRY_HEAD.size
            group = bytes(body[pos : pos + group_len]).decode()
            pos += group_len
            (topic_len,) = _NAME_LEN.unpack_from(body, pos)
            pos += _NAME_LEN.size
            topic = bytes(body[pos : pos + topic_len]).decode()
            pos += topic_len
            if pos > size:
                raise ProtocolError("offsets frame entry runs past the frame")
            if offset < 0:
                raise ProtocolError(f"negative committed offset {offset} for {group}/{topic}:{queue_id}")
            entries.append(OffsetCommit(group, topic, queue_id, offset))
    except (struct.error, UnicodeDecodeError) as e:
        raise ProtocolError(f"malformed offsets frame entry: {e}") from None
    if pos != size:
        raise ProtocolError(f"offsets frame has {size - pos} byte(s) after its {count} entries")
    return seq, flags, entries


def encode_offsets_ack(seq: int) -> bytes:
    """A slave's ack of the offsets batch `seq` (a report of -seq; only to a master that sent one)."""
    if seq <= 0:
        raise ProtocolError(f"offsets sequence number {seq} must be positive")
    _check_offset(seq, "offsets ack")
    return _REPORT.pack(-seq)


def is_offer(previous: int, offset: int) -> bool:
    """Master side: a report of 0 after a positive one is a tidemq slave's offer (not an ack)."""
    return offset == 0 and previous > 0


class ReportDecoder:
    """Master side: split the slave's byte stream into 8-byte offset reports.

    A partial report is kept until the rest arrives, so reads may split the stream anywhere
    (RocketMQ itself assumes 8-byte alignment from the stream start; so do we).
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._failed = False
        self.last: int | None = None
        """The newest complete report, or None before the first; what the master acts on."""
        self.offsets_acks = False
        """Set once the master sent this slave an offsets frame: a negative report is then
        an offsets ack (-seq), returned as it is; before, it is a protocol error."""

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete report held until the next `feed`."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[int]:
        """Consume ``data``; return every report it completes, oldest first."""
        if self._failed:
            raise ProtocolError("report decoder already failed; the connection must be closed")
        buf = self._buf
        buf += data
        complete = len(buf) - len(buf) % REPORT_SIZE
        if not complete:
            return []
        with memoryview(buf) as view:
            offsets = [value for (value,) in _REPORT.iter_unpack(view[:complete])]
        for value in offsets:
            if value < 0 and not (self.offsets_acks and value > -INT64_MAX - 1):
                self._failed = True
                raise ProtocolError(f"negative offset {value} in slave report")
        del buf[:complete]
        self.last = offsets[-1]
        return offsets


@attrs.frozen
class Transfer:
    """One master frame: ``body`` is the CommitLog data starting at ``offset``.

    The body is read-only: bytes, or a memoryview into the chunk it arrived in (no copy of
    the CommitLog data on its way from the socket to the slave's log).
    """

    offset: int
    body: bytes | memoryview = attrs.field(repr=lambda body: f"<{len(body)} bytes>")

    @property
    def is_heartbeat(self) -> bool:
        """An empty body only says where the master will continue."""
        return not len(self.body)

    @property
    def end(self) -> int:
        """The offset just past this body: the slave's max offset after appending it."""
        return self.offset + len(self.body)


class TransferDecoder:
    """Slave side: split the master's byte stream into `Transfer` frames.

    Data may be split anywhere (inside a header, inside a body, several frames per chunk).
    A header is validated as soon as its 12 bytes arrive, so an oversized or negative size is
    rejected before any of its body is buffered. Frames complete within one fed chunk are
    views into it; only a frame split across chunks is copied together.
    """

    def __init__(self, max_body: int = DEFAULT_BATCH_SIZE) -> None:
        if not 0 <= max_body <= INT32_MAX:
            raise ValueError(f"max_body {max_body} must be between 0 and {INT32_MAX}")
        self.max_body = max_body
        self._pending = bytearray()  # the start of a frame split across chunks
        self._failed = False
        self.extension = False
        """Set once this slave offered the extension: confirm frames are then accepted."""
        self.confirm: int | None = None
        """The newest confirm offset received (None before any)."""
        self.offsets: list[OffsetsBatch] = []
        """Complete offsets batches received, oldest first; the caller takes them (`take_offsets`)."""
        self._batch: list[OffsetCommit] = []  # entries of a batch whose last frame is to come
        self._batch_head: tuple[int, bool, bool] | None = None  # its (seq, replace, raise)

    def take_offsets(self) -> list[OffsetsBatch]:
        """The complete offsets batches decoded so far (and forget them)."""
        batches, self.offsets = self.offsets, []
        return batches

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame (header included) held until the next `feed`."""
        return len(self._pending)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Transfer]:
        """Consume ``data``; return every frame it completes, in stream order."""
        if self._failed:
            raise ProtocolError("transfer decoder already failed; the connection must be closed")
        if not isinstance(data, bytes):
            data = bytes(data)  # the caller may reuse a mutable buffer; frames must not change
        view = memoryview(data)
        end = len(view)
        frames: list[Transfer] = []
        try:
            pos = self._finish_pending(view, frames)
            while end - pos >= HEADER_SIZE:
                offset, size = self._check_header(*_HEADER.unpack_from(view, pos))
                if end - pos - HEADER_SIZE < size:
                    break
                pos += HEADER_SIZE
                self._emit(frames, offset, view[pos : pos + size])
                pos += size
        except ProtocolError:
            self._failed = True
            raise
        if pos < end:
            self._pending += view[pos:]
        return frames

    def _finish_pending(self, view: memoryview, frames: list[Transfer]) -> int:
        """Complete a frame begun in an earlier chunk; returns how much of `view` it used."""
        pending = self._pending
        if not pending:
            return 0
        pos = 0
        if len(pending) < HEADER_SIZE:
            pos = min(HEADER_SIZE - len(pending), len(view))
            pending += view[:pos]
            if len(pending) < HEADER_SIZE:
                return pos
        offset, size = self._check_header(*_HEADER.unpack_from(pending, 0))
        take = min(HEADER_SIZE + size - len(pending), len(view) - pos)
        pending += view[pos : pos + take]
        pos += take
        if len(pending) == HEADER_SIZE + size:
            self._emit(frames, offset, bytes(pending[HEADER_SIZE:]))
            pending.clear()
        return pos

    def _emit(self, frames: list[Transfer], offset: int, body: bytes | memoryview) -> None:
        """A transfer goes to `frames`; a confirm frame's offset to `confirm`; an offsets
        frame to `offsets` once its batch is complete."""
        if offset == OFFSETS_MARK:
            self._offsets_frame(body)
            return
        if offset != CONFIRM_MARK:
            frames.append(Transfer(offset, body))
            return
        (confirm,) = _REPORT.unpack(body)
        if confirm < 0:
            raise ProtocolError(f"negative confirm offset {confirm}")
        self.confirm = confirm if self.confirm is None else max(self.confirm, confirm)

    def _offsets_frame(self, body: bytes | memoryview) -> None:
        seq, flags, entries = decode_offsets_body(body)
        head = (seq, bool(flags & OFFSETS_REPLACE), bool(flags & OFFSETS_RAISE))
        if self._batch_head is not None and self._batch_head != head:
            raise ProtocolError(f"offsets frame of batch {seq} inside batch {self._batch_head[0]}")
        self._batch_head = head
        self._batch += entries
        if not flags & OFFSETS_MORE:
            self.offsets.append(OffsetsBatch(seq, head[1], tuple(self._batch), raise_only=head[2]))
            self._batch, self._batch_head = [], None

    def _check_header(self, offset: int, size: int) -> tuple[int, int]:
        if offset == OFFSETS_MARK and self.extension:
            if not _OFFSETS_HEAD.size <= size <= OFFSETS_MAX_BODY:
                raise ProtocolError(f"offsets frame of {size} bytes (expected {_OFFSETS_HEAD.size}..{OFFSETS_MAX_BODY})")
            return offset, size
        if offset == CONFIRM_MARK and self.extension:
            if size != CONFIRM_SIZE:
                raise ProtocolError(f"confirm frame of {size} bytes (expected {CONFIRM_SIZE})")
            return offset, size
        if offset < 0:
            raise ProtocolError(f"negative offset {offset} in master header")
        if size < 0:
            raise ProtocolError(f"negative body size {size} in master header")
        if size > self.max_body:
            raise ProtocolError(f"body size {size} exceeds the batch limit {self.max_body}")
        return offset, size
