"""What every op acts on and how it fails: `NodeServices` (one node's store, tables and
replication services), `OpError` (a node status rather than a store status), and the
failover hooks the write path calls (typed here, so the ops need not import node/failover/,
which sits above them).

docs/protocol.md is the contract. Every failure becomes a response (store statuses,
BAD_REQUEST, NOT_FOUND, SERVICE_NOT_AVAILABLE, INTERNAL_ERROR with the cause), so the
connection layer (node/server.py) only moves frames.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import attrs
import trio

from ha.master import HAService
from ha.slave import HAClient
from store.epoch_file import EpochFileCache
from store.message_store import MessageStore
from wire.protocol import (
    Status,
    WirePromoteCheck,
)

from ..config import BrokerConfig
from ..schedule import ScheduleMessageService
from ..stats import BrokerStats
from ..tables.consumers import ConsumerManager
from ..tables.jsonfile import ConfigFileError, read_json
from ..tables.offsets import ConsumerOffsetManager
from ..tables.producers import ProducerManager
from ..tables.subscription_groups import SubscriptionGroupManager
from ..tables.topics import TopicConfigManager
from ..tables.transaction_checks import CheckRequests
from ..tables.transactions import TransactionTable


class FailoverHooks(Protocol):
    """What the ops ask of node/failover/promotion.py's Failover: typed here, so ops (below failover,
    which raises OpError and is handed NodeServices) does not import it. mypy checks that
    Failover satisfies it (promotion.py assigns one to a FailoverHooks under TYPE_CHECKING)."""

    @property
    def controller(self) -> object | None:
        """The etcd controller when controllerMode is etcd (a manual promotion is refused then)."""

    async def before_write(self) -> float:
        """Refuse a write this master must not take (OpError); else the trio time it was
        admitted, which `after_write` takes."""

    async def after_write(self, admitted: float, *, unreplicated: bool = False) -> None:
        """Refuse (OpError INDETERMINATE) to acknowledge a stored write admitted at `admitted`
        that this node may no longer answer PUT_OK; `unreplicated`: some of it answers
        SLAVE_NOT_AVAILABLE."""

    @property
    def epochs(self) -> EpochFileCache:
        """The node's epoch history (which term wrote which part of its CommitLog)."""

    @property
    def candidate(self) -> bool:
        """etcd mode: started as master from its files, not yet elected (no mandate)."""

    def status(self) -> dict[str, Any]: ...

    def epoch_answer(self) -> dict[str, Any]: ...

    async def promote(self, role: str | None, *, unclean: bool = False) -> dict[str, Any]: ...

    async def promotion_check(self) -> WirePromoteCheck: ...


__all__ = ["FailoverHooks", "NodeServices", "OpError", "check_writeable", "confirm_write", "refuse_on_slave",
           "write_perm_path"]


class OpError(Exception):
    """A request that fails with a node status (not a store status)."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@attrs.define(eq=False, on_setattr=attrs.setters.frozen)
class NodeServices:
    """What the operations act on: one node's store, tables and replication services.

    A term's collaborators are built first and handed over here (node/broker.py
    `_build_term`): none is set afterwards (assigning one raises FrozenAttributeError), so
    an op never sees a half-built node. None means this node has none in its role (a
    master has no HA client, a slave no HA service) or was built without it (tests).
    Only the node's switches change while it serves (`write_wiped`, `stopping`)."""

    cfg: BrokerConfig
    store: MessageStore
    topics: TopicConfigManager
    offsets: ConsumerOffsetManager
    ha_master: HAService | None = None
    ha_client: HAClient | None = None
    slave_sync_status: Callable[[], dict[str, Any]] | None = None
    registration_status: Callable[[], list[dict[str, Any]]] | None = None
    security_status: Callable[[], dict[str, Any]] | None = None  # the client port's Guard, with aclEnable
    acl_accounts: Callable[[], list[dict[str, Any]]] | None = None  # its accounts (acl_list), with aclEnable
    acl_file: str | None = None  # the file acl_put / acl_remove edit, with aclEnable
    acl_recheck: Callable[[], None] | None = None  # the guard reads the edited file at once
    consumers: ConsumerManager = attrs.field(
        default=attrs.Factory(lambda s: ConsumerManager(expire_s=s.cfg.channel_expired_timeout / 1000),
                              takes_self=True))
    schedule: ScheduleMessageService | None = None
    subgroups: SubscriptionGroupManager = attrs.field(
        default=attrs.Factory(lambda s: SubscriptionGroupManager(s.cfg.store.store_path_root_dir), takes_self=True))
    stats: BrokerStats = attrs.field(factory=BrokerStats)
    producers: ProducerManager = attrs.field(
        default=attrs.Factory(lambda s: ProducerManager(expire_s=s.cfg.channel_expired_timeout / 1000),
                              takes_self=True))
    write_wiped: bool = attrs.field(default=attrs.Factory(lambda s: _read_write_wiped(s.cfg), takes_self=True),
                                    on_setattr=attrs.setters.NO_OP)
    """mqadmin wipeWritePerm: the node refuses sends until addWritePerm (kept in
    `config/writePerm.json`, so a restart or a promotion keeps it)."""
    failover: FailoverHooks | None = None
    transactions: TransactionTable = attrs.field(factory=TransactionTable)
    """The term's transaction state, built from the store on first use (node/tables/transactions.py)."""
    checks: CheckRequests = attrs.field(factory=CheckRequests)
    """Check requests waiting for their producers' `transaction_check_watch`."""
    stopping: bool = attrs.field(default=False, on_setattr=attrs.setters.NO_OP)
    _long_polls: set[trio.CancelScope] = attrs.field(factory=set)

    @property
    def is_master(self) -> bool:
        return self.cfg.role.is_master

    @contextlib.contextmanager
    def long_poll(self, deadline: float) -> Iterator[trio.CancelScope]:
        """A cancel scope for one pull's wait, cancelled early by `stop_long_polls`."""
        with trio.CancelScope(deadline=deadline) as scope:
            self._long_polls.add(scope)
            try:
                yield scope
            finally:
                self._long_polls.discard(scope)

    def stop_long_polls(self) -> None:
        """Shutdown: pulls waiting for messages answer now with what they have."""
        self.stopping = True
        for scope in list(self._long_polls):
            scope.cancel()


def write_perm_path(cfg: BrokerConfig) -> str:
    return cfg.store.path("config", "writePerm.json")


def _read_write_wiped(cfg: BrokerConfig) -> bool:
    path = write_perm_path(cfg)
    raw = read_json(path)
    if raw is None:
        return False
    if not isinstance(raw, dict) or type(raw.get("writeable")) is not bool:
        raise ConfigFileError(f"{path}: expected {{\"writeable\": true|false}}, got {raw!r}")
    return not raw["writeable"]


def refuse_on_slave(services: NodeServices, what: str) -> None:
    if not services.is_master:
        raise OpError(
            Status.SERVICE_NOT_AVAILABLE,
            f"this node is a SLAVE and refuses {what}; send it to the master of {services.cfg.broker_name}",
        )


async def check_writeable(s: NodeServices) -> float:
    """A slave refuses writes; a master asks for the group's epoch first when it must
    (fencing). Returns the token `confirm_write` takes (when Failover admitted the write)."""
    refuse_on_slave(s, "writes")
    if s.write_wiped:
        raise OpError(Status.SERVICE_NOT_AVAILABLE,
                      f"{s.cfg.broker_name}'s write permission is wiped (admin wipeWritePerm): it refuses sends "
                      "until admin addWritePerm")
    if s.failover is not None:
        return await s.failover.before_write()
    return 0


async def check_committable(s: NodeServices) -> float:
    """An offset commit is a write of the group's state: a slave, a fenced master and an
    etcd-mode candidate refuse it as they refuse a send (one answered OK there would be
    lost, or overwritten by the serving master's table). Write permission (wipeWritePerm)
    is about topics and does not stop commits. Returns the token `confirm_write` takes."""
    refuse_on_slave(s, "offset commits")
    if s.failover is not None:
        return await s.failover.before_write()
    return 0


async def confirm_write(s: NodeServices, checked: float, *, unreplicated: bool = False) -> None:
    """A stored write is not acknowledged by a node that a newer epoch replaced, or whose
    lease ran out, or that stalled since `checked` and cannot confirm its epoch, or (some
    of it `unreplicated`, SLAVE_NOT_AVAILABLE) whose in-sync set cannot shrink: raises
    OpError(INDETERMINATE)."""
    if s.failover is not None:
        await s.failover.after_write(checked, unreplicated=unreplicated)
