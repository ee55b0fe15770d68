"""Offsets a broadcasting member keeps itself, in a local file (RocketMQ's
LocalFileOffsetStore): in broadcasting every member reads every queue, so one committed
offset per group on the broker cannot say where each member is.

The file is `<root>/<client id>/<group>/offsets.json` (root: `~/.tidemq_offsets`, like
RocketMQ's `~/.rocketmq_offsets`):

    {"offsetTable": [{"topic": "Orders", "brokerName": "broker-a", "queueId": 0, "offset": 12}, ...]}

Each save writes `offsets.json.tmp` and fsyncs it, moves the previous file to
`offsets.json.bak`, renames the new one into place and fsyncs the directory, so a crash
leaves the new file, or (between the two renames) only the backup, which `load` reads
then. A file that cannot be parsed is an error naming it (and the backup, to copy back),
never a silent start from scratch. A lock file (`offsets.json.lock`, flock) keeps a second
process with the same client id and group out: two writers would undo each other's saves.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from pathlib import Path
from typing import Any

from store.durable import write_durably

from .routing import MessageQueue

__all__ = ["DEFAULT_OFFSETS_DIR", "LocalOffsetStore", "OffsetFileError"]

DEFAULT_OFFSETS_DIR = Path("~/.tidemq_offsets")
_SAFE = re.compile(r"[^A-Za-z0-9._@%-]")


class OffsetFileError(ValueError):
    """A local offsets file that cannot be read or written, or is in use (names the file)."""


def _component(name: str, what: str) -> str:
    """A client id or group as one path component (`/` and other odd characters become `_`)."""
    if not name:
        raise ValueError(f"the {what} is empty")
    safe = _SAFE.sub("_", name)
    return "_" + safe if safe.startswith(".") else safe


class LocalOffsetStore:
    """One member's offsets of one group, in memory and in its file (see the module
    docstring). `open()` takes the lock and reads the file; `save()` persists; `close()`
    saves and lets the lock go."""

    def __init__(self, client_id: str, group: str, root: str | os.PathLike[str] | None = None) -> None:
        base = Path(root).expanduser() if root is not None else DEFAULT_OFFSETS_DIR.expanduser()
        self.directory = base / _component(client_id, "client id") / _component(group, "group")
        self.path = self.directory / "offsets.json"
        self.backup = self.directory / "offsets.json.bak"
        self._offsets: dict[MessageQueue, int] = {}
        self._saved: dict[MessageQueue, int] = {}
        self._lock_fd: int | None = None

    # ---- life ---------------------------------------------------------------------------

    def open(self) -> None:
        """Lock the member's directory and read its offsets (none when it has no file)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / "offsets.json.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OffsetFileError(f"{self.path} is in use by another process (a member with the same client id "
                                  f"and group is running): give this one another client id") from None
        self._lock_fd = fd
        try:
            self._offsets = self._read()
        except BaseException:
            self._unlock()
            raise
        self._saved = dict(self._offsets)

    def close(self) -> None:
        """Save what changed, then let the lock go."""
        try:
            if self._lock_fd is not None:
                self.save()
        finally:
            self._unlock()

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing drops the flock
            self._lock_fd = None

    # ---- offsets ------------------------------------------------------------------------

    def get(self, queue: MessageQueue) -> int | None:
        return self._offsets.get(queue)

    def update(self, queue: MessageQueue, offset: int) -> None:
        """The queue's next offset to read (kept in memory until `save`)."""
        self._offsets[queue] = offset

    @property
    def offsets(self) -> dict[MessageQueue, int]:
        return dict(self._offsets)

    def save(self) -> bool:
        """Write the file when an offset changed since the last save; True when it wrote."""
        if self._lock_fd is None:
            raise OffsetFileError(f"{self.path}: the store is not open")
        snapshot = dict(self._offsets)  # one copy: the event loop may update it meanwhile
        if snapshot == self._saved:
            return False
        table = [{"topic": q.topic, "brokerName": q.broker_name, "queueId": q.queue_id, "offset": o}
                 for q, o in sorted(snapshot.items())]
        data = (json.dumps({"offsetTable": table}, indent=1) + "\n").encode()
        try:
            write_durably(self.path, data, backup=True)
        except OSError as e:
            raise OffsetFileError(f"cannot write {self.path}: {e}") from e
        self._saved = snapshot
        return True

    def _read(self) -> dict[MessageQueue, int]:
        """The file's table; the backup's when only the backup exists (a crash between the
        two renames); empty when neither does."""
        for path in (self.path, self.backup):
            if path.exists():
                return self._parse(path)
        return {}

    def _parse(self, path: Path) -> dict[MessageQueue, int]:
        hint = f" (its backup {self.backup} may be copied over it)" if path == self.path and self.backup.exists() else ""
        try:
            data: Any = json.loads(path.read_bytes())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise OffsetFileError(f"cannot read the offsets file {path}: {e}{hint}") from e
        table = data.get("offsetTable") if isinstance(data, dict) else None
        if not isinstance(table, list):
            raise OffsetFileError(f"the offsets file {path} has no offsetTable list{hint}")
        out: dict[MessageQueue, int] = {}
        for entry in table:
            try:
                queue = MessageQueue(str(entry["topic"]), str(entry["brokerName"]), int(entry["queueId"]))
                offset = int(entry["offset"])
            except (TypeError, KeyError, ValueError) as e:
                raise OffsetFileError(f"the offsets file {path} has a bad entry {entry!r}{hint}") from e
            if offset < 0 or isinstance(entry["offset"], bool):
                raise OffsetFileError(f"the offsets file {path} has a bad offset in {entry!r}{hint}")
            out[queue] = offset
        return out
