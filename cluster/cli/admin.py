"""`tidemq admin ...`: operator commands, under RocketMQ mqadmin's names too.

| action | mqadmin alias | what |
|---|---|---|
| `topics` | `topicList` | every topic per broker group, with queue counts and permissions |
| `route` | `topicRoute` | a topic's route: groups, their brokers and queues |
| `progress` | `consumerProgress` | a consumer group's committed offset, the max offset and the lag per queue |
| `status` | `brokerStatus` | the `tidemq status` table |
| `msg` | `queryMsgById` | a message by msgId |
| `key` | `queryMsgByKey` | messages by key |
| `delete-expired` | `deleteExpiredCommitLog` | ask each master to delete its expired files now |
| `promote` | | make a slave its group's master with a new epoch (docs/failover.md) |

Another action (e.g. `promote`) registers on the subparsers `add_admin_commands` returns.
Every action prints JSON lines (status: a table unless --json); exit codes as store/cli.py.
"""

from __future__ import annotations

import argparse
from typing import Any

from store.cli import EXIT_OK, EXIT_PROBLEM, UsageError, error, print_json

from .client import print_broker_status, run_query
from .common import add_source, handled, run_async, source


def _cmd_topics(args: argparse.Namespace) -> int:
    from ..client import Admin

    src = source(args)

    async def main() -> int:
        async with Admin(**src) as admin:
            topics = await admin.topics()
        for t in topics:
            print_json({"topic": t.topic, "broker_name": t.broker_name, "read_queue_nums": t.read_queue_nums,
                        "write_queue_nums": t.write_queue_nums, "perm": t.perm})
        if not topics:
            error("no topic is registered")
            return EXIT_PROBLEM
        return EXIT_OK

    return run_async(args, main)


def _cmd_route(args: argparse.Namespace) -> int:
    from ..client import Admin

    src = source(args)

    async def main() -> int:
        async with Admin(**src) as admin:
            route = await admin.route(args.topic)
        for g in route.groups:
            qd = g.queue_data
            print_json({
                "topic": route.topic, "broker_name": g.broker_name, "cluster": g.cluster,
                "read_queue_nums": qd.read_queue_nums if qd else None,
                "write_queue_nums": qd.write_queue_nums if qd else None, "perm": qd.perm if qd else None,
                **g.controller_view(),
                "brokers": [{"broker_id": b.broker_id, "role": b.role, "address": b.address, "alive": b.alive,
                             "epoch": b.epoch} for b in g.brokers],
            })
        return EXIT_OK

    return run_async(args, main)


def _cmd_progress(args: argparse.Namespace) -> int:
    from ..client import Admin, MessageQueue

    src = source(args)

    async def main() -> int:
        async with Admin(**src) as admin:
            route = await admin.route(args.topic)
            total = 0
            for g in route.groups:
                for queue_id in range(g.queue_data.read_queue_nums if g.queue_data else 0):
                    mq = MessageQueue(args.topic, g.broker_name, queue_id)
                    broker_offset = await admin.max_offset(mq)
                    consumer_offset = await admin.consumer_offset(mq, args.group)
                    lag = broker_offset - (consumer_offset or 0)
                    total += lag
                    print_json({"topic": args.topic, "broker_name": g.broker_name, "queue_id": queue_id,
                                "broker_offset": broker_offset, "consumer_offset": consumer_offset, "lag": lag})
        print_json({"group": args.group, "topic": args.topic, "total_lag": total})
        return EXIT_OK

    return run_async(args, main)


def _cmd_delete_expired(args: argparse.Namespace) -> int:
    from ..client import Admin

    src = source(args)

    async def main() -> int:
        async with Admin(**src) as admin:
            masters = sorted({b.address for b in await admin.cluster_info() if b.is_master})
            for address in masters:
                print_json({"address": address, "deleted_files": await admin.delete_expired_files(address)})
        if not masters:
            error("no master is registered")
            return EXIT_PROBLEM
        return EXIT_OK

    return run_async(args, main)


def _cmd_promote(args: argparse.Namespace) -> int:
    from ..client import Admin

    src = source(args)
    if args.broker_id < 1:
        raise UsageError(f"BROKER_ID must be a slave's id (1 or more), got {args.broker_id}")

    async def main() -> int:
        async with Admin(**src) as admin:
            result = await admin.promote(args.broker_name, args.broker_id, role=args.role, timeout=args.timeout)
        if args.json:
            print_json(result)
        else:
            print(f"{args.broker_name}: {result['address']} is the master now (brokerId 0, {result['role']}), "
                  f"epoch {result['epoch']} from CommitLog offset {result['start_offset']}")
        return EXIT_OK

    return run_async(args, main)


def add_admin_commands(subparsers: argparse._SubParsersAction) -> Any:
    """Register `tidemq admin ...`; returns the group's action subparsers."""
    admin = subparsers.add_parser(
        "admin", help="operator commands (RocketMQ mqadmin names accepted)",
        description="Operator commands. RocketMQ mqadmin's names are accepted as aliases: topicList, "
        "topicRoute, consumerProgress, brokerStatus, queryMsgById, queryMsgByKey, deleteExpiredCommitLog.",
    )
    admin.set_defaults(group_parser=admin)
    actions = admin.add_subparsers(dest="action", metavar="ACTION")

    def action(name: str, alias: str, summary: str) -> argparse.ArgumentParser:
        p = actions.add_parser(name, aliases=[alias], help=summary, description=f"{summary} (mqadmin: {alias}).")
        add_source(p)
        return p

    action("topics", "topicList", "every topic per broker group: queue counts and permissions") \
        .set_defaults(handler=handled(_cmd_topics))
    route = action("route", "topicRoute", "a topic's route: its groups, their brokers and queue counts")
    route.add_argument("--topic", required=True)
    route.set_defaults(handler=handled(_cmd_route))
    progress = action("progress", "consumerProgress",
                      "a consumer group's committed offset, the queue's max offset and the lag, per queue, "
                      "then the total")
    progress.add_argument("--group", required=True)
    progress.add_argument("--topic", required=True)
    progress.set_defaults(handler=handled(_cmd_progress))
    status = action("status", "brokerStatus", "every broker's status table (as `tidemq status`)")
    status.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    status.set_defaults(handler=handled(print_broker_status))
    by_id = action("msg", "queryMsgById", "the message with this msgId")
    by_id.add_argument("--msg-id", required=True, metavar="ID")
    by_id.set_defaults(handler=handled(run_query), topic=None, key=None, max=32)
    by_key = action("key", "queryMsgByKey", "the messages of a topic with this key, newest first")
    by_key.add_argument("--topic", required=True)
    by_key.add_argument("--key", required=True)
    by_key.add_argument("--max", type=int, default=32, metavar="N", help="at most N messages (default 32)")
    by_key.set_defaults(handler=handled(run_query), msg_id=None)
    action("delete-expired", "deleteExpiredCommitLog",
           "ask every master to delete its expired CommitLog, ConsumeQueue and index files now") \
        .set_defaults(handler=handled(_cmd_delete_expired))
    promote = actions.add_parser(
        "promote", help="make a slave its group's master (a new epoch)",
        description="Promote slave BROKER_ID of BROKER_NAME: it stops replicating, dispatches what it "
        "holds, starts epoch N+1 at its max offset and serves as brokerId 0; the group's other slaves "
        "follow it, and an old master that returns is fenced and rejoins as a slave (docs/failover.md). "
        "Exit 1 when the broker is unknown or refuses.",
    )
    add_source(promote)
    promote.add_argument("broker_name", metavar="BROKER_NAME", help="the group, e.g. broker-a")
    promote.add_argument("broker_id", metavar="BROKER_ID", type=int, help="the slave's brokerId, e.g. 1")
    promote.add_argument("--role", choices=("SYNC_MASTER", "ASYNC_MASTER"),
                         help="the role to serve (default: the group master's registered role)")
    promote.add_argument("--timeout", type=float, default=30.0, help="seconds to wait (default 30)")
    promote.add_argument("--json", action="store_true", help="print the result as JSON")
    promote.set_defaults(handler=handled(_cmd_promote))
    return actions
