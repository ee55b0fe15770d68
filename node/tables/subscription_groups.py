"""Consumer groups' broker-side settings: `<storePathRootDir>/config/subscriptionGroup.json`
(RocketMQ's SubscriptionGroupManager, set with `mqadmin updateSubGroup`).

A group without an entry consumes with the defaults (consumption allowed, the retry limit
its members send). An entry is written by `subgroup_update` on a master, rewritten
atomically (node/tables/jsonfile.py) before the answer, and copied wholesale by slaves with the
topics and offsets (node/slave_sync.py), so a promoted slave enforces what its master did.
`subgroup_delete` (mqadmin deleteSubGroup) drops an entry the same way.
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

__all__ = ["DEFAULT_RETRY_MAX_TIMES", "SubscriptionGroupConfig", "SubscriptionGroupManager"]

DEFAULT_RETRY_MAX_TIMES = 16
"""RocketMQ's SubscriptionGroupConfig.retryMaxTimes."""
MAX_RETRY_TIMES = 10_000


@attrs.frozen
class SubscriptionGroupConfig:
    """One group's settings: whether its members may pull, and how many times a message
    it sends back is retried before it goes to the group's DLQ."""

    group: str
    consume_enable: bool = True
    retry_max_times: int = DEFAULT_RETRY_MAX_TIMES

    def to_json(self) -> dict[str, Any]:
        return {"consume_enable": self.consume_enable, "retry_max_times": self.retry_max_times}

    def to_wire(self) -> dict[str, Any]:
        return {"group": self.group, **self.to_json()}

    @classmethod
    def from_json(cls, group: str, value: Any, source: str) -> SubscriptionGroupConfig:
        """Validate one entry of the file (or of a master's `subgroup_list`)."""
        if not isinstance(value, dict):
            raise ConfigFileError(f"{source}: group {group!r}: expected a map, got {type(value).__name__}")
        enable, times = value.get("consume_enable"), value.get("retry_max_times")
        if type(enable) is not bool:
            raise ConfigFileError(f"{source}: group {group!r}: consume_enable must be true or false, got {enable!r}")
        if type(times) is not int or not 0 <= times <= MAX_RETRY_TIMES:
            raise ConfigFileError(f"{source}: group {group!r}: retry_max_times must be an integer in "
                                  f"0..{MAX_RETRY_TIMES}, got {times!r}")
        return cls(group, enable, times)


class SubscriptionGroupManager:
    """The node's group settings; every change is persisted before it is reported."""

    def __init__(self, store_root: str) -> None:
        self.path = os.path.join(store_root, "config", "subscriptionGroup.json")
        self._groups: dict[str, SubscriptionGroupConfig] = {}
        self._lock = trio.Lock()

    def load(self) -> None:
        """Read the file (or its backup); ConfigFileError when it is damaged."""
        raw = read_json(self.path)
        if raw is None:
            return
        if not isinstance(raw, dict):
            raise ConfigFileError(f"{self.path}: expected a map of groups, got {type(raw).__name__}")
        self._groups = {g: SubscriptionGroupConfig.from_json(g, v, self.path) for g, v in raw.items()}
        log.info("loaded %d subscription group(s) from %s", len(self._groups), self.path)

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self._groups.get(group)

    def list(self) -> list[SubscriptionGroupConfig]:
        return [self._groups[g] for g in sorted(self._groups)]

    async def update(self, group: str, *, consume_enable: bool | None = None,
                     retry_max_times: int | None = None) -> SubscriptionGroupConfig:
        """Set the given settings of `group` (the others keep their value, or the default)."""
        async with self._lock:
            old = self._groups.get(group) or SubscriptionGroupConfig(group)
            config = old
            if consume_enable is not None:
                config = attrs.evolve(config, consume_enable=consume_enable)
            if retry_max_times is not None:
                config = attrs.evolve(config, retry_max_times=retry_max_times)
            if self._groups.get(group) == config:
                return config
            await self._publish({**self._groups, group: config})
        log.info("subscription group %s: consume %s, retry at most %d time(s)", group,
                 "enabled" if config.consume_enable else "DISABLED", config.retry_max_times)
        return config

    async def delete(self, group: str) -> bool:
        """Drop the group's settings (it falls back to the defaults; mqadmin deleteSubGroup);
        False when it had none."""
        async with self._lock:
            if group not in self._groups:
                return False
            await self._publish({g: c for g, c in self._groups.items() if g != group})
        log.info("subscription group %s deleted", group)
        return True

    async def replace_all(self, configs: Iterable[SubscriptionGroupConfig]) -> bool:
        """Take the master's table (a slave syncing); True if it changed."""
        table = {c.group: c for c in configs}
        async with self._lock:
            if table == self._groups:
                return False
            await self._publish(table)
        return True

    async def _publish(self, table: dict[str, SubscriptionGroupConfig]) -> None:
        """Write `table`, then serve it: nothing is read here that a crash could still lose
        (a slave's listing seen before a SIGKILL must be what it restarts with). Under the lock."""
        snapshot = {g: c.to_json() for g, c in table.items()}
        await runtime.run_sync(write_json_atomic, self.path, snapshot)
        self._groups = table
