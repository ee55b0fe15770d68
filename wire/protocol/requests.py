"""The node's requests: one attrs class per op, its fields declared with `wire()` (wire type,
value check, default). The server parses a frame into one (`parse_request`), the clients
build one and send `to_wire(id)`; docs/protocol.md is the reference for ops and fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from .checks import (
    check_body,
    check_client_id,
    check_config_key,
    check_config_value,
    check_group,
    check_keys,
    check_master_role,
    check_message_model,
    check_msg_id,
    check_non_empty,
    check_perm,
    check_properties,
    check_queue_ids,
    check_sql_filter,
    check_tag_filter,
    check_tags,
    check_topic,
    check_topics,
    parse_tag_filter,
)
from .codec import (
    BOOL,
    BYTES,
    DICT_STR_STR,
    INT,
    INT32,
    INT32_MAX,
    INT64_MAX,
    LIST_INT,
    LIST_STR,
    MAX_QUEUE_NUMS,
    NON_NEG64,
    POSITIVE32,
    QUEUE_ID_RANGE,
    STR,
    Field,
    FieldType,
    InvalidRequest,
    Request,
    WireRequest,
    parse_fields,
    parse_with,
    schema_of,
    value_range,
    wire,
    wrong_type,
)
from .replies import (
    AclChangeReply,
    AclListReply,
    BrokerConfigReply,
    BrokerConfigUpdateReply,
    ConsumerListReply,
    ConsumerUnregisterReply,
    CountMessagesReply,
    DeletedFilesReply,
    EmptyReply,
    EndTransactionReply,
    EpochReply,
    LockReply,
    MembersReply,
    MessageReply,
    MessagesReply,
    OffsetForEpochReply,
    OffsetListReply,
    OffsetReply,
    ProducerListReply,
    ProducerUnregisterReply,
    PromoteCheckReply,
    PromoteReply,
    PullReply,
    SendBackReply,
    SendBatchReply,
    SendReply,
    StatsAllReply,
    StatusReply,
    SubGroupDeleteReply,
    SubGroupListReply,
    SubGroupReply,
    TopicDeleteReply,
    TopicListReply,
    TopicReply,
    TopicStatusReply,
    TransactionChecksReply,
    TransactionListReply,
    TransactionResumeReply,
    WritePermReply,
)

# ---------------------------------------------------------------- messages


@attrs.define(kw_only=True)
class BatchMessage(WireRequest):
    """One message of a `send_batch` (the topic, queue and wait are the batch's)."""

    body: bytes = wire(BYTES, check_body)
    tags: str | None = wire(STR, check_tags, default=None)
    keys: list[str] = wire(LIST_STR, check_keys, default=[])
    properties: dict[str, str] = wire(DICT_STR_STR, check_properties, default={})
    flag: int = wire(INT, INT32, default=0)


_MESSAGE_NAMES = frozenset(f.name for f in schema_of(BatchMessage))


def _plain_message(item: dict[Any, Any]) -> BatchMessage | None:
    """A batch message of a body and optional tags (the common case), as the schema path
    would parse it; None for anything else: the schema path then checks it and names any
    problem. A batch of 32 spent most of its parsing walking the schema per message."""
    if len(item) > 2 or not _MESSAGE_NAMES.issuperset(item):
        return None
    body = item.get("body")
    if type(body) is not bytes or not body:
        return None
    tags = item.get("tags")
    if tags is None:
        if len(item) == 2:  # the other field is not tags (or tags is null): the schema path
            return None
    elif type(tags) is not str or check_tags(tags):
        return None
    return BatchMessage(body=body, tags=tags)


def _check_messages(value: Any, path: str) -> list[BatchMessage]:
    if type(value) is not list:
        raise wrong_type(path, "an array of maps", value)
    if not value:
        raise InvalidRequest(f"field {path!r} must hold at least one message")
    out = []
    for i, item in enumerate(value):
        if type(item) is not dict:
            raise wrong_type(f"{path}[{i}]", "a map", item)
        parsed = _plain_message(item)
        out.append(parsed if parsed is not None else parse_fields(item, BatchMessage, f"{path}[{i}].", "send_batch"))
    return out


MESSAGES = FieldType("an array of maps", _check_messages)
FIELD_TYPES = (STR, BYTES, INT, BOOL, LIST_STR, LIST_INT, DICT_STR_STR, MESSAGES)
"""Every scalar/compound wire type a field can have, for docs and tests."""


def _topic_field() -> Any:
    return wire(STR, check_topic, remember=True)


def _queue_id(**default: Any) -> Any:
    return wire(INT, QUEUE_ID_RANGE, **default)


def _group_field() -> Any:
    return wire(STR, check_group)


def _client_id_field() -> Any:
    return wire(STR, check_client_id)


__all__ = [
    "CLIENT_LOCK_LIFE_MS", "FIELD_TYPES", "LOCK_LIFE_MS", "MESSAGES", "NODE_REQUESTS", "OPS", "AclList", "AclPut", "AclRemove", "BatchMessage", "CommitOffset", "ConsumerHeartbeat",
    "ConsumerList", "ConsumerLock", "ConsumerSendBack", "ConsumerUnlock", "ConsumerUnregister", "ConsumerWatch",
    "BrokerWritePerm", "GetBrokerConfig", "UpdateBrokerConfig",
    "CountMessages", "DeleteExpiredFiles", "EndTransaction", "Epoch", "FetchOffset", "GetByMsgId", "MaxOffset",
    "MinOffset", "GetStatus", "OffsetByTime", "OffsetForEpoch", "OffsetList", "ProducerHeartbeat", "ProducerList", "ProducerUnregister",
    "Promote", "PromoteCheck", "Pull", "TransactionCheckWatch", "TransactionList", "TransactionResume",
    "QueryByKey", "Send", "SendBatch", "StatsAll", "SubGroupDelete", "SubGroupList",
    "SubGroupUpdate", "TopicCreate",
    "TopicDelete", "TopicList", "TopicStatus", "parse_request", "parse_tag_filter",
]


# ---------------------------------------------------------------- sends and reads


@attrs.define(kw_only=True)
class Send(WireRequest):
    OP = "send"
    REPLY = SendReply
    topic: str = _topic_field()
    body: bytes = wire(BYTES, check_body)
    queue_id: int | None = _queue_id(default=None)
    tags: str | None = wire(STR, check_tags, default=None)
    keys: list[str] = wire(LIST_STR, check_keys, default=[])
    properties: dict[str, str] = wire(DICT_STR_STR, check_properties, default={})
    flag: int = wire(INT, INT32, default=0)
    born_timestamp: int | None = wire(INT, NON_NEG64, default=None)
    wait: bool = wire(BOOL, default=True)


@attrs.define(kw_only=True)
class SendBatch(WireRequest):
    OP = "send_batch"
    REPLY = SendBatchReply
    topic: str = _topic_field()
    messages: list[BatchMessage] = wire(MESSAGES)
    queue_id: int | None = _queue_id(default=None)
    wait: bool = wire(BOOL, default=True)


@attrs.define(kw_only=True)
class Pull(WireRequest):
    OP = "pull"
    REPLY = PullReply
    topic: str = _topic_field()
    queue_id: int = _queue_id()
    offset: int = wire(INT, NON_NEG64)
    max_msgs: int = wire(INT, POSITIVE32, default=32)
    tag_filter: str = wire(STR, check_tag_filter, default="*")
    timeout_ms: int = wire(INT, value_range(0, INT32_MAX), default=0)
    group: str | None = wire(STR, check_group, default=None)
    sql_filter: str | None = wire(STR, check_sql_filter, default=None)  # SQL92, with enablePropertyFilter


@attrs.define(kw_only=True)
class QueryByKey(WireRequest):
    OP = "query_by_key"
    REPLY = MessagesReply
    topic: str = _topic_field()
    key: str = wire(STR, check_non_empty)
    max_num: int = wire(INT, POSITIVE32, default=32)
    begin_ts: int = wire(INT, NON_NEG64, default=0)
    end_ts: int = wire(INT, NON_NEG64, default=INT64_MAX)


@attrs.define(kw_only=True)
class GetByMsgId(WireRequest):
    OP = "get_by_msg_id"
    REPLY = MessageReply
    msg_id: str = wire(STR, check_msg_id)


@attrs.define(kw_only=True)
class OffsetByTime(WireRequest):
    OP = "offset_by_time"
    REPLY = OffsetReply
    topic: str = _topic_field()
    queue_id: int = _queue_id()
    timestamp: int = wire(INT)


@attrs.define(kw_only=True)
class MinOffset(WireRequest):
    OP = "min_offset"
    REPLY = OffsetReply
    topic: str = _topic_field()
    queue_id: int = _queue_id()


@attrs.define(kw_only=True)
class MaxOffset(WireRequest):
    OP = "max_offset"
    REPLY = OffsetReply
    topic: str = _topic_field()
    queue_id: int = _queue_id()


# ---------------------------------------------------------------- consumer offsets and topics


@attrs.define(kw_only=True)
class CommitOffset(WireRequest):
    OP = "commit_offset"
    REPLY = EmptyReply
    group: str = _group_field()
    topic: str = _topic_field()
    queue_id: int = _queue_id()
    offset: int = wire(INT, NON_NEG64)


@attrs.define(kw_only=True)
class FetchOffset(WireRequest):
    OP = "fetch_offset"
    REPLY = OffsetReply
    group: str = _group_field()
    topic: str = _topic_field()
    queue_id: int = _queue_id()


@attrs.define(kw_only=True)
class OffsetForEpoch(WireRequest):
    """Before reading on where it left off from a node in a newer epoch: the consumer's last
    record (its CommitLog offset and epoch) and its next queue offset (KIP-320)."""

    OP = "offset_for_epoch"
    REPLY = OffsetForEpochReply
    topic: str = _topic_field()
    queue_id: int = _queue_id()
    epoch: int = wire(INT, value_range(-1, INT64_MAX))
    """-1: the record was read before any epoch its node had recorded."""
    commitlog_offset: int = wire(INT, NON_NEG64)
    offset: int = wire(INT, NON_NEG64)
    group: str | None = wire(STR, check_group, default=None)


@attrs.define(kw_only=True)
class OffsetList(WireRequest):
    OP = "offset_list"
    REPLY = OffsetListReply


@attrs.define(kw_only=True)
class TopicCreate(WireRequest):
    OP = "topic_create"
    REPLY = TopicReply
    topic: str = _topic_field()
    read_queue_nums: int = wire(INT, value_range(1, MAX_QUEUE_NUMS), default=4)
    write_queue_nums: int = wire(INT, value_range(1, MAX_QUEUE_NUMS), default=4)
    perm: int = wire(INT, check_perm, default=6)


@attrs.define(kw_only=True)
class TopicDelete(WireRequest):
    OP = "topic_delete"
    REPLY = TopicDeleteReply
    topic: str = _topic_field()


@attrs.define(kw_only=True)
class TopicList(WireRequest):
    OP = "topic_list"
    REPLY = TopicListReply


@attrs.define(kw_only=True)
class AclList(WireRequest):
    """The accounts of the node's ACL file and their permissions (the console's ACL page);
    admin-only, as every op docs/security.md does not list."""

    OP = "acl_list"
    REPLY = AclListReply


@attrs.define(kw_only=True)
class AclPut(WireRequest):
    """Add an account to the node's ACL file, or replace its permissions (the console's ACL
    page; admin-only). `scram` is the account's new SCRAM verifier, made by the client, so
    no secret crosses the wire; None keeps the account's own (a new account needs one).
    The node checks the permissions and rules (refused whole, the file unchanged)."""

    OP = "acl_put"
    REPLY = AclChangeReply
    access_key: str = wire(STR, check_non_empty)
    scram: str | None = wire(STR, check_non_empty, default=None)
    admin: bool = wire(BOOL, default=False)
    default_topic_perm: str = wire(STR, check_non_empty, default="DENY")
    default_group_perm: str = wire(STR, check_non_empty, default="DENY")
    topic_perms: list[str] = wire(LIST_STR, default=[])
    group_perms: list[str] = wire(LIST_STR, default=[])
    white_remote_address: list[str] = wire(LIST_STR, default=[])


@attrs.define(kw_only=True)
class AclRemove(WireRequest):
    """Remove an account from the node's ACL file (admin-only); its connections lose access."""

    OP = "acl_remove"
    REPLY = AclChangeReply
    access_key: str = wire(STR, check_non_empty)


# ---------------------------------------------------------------- consumer groups


@attrs.define(kw_only=True)
class ConsumerHeartbeat(WireRequest):
    OP = "consumer_heartbeat"
    REPLY = MembersReply
    group: str = _group_field()
    client_id: str = _client_id_field()
    topics: list[str] = wire(LIST_STR, check_topics, default=[])
    heartbeat_interval_ms: int = wire(INT, value_range(1, 3_600_000), default=30_000)
    message_model: str = wire(STR, check_message_model, default="CLUSTERING")


@attrs.define(kw_only=True)
class ConsumerWatch(WireRequest):
    OP = "consumer_watch"
    REPLY = MembersReply
    group: str = _group_field()
    since: int = wire(INT, value_range(-1, 2**62), default=-1)
    timeout_ms: int = wire(INT, value_range(0, 600_000), default=30_000)


@attrs.define(kw_only=True)
class ConsumerUnregister(WireRequest):
    OP = "consumer_unregister"
    REPLY = ConsumerUnregisterReply
    group: str = _group_field()
    client_id: str = _client_id_field()


@attrs.define(kw_only=True)
class ConsumerList(WireRequest):
    OP = "consumer_list"
    REPLY = ConsumerListReply
    group: str = _group_field()


LOCK_LIFE_MS = 60_000
"""RocketMQ's REBALANCE_LOCK_MAX_LIVE_TIME (broker side): a lease not renewed lapses."""
CLIENT_LOCK_LIFE_MS = 30_000
"""RocketMQ's ProcessQueue REBALANCE_LOCK_MAX_LIVE_TIME: how long an orderly member trusts a
granted lease from when it asked; a new master fences its lock table this long."""


@attrs.define(kw_only=True)
class ConsumerLock(WireRequest):
    """Lock queues for a member. `life_ms` 0: held while the member lives (rebalancing);
    else a lease that lapses unless renewed (orderly members: RocketMQ's 60 s), and `renew`
    says the member held it before (a new master's fenced table grants only those)."""

    OP = "consumer_lock"
    REPLY = LockReply
    group: str = _group_field()
    client_id: str = _client_id_field()
    topic: str = _topic_field()
    queue_ids: list[int] = wire(LIST_INT, check_queue_ids)
    life_ms: int = wire(INT, value_range(0, 3_600_000), default=0)
    renew: bool = wire(BOOL, default=False)


@attrs.define(kw_only=True)
class ConsumerUnlock(WireRequest):
    OP = "consumer_unlock"
    REPLY = EmptyReply
    group: str = _group_field()
    client_id: str = _client_id_field()
    topic: str = _topic_field()
    queue_ids: list[int] = wire(LIST_INT, check_queue_ids)


@attrs.define(kw_only=True)
class ConsumerSendBack(WireRequest):
    OP = "consumer_send_back"
    REPLY = SendBackReply
    group: str = _group_field()
    commitlog_offset: int = wire(INT, NON_NEG64)
    delay_level: int = wire(INT, value_range(-1, 1000), default=0)
    max_reconsume_times: int = wire(INT, value_range(0, 10_000), default=16)
    origin_msg_id: str | None = wire(STR, check_non_empty, default=None)


@attrs.define(kw_only=True)
class SubGroupUpdate(WireRequest):
    """mqadmin updateSubGroup: set a group's broker-side settings (those given)."""

    OP = "subgroup_update"
    REPLY = SubGroupReply
    group: str = _group_field()
    consume_enable: bool | None = wire(BOOL, default=None)
    retry_max_times: int | None = wire(INT, value_range(0, 10_000), default=None)


@attrs.define(kw_only=True)
class SubGroupList(WireRequest):
    OP = "subgroup_list"
    REPLY = SubGroupListReply


@attrs.define(kw_only=True)
class SubGroupDelete(WireRequest):
    """mqadmin deleteSubGroup: drop a group's broker-side settings (its slaves copy that)."""

    OP = "subgroup_delete"
    REPLY = SubGroupDeleteReply
    group: str = _group_field()


# ---------------------------------------------------------------- transactions


def _check_outcome(v: str) -> str | None:
    return None if v in _OUTCOMES else f"must be one of {', '.join(_OUTCOMES)}, got {v!r}"


_OUTCOMES = ("COMMIT", "ROLLBACK", "UNKNOWN")


@attrs.define(kw_only=True)
class EndTransaction(WireRequest):
    """RocketMQ's END_TRANSACTION (EndTransactionRequestHeader): end the transaction whose half
    message is at `commitlog_offset` (the prepared send's answer) with COMMIT, ROLLBACK or
    UNKNOWN. `tran_state_table_offset` is the send's queue_offset (the half queue offset) and
    must match, as `producer_group` must match the half's PGROUP. docs/transactions.md."""

    OP = "end_transaction"
    REPLY = EndTransactionReply
    producer_group: str = _group_field()
    tran_state_table_offset: int = wire(INT, NON_NEG64)
    commitlog_offset: int = wire(INT, NON_NEG64)
    outcome: str = wire(STR, _check_outcome)
    from_transaction_check: bool = wire(BOOL, default=False)
    msg_id: str | None = wire(STR, check_non_empty, default=None)
    """The half message's UNIQ_KEY, when the producer set one (checked against it)."""
    transaction_id: str | None = wire(STR, check_non_empty, default=None)


@attrs.define(kw_only=True)
class TransactionCheckWatch(WireRequest):
    """A transaction producer's long poll for check requests (RocketMQ's broker-to-client
    CHECK_TRANSACTION_STATE, as `consumer_watch` carries NOTIFY_CONSUMER_IDS_CHANGED): answered
    as soon as the master's check service has checks for this producer, or after
    `timeout_ms` with none. The producer answers each with an `end_transaction`
    (`from_transaction_check`). docs/transactions.md."""

    OP = "transaction_check_watch"
    REPLY = TransactionChecksReply
    group: str = _group_field()
    client_id: str = _client_id_field()
    timeout_ms: int = wire(INT, value_range(0, 600_000), default=30_000)
    max_checks: int = wire(INT, value_range(1, 1024), default=32)


def _check_offsets(v: list[int]) -> str | None:
    if len(v) > 10_000 or any(not 0 <= o < 2**63 for o in v):
        return "must hold at most 10000 CommitLog offsets, each >= 0"
    return None


@attrs.define(kw_only=True)
class TransactionList(WireRequest):
    """The node's open half messages (no END ended them yet), oldest first, at most `limit`,
    of `topic` (their real topic) or all: an operator's view of what the check service will
    ask about (docs/transactions.md)."""

    OP = "transaction_list"
    REPLY = TransactionListReply
    topic: str | None = wire(STR, check_topic, default=None)
    limit: int = wire(INT, value_range(1, 100_000), default=1000)


@attrs.define(kw_only=True)
class TransactionResume(WireRequest):
    """Write discarded half messages (TRANS_CHECK_MAX_TIME_TOPIC) back as open ones, their
    check count at 0: those whose transaction's origin CommitLog offset is in `offsets`, or
    all of them when `offsets` is null (an admin action; docs/transactions.md)."""

    OP = "transaction_resume"
    REPLY = TransactionResumeReply
    offsets: list[int] | None = wire(LIST_INT, _check_offsets, default=None)


# ---------------------------------------------------------------- producer groups


@attrs.define(kw_only=True)
class ProducerHeartbeat(WireRequest):
    """A producer says it is live, and of which group (RocketMQ's producer heartbeat): what
    `producer_list` (mqadmin producerConnection) shows. Nothing per message."""

    OP = "producer_heartbeat"
    REPLY = EmptyReply
    group: str = _group_field()
    client_id: str = _client_id_field()
    heartbeat_interval_ms: int = wire(INT, value_range(1, 3_600_000), default=30_000)


@attrs.define(kw_only=True)
class ProducerUnregister(WireRequest):
    OP = "producer_unregister"
    REPLY = ProducerUnregisterReply
    group: str = _group_field()
    client_id: str = _client_id_field()


@attrs.define(kw_only=True)
class ProducerList(WireRequest):
    OP = "producer_list"
    REPLY = ProducerListReply
    group: str = _group_field()


# ---------------------------------------------------------------- the node itself


@attrs.define(kw_only=True)
class GetStatus(WireRequest):
    OP = "status"
    REPLY = StatusReply


@attrs.define(kw_only=True)
class DeleteExpiredFiles(WireRequest):
    OP = "admin.delete_expired_files"
    REPLY = DeletedFilesReply


@attrs.define(kw_only=True)
class Epoch(WireRequest):
    OP = "epoch"
    REPLY = EpochReply


@attrs.define(kw_only=True)
class Promote(WireRequest):
    OP = "promote"
    REPLY = PromoteReply
    role: str | None = wire(STR, check_master_role, default=None)
    unclean: bool = wire(BOOL, default=False)
    """Promote a slave outside the in-sync set or behind the confirm offset anyway."""


@attrs.define(kw_only=True)
class PromoteCheck(WireRequest):
    """Would `promote` go ahead without `unclean`, and what would it drop (docs/failover.md)."""

    OP = "promote_check"
    REPLY = PromoteCheckReply


@attrs.define(kw_only=True)
class CountMessages(WireRequest):
    """Messages stored in CommitLog range [from_offset, to_offset) (what an unclean promotion drops)."""

    OP = "count_messages"
    REPLY = CountMessagesReply
    from_offset: int = wire(INT, NON_NEG64)
    to_offset: int = wire(INT, NON_NEG64)


@attrs.define(kw_only=True)
class TopicStatus(WireRequest):
    """mqadmin topicStatus: per queue of a topic, its min and max offsets and last update."""

    OP = "topic_status"
    REPLY = TopicStatusReply
    topic: str = _topic_field()


@attrs.define(kw_only=True)
class GetBrokerConfig(WireRequest):
    """mqadmin getBrokerConfig: the node's config as it runs."""

    OP = "broker_config"
    REPLY = BrokerConfigReply


@attrs.define(kw_only=True)
class UpdateBrokerConfig(WireRequest):
    """mqadmin updateBrokerConfig: change one key that the node reads live (node/live_config.py)."""

    OP = "broker_config_update"
    REPLY = BrokerConfigUpdateReply
    key: str = wire(STR, check_config_key)
    value: str = wire(STR, check_config_value)


@attrs.define(kw_only=True)
class BrokerWritePerm(WireRequest):
    """mqadmin wipeWritePerm / addWritePerm, on the node: refuse (or accept again) sends."""

    OP = "broker_write_perm"
    REPLY = WritePermReply
    writeable: bool = wire(BOOL)


@attrs.define(kw_only=True)
class StatsAll(WireRequest):
    """mqadmin statsAll: put and get counts and TPS per topic and consumer group."""

    OP = "stats_all"
    REPLY = StatsAllReply


NODE_REQUESTS: dict[str, type[WireRequest]] = {cls.OP: cls for cls in (
    Send, SendBatch, Pull, QueryByKey, GetByMsgId, OffsetByTime, MinOffset, MaxOffset,
    CommitOffset, FetchOffset, OffsetList, OffsetForEpoch, TopicCreate, TopicDelete, TopicList,
    ConsumerHeartbeat, ConsumerWatch, ConsumerUnregister, ConsumerList, ConsumerLock, ConsumerUnlock,
    ConsumerSendBack, SubGroupUpdate, SubGroupList, SubGroupDelete, EndTransaction, TransactionCheckWatch,
    TransactionList, TransactionResume, ProducerHeartbeat, ProducerUnregister, ProducerList, GetStatus, DeleteExpiredFiles, Epoch,
    Promote, PromoteCheck, CountMessages, TopicStatus, GetBrokerConfig, UpdateBrokerConfig,
    BrokerWritePerm, StatsAll, AclList, AclPut, AclRemove)}
"""The node's op table: op name → request class."""

OPS: dict[str, tuple[Field, ...]] = {op: schema_of(cls) for op, cls in NODE_REQUESTS.items()}
"""Each op's fields, in declaration order (for docs and tests)."""


def parse_request(frame: Mapping[Any, Any], requests: Mapping[str, type[WireRequest]] = NODE_REQUESTS,
                  checked: set[str] | None = None) -> Request:
    """Validate a decoded frame against its op's request class (the node's table unless
    another is given); InvalidRequest names what is wrong. `checked`: as for `parse_with`."""
    return parse_with(frame, requests, checked)
