"""The epoch file: which master term wrote which part of the CommitLog (RocketMQ 5's
EpochFileCache, persisted as a CheckpointFile).

Every master term has an epoch; the file maps each epoch to the CommitLog offset where that
term's first record starts. A term ends where the next one starts; the last one ends at the
log's max offset. Two nodes whose logs share an epoch *with the same start offset* agree up
to the smaller of their ends for it (`find_consistent_point`), so a returning old master
knows exactly which tail of its log no other node has and must be cut.

On disk (`<storePathRootDir>/epochFileCheckpoint`), text as RocketMQ's CheckpointFile
writes it: the number of entries, a CRC32 masked to 31 bits of the entry lines (each with
its newline; 0 means "do not check"), then one `<epoch>-<startOffset>` line per entry.
Writes keep the previous content in `.bak` (as MixAll.string2File does) and replace the
file atomically (temp file, fsync, rename, fsync of the directory) so a crash leaves the
old or the new list, never a torn one; a file that fails its checks is read from `.bak`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import zlib
from collections.abc import Iterable, Sequence

import attrs

from .durable import write_durably

log = logging.getLogger("tidemq.store")

__all__ = [
    "EPOCH_FILE_NAME",
    "EpochEntry",
    "EpochFileCache",
    "EpochFileError",
    "format_entries",
    "parse_entries",
]

EPOCH_FILE_NAME = "epochFileCheckpoint"
NO_CRC_CHECK = 0
MAX_OFFSET = 2**63 - 1
"""Java's Long.MAX_VALUE: the end of the last entry until the log's max offset is set."""


class EpochFileError(ValueError):
    """An epoch file (or entry list) that cannot be used; the message names why."""


@attrs.frozen
class EpochEntry:
    """One master term: its epoch and the CommitLog offset of its first record."""

    epoch: int
    start_offset: int

    def to_wire(self) -> list[int]:
        return [self.epoch, self.start_offset]


def _crc(data: bytes) -> int:
    """RocketMQ's UtilAll.crc32: CRC32 masked to a non-negative Java int."""
    return zlib.crc32(data) & 0x7FFFFFFF


def format_entries(entries: Sequence[EpochEntry]) -> str:
    """The file content CheckpointFile writes for `entries` (never called with none)."""
    body = "".join(f"{e.epoch}-{e.start_offset}\n" for e in entries)
    return f"{len(entries)}\n{_crc(body.encode())}\n{body}"


def _entry(line: str) -> EpochEntry | None:
    """EpochFileCache's deserializer: `epoch-startOffset`; None for a line that does not parse."""
    epoch, sep, start = line.partition("-")
    if not sep:
        return None
    try:
        return EpochEntry(int(epoch), int(start))
    except ValueError:
        return None


def parse_entries(text: str, source: str = "epoch file") -> list[EpochEntry]:
    """Entries from file content; EpochFileError when the count or the CRC disagree."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise EpochFileError(f"{source}: expected a count and a CRC line, got {len(lines)} line(s)")
    try:
        expected, crc = int(lines[0]), int(lines[1])
    except ValueError:
        raise EpochFileError(f"{source}: the count and CRC lines must be integers") from None
    entries = [e for e in map(_entry, lines[2:]) if e is not None]
    if len(entries) != expected:
        raise EpochFileError(f"{source}: expected {expected} entries, found {len(entries)}")
    truth = _crc("".join(f"{line}\n" for line in lines[2:]).encode())
    if crc != NO_CRC_CHECK and crc != truth:
        raise EpochFileError(f"{source}: CRC {crc} in the file, {truth} computed")
    return entries


def _check_order(entries: Sequence[EpochEntry]) -> None:
    for prev, cur in zip(entries, entries[1:], strict=False):
        if cur.epoch <= prev.epoch or cur.start_offset <= prev.start_offset:
            raise EpochFileError(f"epoch entries must grow in epoch and start offset: {prev} then {cur}")


class EpochFileCache:
    """The epoch entries of one store, kept in memory and flushed on every change.

    `path` None keeps them in memory only (a peer's entries received over the network).
    """

    def __init__(self, path: str | None = None, entries: Iterable[EpochEntry] = ()) -> None:
        self.path = path
        self._entries = list(entries)
        _check_order(self._entries)
        self._last_end = MAX_OFFSET

    @classmethod
    def load(cls, path: str) -> EpochFileCache:
        """Read `path` (or its `.bak` when it is damaged or empty); a missing file is empty
        history, a damaged one without a usable backup is an EpochFileError."""
        entries: list[EpochEntry] = []
        problems = []
        for candidate in (path, f"{path}.bak"):
            try:
                with open(candidate, encoding="utf-8") as f:
                    entries = parse_entries(f.read(), candidate)
            except FileNotFoundError:
                continue
            except (EpochFileError, UnicodeDecodeError) as e:
                problems.append(str(e))
                continue
            if entries:
                break
        if problems and not entries:  # the writes are atomic: this is damage, not a torn write
            raise EpochFileError(f"{'; '.join(problems)}; no usable backup. Move the file away to start "
                                 "without epoch history (a master then starts epoch 1; fencing needs its peers)")
        if problems:
            log.warning("epoch file: %s (used the backup)", "; ".join(problems))
        try:
            return cls(path, entries)
        except EpochFileError as e:
            raise EpochFileError(f"{path}: {e}") from None

    # ---- queries -----------------------------------------------------------------------------
    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def last_epoch(self) -> int:
        """The newest epoch, -1 when there is none (as EpochFileCache.lastEpoch)."""
        return self._entries[-1].epoch if self._entries else -1

    def last_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    def entry(self, epoch: int) -> EpochEntry | None:
        return next((e for e in self._entries if e.epoch == epoch), None)

    def epoch_at(self, offset: int) -> int | None:
        """The epoch whose range holds CommitLog `offset`: the newest entry starting at or
        before it (None before the first entry, or with no history)."""
        found = None
        for e in self._entries:
            if e.start_offset > offset:
                break
            found = e.epoch
        return found

    def end_after(self, epoch: int, log_end: int) -> int:
        """Where this log stops holding what `epoch` wrote (Kafka's OffsetsForLeaderEpoch):
        the start of the first newer epoch, or `log_end` when there is none. Works for an
        epoch this log never had: it ends where the next one it has begins."""
        return next((e.start_offset for e in self._entries if e.epoch > epoch), log_end)

    def end_offset(self, epoch: int) -> int:
        """Where `epoch`'s records end: the next entry's start, or the last end offset."""
        for i, e in enumerate(self._entries):
            if e.epoch == epoch:
                return self._entries[i + 1].start_offset if i + 1 < len(self._entries) else self._last_end
        raise KeyError(epoch)

    def set_last_end_offset(self, offset: int) -> None:
        """The log's max offset ends the last term (ignored when before its start)."""
        if self._entries and self._entries[-1].start_offset <= offset:
            self._last_end = offset

    def find_consistent_point(self, other: EpochFileCache) -> int:
        """RocketMQ's rule: from the newest own epoch down, the first one `other` has with
        the same start offset gives min(own end, other end); -1 when none matches."""
        for own in reversed(self._entries):
            theirs = other.entry(own.epoch)
            if theirs is not None and theirs.start_offset == own.start_offset:
                return min(self.end_offset(own.epoch), other.end_offset(own.epoch))
        return -1

    # ---- changes -----------------------------------------------------------------------------
    def append(self, entry: EpochEntry) -> bool:
        """Start a new term; refused (False) unless epoch and start offset both grow."""
        last = self.last_entry()
        if last is not None and (entry.epoch <= last.epoch or entry.start_offset <= last.start_offset):
            log.error("epoch entry %s refused: the last one is %s", entry, last)
            return False
        self._entries.append(entry)
        self._last_end = MAX_OFFSET
        self.flush()
        return True

    def replace(self, entries: Iterable[EpochEntry]) -> None:
        """Take another node's history wholesale (a slave adopting its master's)."""
        new = list(entries)
        _check_order(new)
        self._entries = new
        self._last_end = MAX_OFFSET
        self.flush()

    def truncate_suffix_by_offset(self, offset: int) -> None:
        """Drop the terms that start at or after `offset`; the last one left ends there."""
        self._truncate([e for e in self._entries if e.start_offset < offset])
        self.set_last_end_offset(offset)

    def truncate_suffix_by_epoch(self, epoch: int) -> None:
        """Drop the terms with epoch >= `epoch`."""
        self._truncate([e for e in self._entries if e.epoch < epoch])

    def _truncate(self, kept: list[EpochEntry]) -> None:
        if len(kept) == len(self._entries):
            return
        self._entries = kept
        self._last_end = MAX_OFFSET
        if kept:
            self.flush()
        elif self.path is not None:  # no history left: nothing may come back from disk
            for path in (self.path, f"{self.path}.bak"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)

    def flush(self) -> None:
        """Persist (never an empty list, as CheckpointFile); the old content goes to `.bak`."""
        if self.path is None or not self._entries:
            return
        try:
            with open(self.path, "rb") as f:
                previous = f.read()
        except FileNotFoundError:
            previous = None
        if previous is not None:
            write_durably(f"{self.path}.bak", previous)
        write_durably(self.path, format_entries(self._entries).encode())
