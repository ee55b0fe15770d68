"""The replies: one attrs class per answer shape, written by the server (`to_wire(id)`)
and read by the clients (`from_wire(map)`), so neither side spells a field by string.

A reply's status is OK unless the class carries one (a put's PUT_OK / FLUSH_*_TIMEOUT /
SLAVE_NOT_AVAILABLE, a pull's FOUND / NO_NEW_MSG / ...). Failures are not replies: they are
`error_response` maps, which the client raises as typed errors (wire/client.py).

`from_wire` keeps the fields the class declares and ignores others (a newer node may say
more); a missing field takes its default, and a missing field without one is a
ReplyError. Nested values are values.py's classes (a message, a route, a node's HA, disk,
stats, truncation and controller views); the others (a topic entry, a node's diagnostics)
are still maps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import attrs

from .codec import Status
from .values import (
    ReplyError,
    WireControllerView,
    WireDiskUsage,
    WireGroupRoute,
    WireHAClient,
    WireHASlave,
    WireHAView,
    WireMessage,
    WireNodeStats,
    WirePromoteCheck,
    WireQueueData,
    WireRouteBroker,
    WireTruncation,
    WireValue,
    nested,
)

__all__ = [
    "BrokerConfigReply", "BrokerConfigUpdateReply", "ConsumerListReply", "ConsumerUnregisterReply",
    "CountMessagesReply", "DeletedFilesReply", "EmptyReply", "EndTransactionReply", "EpochReply", "LockReply",
    "MembersReply", "MessageReply", "MessagesReply", "OffsetForEpochReply", "OffsetListReply", "OffsetReply", "ProducerListReply",
    "ProducerUnregisterReply", "PromoteCheckReply", "PromoteReply", "PullReply", "TransactionChecksReply",
    "TransactionListReply", "TransactionResumeReply",
    "AclChangeReply", "AclListReply", "ReplyError", "SendBackReply", "StatsAllReply", "SubGroupDeleteReply", "SubGroupListReply", "SubGroupReply",
    "SendBatchReply", "SendReply", "StatusReply", "TopicDeleteReply", "TopicListReply", "TopicReply",
    "TopicStatusReply", "WireControllerView", "WireDiskUsage", "WireGroupRoute", "WireHAClient", "WireHASlave", "WireHAView", "WireMessage", "WireNodeStats", "WirePromoteCheck", "WireQueueData", "WireReply", "WireRouteBroker", "WireTruncation", "WireValue", "WritePermReply", "nested",
]

R = TypeVar("R", bound="WireReply")

_PLAIN, _STATUS, _ONE, _MANY = range(4)


_PLANS: dict[type, tuple[tuple[str, int, Any], ...]] = {}


def _plan(cls: type) -> tuple[tuple[str, int, Any], ...]:
    """Per field of a reply class: its name, how it is carried (plain, the status, one
    nested value, a list of them) and the nested class; worked out once per class."""
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = tuple(
            (a.name, _STATUS if a.name == "status" else
             (_MANY if a.metadata["many"] else _ONE) if "nested" in a.metadata else _PLAIN,
             a.metadata.get("nested"))
            for a in attrs.fields(cls))
    return plan


class WireReply:
    """Base of the reply classes: `to_wire(id)` is the response map, `from_wire` reads one."""

    __slots__ = ()

    def to_wire(self, request_id: int) -> dict[str, Any]:
        out: dict[str, Any] = {"id": request_id, "status": Status.OK.value}  # a `status` field overrides it
        for name, kind, _ in _plan(type(self)):
            value = getattr(self, name)
            if kind == _PLAIN:
                out[name] = value
            elif kind == _STATUS:
                out[name] = value.value
            elif kind == _ONE:
                out[name] = None if value is None else value.to_wire()
            else:
                out[name] = [v.to_wire() for v in value]
        return out

    def to_json(self) -> dict[str, Any]:
        """The answer's fields as the wire carries them (nested values as their maps), without
        the envelope: what tools print as JSON (attrs.asdict would print a value's attributes,
        not its wire shape)."""
        out = self.to_wire(0)
        del out["id"]
        if "status" not in attrs.fields_dict(type(self)):  # type: ignore[arg-type]
            del out["status"]
        return out

    @classmethod
    def from_wire(cls: type[R], raw: Mapping[str, Any]) -> R:
        kwargs: dict[str, Any] = {}
        for name, kind, value_cls in _plan(cls):
            if name not in raw:
                if attrs.fields_dict(cls)[name].default is attrs.NOTHING:  # type: ignore[arg-type]
                    raise ReplyError(f"the answer lacks the field {name!r} of {cls.__name__}")
                continue
            value = raw[name]
            if kind == _STATUS:
                value = Status(value)
            elif kind == _ONE:
                value = None if value is None else value_cls.from_wire(value)
            elif kind == _MANY:
                value = [value_cls.from_wire(v) for v in value]
            kwargs[name] = value
        return cls(**kwargs)


# ---------------------------------------------------------------- sends


@attrs.define(kw_only=True)
class SendReply(WireReply):
    """`send`: where the message was stored (`status` says whether flush and slave confirmed it).
    Its map is the reference the compiled send path's answer frames are tested against
    (wire/send_codec.py)."""

    status: Status
    msg_id: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int


@attrs.define(kw_only=True)
class EndTransactionReply(WireReply):
    """`end_transaction`: what the transaction's outcome is now. `status` is the committed
    record's put status (PUT_OK, or a flush/slave status: stored on the master) for a COMMIT
    that wrote it, else OK. `duplicate`: it had ended this way before, so nothing was written
    (the committed record's place is the first COMMIT's). UNKNOWN writes nothing either."""

    status: Status
    outcome: str
    duplicate: bool = False
    msg_id: str | None = None
    """The committed record's offset msgId (COMMIT)."""
    topic: str | None = None
    queue_id: int | None = None
    queue_offset: int | None = None
    commitlog_offset: int | None = None


@attrs.define(kw_only=True)
class TransactionChecksReply(WireReply):
    """`transaction_check_watch`: the check requests for this producer (RocketMQ's
    CHECK_TRANSACTION_STATE), empty when the poll timed out. Each is a map: `producer_group`,
    `commitlog_offset` and `tran_state_table_offset` (what the END names: the newest half
    record), `origin_offset` (the transaction's identity), `msg_id` (UNIQ_KEY or null),
    `transaction_id`, `topic`, `queue_id` (the real ones), `body`, `properties`, `check_times`."""

    checks: list[dict[str, Any]]


@attrs.define(kw_only=True)
class TransactionListReply(WireReply):
    """`transaction_list`: open half messages (maps of `offset`, the transaction's origin
    CommitLog offset; `topic`, `queue_id`, the real ones; `producer_group`; `transaction_id`;
    `check_times`; `age_ms`, since it was prepared; `next_check_in_ms`, 0 when due), and how
    many there are in all (`open`, beyond `limit` too) and how many were discarded."""

    transactions: list[dict[str, Any]]
    open: int
    discarded: int


@attrs.define(kw_only=True)
class TransactionResumeReply(WireReply):
    """`transaction_resume`: the transactions (their origin CommitLog offsets) written back as
    open half messages, and the offsets asked for that were not (no discarded transaction
    has that origin here)."""

    resumed: list[int]
    not_resumed: list[int]


@attrs.define(kw_only=True)
class SendBatchReply(WireReply):
    """`send_batch`: one msgId per message, stored together from `queue_offset` on."""

    status: Status
    msg_ids: list[str]
    queue_id: int
    queue_offset: int
    commitlog_offset: int


@attrs.define(kw_only=True)
class SendBackReply(WireReply):
    """`consumer_send_back`: the copy stored for a later retry (or the DLQ), and where."""

    status: Status
    msg_id: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    topic: str | None = None
    delay_level: int | None = None
    reconsume_times: int | None = None


# ---------------------------------------------------------------- reads


@attrs.define(kw_only=True)
class PullReply(WireReply):
    """`pull`: the messages found, where to go on from, and the queue's bounds."""

    status: Status
    messages: list[WireMessage] = nested(WireMessage, many=True)
    next_begin_offset: int
    min_offset: int = 0
    max_offset: int = 0
    epoch: int | None = None
    """The epoch whose range of the node's epoch history holds the last message's CommitLog
    offset (-1: before the history's first epoch, or none; None: no message, or a node
    without failover): a consumer keeps it with that offset (KIP-320)."""
    node_epoch: int | None = None
    """The newest epoch the answering node knows (-1: none yet; None from a node without
    failover): a newer one than when the consumer last read means its position must be
    checked first."""


@attrs.define(kw_only=True)
class MessagesReply(WireReply):
    """`query_by_key`: the messages whose KEYS hold the key."""

    messages: list[WireMessage] = nested(WireMessage, many=True)


@attrs.define(kw_only=True)
class MessageReply(WireReply):
    """`get_by_msg_id`: the message."""

    message: WireMessage = nested(WireMessage)


@attrs.define(kw_only=True)
class OffsetReply(WireReply):
    """`offset_by_time`, `min_offset`, `max_offset`, `fetch_offset`: one queue offset."""

    offset: int


@attrs.define(kw_only=True)
class EmptyReply(WireReply):
    """`commit_offset`, `consumer_unlock`: OK and nothing more."""


@attrs.define(kw_only=True)
class OffsetListReply(WireReply):
    """`offset_list`: every committed offset (group, topic, queue_id, offset maps). `held`:
    the table is not the group's: the node is a slave (a master that lost an election, with
    its file's table) or an etcd-mode candidate (its file's, up to 5 s old); a slave syncing
    from it keeps its own (an older node's answer lacks it: False)."""

    offsets: list[dict[str, Any]]
    held: bool = False


@attrs.define(kw_only=True)
class TopicReply(WireReply):
    """`topic_create`: the topic's config as stored (topic, queue counts, perm)."""

    topic: dict[str, Any]


@attrs.define(kw_only=True)
class TopicDeleteReply(WireReply):
    """`topic_delete`: whether the node had the topic."""

    deleted: bool


@attrs.define(kw_only=True)
class AclListReply(WireReply):
    """`acl_list`: the node's accounts and what each may do (no secret or verifier);
    `enabled` False and no accounts without aclEnable."""

    enabled: bool
    accounts: list[dict[str, Any]]


@attrs.define(kw_only=True)
class AclChangeReply(WireReply):
    """`acl_put` / `acl_remove`: whether the account was there before (replaced, removed)
    and the node's ACL file, which its guard reloads at once."""

    existed: bool
    acl_file: str


@attrs.define(kw_only=True)
class TopicListReply(WireReply):
    """`topic_list`: every topic's config."""

    topics: list[dict[str, Any]]


# ---------------------------------------------------------------- consumer groups


@attrs.define(kw_only=True)
class MembersReply(WireReply):
    """`consumer_heartbeat`, `consumer_watch`: the group's live members and its version
    (bumped by every change, what a watch waits past)."""

    members: list[str]
    version: int


@attrs.define(kw_only=True)
class ConsumerUnregisterReply(WireReply):
    removed: bool
    members: list[str]


@attrs.define(kw_only=True)
class ConsumerListReply(WireReply):
    """`consumer_list`: members, each one's details, who holds which queue lock, and the
    group's version (bumped by every join, leave, drop and freed lock: equal versions
    mean the same holders in between)."""

    members: list[str]
    details: list[dict[str, Any]]
    locks: dict[str, str]
    version: int = 0


@attrs.define(kw_only=True)
class LockReply(WireReply):
    """`consumer_lock`: the queue ids now held by the asking member."""

    locked: list[int]


@attrs.define(kw_only=True)
class SubGroupReply(WireReply):
    """`subgroup_update`: the group's settings as stored (group, consume_enable, retry_max_times)."""

    group: dict[str, Any]


@attrs.define(kw_only=True)
class SubGroupListReply(WireReply):
    """`subgroup_list`: every group with settings of its own."""

    groups: list[dict[str, Any]]


@attrs.define(kw_only=True)
class SubGroupDeleteReply(WireReply):
    """`subgroup_delete`: whether the node had settings for the group."""

    deleted: bool


@attrs.define(kw_only=True)
class ProducerUnregisterReply(WireReply):
    """`producer_unregister`: whether the producer was registered."""

    removed: bool


@attrs.define(kw_only=True)
class ProducerListReply(WireReply):
    """`producer_list`: the group's live producers (client_id, address, heartbeat_interval_ms,
    silent_ms maps)."""

    producers: list[dict[str, Any]]


# ---------------------------------------------------------------- the node itself


@attrs.define(kw_only=True)
class TopicStatusReply(WireReply):
    """`topic_status`: per queue of the topic on this node, its queue_id, min_offset,
    max_offset and last_update_timestamp (store time of its newest message, null when empty)."""

    queues: list[dict[str, Any]]


@attrs.define(kw_only=True)
class BrokerConfigReply(WireReply):
    """`broker_config`: every key of the node's config (RocketMQ's camelCase name → value as
    it runs now) and the keys `broker_config_update` may change."""

    config: dict[str, Any]
    live_keys: list[str]


@attrs.define(kw_only=True)
class BrokerConfigUpdateReply(WireReply):
    """`broker_config_update`: the key and its value before and after."""

    key: str
    old: Any
    new: Any


@attrs.define(kw_only=True)
class WritePermReply(WireReply):
    """`broker_write_perm` (a node: whether it accepts sends now) and the name server's
    `wipe_write_perm` / `add_write_perm` (how many of the group's topics it changed)."""

    writeable: bool
    topics: int = 0


@attrs.define(kw_only=True)
class StatsAllReply(WireReply):
    """`stats_all`: per topic, messages stored (put_tps, put_total); per topic and consumer
    group, messages pulled (get_tps, get_total); TPS over the last minute, totals since start."""

    topics: list[dict[str, Any]]
    groups: list[dict[str, Any]]


@attrs.define(kw_only=True)
class EpochReply(WireReply):
    """`epoch`: the node's epoch history and log end, what a peer decides fencing and
    truncation on."""

    epoch: int
    entries: list[list[int]]
    max_offset: int
    broker_id: int
    role: str
    fenced: str | None = None
    mapped_file_size_commit_log: int | None = None
    pending: str | None = None
    """Why this master's epoch is not yet the group's (an etcd candidate not elected, a
    master whose new epoch after an abnormal restart is due): no slave takes its history."""


@attrs.define(kw_only=True)
class OffsetForEpochReply(WireReply):
    """`offset_for_epoch`: where the consumer continues (`offset`, never past the one it
    sent), the node's newest epoch, and where the node's log stops holding the asked epoch."""

    offset: int
    end_offset: int
    node_epoch: int
    diverged: bool


@attrs.define(kw_only=True)
class PromoteReply(WireReply):
    """`promote`: the new epoch and where it starts."""

    epoch: int
    max_offset: int
    broker_id: int
    role: str
    check: WirePromoteCheck | None = nested(WirePromoteCheck, default=None)
    """The in-sync check it passed (or, `unclean`, what it dropped); None from an older node."""
    offsets_clamped: int = 0
    """With `unclean`: committed consumer offsets past the promoted log's queue ends, set back to the ends."""


@attrs.define(kw_only=True)
class PromoteCheckReply(WireReply):
    """`promote_check`: whether `promote` would go ahead without `unclean`, and what it drops."""

    check: WirePromoteCheck = nested(WirePromoteCheck)


@attrs.define(kw_only=True)
class CountMessagesReply(WireReply):
    """`count_messages`: messages stored in a CommitLog range, counted within a time budget."""

    count: int
    counted_to: int
    """Where counting stopped: the range's end (or the log's) when `complete`."""
    complete: bool


@attrs.define(kw_only=True)
class DeletedFilesReply(WireReply):
    deleted_files: int


@attrs.define(kw_only=True)
class StatusReply(WireReply):
    """`status`: a node's identity, log, HA, disk and failover views. Every field has a
    default, so an older node's answer reads too, and so does the name server's shorter one
    (namesrv.NamesrvStatusReply: role NAMESRV, address) for tools that ask every process.
    `ha`, `disk`, `stats`, `last_truncation` and `controller` are values (values.py), None when an answer lacks the section
    (`ha`: an empty view); the other nested views stay maps (their shapes are
    docs/protocol.md's)."""

    role: str | None = None
    address: str | None = None
    broker_cluster_name: str | None = None
    broker_name: str | None = None
    broker_id: int | None = None
    ha_address: str | None = None
    bind_address: str | None = None
    ha_bind_address: str | None = None
    min_phy_offset: int = 0
    max_phy_offset: int = 0
    flushed_offset: int = 0
    dispatch_behind_bytes: int = 0
    running_flags: list[str] = attrs.field(factory=list)
    not_writeable: str | None = None
    """Why the store refuses writes (a failed flush, a full disk, ...); None: it takes them."""
    damaged: list[dict[str, Any]] = attrs.field(factory=list)
    """CommitLog records that failed their body CRC, each {start, end, reason, found_by}:
    never served; gone unless a replica holds them (docs/store.md, "Corrupt records")."""
    last_store_timestamp: int = 0
    stats: WireNodeStats | None = nested(WireNodeStats, default=None)
    ha: WireHAView = nested(WireHAView, factory=WireHAView)
    disk: WireDiskUsage | None = nested(WireDiskUsage, default=None)
    # free-form diagnostics, shown whole and read by key by no client: maps (docs/protocol.md)
    sync: dict[str, Any] | None = None
    namesrv: Any = None
    schedule: dict[str, Any] | None = None
    transactions: dict[str, Any] | None = None  # a master's open half messages and outcome counts
    security: dict[str, Any] | None = None  # logins and refusals, with aclEnable
    consumer_groups: dict[str, list[str]] = attrs.field(factory=dict)
    # failover (absent on a node without it)
    epoch: int | None = None
    epochs: list[list[int]] = attrs.field(factory=list)
    newest_epoch_seen: int | None = None
    fenced: str | None = None
    stalls: int = 0
    last_stall_s: float | None = None
    writes_held: str | None = None
    slave_left: bool = False
    role_file: dict[str, Any] | None = None
    last_truncation: WireTruncation | None = nested(WireTruncation, default=None)
    acked_floor: int | None = None
    """A master restarted after an abnormal exit: the CommitLog end it recovered to, all of
    which it may have acknowledged before (a promotion check's confirm offset is at least it)."""
    replication_refused: str | None = None
    controller: WireControllerView | None = nested(WireControllerView, default=None)
    confirm_offset: int | None = None
    """The confirm offset the node last knew (a master's: what it told its slaves); None: none."""

    def lag_bytes(self) -> int | None:
        """A master's largest slave lag, or a slave's own; None when it has no HA peer."""
        return self.ha.lag_bytes()
