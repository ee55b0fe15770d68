"""Damaged CommitLog ranges: records whose body fails its CRC, found by a read or by recovery.

A bit flip in a record that was durable (media corruption, a sector the disk returns with
flipped bits) is not a torn write: the records after it are good, so the log is not cut there
on a master (it would drop acknowledged messages with it). The store keeps the record but
never serves it as good (reads.py stops before it and names the range), notes the range here,
logs it once as an ERROR naming the offsets, and `status` shows it (`damaged`). A slave cuts its
log at the first damaged record when it recovers and refetches the rest from its master
(recovery.py); a master's operator learns from this note which offsets are gone unless a
replica holds them (docs/store.md, "Corrupt records").

The note lives in memory: a restart finds the range again (recovery reads the segments it
validates with their CRCs; a read finds any other).
"""

from __future__ import annotations

import logging

import attrs

__all__ = ["DamagedRange", "DamagedRanges"]

log = logging.getLogger("tidemq.store")


@attrs.frozen
class DamagedRange:
    """[start, end) of the CommitLog: one record whose body fails its CRC."""

    start: int
    end: int
    reason: str
    found_by: str  # "read" or "recovery"

    def describe(self) -> str:
        return f"[{self.start}, {self.end}) {self.reason} (found by {self.found_by})"

    def to_json(self) -> dict[str, int | str]:
        return {"start": self.start, "end": self.end, "reason": self.reason, "found_by": self.found_by}


class DamagedRanges:
    """The damaged ranges one CommitLog knows of, by start offset."""

    def __init__(self) -> None:
        self.ranges: dict[int, DamagedRange] = {}

    def note(self, start: int, end: int, reason: str, found_by: str) -> DamagedRange:
        """Note [start, end) damaged; the first time, log it (ERROR) with its offsets."""
        known = self.ranges.get(start)
        if known is not None:
            return known
        damaged = self.ranges[start] = DamagedRange(start, end, reason, found_by)
        log.error("CommitLog damaged: the record at [%d, %d) fails its check (%s); it is not served. "
                  "A slave refetches it from its master after a restart; on a master, unless a replica "
                  "holds it, the message(s) in [%d, %d) are gone", start, end, reason, start, end)
        return damaged

    def at(self, offset: int) -> DamagedRange | None:
        """The damaged record starting at `offset`, if one is noted."""
        return self.ranges.get(offset)

    def forget_from(self, offset: int) -> None:
        """The log was cut at `offset`: the ranges from there on are gone with it."""
        for start in [s for s in self.ranges if s >= offset]:
            del self.ranges[start]

    def view(self) -> list[dict[str, int | str]]:
        """For `status`: each range in offset order."""
        return [self.ranges[s].to_json() for s in sorted(self.ranges)]

