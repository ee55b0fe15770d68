"""ScheduleMessageService: delivers scheduled (DELAY level) messages when they are due.

The store puts a delayed message on `SCHEDULE_TOPIC_XXXX` queue level − 1
(store/schedule.py). Here one task per level reads its queue from the saved offset,
puts each due message on its real topic and queue, and advances; a message not yet due
puts the level to sleep for the time left (each level's queue is in due order: one
delay, store order). A put that fails is retried after `retry_after_s` (RocketMQ: 10 s).

Progress is `<storePathRootDir>/config/delayOffset.json` in RocketMQ's shape,
`{"offsetTable": {"<level>": nextOffset}, "dataVersion": {"counter", "timestamp"}}`
(level keys as JSON strings; RocketMQ's bare integer keys are read too), written atomically after every
round that delivered something and at shutdown. A clean restart therefore neither loses
nor repeats a delivery; after a crash, deliveries are at least once (a put whose offset
write did not happen yet is delivered again), never lost. Runs on a master only.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

import trio

from store import runtime
from store.message_store import MessageStore
from store.schedule import SCHEDULE_TOPIC, DelayError, deliver_timestamp, restore_message
from store.status import GetMessageStatus

from .tables.jsonfile import ConfigFileError, read_json, write_json_atomic

log = logging.getLogger("tidemq.node")

__all__ = ["ScheduleMessageService"]

BATCH = 32


_BARE_INT_KEY = re.compile(r'([{,]\s*)(\d+)(\s*:)')


def _read_fastjson(path: str) -> Any | None:
    """The file (or its backup) as RocketMQ's fastjson writes it, integer map keys bare
    (`{"offsetTable":{1:5}}`); None when neither parses that way either."""
    for candidate in (path, path + ".bak"):
        try:
            with open(candidate, encoding="utf-8") as f:
                return json.loads(_BARE_INT_KEY.sub(r'\1"\2"\3', f.read()))
        except (OSError, ValueError):
            continue
    return None


class ScheduleMessageService:
    """See the module docstring."""

    def __init__(self, store: MessageStore, *, retry_after_s: float = 10.0) -> None:
        self.store = store
        self.levels = store.delay_levels
        self.path = self.path_in(store)
        self.retry_after_s = retry_after_s
        self.offsets: dict[int, int] = {}  # level → next offset of its queue
        self.delivered = 0
        self._counter = 0
        self._persisted: dict[int, int] = {}
        self._lock = trio.Lock()

    @staticmethod
    def path_in(store: MessageStore) -> str:
        return os.path.join(store.config.store_path_root_dir, "config", "delayOffset.json")

    def load(self) -> None:
        """Read delayOffset.json (or its backup); ConfigFileError when it is damaged.
        An offset outside its queue's range is corrected to the nearest end."""
        try:
            raw = read_json(self.path)
        except ConfigFileError:
            raw = _read_fastjson(self.path)
            if raw is None:
                raise
        if raw is None:
            return
        table = raw.get("offsetTable") if isinstance(raw, dict) else None
        if not isinstance(table, dict):
            raise ConfigFileError(f"{self.path}: expected {{\"offsetTable\": {{level: offset}}}}")
        for key, offset in table.items():
            if not str(key).isdigit() or type(offset) is not int or offset < 0:
                raise ConfigFileError(f"{self.path}: bad entry {key!r}: {offset!r}; expected level: offset")
            level = int(key)
            lo = self.store.get_min_offset_in_queue(SCHEDULE_TOPIC, level - 1)
            hi = self.store.get_max_offset_in_queue(SCHEDULE_TOPIC, level - 1)
            fixed = min(max(offset, lo), hi)
            if fixed != offset:
                log.warning("%s: level %d offset %d is outside its queue [%d, %d]; using %d",
                            self.path, level, offset, lo, hi, fixed)
            self.offsets[level] = fixed
        if isinstance(raw.get("dataVersion"), dict):
            self._counter = int(raw["dataVersion"].get("counter", 0))
        self._persisted = dict(self.offsets)
        log.info("loaded delay offsets %s from %s", self.offsets, self.path)

    def _snapshot(self) -> dict[str, Any]:
        return {
            "offsetTable": {str(level): off for level, off in sorted(self.offsets.items())},
            "dataVersion": {"counter": self._counter, "timestamp": int(runtime.wall_clock() * 1000)},
        }

    async def persist(self) -> None:
        """Write delayOffset.json when an offset moved since the last write."""
        async with self._lock:
            if self.offsets == self._persisted:
                return
            self._counter += 1
            snapshot = dict(self.offsets)
            await runtime.run_sync(write_json_atomic, self.path, self._snapshot())
            self._persisted = snapshot

    def status(self) -> dict[str, Any]:
        behind = {
            str(level): self.store.get_max_offset_in_queue(SCHEDULE_TOPIC, level - 1) - off
            for level, off in sorted(self.offsets.items())
        }
        return {"delivered": self.delivered, "offsets": dict(self._snapshot()["offsetTable"]), "waiting": behind}

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """One task per level until cancelled; the offsets are written once more on the way out."""
        try:
            async with trio.open_nursery() as nursery:
                for level in range(1, len(self.levels) + 1):
                    nursery.start_soon(self._level_loop, level)
                task_status.started()
        finally:
            with trio.CancelScope(shield=True):
                try:
                    await self.persist()
                except OSError as e:
                    log.error("cannot write %s: %s", self.path, e)

    async def _level_loop(self, level: int) -> None:
        qid = level - 1
        while True:
            offset = max(self.offsets.get(level, 0), self.store.get_min_offset_in_queue(SCHEDULE_TOPIC, qid))
            if offset >= self.store.get_max_offset_in_queue(SCHEDULE_TOPIC, qid):
                await self.store.wait_for_message(SCHEDULE_TOPIC, qid, offset, timeout=60.0)
                continue
            wait_s = await self._deliver_due(level, offset)
            await self.persist()
            if wait_s > 0:
                await runtime.sleep(wait_s)

    async def _deliver_due(self, level: int, offset: int) -> float:
        """Deliver the due messages from `offset`; seconds to wait before the next round."""
        qid = level - 1
        result = self.store.get_message("SCHEDULE", SCHEDULE_TOPIC, qid, offset, BATCH)
        if result.status is not GetMessageStatus.FOUND:
            if result.next_begin_offset > offset:  # removed by cleanup, or a blank unit: skip over
                self.offsets[level] = result.next_begin_offset
                return 0.0
            return 0.1  # dispatch has not written the unit yet
        for msg in result.messages:
            due = deliver_timestamp(qid, msg.store_timestamp, self.levels)
            left_ms = due - int(self.store.clock() * 1000)
            if left_ms > 0:
                return left_ms / 1000
            try:
                real = restore_message(msg)
            except DelayError as e:
                log.error("level %d: dropping an undeliverable scheduled message: %s", level, e)
                self.offsets[level] = msg.queue_offset + 1
                continue
            put = await self.store.put_message(real)
            if not put.status.stored:
                log.warning("level %d: delivering %s to %s failed (%s: %s); retrying in %.0f s", level,
                            msg.msg_id, real.topic, put.status.name, put.error, self.retry_after_s)
                return self.retry_after_s
            self.offsets[level] = msg.queue_offset + 1
            self.delivered += 1
        self.offsets[level] = max(self.offsets.get(level, 0), result.next_begin_offset)
        return 0.0
