"""Committed consumer offsets: `<storePathRootDir>/config/consumerOffset.json`.

The file has RocketMQ's shape, `{"offsetTable": {"<topic>@<group>": {"<queueId>": offset}}}`
(topic and group names cannot contain '@'). Commits only touch memory; the table is
written atomically every `PERSIST_INTERVAL_S` when it changed, and at shutdown, as
RocketMQ's ConsumerOffsetManager does: a crash may lose the last seconds of commits, which
makes consumers re-read a few messages, never skip any.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import Any

import attrs
import trio

from store import runtime

from .jsonfile import ConfigFileError, read_json, write_json_atomic

log = logging.getLogger("tidemq.node")

PERSIST_INTERVAL_S = 5.0

__all__ = ["PERSIST_INTERVAL_S", "ConsumerOffsetManager", "OffsetEntry"]


@attrs.frozen
class OffsetEntry:
    """One group's committed offset on one queue: the next offset it will consume."""

    group: str
    topic: str
    queue_id: int
    offset: int

    def to_wire(self) -> dict[str, Any]:
        return attrs.asdict(self)


_Key = tuple[str, str, int]  # group, topic, queue_id


class ConsumerOffsetManager:
    """In-memory table with periodic atomic persistence."""

    def __init__(self, store_root: str) -> None:
        self.path = os.path.join(store_root, "config", "consumerOffset.json")
        self._table: dict[_Key, int] = {}
        self._fresh: set[_Key] = set()
        """Keys committed since this process started (here, or by the master streaming them)."""
        self._complete = False
        """The table is the group's whole table: taken from a complete master's stream since
        this process started. Until then it holds what the file (up to 5 s old, or none) and
        the slave's 10 s pull gave, which may lack commits answered OK (`stale_keys`)."""
        self._version = 0  # bumped on every change
        self._persisted_version = 0
        self._lock = trio.Lock()

    def load(self) -> None:
        """Read the file (or its backup); ConfigFileError when it is damaged."""
        raw = read_json(self.path)
        if raw is None:
            return
        table = raw.get("offsetTable") if isinstance(raw, dict) else None
        if not isinstance(table, dict):
            raise ConfigFileError(f"{self.path}: expected {{\"offsetTable\": {{...}}}}")
        loaded: dict[_Key, int] = {}
        for key, queues in table.items():
            topic, sep, group = key.partition("@")
            if not sep or not topic or not group or not isinstance(queues, dict):
                raise ConfigFileError(f"{self.path}: bad entry {key!r}; expected \"topic@group\": {{queueId: offset}}")
            for qid, offset in queues.items():
                if not str(qid).isdigit() or type(offset) is not int or offset < 0:
                    raise ConfigFileError(f"{self.path}: {key}: bad queue offset {qid!r}: {offset!r}")
                loaded[(group, topic, int(qid))] = offset
        self._table = loaded
        log.info("loaded %d committed offset(s) from %s", len(loaded), self.path)

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        key = (group, topic, queue_id)
        self._fresh.add(key)
        if self._table.get(key) != offset:
            self._table[key] = offset
            self._version += 1

    def fetch(self, group: str, topic: str, queue_id: int) -> int | None:
        return self._table.get((group, topic, queue_id))

    def entries(self) -> list[OffsetEntry]:
        return [OffsetEntry(g, t, q, o) for (g, t, q), o in sorted(self._table.items())]

    def raise_to(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Keep at least `offset` (a master's table that may be behind this one's): not a
        commit, so the key stays as fresh as it was."""
        key = (group, topic, queue_id)
        if self._table.get(key, -1) < offset:
            self._table[key] = offset
            self._version += 1

    def stale_keys(self) -> frozenset[_Key] | None:
        """None when the table is the group's whole table; else the keys not committed since
        this process started, whose offsets may be behind (a master sends such a table to
        raise its slaves', never to lower them, and the fresh keys as commits:
        node/offset_stream.py)."""
        if self._complete:
            return None
        return frozenset(k for k in self._table if k not in self._fresh)

    def replace_all(self, entries: Iterable[OffsetEntry], *, complete: bool = False) -> bool:
        """Take another node's table (a slave syncing from its master); True if it changed.
        `complete`: a complete master's whole table from its HA stream (not the 10 s pull)."""
        table = {(e.group, e.topic, e.queue_id): e.offset for e in entries}
        self._complete = complete
        self._fresh = set(table) if complete else set()
        if table == self._table:
            return False
        self._table = table
        self._version += 1
        return True

    @property
    def dirty(self) -> bool:
        return self._version != self._persisted_version

    def _snapshot(self) -> dict[str, Any]:
        table: dict[str, dict[str, int]] = {}
        for (group, topic, qid), offset in sorted(self._table.items()):
            table.setdefault(f"{topic}@{group}", {})[str(qid)] = offset
        return {"offsetTable": table}

    async def persist(self, *, force: bool = False) -> None:
        """Write the table if it changed since the last write (or always with `force`)."""
        async with self._lock:
            if not force and not self.dirty:
                return
            version = self._version
            await runtime.run_sync(write_json_atomic, self.path, self._snapshot())
            self._persisted_version = version

    async def run_persister(
        self,
        interval_s: float = PERSIST_INTERVAL_S,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Persist every `interval_s` until cancelled (the node persists once more at shutdown)."""
        task_status.started()
        while True:
            await runtime.sleep(interval_s)
            try:
                await self.persist()
            except OSError as e:
                log.error("cannot persist consumer offsets to %s: %s", self.path, e)
