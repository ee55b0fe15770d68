"""A slave's copy of its master's topics and consumer offsets (RocketMQ SlaveSynchronize).

Every `SYNC_INTERVAL_S` (and once at start) the slave asks its master's client address
(`masterAddr`) for `topic_list` and `offset_list` and takes both tables wholesale, so
consumers reading from the slave while the master is down resume where they committed.
The offsets of a pull are not taken once the master streamed them over the HA connection
this term (node/offset_stream.py): those are newer, and a master that restarted streams its
table again when the slave reconnects.
It also copies the master's delay-level progress (the `schedule` part of its `status`)
into its own `config/delayOffset.json`, as RocketMQ's syncDelayOffset does, so a slave
that becomes master does not deliver the scheduled messages again.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from typing import Any, TypeVar

import trio

from ha.net import TCP, Network
from store import runtime
from wire.client import BadRequest, Connection, TidemqError, connect
from wire.credentials import Credentials
from wire.options import ConnectOptions
from wire.protocol import GetStatus, OffsetList, SubGroupList, TopicList

from .tables.jsonfile import ConfigFileError, write_json_atomic
from .tables.offsets import ConsumerOffsetManager, OffsetEntry
from .tables.subscription_groups import SubscriptionGroupConfig, SubscriptionGroupManager
from .tables.topics import TopicConfig, TopicConfigManager

T = TypeVar("T")
log = logging.getLogger("tidemq.node")

SYNC_INTERVAL_S = 10.0

__all__ = ["SYNC_INTERVAL_S", "SlaveSync"]


def _offset_entries(raw: Any, source: str) -> list[OffsetEntry]:
    if not isinstance(raw, list):
        raise ConfigFileError(f"{source}: 'offsets' must be an array")
    out = []
    for item in raw:
        if not (
            isinstance(item, dict)
            and isinstance(item.get("group"), str)
            and isinstance(item.get("topic"), str)
            and type(item.get("queue_id")) is int
            and type(item.get("offset")) is int
        ):
            raise ConfigFileError(f"{source}: bad offset entry {item!r}")
        out.append(OffsetEntry(item["group"], item["topic"], item["queue_id"], item["offset"]))
    return out


def _named_entries(raw: Any, source: str, field: str, key: str, parse: Callable[[str, Any, str], T]) -> list[T]:
    """A master's list of maps named by `key` (topics by "topic", groups by "group"), each
    validated as the file entry it becomes."""
    if not isinstance(raw, list):
        raise ConfigFileError(f"{source}: {field!r} must be an array")
    out = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get(key), str):
            raise ConfigFileError(f"{source}: bad {key} entry {item!r}")
        out.append(parse(item[key], item, source))
    return out


def _topic_configs(raw: Any, source: str) -> list[TopicConfig]:
    return _named_entries(raw, source, "topics", "topic", TopicConfig.from_json)


def _group_configs(raw: Any, source: str) -> list[SubscriptionGroupConfig]:
    return _named_entries(raw, source, "groups", "group", SubscriptionGroupConfig.from_json)


class SlaveSync:
    """Periodic pull of the master's tables; failures are logged and retried next round.

    `master_addr` may be None (no masterAddr in the config): the name server registration
    fills it in from the group's master (`set_master_addr`) and rounds start then.
    """

    def __init__(
        self,
        master_addr: str | None,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        *,
        max_frame_size: int,
        interval_s: float = SYNC_INTERVAL_S,
        delay_offset_path: str | None = None,
        subgroups: SubscriptionGroupManager | None = None,
        credentials: Credentials | None = None,
        tls: ssl.SSLContext | None = None,
        net: Network = TCP,
        offsets_stream: Callable[[], tuple[bool, int]] | None = None,
    ) -> None:
        self.master_addr = master_addr
        self.connect_options = ConnectOptions(max_frame_size=max_frame_size, credentials=credentials, tls=tls, net=net)
        self.topics = topics
        self.offsets = offsets
        self.subgroups = subgroups
        self.interval_s = interval_s
        self.offsets_stream = offsets_stream
        """(the master streams offsets over HA now, batches taken so far): while it does, or
        when a batch came during a round, the pulled table is older and is not taken."""
        self.delay_offset_path = delay_offset_path
        self._delay_offsets: dict[str, int] | None = None
        self.last_sync_ms: int | None = None
        self.last_error: str | None = None
        self._address_known = trio.Event()
        if master_addr is not None:
            self._address_known.set()

    def set_master_addr(self, address: str) -> None:
        if address != self.master_addr:
            log.info("topic/offset sync now follows master %s (was %s)", address, self.master_addr)
            self.master_addr = address
            self._address_known.set()

    def status(self) -> dict[str, Any]:
        return {"master_addr": self.master_addr, "last_sync_ms": self.last_sync_ms, "last_error": self.last_error}

    async def sync_once(self) -> None:
        """One round; raises TidemqError / ConfigFileError when it cannot complete."""
        if self.master_addr is None:
            return
        source = f"master {self.master_addr}"
        before = self.offsets_stream() if self.offsets_stream is not None else (False, 0)
        async with connect(self.master_addr, self.connect_options) as conn:
            topics = _topic_configs((await conn.call(TopicList())).topics, source)
            offset_reply = await conn.call(OffsetList())
            offsets = _offset_entries(offset_reply.offsets, source)
            schedule = (await conn.call(GetStatus())).schedule if self.delay_offset_path else None
            groups = await self._group_configs(conn, source) if self.subgroups else None
        if await self.topics.replace_all(topics):
            log.info("synced %d topic(s) from %s", len(topics), self.master_addr)
        after = self.offsets_stream() if self.offsets_stream is not None else (False, 0)
        # the HA stream's table is newer: while it streams, when a batch came during the pull,
        # and once any came this term (a master that restarted streams its table again when
        # the slave reconnects; its pulled table is its file's, seed 1121)
        streamed = before[0] or after[0] or before[1] > 0 or after[1] > 0
        # a candidate's table is its file's (seed 248: it replaced the fresher one here, then
        # this slave was elected with it)
        if not streamed and not offset_reply.held and self.offsets.replace_all(offsets):
            log.info("synced %d consumer offset(s) from %s", len(offsets), self.master_addr)
        if self.subgroups is not None and groups is not None and await self.subgroups.replace_all(groups):
            log.info("synced %d subscription group(s) from %s", len(groups), self.master_addr)
        if isinstance(schedule, dict):
            await self._take_delay_offsets(schedule.get("offsets"), source)

    async def _group_configs(self, conn: Connection, source: str) -> list[SubscriptionGroupConfig] | None:
        """The master's subscription groups; None from a master that predates them (a
        rolling upgrade: the topics and offsets still sync)."""
        try:
            return _group_configs((await conn.call(SubGroupList())).groups, source)
        except BadRequest as e:
            log.info("%s has no subscription groups to sync (%s)", source, e)
            return None

    async def _take_delay_offsets(self, raw: Any, source: str) -> None:
        if not isinstance(raw, dict) or not all(
            str(k).isdigit() and type(v) is int and v >= 0 for k, v in raw.items()
        ):
            raise ConfigFileError(f"{source}: bad delay offsets {raw!r}")
        if raw == self._delay_offsets or self.delay_offset_path is None:
            return
        table = {"offsetTable": dict(raw), "dataVersion": {"counter": 0, "timestamp": int(runtime.wall_clock() * 1000)}}
        await runtime.run_sync(write_json_atomic, self.delay_offset_path, table)
        self._delay_offsets = dict(raw)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await self._address_known.wait()
        while True:
            failed: BaseException | None = None
            try:
                await self.sync_once()
            except* (TidemqError, ConfigFileError, OSError) as group:
                # except*: should a group come out with a Cancelled in it (the node shutting
                # down for a role change), the error is logged and the Cancelled goes on and
                # ends this task instead of the process (connect itself raises the Cancelled
                # bare: wire.client.block_nursery)
                failed = group.exceptions[0]
            if failed is not None:
                if self.last_error != str(failed):
                    log.warning("cannot sync topics and offsets from %s: %s", self.master_addr, failed)
                self.last_error = str(failed)
            else:
                self.last_sync_ms = int(runtime.wall_clock() * 1000)
                self.last_error = None
            await runtime.sleep(self.interval_s)
