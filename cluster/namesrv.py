"""The name server: brokers register and heartbeat, clients ask where a topic lives.

Like RocketMQ's NameServer it keeps no state on disk: every broker re-registers every
`registerNameServerPeriod` (node/registration.py) with its identity, addresses, topic
configs and max CommitLog offset, so a restarted name server is whole again within one
period. A broker is dropped when it has not registered for `brokerExpireMs` (default 30 s),
and it is marked `alive: false` at once when the connection it registered over closes
(a SIGKILLed broker's socket is closed by its kernel), as RocketMQ's
BrokerHousekeepingService does on a channel close, so clients stop routing to it before
it expires.

The name server speaks the client protocol's framing and envelope (node/protocol.py) with
its own op table, `NAMESRV_OPS`; docs/protocol.md ("Name server") is the reference.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import os
import signal
import time
import tomllib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import attrs
import trio

from node.config import ConfigError, parse_properties
from node.protocol import (
    INT,
    LIST_STR,
    STR,
    Field,
    FieldType,
    InvalidRequest,
    Request,
    Status,
    error_response,
    ok_response,
    wrong_type,
)
from node.server import ClientServer
from store.address import AddressError, format_host_port, split_host_port
from store.message import topic_error

from .routing import BrokerInfo, groups_serving

log = logging.getLogger("tidemq.namesrv")

__all__ = [
    "NAMESRV_OPS",
    "NameServer",
    "NamesrvConfig",
    "RouteTable",
    "load_namesrv_config",
]

MiB = 1024 * 1024
DEFAULT_PORT = 9876
ROLES = ("SYNC_MASTER", "ASYNC_MASTER", "SLAVE")
SHUTDOWN_GRACE_S = 3.0


# ---------------------------------------------------------------- config


@attrs.define(kw_only=True)
class NamesrvConfig:
    """Name server settings; the file uses the camelCase keys in `_KEYS`."""

    listen_port: int = DEFAULT_PORT
    listen_address: str = "127.0.0.1"
    broker_expire_ms: int = 30_000
    max_frame_size: int = 8 * MiB
    source: str = attrs.field(default="", eq=False)

    def __attrs_post_init__(self) -> None:
        where = f"{self.source}: " if self.source else ""
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"{where}listenPort must be in 0..65535 (0 picks a free port), got {self.listen_port}")
        if not self.listen_address.strip():
            raise ConfigError(f"{where}listenAddress must not be empty")
        if not 100 <= self.broker_expire_ms <= 3_600_000:
            raise ConfigError(f"{where}brokerExpireMs must be in 100..3600000, got {self.broker_expire_ms}")
        if not 64 * 1024 <= self.max_frame_size <= 1024 * MiB:
            raise ConfigError(f"{where}maxFrameSize must be in 65536..{1024 * MiB}, got {self.max_frame_size}")


_KEYS = {
    "listenPort": ("listen_port", int),
    "listenAddress": ("listen_address", str),
    "brokerExpireMs": ("broker_expire_ms", int),
    "maxFrameSize": ("max_frame_size", int),
}


def namesrv_config_from_mapping(values: Mapping[str, Any], *, source: str = "") -> NamesrvConfig:
    """Build from RocketMQ-style keys; an unknown key or a wrong type names the key."""
    where = f"{source}: " if source else ""
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key not in _KEYS:
            close = difflib.get_close_matches(key, list(_KEYS), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(_KEYS)}"
            raise ConfigError(f"{where}unknown key {key!r}{hint}")
        name, type_ = _KEYS[key]
        if type_ is int and isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise ConfigError(f"{where}{key} must be an integer, got {value!r}") from None
        if type(value) is not type_:
            raise ConfigError(f"{where}{key} must be {'an integer' if type_ is int else 'a string'}, got {value!r}")
        kwargs[name] = value
    return NamesrvConfig(**kwargs, source=source)


def load_namesrv_config(path: str) -> NamesrvConfig:
    """Read a namesrv `.toml` (or `.properties`) file, e.g. conf/2m-2s-sync/namesrv.toml."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config file: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text: {e}") from None
    if os.path.splitext(path)[1].lower() == ".properties":
        values: Mapping[str, Any] = parse_properties(text, source=path)
    else:
        try:
            values = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path}: TOML syntax error: {e}") from None
    return namesrv_config_from_mapping(values, source=path)


# ---------------------------------------------------------------- op schema


def _non_empty(v: str) -> str | None:
    return None if v.strip() else "must not be empty"


def _address(v: str) -> str | None:
    try:
        split_host_port(v)
    except AddressError as e:
        return str(e)
    return None


def _addresses(v: list[str]) -> str | None:
    return next((f"[{i}] {problem}" for i, a in enumerate(v) if (problem := _address(a))), None)


def _role(v: str) -> str | None:
    return None if v in ROLES else f"must be one of {', '.join(ROLES)}, got {v!r}"


def _non_negative(v: int) -> str | None:
    return None if 0 <= v < 2**63 else f"must be in 0..2^63-1, got {v}"


def _topic(v: str) -> str | None:
    return topic_error(v)


_QUEUE_DATA_KEYS = (("read_queue_nums", 1, 1024), ("write_queue_nums", 1, 1024), ("perm", 0, 7))


def _check_topics(value: Any, path: str) -> dict[str, dict[str, int]]:
    """{topic: {read_queue_nums, write_queue_nums, perm}}: the broker's topic table."""
    if type(value) is not dict:
        raise wrong_type(path, "a map of topic → queue data", value)
    out: dict[str, dict[str, int]] = {}
    for topic, data in value.items():
        if type(topic) is not str:
            raise wrong_type(f"{path} key", "a text string", topic)
        problem = topic_error(topic)
        if problem:
            raise _bad(f"field {path!r}: {problem}")
        if type(data) is not dict:
            raise wrong_type(f"{path}[{topic!r}]", "a map", data)
        unknown = set(data) - {k for k, _, _ in _QUEUE_DATA_KEYS}
        if unknown:
            raise _bad(f"field {path}[{topic!r}] has unknown key {sorted(map(str, unknown))[0]!r}")
        entry = {}
        for key, low, high in _QUEUE_DATA_KEYS:
            v = data.get(key)
            if type(v) is not int or not low <= v <= high:
                raise _bad(f"field {path}[{topic!r}].{key} must be an integer in {low}..{high}, got {v!r}")
            entry[key] = v
        out[topic] = entry
    return out


def _bad(message: str) -> InvalidRequest:
    return InvalidRequest(message)


TOPICS = FieldType("a map of topic → queue data", _check_topics)
_CLUSTER = Field("cluster", STR, True, None, _non_empty)
_BROKER_NAME = Field("broker_name", STR, True, None, _non_empty)
_BROKER_ID = Field("broker_id", INT, True, None, _non_negative)
_ADDRESS = Field("address", STR, True, None, _address)

NAMESRV_OPS: dict[str, tuple[Field, ...]] = {
    "register_broker": (
        _CLUSTER,
        _BROKER_NAME,
        _BROKER_ID,
        Field("role", STR, True, None, _role),
        _ADDRESS,
        Field("ha_address", STR, False, None, _address),
        Field("topics", TOPICS, False, {}),
        Field("max_offset", INT, False, 0, _non_negative),
        Field("epoch", INT, False, None, _non_negative),
        # controllerMode etcd: the group's lease holder and in-sync slaves, as this broker sees them
        Field("lease_holder", STR, False, None, _address),
        Field("in_sync", LIST_STR, False, None, _addresses),
    ),
    "unregister_broker": (_CLUSTER, _BROKER_NAME, _BROKER_ID, _ADDRESS),
    "get_route": (Field("topic", STR, True, None, _topic),),
    "get_cluster_info": (),
    "status": (),
}
"""The name server's op table (node/protocol.parse_request validates against it)."""


# ---------------------------------------------------------------- the table


@attrs.define(eq=False)
class _Registration:
    """A broker's last registration: what it said (`broker`), when (time.monotonic()) and
    over which connection (`peer`), which only the name server needs."""

    broker: BrokerInfo
    last_update: float
    peer: str | None

    def age_ms(self, now: float) -> int:
        return int((now - self.last_update) * 1000)

    def seen_at(self, now: float) -> BrokerInfo:
        """The broker as a client is told about it at `now` (with its age)."""
        return attrs.evolve(self.broker, age_ms=self.age_ms(now))


class RouteTable:
    """Brokers by (brokerName, brokerId): what the name server knows. No I/O, so tests and
    the server share it; `now` is time.monotonic() unless given."""

    def __init__(self, expire_ms: int) -> None:
        self.expire_s = expire_ms / 1000
        self._brokers: dict[tuple[str, int], _Registration] = {}

    def __len__(self) -> int:
        return len(self._brokers)

    def register(self, fields: Mapping[str, Any], peer: str | None, now: float | None = None) -> BrokerInfo | None:
        """Record a registration (`fields` as `register_broker` validated them); returns the
        broker as recorded, or None when refused: a master (brokerId 0) whose epoch is older
        than the registered one's stays out (a returning old master must not take the route
        from the promoted one)."""
        now = time.monotonic() if now is None else now
        key = (fields["broker_name"], fields["broker_id"])
        old = self._brokers.get(key)
        epoch = fields.get("epoch")
        if (key[1] == 0 and old is not None and old.broker.address != fields["address"]
                and old.broker.epoch is not None and (epoch is None or epoch < old.broker.epoch)):
            log.warning("refused %s as master of %s: its epoch %s is older than %s's epoch %d",
                        fields["address"], key[0], epoch, old.broker.address, old.broker.epoch)
            return None
        # the same address under another id or name: the node changed identity (promotion)
        for other_key, other in list(self._brokers.items()):
            if other_key != key and other.broker.address == fields["address"]:
                log.info("%s now registers as %s/%d (was %s/%d)", fields["address"], key[0], key[1], *other_key)
                del self._brokers[other_key]
        if old is None:
            log.info("broker %s/%d (%s, %s) registered", key[0], key[1], fields["role"], fields["address"])
        elif old.broker.address != fields["address"]:
            log.warning("broker %s/%d moved from %s to %s", key[0], key[1], old.broker.address, fields["address"])
        elif not old.broker.alive:
            log.info("broker %s/%d (%s) is back", key[0], key[1], fields["address"])
        broker = attrs.evolve(BrokerInfo.from_wire(fields), last_update_ms=int(time.time() * 1000))
        self._brokers[key] = _Registration(broker, now, peer)
        return broker

    def master_of(self, broker_name: str) -> BrokerInfo | None:
        registration = self._brokers.get((broker_name, 0))
        return registration.broker if registration else None

    def unregister(self, broker_name: str, broker_id: int, address: str) -> bool:
        """Remove a broker that stops gracefully; only if `address` is the registered one,
        so a late unregister of an old process cannot remove its successor."""
        registration = self._brokers.get((broker_name, broker_id))
        if registration is None or registration.broker.address != address:
            return False
        del self._brokers[(broker_name, broker_id)]
        log.info("broker %s/%d (%s) unregistered", broker_name, broker_id, address)
        return True

    def connection_closed(self, peer: str | None) -> None:
        """The connection `peer` ended: its brokers are not alive (until they register again)."""
        if peer is None:
            return
        for registration in self._brokers.values():
            b = registration.broker
            if registration.peer == peer and b.alive:
                registration.broker = attrs.evolve(b, alive=False)
                log.info("broker %s/%d (%s): registration connection closed; marked not alive",
                         b.broker_name, b.broker_id, b.address)

    def expire(self, now: float | None = None) -> list[BrokerInfo]:
        """Drop brokers not heard from for brokerExpireMs; returns them."""
        now = time.monotonic() if now is None else now
        gone = [r for r in self._brokers.values() if now - r.last_update > self.expire_s]
        for r in gone:
            b = r.broker
            del self._brokers[(b.broker_name, b.broker_id)]
            log.warning("broker %s/%d (%s) expired: not heard from for %d ms",
                        b.broker_name, b.broker_id, b.address, r.age_ms(now))
        return [r.broker for r in gone]

    def route(self, topic: str, now: float | None = None) -> list[dict[str, Any]]:
        """The groups serving `topic` (any of its brokers has it), by brokerName.

        Each group lists all its brokers (so a consumer can fall back to a slave) and the
        queue data of its master, or of its lowest-id broker that has the topic when the
        master is gone.
        """
        now = time.monotonic() if now is None else now
        brokers = [r.seen_at(now) for r in self._brokers.values()]
        return [
            {
                "broker_name": name,
                "cluster": members[0].cluster,
                "brokers": [b.route_entry() for b in members],
                "queue_data": attrs.asdict(queue_data),
            }
            for name, members, queue_data in groups_serving(topic, brokers)
        ]

    def cluster_info(self, now: float | None = None) -> list[dict[str, Any]]:
        now = time.monotonic() if now is None else now
        brokers = sorted((r.seen_at(now) for r in self._brokers.values()),
                         key=lambda b: (b.cluster, b.broker_name, b.broker_id))
        return [b.to_wire() for b in brokers]


# ---------------------------------------------------------------- the server


class NameServer:
    """The name server process's services: `await NameServer(cfg).run()`."""

    def __init__(self, cfg: NamesrvConfig, *, handle_signals: bool = True) -> None:
        self.cfg = cfg
        self.handle_signals = handle_signals
        self.table = RouteTable(cfg.broker_expire_ms)
        self.server: ClientServer | None = None
        self.address = ""
        self.started_ms = 0
        self._stop = trio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until stopped (SIGTERM/SIGINT); `task_status.started(address)` when serving."""
        receiver = (
            trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT)
            if self.handle_signals
            else contextlib.nullcontext()
        )
        with receiver as signals:
            async with trio.open_nursery() as nursery:
                if signals is not None:
                    nursery.start_soon(self._watch_signals, signals)
                self.server = ClientServer(
                    self._handle,
                    host=self.cfg.listen_address,
                    port=self.cfg.listen_port,
                    max_frame_size=self.cfg.max_frame_size,
                    ops=NAMESRV_OPS,
                    on_disconnect=self.table.connection_closed,
                )
                await nursery.start(self.server.run)
                nursery.start_soon(self._expire_loop)
                self.address = format_host_port(self.cfg.listen_address, self.server.port)
                self.started_ms = int(time.time() * 1000)
                log.info("name server serving on %s (brokerExpireMs %d)", self.address, self.cfg.broker_expire_ms)
                task_status.started(self.address)
                await self._stop.wait()
                log.info("name server shutting down")
                await self.server.drain(SHUTDOWN_GRACE_S)
                nursery.cancel_scope.cancel()

    async def _watch_signals(self, signals: AsyncIterator[int]) -> None:
        async for signum in signals:
            log.info("received %s: shutting down", signal.Signals(signum).name)
            self.stop()

    async def _expire_loop(self) -> None:
        interval = min(1.0, self.table.expire_s / 4)
        while True:
            await trio.sleep(interval)
            self.table.expire()

    async def _handle(self, request: Request, peer: str | None) -> dict[str, Any]:
        try:
            return self._dispatch(request, peer)
        except Exception as e:  # a bug costs one request, never the name server
            log.exception("op %s (id %s) failed", request.op, request.id)
            return error_response(request.id, Status.INTERNAL_ERROR, f"{request.op} failed: {type(e).__name__}: {e}")

    def _dispatch(self, request: Request, peer: str | None) -> dict[str, Any]:
        f, table = request.fields, self.table
        table.expire()
        if request.op == "register_broker":
            registered = table.register(f, peer) is not None
            master = table.master_of(f["broker_name"])
            return ok_response(
                request.id,
                registered=registered,
                master_address=master.address if master else None,
                master_ha_address=master.ha_address if master else None,
                master_epoch=master.epoch if master else None,
                master_role=master.role if master else None,
                broker_expire_ms=self.cfg.broker_expire_ms,
            )
        if request.op == "unregister_broker":
            return ok_response(request.id, removed=table.unregister(f["broker_name"], f["broker_id"], f["address"]))
        if request.op == "get_route":
            groups = table.route(f["topic"])
            if not groups:
                return error_response(request.id, Status.NOT_FOUND, f"no broker serves topic {f['topic']!r}")
            return ok_response(request.id, topic=f["topic"], groups=groups)
        if request.op == "get_cluster_info":
            return ok_response(request.id, brokers=table.cluster_info(), broker_expire_ms=self.cfg.broker_expire_ms)
        if request.op == "status":
            return ok_response(
                request.id,
                role="NAMESRV",
                address=self.address,
                brokers=len(table),
                broker_expire_ms=self.cfg.broker_expire_ms,
                started_ms=self.started_ms,
            )
        raise AssertionError(f"op {request.op!r} has a schema but no handler")
