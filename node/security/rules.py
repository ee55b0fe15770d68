"""What each op needs from the account that sends it (RocketMQ ACL 1.0's table, for our ops).

`needs(request)` lists the permissions one request needs: PUB or SUB on a topic, SUB on a
consumer group, or the admin flag; an empty list means any logged-in account may. An op
missing from the table needs admin, so a new op is closed until someone decides otherwise
(a test checks every op of the node and the name server is listed). A retry or dead-letter
topic (`%RETRY%g`, `%DLQ%g`) belongs to its group: it needs SUB on the group. A system topic
(`SCHEDULE_TOPIC_XXXX`, `RMQ_SYS_*`, ...) needs admin.

`message_needs(topic, properties)` is the one rule for a stored message, whichever op shows
or copies it (guard.check_answer for every answer, `Request.reader` for consumer_send_back):
SUB on the topic it is stored under, and on its original topic when it is a copy (a retry
or DLQ copy's `RETRY_TOPIC`, a delayed message's `REAL_TOPIC`). Without the second half,
an account that may read its group's DLQ could read any topic a copy came from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from store.properties import PROPERTY_REAL_TOPIC, PROPERTY_RETRY_TOPIC
from store.schedule import SCHEDULE_TOPIC

from .acl import Account, Perm

__all__ = ["ADMIN", "ANY_ACCOUNT", "Need", "RULES", "is_system_topic", "message_needs", "needs", "topic_need"]

RETRY_PREFIX = "%RETRY%"  # node/ops/consumers.py's names (security sits below the ops)
DLQ_PREFIX = "%DLQ%"
SYSTEM_TOPICS = frozenset({SCHEDULE_TOPIC, "TBW102", "OFFSET_MOVED_EVENT", "TRANS_CHECK_MAX_TIME_TOPIC"})
SYSTEM_PREFIX = "RMQ_SYS_"


@attrs.frozen
class Need:
    """One permission a request needs: `kind` is "topic", "group" or "admin"."""

    kind: str
    name: str = ""
    perm: Perm = Perm.NONE

    def granted(self, account: Account) -> bool:
        if self.kind == "admin":
            return account.admin
        if self.kind == "group":
            return account.may_group(self.name, self.perm)
        return account.may_topic(self.name, self.perm)

    def describe(self) -> str:
        if self.kind == "admin":
            return "admin"
        return f"{self.perm.name} on {self.kind} {self.name!r}"


ADMIN = "admin"
ANY_ACCOUNT = "any"


def _topic(perm: Perm) -> Callable[[Any], list[Need]]:
    return lambda r: [topic_need(r.topic, perm)]


def is_system_topic(topic: str) -> bool:
    """The broker's own topics (RocketMQ's TopicValidator.isSystemTopic, for ours)."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_PREFIX)


def topic_need(topic: str, perm: Perm) -> Need:
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if topic.startswith(prefix):
            return Need("group", topic[len(prefix):], Perm.SUB)
    if is_system_topic(topic):
        return Need("admin")
    return Need("topic", topic, perm)


def message_needs(topic: str, properties: Mapping[str, str]) -> list[Need]:
    """What an account needs to be shown, or to copy, a message stored under `topic` with
    `properties`: SUB on that topic, and on the topic a copy came from. A delayed message
    waits on the system topic for its `REAL_TOPIC`, so it belongs to that topic (and to its
    original topic when the real one is a retry topic)."""
    if topic == SCHEDULE_TOPIC:
        real = properties.get(PROPERTY_REAL_TOPIC)
        if real and real != SCHEDULE_TOPIC:
            return message_needs(real, properties)
    out = [topic_need(topic, Perm.SUB)]
    if topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
        origin = properties.get(PROPERTY_RETRY_TOPIC)
        if origin and origin != topic:
            out.append(topic_need(origin, Perm.SUB))
    return out


def _group(r: Any) -> list[Need]:
    return [Need("group", r.group, Perm.SUB)]


def _group_topic(r: Any) -> list[Need]:
    return [Need("group", r.group, Perm.SUB), topic_need(r.topic, Perm.SUB)]


def _pull(r: Any) -> list[Need]:
    out = [topic_need(r.topic, Perm.SUB)]
    if r.group is not None:
        out.append(Need("group", r.group, Perm.SUB))
    return out


def _heartbeat(r: Any) -> list[Need]:
    return [Need("group", r.group, Perm.SUB), *(topic_need(t, Perm.SUB) for t in r.topics)]


RULES: dict[str, str | Callable[[Any], list[Need]]] = {
    # node: sends and reads
    "send": _topic(Perm.PUB),
    "send_batch": _topic(Perm.PUB),
    "pull": _pull,
    "offset_for_epoch": _pull,
    "query_by_key": _topic(Perm.SUB),
    "get_by_msg_id": ANY_ACCOUNT,  # the answer's topic is checked (guard.check_answer)
    "offset_by_time": _topic(Perm.SUB),
    "min_offset": _topic(Perm.SUB),
    "max_offset": _topic(Perm.SUB),
    # consumer groups
    "commit_offset": _group_topic,
    "fetch_offset": _group_topic,
    "consumer_heartbeat": _heartbeat,
    "consumer_watch": _group,
    "consumer_unregister": _group,
    "consumer_list": _group,
    "consumer_lock": _group_topic,
    "consumer_unlock": _group_topic,
    "consumer_send_back": _group,
    # producer groups: a producer says it is live (any account that may log in may say so);
    # who is live is for operators
    "producer_heartbeat": ANY_ACCOUNT,
    "producer_unregister": ANY_ACCOUNT,
    "producer_list": ADMIN,
    # a transaction's END: PUB on the half message's real topic, which the op reads from the
    # half message before it writes anything (Request.publisher)
    "end_transaction": ANY_ACCOUNT,
    # a producer's wait for check requests: any account that may say it is a producer of the
    # group (producer_heartbeat); the checks carry the half messages (docs/transactions.md)
    "transaction_check_watch": ANY_ACCOUNT,  # each check needs PUB on its topic (Request.publisher)
    "transaction_resume": ADMIN,
    "transaction_list": ADMIN,
    # the node itself
    "status": ANY_ACCOUNT,
    "epoch": ANY_ACCOUNT,
    "offset_list": ADMIN,
    "topic_create": ADMIN,
    "topic_delete": ADMIN,
    "topic_list": ADMIN,
    "acl_list": ADMIN,  # the accounts and their permissions (the console's ACL page)
    "acl_put": ADMIN,  # add an account or change its permissions (the console's ACL page)
    "acl_remove": ADMIN,
    "subgroup_update": ADMIN,
    "subgroup_list": ADMIN,
    "promote": ADMIN,
    "promote_check": ADMIN,
    "count_messages": ADMIN,
    "admin.delete_expired_files": ADMIN,
    "topic_status": _topic(Perm.SUB),  # offsets, as min_offset / max_offset
    "subgroup_delete": ADMIN,
    "broker_config": ADMIN,
    "broker_config_update": ADMIN,
    "broker_write_perm": ADMIN,
    "stats_all": ADMIN,
    # the name server
    "register_broker": ADMIN,
    "unregister_broker": ADMIN,
    "get_route": ANY_ACCOUNT,
    "get_cluster_info": ANY_ACCOUNT,
    "wipe_write_perm": ADMIN,
    "add_write_perm": ADMIN,
}


def needs(request: Any) -> list[Need]:
    """The permissions `request` needs (empty: any account)."""
    rule = RULES.get(request.OP, ADMIN)
    if rule == ADMIN:
        return [Need("admin")]
    if rule == ANY_ACCOUNT:
        return []
    return rule(request)  # type: ignore[operator]
