"""`tidemq admin ...`: operator commands, under RocketMQ mqadmin's names too.

| action | mqadmin alias | what |
|---|---|---|
| `topics` | `topicList` | every topic per broker group (of `-c CLUSTER`), with queue counts and permissions |
| `route` | `topicRoute` | a topic's route: groups, their brokers and queues |
| `topic-status` | `topicStatus` | per queue of a topic: broker, min and max offsets, last update |
| `progress` | `consumerProgress` | a consumer group's committed offset, the max offset and the lag per queue (of `-t TOPIC`, else of every topic of the group) |
| `status` | `brokerStatus` | the `tidemq status` table |
| `stats-all` | `statsAll` | per topic and consumer group: in/out TPS and message counts |
| `msg` | `queryMsgById` | a message by msgId |
| `key` | `queryMsgByKey` | messages by key |
| `unique-key` | `queryMsgByUniqueKey` | messages by UNIQ_KEY (the client's message id) |
| `trace` | `queryMsgTraceById` | a message's life from its traces: sent, stored, consumed by which groups, retried, dead-lettered (docs/trace.md) |
| `send-message` | `sendMessage` | send one message, print where it was stored |
| `delete-expired` | `deleteExpiredCommitLog` | ask each master to delete its expired files now |
| `clusters` | `clusterList` | every registered broker per cluster (of `-c CLUSTER`): role, epoch, offsets, liveness, in-sync set membership, confirm offset |
| `broker-config` | `getBrokerConfig` | the brokers' config as they run |
| `update-broker-config` | `updateBrokerConfig` | change a key the brokers read live (node/live_config.py) |
| `wipe-write-perm` | `wipeWritePerm` | a broker group refuses sends; routes show its topics without the write bit |
| `add-write-perm` | `addWritePerm` | undo wipeWritePerm |
| `update-topic` | `updateTopic` | create or update a topic on a cluster's masters (`-c`) or some (`-b`) |
| `delete-topic` | `deleteTopic` | delete a topic from a cluster's masters (routes lose it; files age out) |
| `consumer-connection` | `consumerConnection` | a consumer group's live members: address, subscriptions |
| `consumer-status` | `consumerStatus` | per member: the queues it holds, their offsets and lag |
| `producer-connection` | `producerConnection` | a producer group's live producers on a topic's masters |
| `update-sub-group` | `updateSubGroup` | a consumer group's broker-side settings: consumption on/off, retry limit |
| `delete-sub-group` | `deleteSubGroup` | drop a consumer group's broker-side settings |
| `reset-offset` | `resetOffsetByTime` | rewind (or skip) a stopped group's offsets to a time, or `now` |
| `transactions` | | the open half messages of every master (oldest first) with their check counts |
| `resume-half` | `resumeCheckHalfMessage` | write half messages discarded after transactionCheckMax checks back as open ones |
| `promote` | | make a slave its group's master with a new epoch (docs/failover.md) |

Every action prints a table (tables.rows_table: booleans `true`/`false`, times as local
time), or JSON lines with `--json`; exit codes as store/cli.py: 1 for an unknown group,
topic, cluster or broker, 2 for a bad value. Another action registers on the subparsers
`add_admin_commands` returns.
"""

from __future__ import annotations

import argparse
from typing import Any

from . import admin_changes as changes
from . import admin_common as common
from . import admin_queries as queries
from . import admin_transactions as transactions
from .client import print_broker_status
from .common import add_source, handled


def _live_keys() -> list[str]:
    from node.live_config import LIVE_KEYS

    return list(LIVE_KEYS)


def add_admin_commands(subparsers: argparse._SubParsersAction) -> Any:
    """Register `tidemq admin ...`; returns the group's action subparsers."""
    admin = subparsers.add_parser(
        "admin", help="operator commands (RocketMQ mqadmin names accepted)",
        description="Operator commands. RocketMQ mqadmin's names are accepted as aliases: topicList, "
        "topicRoute, topicStatus, consumerProgress, brokerStatus, statsAll, queryMsgById, queryMsgByKey, "
        "queryMsgByUniqueKey, sendMessage, deleteExpiredCommitLog, clusterList, getBrokerConfig, "
        "updateBrokerConfig, wipeWritePerm, addWritePerm, updateTopic, deleteTopic, updateSubGroup, "
        "deleteSubGroup, consumerConnection, consumerStatus, producerConnection, resetOffsetByTime, "
        "resumeCheckHalfMessage. "
        "Each prints a table, or JSON lines with --json. Exit 1 when a group, topic, cluster or broker "
        "is unknown, 2 for a bad value.",
    )
    admin.set_defaults(group_parser=admin)
    actions = admin.add_subparsers(dest="action", metavar="ACTION")

    def action(name: str, alias: str, summary: str) -> argparse.ArgumentParser:
        # "resolve": an action may take back a short flag of the shared ones (-v is
        # updateBrokerConfig's value, as in mqadmin; --verbose stays)
        p = actions.add_parser(name, aliases=[alias], help=summary, description=f"{summary} (mqadmin: {alias}).",
                               conflict_handler="resolve")
        add_source(p)
        p.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
        return p

    def targets(p: argparse.ArgumentParser, what: str = "master") -> None:
        p.add_argument("-c", "--cluster", help=f"every {what} of this brokerClusterName")
        p.add_argument("-b", "--on-broker", metavar="BROKER", action="append",
                       help=f"this {what} only: a broker name or address (repeatable)")

    topics = action("topics", "topicList", "every topic per broker group: queue counts and permissions")
    topics.add_argument("-c", "--cluster", help="the topics of this brokerClusterName's groups only")
    topics.set_defaults(handler=common.admin_command(queries.topics))
    route = action("route", "topicRoute", "a topic's route: its groups, their brokers and queue counts "
                   "(the table: a row per broker)")
    route.add_argument("-t", "--topic", required=True)
    route.set_defaults(handler=common.admin_command(queries.route))
    topic_status = action("topic-status", "topicStatus",
                          "per queue of a topic: its broker group, min and max offsets and when it last stored "
                          "a message")
    topic_status.add_argument("-t", "--topic", required=True)
    topic_status.set_defaults(handler=common.admin_command(queries.topic_status))
    progress = action("progress", "consumerProgress",
                      "a consumer group's committed offset, the queue's max offset and the lag, per queue of -t "
                      "TOPIC (else of every topic the group committed offsets for or subscribes), then the total")
    progress.add_argument("-g", "--group", required=True)
    progress.add_argument("-t", "--topic")
    progress.set_defaults(handler=common.admin_command(queries.progress))
    status = action("status", "brokerStatus", "every broker's status table (as `tidemq status`)")
    status.set_defaults(handler=handled(print_broker_status))
    stats = action("stats-all", "statsAll",
                   "per topic and consumer group: messages in (stored) and out (pulled), TPS of the last minute "
                   "and counts since each broker started, summed over the brokers")
    stats.add_argument("-t", "--topic", help="this topic only")
    stats.set_defaults(handler=common.admin_command(queries.stats_all))
    by_id = action("msg", "queryMsgById", "the message with this msgId")
    by_id.add_argument("-i", "--msg-id", required=True, metavar="ID")
    by_id.set_defaults(handler=common.admin_command(queries.by_id, check=queries.check_msg_id))
    by_key = action("key", "queryMsgByKey", "the messages of a topic with this key, newest first")
    by_key.add_argument("-t", "--topic", required=True)
    by_key.add_argument("-k", "--key", required=True)
    by_key.add_argument("--max", type=int, default=32, metavar="N", help="at most N messages (default 32)")
    by_key.set_defaults(handler=common.admin_command(queries.by_key, check=queries.check_max))
    by_uniq = action("unique-key", "queryMsgByUniqueKey",
                     "the messages of a topic whose UNIQ_KEY (the id RocketMQ's clients and sendMessage give "
                     "each message) is this one, newest first")
    by_uniq.add_argument("-i", "--uniq-key", required=True, metavar="UNIQ_KEY")
    by_uniq.add_argument("-t", "--topic", required=True)
    by_uniq.set_defaults(handler=common.admin_command(queries.by_unique_key))
    trace = action("trace", "queryMsgTraceById",
                   "a message's life from the trace topic (clients with enable_msg_trace): who sent it, where it "
                   "was stored, which consumer groups took it and when, how each try ended, its retry and "
                   "dead-letter copies")
    trace.add_argument("-i", "--msg-id", required=True, metavar="ID",
                       help="the msgId the send returned (a RocketMQ client's: its UNIQ_KEY)")
    trace.add_argument("-t", "--trace-topic", help="the trace topic (default RMQ_SYS_TRACE_TOPIC)")
    trace.add_argument("--max", type=int, default=64, metavar="N", help="read at most N trace messages (default 64)")
    trace.set_defaults(handler=common.admin_command(queries.msg_trace, check=queries.check_max))
    send = action("send-message", "sendMessage",
                  "send one message as a producer does (with a UNIQ_KEY) and print where it was stored")
    send.add_argument("-t", "--topic", required=True)
    send.add_argument("-p", "--body", required=True, help="the message body (text)")
    send.add_argument("-k", "--keys", help="its keys, separated by spaces or commas")
    send.add_argument("-c", "--tags", help="its tag")
    send.add_argument("-b", "--broker-name", metavar="BROKER_NAME", help="send to this broker group")
    send.add_argument("-i", "--queue-id", type=int, metavar="QUEUE_ID", help="to this queue (with -b)")
    send.set_defaults(handler=common.admin_command(changes.send_message, check=changes.check_send_message))
    action("delete-expired", "deleteExpiredCommitLog",
           "ask every master to delete its expired CommitLog, ConsumeQueue and index files now") \
        .set_defaults(handler=common.admin_command(changes.delete_expired))
    clusters = action("clusters", "clusterList",
                      "every registered broker per cluster: role, epoch, max offset, liveness")
    clusters.add_argument("-c", "--cluster", help="this brokerClusterName's brokers only")
    clusters.set_defaults(handler=common.admin_command(queries.clusters))
    get_config = action("broker-config", "getBrokerConfig",
                        "the config of every broker of a cluster (-c), of some (-b), or of all, as they run; "
                        "`live` keys are the ones updateBrokerConfig may change")
    targets(get_config, "broker")
    get_config.add_argument("-k", "--key", help="this key only (camelCase, as in the config file)")
    get_config.set_defaults(handler=common.admin_command(queries.broker_config, check=queries.check_broker_config))
    set_config = action("update-broker-config", "updateBrokerConfig",
                        "set a key on every broker of a cluster (-c) or some (-b) while they run; only keys the "
                        f"brokers read live: {', '.join(_live_keys())}; in memory until a broker restarts")
    targets(set_config, "broker")
    set_config.add_argument("-k", "--key", required=True)
    set_config.add_argument("-v", "--value", required=True)
    set_config.set_defaults(handler=common.admin_command(changes.update_broker_config, check=changes.check_update_broker_config))
    for name, alias, writeable, summary in (
            ("wipe-write-perm", "wipeWritePerm", False,
             "a broker group refuses sends (SERVICE_NOT_AVAILABLE, saying why: producers go to other groups) and "
             "the name servers route its topics without the write bit, until addWritePerm; reads go on"),
            ("add-write-perm", "addWritePerm", True,
             "undo wipeWritePerm: the group accepts sends and routes show its topics' perm as registered")):
        perm = action(name, alias, summary)
        perm.add_argument("-b", "--broker-name", required=True, metavar="BROKER_NAME", help="the group, e.g. broker-a")
        perm.set_defaults(handler=common.admin_command(changes.write_perm(writeable), check=changes.check_write_perm))
    update_topic = action("update-topic", "updateTopic",
                          "create or update a topic on every master of a cluster (-c) or on some (-b)")
    update_topic.add_argument("-t", "--topic", required=True)
    targets(update_topic)
    update_topic.add_argument("-r", "--read-queue-nums", type=int, default=8, metavar="N", help="default 8")
    update_topic.add_argument("-w", "--write-queue-nums", type=int, default=8, metavar="N", help="default 8")
    update_topic.add_argument("-p", "--perm", type=int, default=6, metavar="P",
                              help="READ(4) | WRITE(2) | INHERIT(1); default 6")
    update_topic.set_defaults(handler=common.admin_command(changes.update_topic, check=changes.check_update_topic))
    delete_topic = action("delete-topic", "deleteTopic",
                          "delete a topic from every master of a cluster (-c) or some (-b): routes lose it, "
                          "its files age out; exit 1 when no master had it")
    delete_topic.add_argument("-t", "--topic", required=True)
    targets(delete_topic)
    delete_topic.set_defaults(handler=common.admin_command(changes.delete_topic))
    connection = action("consumer-connection", "consumerConnection",
                        "a consumer group's live members: client id, address, subscriptions, the masters "
                        "that know it; exit 1 when it has none")
    connection.add_argument("-g", "--group", required=True)
    connection.set_defaults(handler=common.admin_command(queries.consumer_connection))
    consumer_status = action("consumer-status", "consumerStatus",
                             "per member of a consumer group: the queues it holds, their committed and max "
                             "offsets and the lag")
    consumer_status.add_argument("-g", "--group", required=True)
    consumer_status.set_defaults(handler=common.admin_command(queries.consumer_status))
    producers = action("producer-connection", "producerConnection",
                       "a producer group's live producers (client id, address, heartbeat) on the masters serving "
                       "a topic; producers say their group when built with Producer(group=...); exit 1 when none")
    producers.add_argument("-g", "--group", required=True, help="the producer group")
    producers.add_argument("-t", "--topic", required=True)
    producers.set_defaults(handler=common.admin_command(queries.producer_connection))
    sub_group = action("update-sub-group", "updateSubGroup",
                       "set a consumer group's settings on every master of a cluster (-c) or some (-b); slaves "
                       "copy them and a promoted slave keeps them")
    sub_group.add_argument("-g", "--group", required=True)
    targets(sub_group)
    sub_group.add_argument("-s", "--consumeEnable", "--consume-enable", dest="consume_enable", type=common.parse_bool,
                           metavar="true|false", help="false: the group's pulls are refused (NO_PERMISSION)")
    sub_group.add_argument("-r", "--retryMaxTimes", "--retry-max-times", dest="retry_max_times", type=int,
                           metavar="N", help="retries before a message goes to the group's DLQ (broker-side, "
                           "wins over the members' setting)")
    sub_group.set_defaults(handler=common.admin_command(changes.update_sub_group, check=changes.check_update_sub_group))
    delete_group = action("delete-sub-group", "deleteSubGroup",
                          "drop a consumer group's settings (updateSubGroup's) from every master of a cluster (-c) "
                          "or some (-b); slaves copy that; exit 1 when no master had any")
    delete_group.add_argument("-g", "--group", required=True)
    targets(delete_group)
    delete_group.set_defaults(handler=common.admin_command(changes.delete_sub_group))
    reset = action("reset-offset", "resetOffsetByTime",
                   "set a consumer group's committed offsets of a topic to the first message stored at or "
                   "after a time (-s now: skip to the end); the group's members must be stopped")
    reset.add_argument("-g", "--group", required=True)
    reset.add_argument("-t", "--topic", required=True)
    reset.add_argument("-s", "--timestamp", required=True, metavar="TIME",
                       help="now, ms since the epoch, 2026-11-24T10:30:00 or 2026-11-24#10:30:00:000")
    reset.add_argument("--force", action="store_true",
                       help="reset even while members are live (they may commit over it)")
    reset.set_defaults(handler=common.admin_command(changes.reset_offset, check=changes.check_reset_offset))
    open_tx = actions.add_parser(
        "transactions", help="open half messages (transactions no END ended) on every master",
        description="The open half messages of every master of -c or -b (else all), oldest first: the "
        "transaction's origin CommitLog offset (what END and resume-half name), its real topic and queue, "
        "producer group, transaction id, checks so far, age and when the check service asks next. The "
        "title line counts every open and discarded one.", conflict_handler="resolve")
    add_source(open_tx)
    targets(open_tx)
    open_tx.add_argument("-t", "--topic", help="only those of this (real) topic")
    open_tx.add_argument("--limit", type=int, default=1000, metavar="N", help="at most N per master (default 1000)")
    open_tx.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    open_tx.set_defaults(handler=common.admin_command(transactions.open_transactions))
    resume = action("resume-half", "resumeCheckHalfMessage",
                    "write half messages the transaction check service discarded (checked transactionCheckMax "
                    "times, now on TRANS_CHECK_MAX_TIME_TOPIC) back as open ones on every master of -c or -b (else "
                    "all): checks start again from 0; exit 1 when none was resumed")
    targets(resume)
    resume.add_argument("--offset", type=int, action="append", metavar="OFFSET",
                        help="the transaction's origin CommitLog offset (TRAN_HALF_OFFSET of its discard record); "
                        "repeatable")
    resume.add_argument("--all", action="store_true", help="every discarded half message")
    resume.set_defaults(handler=common.admin_command(transactions.resume, check=transactions.check_resume))
    promote = actions.add_parser(
        "promote", help="make a slave its group's master (a new epoch)",
        description="Promote slave BROKER_ID of BROKER_NAME: it stops replicating, dispatches what it "
        "holds, starts epoch N+1 at its max offset and serves as brokerId 0; the group's other slaves "
        "follow it, and an old master that returns is fenced and rejoins as a slave (docs/failover.md). "
        "A slave outside its master's in-sync set or behind the confirm offset is refused, with the "
        "reason, unless --unclean. Exit 1 when the broker is unknown or refuses.",
    )
    add_source(promote)
    promote.add_argument("broker_name", metavar="BROKER_NAME", help="the group, e.g. broker-a")
    promote.add_argument("broker_id", metavar="BROKER_ID", type=int, help="the slave's brokerId, e.g. 1")
    promote.add_argument("--role", choices=("SYNC_MASTER", "ASYNC_MASTER"),
                         help="the role to serve (default: the group master's registered role)")
    promote.add_argument("--timeout", type=float, default=30.0, help="seconds to wait (default 30)")
    promote.add_argument("--unclean", action="store_true",
                         help="promote a slave outside the in-sync set or behind the confirm offset anyway, "
                         "after printing what it drops (offset range, message count); an in-sync slave "
                         "needs no flag")
    promote.add_argument("--json", action="store_true", help="print the result as JSON")
    promote.set_defaults(handler=common.admin_command(changes.promote, check=changes.check_promote))
    return actions
