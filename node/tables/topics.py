"""Topic configs of one node: `<storePathRootDir>/config/topics.json`.

The file maps each topic to `{"read_queue_nums", "write_queue_nums", "perm"}` and is
rewritten atomically (node/tables/jsonfile.py) on every change, so a topic a client was told
exists survives a crash. On a master, topics come from `topic_create` or are created on
first send when `autoCreateTopicEnable` is on; a slave takes the master's table wholesale
(`replace_all`), as RocketMQ's SlaveSynchronize does.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterable
from typing import Any

import attrs
import trio

from store import runtime

from .changes import Changes
from .jsonfile import ConfigFileError, read_json, write_json_atomic

log = logging.getLogger("tidemq.node")

PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1
DEFAULT_PERM = PERM_READ | PERM_WRITE
MAX_QUEUE_NUMS = 1024

__all__ = [
    "DEFAULT_PERM",
    "PERM_READ",
    "PERM_WRITE",
    "TopicConfig",
    "TopicConfigManager",
]


@attrs.frozen
class TopicConfig:
    """One topic's queue counts and RocketMQ PermName bits."""

    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = DEFAULT_PERM

    @property
    def writeable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    def to_json(self) -> dict[str, int]:
        return {
            "read_queue_nums": self.read_queue_nums,
            "write_queue_nums": self.write_queue_nums,
            "perm": self.perm,
        }

    def to_wire(self) -> dict[str, Any]:
        return {"topic": self.topic, **self.to_json()}

    @classmethod
    def from_json(cls, topic: str, value: Any, source: str) -> TopicConfig:
        """Validate one entry of the file (or of a master's `topic_list`)."""
        if not isinstance(value, dict):
            raise ConfigFileError(f"{source}: topic {topic!r}: expected a map, got {type(value).__name__}")
        fields = {}
        for name, low, high in (
            ("read_queue_nums", 1, MAX_QUEUE_NUMS),
            ("write_queue_nums", 1, MAX_QUEUE_NUMS),
            ("perm", 0, 7),
        ):
            v = value.get(name)
            if type(v) is not int or not low <= v <= high:
                raise ConfigFileError(
                    f"{source}: topic {topic!r}: {name} must be an integer in {low}..{high}, got {v!r}"
                )
            fields[name] = v
        return cls(topic=topic, **fields)


class TopicConfigManager:
    """The node's topic table; every change is persisted before it is reported."""

    def __init__(self, store_root: str, *, auto_create: bool, default_queue_nums: int) -> None:
        self.path = os.path.join(store_root, "config", "topics.json")
        self.auto_create = auto_create
        self.default_queue_nums = default_queue_nums
        self._topics: dict[str, TopicConfig] = {}
        self._rr: dict[str, itertools.count] = {}
        self._lock = trio.Lock()
        self.changes = Changes()
        """Bumped after a change is persisted: the node re-registers with the name servers
        so routes learn a new topic at once rather than at the next period."""

    def load(self) -> None:
        """Read the file (or its backup); ConfigFileError when it is damaged."""
        raw = read_json(self.path)
        if raw is None:
            return
        if not isinstance(raw, dict):
            raise ConfigFileError(f"{self.path}: expected a map of topics, got {type(raw).__name__}")
        self._topics = {t: TopicConfig.from_json(t, v, self.path) for t, v in raw.items()}
        log.info("loaded %d topic(s) from %s", len(self._topics), self.path)

    def get(self, topic: str) -> TopicConfig | None:
        return self._topics.get(topic)

    def list(self) -> list[TopicConfig]:
        return [self._topics[t] for t in sorted(self._topics)]

    async def create(
        self, topic: str, read_queue_nums: int, write_queue_nums: int, perm: int = DEFAULT_PERM
    ) -> TopicConfig:
        """Create or update a topic and persist the table."""
        config = TopicConfig(topic, read_queue_nums, write_queue_nums, perm)
        if self._topics.get(topic) != config:
            self._topics[topic] = config
            await self._persist()
            log.info("topic %s: read %d, write %d, perm %d", topic, read_queue_nums, write_queue_nums, perm)
            self.changes.bump()
        return config

    async def delete(self, topic: str) -> bool:
        """Remove a topic from the table (its files are left to the cleanup service); False
        when it was not there."""
        if self._topics.pop(topic, None) is None:
            return False
        self._rr.pop(topic, None)
        await self._persist()
        log.info("topic %s deleted", topic)
        self.changes.bump()
        return True

    async def for_send(self, topic: str) -> TopicConfig | None:
        """The topic's config, auto-created when allowed; None if it does not exist."""
        config = self._topics.get(topic)
        if config is None and self.auto_create:
            n = self.default_queue_nums
            config = await self.create(topic, n, n, DEFAULT_PERM)
        return config

    def select_queue(self, config: TopicConfig) -> int:
        """Round robin over the write queues, for sends that do not name a queue."""
        counter = self._rr.setdefault(config.topic, itertools.count())
        return next(counter) % config.write_queue_nums

    async def replace_all(self, configs: Iterable[TopicConfig]) -> bool:
        """Take another node's table (a slave syncing from its master); True if it changed."""
        table = {c.topic: c for c in configs}
        if table == self._topics:
            return False
        self._topics = table
        await self._persist()
        self.changes.bump()
        return True

    async def _persist(self) -> None:
        async with self._lock:  # one writer at a time; each writes the newest table
            snapshot = {t: c.to_json() for t, c in self._topics.items()}
            await runtime.run_sync(write_json_atomic, self.path, snapshot)
