"""The event log: what a run did, in order (each fault struck and healed, each role and
epoch change, each truncation, each send's outcome, the verdict); its SHA-256 is the run's
fingerprint, so one line more or less, or one in another place, is another run."""

from __future__ import annotations

import hashlib

import trio

from cluster.judge.history import Op

__all__ = ["EventLog", "op_line"]


class EventLog:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, what: str) -> None:
        self.lines.append(f"{trio.current_time():10.4f} {what}")

    def digest(self) -> str:
        h = hashlib.sha256()
        for line in self.lines:
            h.update(line.encode())
            h.update(b"\n")
        return h.hexdigest()

def op_line(op: Op, group: str | None = None) -> str:
    where = f" {op.queue_id}@{op.queue_offset} {op.commitlog_offset}" if op.outcome == "ok" else ""
    where += f" on {group}" if group else ""
    copies = f" (may be stored {op.copies}x)" if op.copies > 1 else ""
    return f"send p{op.process} {op.seq}: {op.outcome} {op.status or ''}{where}{copies}"

