"""The history of a workload: every operation a client invoked and what it was told.

Jepsen's model: an op is invoked, then completes as `ok` (acknowledged: the node said the
message is stored, with status, msgId, queue and offset), `fail` (the node said it is NOT
stored: SERVICE_NOT_AVAILABLE, MESSAGE_ILLEGAL, ...) or `info` (indeterminate: timeout or
lost connection, it may or may not have landed). Each completion is appended to a
JSON-lines file as it happens, so a crashed run still leaves its history.
"""

from __future__ import annotations

import json
import os
from typing import IO, Any

import attrs

from store import runtime

OK, FAIL, INFO = "ok", "fail", "info"


@attrs.define
class Op:
    """One send. `key` is unique in the run; `seq` counts per producer from 0."""

    process: int
    seq: int
    key: str
    invoked_at: float
    outcome: str | None = None  # None while in flight
    completed_at: float | None = None
    status: str | None = None
    msg_id: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    commitlog_offset: int | None = None
    error: str | None = None
    copies: int = 1
    """How many times the message may be stored: more than once when a client retried it
    after an attempt of unknown outcome (`SendResult.unknown_attempts`; at least once)."""

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in attrs.asdict(self).items() if v is not None and (k != "copies" or v != 1)}


class History:
    """Ops in invocation order, mirrored to `path` (one line per completion)."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.ops: list[Op] = []
        self._file: IO[str] | None = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115

    def invoke(self, process: int, seq: int, key: str) -> Op:
        op = Op(process, seq, key, runtime.wall_clock())
        self.ops.append(op)
        return op

    def complete(self, op: Op, outcome: str, **fields: Any) -> None:
        op.outcome = outcome
        op.completed_at = runtime.wall_clock()
        for name, value in fields.items():
            setattr(op, name, value)
        if self._file is not None:
            self._file.write(json.dumps(op.to_json()) + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def counts(self) -> dict[str, int]:
        out = {OK: 0, FAIL: 0, INFO: 0}
        for op in self.ops:
            out[op.outcome or INFO] += 1  # still in flight at the end = indeterminate
        return out

    def statuses(self) -> dict[str, int]:
        """How often each send status / error status was seen."""
        out: dict[str, int] = {}
        for op in self.ops:
            if op.status:
                out[op.status] = out.get(op.status, 0) + 1
        return out


def key_of(run_id: str, process: int, seq: int) -> str:
    return f"{run_id}-p{process}-{seq}"


def parse_key(key: str) -> tuple[int, int] | None:
    """(process, seq) from a workload key, None for a key of another run."""
    try:
        _run, p, seq = key.rsplit("-", 2)
        return int(p[1:]), int(seq)
    except ValueError:
        return None
