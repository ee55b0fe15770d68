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
| `clusters` | `clusterList` | every registered broker per cluster: role, epoch, offsets, liveness |
| `update-topic` | `updateTopic` | create or update a topic on a cluster's masters (`-c`) or some (`-b`) |
| `delete-topic` | `deleteTopic` | delete a topic from a cluster's masters (routes lose it; files age out) |
| `consumer-connection` | `consumerConnection` | a consumer group's live members: address, subscriptions |
| `consumer-status` | `consumerStatus` | per member: the queues it holds, their offsets and lag |
| `update-sub-group` | `updateSubGroup` | a consumer group's broker-side settings: consumption on/off, retry limit |
| `reset-offset` | `resetOffsetByTime` | rewind (or skip) a stopped group's offsets to a time, or `now` |
| `promote` | | make a slave its group's master with a new epoch (docs/failover.md) |

Every action prints a table, or JSON lines with `--json` (messages are JSON lines either
way); exit codes as store/cli.py: 1 for an unknown group, topic, cluster or broker, 2 for a
bad value. Another action registers on the subparsers `add_admin_commands` returns.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from store.cli import EXIT_OK, EXIT_PROBLEM, UsageError, error, print_json

from .client import print_broker_status, run_query
from .common import add_source, handled, run_async, source


def _emit(args: argparse.Namespace, rows: Sequence[dict[str, Any]], title: str) -> None:
    """The rows as JSON lines (--json) or as one table (columns: the first row's keys)."""
    if getattr(args, "json", False):
        for row in rows:
            print_json(row)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    columns = list(rows[0]) if rows else []
    for column in columns:
        table.add_column(column.replace("_", " "), overflow="fold")
    for row in rows:
        table.add_row(*("-" if row.get(c) is None else
                        json.dumps(row[c]) if isinstance(row.get(c), dict | list) else str(row[c])
                        for c in columns))
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def _admin_command(body: Callable[[argparse.Namespace, Any], Awaitable[int]], *,
                   check: Callable[[argparse.Namespace], None] | None = None) -> Callable[[argparse.Namespace], int]:
    """An action: `check(args)` (usage errors, before anything connects), then
    `body(args, admin)` with an Admin on --namesrv / --broker; exit codes as store/cli.py."""
    def run(args: argparse.Namespace) -> int:
        from ..client import Admin

        src = source(args)
        if check is not None:
            check(args)

        async def main() -> int:
            async with Admin(**src) as admin:
                return await body(args, admin)

        return run_async(args, main)

    return handled(run)


async def _topics(args: argparse.Namespace, admin: Any) -> int:
    topics = await admin.topics()
    _emit(args, [{"topic": t.topic, "broker_name": t.broker_name, "read_queue_nums": t.read_queue_nums,
                  "write_queue_nums": t.write_queue_nums, "perm": t.perm} for t in topics], "topics")
    if not topics:
        error("no topic is registered")
        return EXIT_PROBLEM
    return EXIT_OK


async def _route(args: argparse.Namespace, admin: Any) -> int:
    route = await admin.route(args.topic)
    rows = []
    for g in route.groups:
        qd = g.queue_data
        rows.append({
            "topic": route.topic, "broker_name": g.broker_name, "cluster": g.cluster,
            "read_queue_nums": qd.read_queue_nums if qd else None,
            "write_queue_nums": qd.write_queue_nums if qd else None, "perm": qd.perm if qd else None,
            **g.controller_view(),
            "brokers": [{"broker_id": b.broker_id, "role": b.role, "address": b.address, "alive": b.alive,
                         "epoch": b.epoch} for b in g.brokers],
        })
    _emit(args, rows, f"route of {args.topic}")
    return EXIT_OK


async def _progress(args: argparse.Namespace, admin: Any) -> int:
    from ..client import MessageQueue

    route = await admin.route(args.topic)
    total, rows = 0, []
    for g in route.groups:
        for queue_id in range(g.queue_data.read_queue_nums if g.queue_data else 0):
            mq = MessageQueue(args.topic, g.broker_name, queue_id)
            broker_offset = await admin.max_offset(mq)
            consumer_offset = await admin.consumer_offset(mq, args.group)
            lag = broker_offset - (consumer_offset or 0)
            total += lag
            rows.append({"topic": args.topic, "broker_name": g.broker_name, "queue_id": queue_id,
                         "broker_offset": broker_offset, "consumer_offset": consumer_offset, "lag": lag})
    if all(r["consumer_offset"] is None for r in rows) and not any(
            v.members for v in (await admin.consumer_list(args.group)).values()):
        error(f"consumer group {args.group!r} has no committed offset on {args.topic!r} and no live member")
        return EXIT_PROBLEM
    if args.json:
        _emit(args, [*rows, {"group": args.group, "topic": args.topic, "total_lag": total}], "")
    else:
        _emit(args, rows, f"progress of {args.group} on {args.topic}: total lag {total}")
    return EXIT_OK


async def _delete_expired(args: argparse.Namespace, admin: Any) -> int:
    masters = sorted({b.address for b in await admin.cluster_info() if b.is_master})
    rows = [{"address": address, "deleted_files": await admin.delete_expired_files(address)}
            for address in masters]
    _emit(args, rows, "expired files deleted")
    if not masters:
        error("no master is registered")
        return EXIT_PROBLEM
    return EXIT_OK


async def _clusters(args: argparse.Namespace, admin: Any) -> int:
    infos = await admin.cluster_info()
    rows = [{"cluster": b.cluster, "broker_name": b.broker_name, "broker_id": b.broker_id, "role": b.role,
             "address": b.address, "epoch": b.epoch, "alive": b.alive, "max_offset": b.max_offset,
             "topics": len(b.topics), "age_ms": b.age_ms}
            for b in sorted(infos, key=lambda b: (b.cluster, b.broker_name, b.broker_id))]
    _emit(args, rows, "clusters")
    if not rows:
        error("no broker is registered")
        return EXIT_PROBLEM
    return EXIT_OK


def _targets(args: argparse.Namespace) -> dict[str, Any]:
    if args.cluster and args.on_broker:
        raise UsageError("give -c CLUSTER or -b BROKER, not both")
    return {"cluster": args.cluster, "broker_names": args.on_broker}


def _check_update_topic(args: argparse.Namespace) -> None:
    for flag, value, low, high in (("-r", args.read_queue_nums, 1, 1024), ("-w", args.write_queue_nums, 1, 1024),
                                   ("-p", args.perm, 0, 7)):
        if not low <= value <= high:
            raise UsageError(f"{flag} must be in {low}..{high}, got {value}")


async def _update_topic(args: argparse.Namespace, admin: Any) -> int:
    targets = _targets(args)
    created = await admin.create_topic(args.topic, read_queue_nums=args.read_queue_nums,
                                       write_queue_nums=args.write_queue_nums, perm=args.perm, **targets)
    _emit(args, [{"topic": t.topic, "broker_name": t.broker_name, "read_queue_nums": t.read_queue_nums,
                  "write_queue_nums": t.write_queue_nums, "perm": t.perm} for t in created],
          f"topic {args.topic} created or updated")
    return EXIT_OK


async def _delete_topic(args: argparse.Namespace, admin: Any) -> int:
    targets = _targets(args)
    deleted = await admin.delete_topic(args.topic, **targets)
    _emit(args, [{"topic": args.topic, "broker_name": name, "deleted": had} for name, had in deleted.items()],
          f"topic {args.topic} deleted")
    if not any(deleted.values()):
        error(f"no master had topic {args.topic!r}")
        return EXIT_PROBLEM
    return EXIT_OK


async def _online(admin: Any, group: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]] | None:
    """Each master's view of the group and its members (client id → details and the masters
    that know it); None, after one error line, when no master knows a live member."""
    views = await admin.consumer_list(group)
    members: dict[str, dict[str, Any]] = {}
    for broker_name, view in sorted(views.items()):
        for detail in view.details:
            entry = members.setdefault(detail["client_id"], {**detail, "brokers": []})
            entry["brokers"].append(broker_name)
    if not members:
        error(f"consumer group {group!r} has no live member on any master")
        return None
    return views, members


async def _consumer_connection(args: argparse.Namespace, admin: Any) -> int:
    online = await _online(admin, args.group)
    if online is None:
        return EXIT_PROBLEM
    _, members = online
    _emit(args, [{"group": args.group, "client_id": cid, "address": m.get("address"),
                  "topics": m["topics"], "heartbeat_interval_ms": m["heartbeat_interval_ms"],
                  "silent_ms": m["silent_ms"], "brokers": m["brokers"]} for cid, m in sorted(members.items())],
          f"connections of consumer group {args.group}")
    return EXIT_OK


async def _consumer_status(args: argparse.Namespace, admin: Any) -> int:
    from ..client import MessageQueue

    online = await _online(admin, args.group)
    if online is None:
        return EXIT_PROBLEM
    views, members = online
    rows = []
    for broker_name, view in sorted(views.items()):
        for key, holder in sorted(view.locks.items()):
            topic, _, queue_id = key.rpartition(":")
            mq = MessageQueue(topic, broker_name, int(queue_id))
            max_offset = await admin.max_offset(mq)
            committed = await admin.consumer_offset(mq, args.group)
            rows.append({"client_id": holder, "address": members.get(holder, {}).get("address"),
                         "topic": topic, "broker_name": broker_name, "queue_id": int(queue_id),
                         "consumer_offset": committed, "broker_offset": max_offset,
                         "lag": max_offset - (committed or 0)})
    idle = sorted(set(members) - {r["client_id"] for r in rows})
    rows += [{"client_id": cid, "address": members[cid].get("address"), "topic": None, "broker_name": None,
              "queue_id": None, "consumer_offset": None, "broker_offset": None, "lag": None} for cid in idle]
    _emit(args, rows, f"status of consumer group {args.group} (queues per member)")
    return EXIT_OK


def _bool(text: str) -> bool:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _check_update_sub_group(args: argparse.Namespace) -> None:
    if args.consume_enable is None and args.retry_max_times is None:
        raise UsageError("give --consumeEnable true|false and/or --retryMaxTimes N")
    if args.retry_max_times is not None and not 0 <= args.retry_max_times <= 10_000:
        raise UsageError(f"--retryMaxTimes must be in 0..10000, got {args.retry_max_times}")


async def _update_sub_group(args: argparse.Namespace, admin: Any) -> int:
    targets = _targets(args)
    stored = await admin.update_sub_group(args.group, consume_enable=args.consume_enable,
                                          retry_max_times=args.retry_max_times, **targets)
    _emit(args, [{"broker_name": name, **config} for name, config in stored.items()],
          f"subscription group {args.group}")
    return EXIT_OK


def parse_time_ms(text: str) -> int | None:
    """-s of resetOffsetByTime: "now" (None: each queue's end), milliseconds since the epoch,
    an ISO 8601 time (local time unless it names a zone), or mqadmin's
    yyyy-MM-dd#HH:mm:ss:SSS."""
    if text == "now":
        return None
    if text.isdigit():
        return int(text)
    try:
        if "#" in text:
            moment = datetime.datetime.strptime(text, "%Y-%m-%d#%H:%M:%S:%f")
        else:
            moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"-s {text!r} is not a time: give now, milliseconds since the epoch, "
                         "2026-11-24T10:30:00 or 2026-11-24#10:30:00:000") from None
    return int(moment.timestamp() * 1000)


def _check_reset_offset(args: argparse.Namespace) -> None:
    parse_time_ms(args.timestamp)  # a bad time is a usage error before anything connects


async def _reset_offset(args: argparse.Namespace, admin: Any) -> int:
    from ..client import MessageQueue

    when = parse_time_ms(args.timestamp)
    live = sorted({d["client_id"] for v in (await admin.consumer_list(args.group)).values() for d in v.details})
    if live and not args.force:
        error(f"consumer group {args.group!r} has {len(live)} live member(s) ({', '.join(live)}): "
              "they would commit their own positions over the reset; stop them first (or --force)")
        return EXIT_PROBLEM
    route = await admin.route(args.topic)
    rows = []
    for g in route.groups:
        for queue_id in range(g.queue_data.read_queue_nums if g.queue_data else 0):
            mq = MessageQueue(args.topic, g.broker_name, queue_id)
            old = await admin.consumer_offset(mq, args.group)
            new = await admin.max_offset(mq) if when is None else await admin.offset_by_time(mq, when)
            await admin.commit_offset(mq, args.group, new)
            rows.append({"group": args.group, "topic": args.topic, "broker_name": g.broker_name,
                         "queue_id": queue_id, "old_offset": old, "new_offset": new})
    _emit(args, rows, f"offsets of {args.group} on {args.topic} reset to "
                      f"{'now' if when is None else args.timestamp}")
    return EXIT_OK


def _check_promote(args: argparse.Namespace) -> None:
    if args.broker_id < 1:
        raise UsageError(f"BROKER_ID must be a slave's id (1 or more), got {args.broker_id}")


async def _promote(args: argparse.Namespace, admin: Any) -> int:
    result = await admin.promote(args.broker_name, args.broker_id, role=args.role, timeout=args.timeout)
    if args.json:
        print_json(result)
    else:
        print(f"{args.broker_name}: {result['address']} is the master now (brokerId 0, {result['role']}), "
              f"epoch {result['epoch']} from CommitLog offset {result['start_offset']}")
    return EXIT_OK


def add_admin_commands(subparsers: argparse._SubParsersAction) -> Any:
    """Register `tidemq admin ...`; returns the group's action subparsers."""
    admin = subparsers.add_parser(
        "admin", help="operator commands (RocketMQ mqadmin names accepted)",
        description="Operator commands. RocketMQ mqadmin's names are accepted as aliases: topicList, "
        "topicRoute, consumerProgress, brokerStatus, queryMsgById, queryMsgByKey, deleteExpiredCommitLog, "
        "clusterList, updateTopic, deleteTopic, updateSubGroup, consumerConnection, consumerStatus, "
        "resetOffsetByTime. "
        "Each prints a table, or JSON lines with --json. Exit 1 when a group, topic, cluster or broker "
        "is unknown, 2 for a bad value.",
    )
    admin.set_defaults(group_parser=admin)
    actions = admin.add_subparsers(dest="action", metavar="ACTION")

    def action(name: str, alias: str, summary: str) -> argparse.ArgumentParser:
        p = actions.add_parser(name, aliases=[alias], help=summary, description=f"{summary} (mqadmin: {alias}).")
        add_source(p)
        p.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
        return p

    def targets(p: argparse.ArgumentParser) -> None:
        p.add_argument("-c", "--cluster", help="every master of this brokerClusterName")
        p.add_argument("-b", "--on-broker", metavar="BROKER", action="append",
                       help="this master only: a broker name or address (repeatable)")

    action("topics", "topicList", "every topic per broker group: queue counts and permissions") \
        .set_defaults(handler=_admin_command(_topics))
    route = action("route", "topicRoute", "a topic's route: its groups, their brokers and queue counts")
    route.add_argument("-t", "--topic", required=True)
    route.set_defaults(handler=_admin_command(_route))
    progress = action("progress", "consumerProgress",
                      "a consumer group's committed offset, the queue's max offset and the lag, per queue, "
                      "then the total")
    progress.add_argument("-g", "--group", required=True)
    progress.add_argument("-t", "--topic", required=True)
    progress.set_defaults(handler=_admin_command(_progress))
    status = action("status", "brokerStatus", "every broker's status table (as `tidemq status`)")
    status.set_defaults(handler=handled(print_broker_status))
    by_id = action("msg", "queryMsgById", "the message with this msgId")
    by_id.add_argument("-i", "--msg-id", required=True, metavar="ID")
    by_id.set_defaults(handler=handled(run_query), topic=None, key=None, max=32)
    by_key = action("key", "queryMsgByKey", "the messages of a topic with this key, newest first")
    by_key.add_argument("-t", "--topic", required=True)
    by_key.add_argument("-k", "--key", required=True)
    by_key.add_argument("--max", type=int, default=32, metavar="N", help="at most N messages (default 32)")
    by_key.set_defaults(handler=handled(run_query), msg_id=None)
    action("delete-expired", "deleteExpiredCommitLog",
           "ask every master to delete its expired CommitLog, ConsumeQueue and index files now") \
        .set_defaults(handler=_admin_command(_delete_expired))
    action("clusters", "clusterList", "every registered broker per cluster: role, epoch, max offset, liveness") \
        .set_defaults(handler=_admin_command(_clusters))
    update_topic = action("update-topic", "updateTopic",
                          "create or update a topic on every master of a cluster (-c) or on some (-b)")
    update_topic.add_argument("-t", "--topic", required=True)
    targets(update_topic)
    update_topic.add_argument("-r", "--read-queue-nums", type=int, default=8, metavar="N", help="default 8")
    update_topic.add_argument("-w", "--write-queue-nums", type=int, default=8, metavar="N", help="default 8")
    update_topic.add_argument("-p", "--perm", type=int, default=6, metavar="P",
                              help="READ(4) | WRITE(2) | INHERIT(1); default 6")
    update_topic.set_defaults(handler=_admin_command(_update_topic, check=_check_update_topic))
    delete_topic = action("delete-topic", "deleteTopic",
                          "delete a topic from every master of a cluster (-c) or some (-b): routes lose it, "
                          "its files age out; exit 1 when no master had it")
    delete_topic.add_argument("-t", "--topic", required=True)
    targets(delete_topic)
    delete_topic.set_defaults(handler=_admin_command(_delete_topic))
    connection = action("consumer-connection", "consumerConnection",
                        "a consumer group's live members: client id, address, subscriptions, the masters "
                        "that know it; exit 1 when it has none")
    connection.add_argument("-g", "--group", required=True)
    connection.set_defaults(handler=_admin_command(_consumer_connection))
    consumer_status = action("consumer-status", "consumerStatus",
                             "per member of a consumer group: the queues it holds, their committed and max "
                             "offsets and the lag")
    consumer_status.add_argument("-g", "--group", required=True)
    consumer_status.set_defaults(handler=_admin_command(_consumer_status))
    sub_group = action("update-sub-group", "updateSubGroup",
                       "set a consumer group's settings on every master of a cluster (-c) or some (-b); slaves "
                       "copy them and a promoted slave keeps them")
    sub_group.add_argument("-g", "--group", required=True)
    targets(sub_group)
    sub_group.add_argument("-s", "--consumeEnable", "--consume-enable", dest="consume_enable", type=_bool,
                           metavar="true|false", help="false: the group's pulls are refused (NO_PERMISSION)")
    sub_group.add_argument("-r", "--retryMaxTimes", "--retry-max-times", dest="retry_max_times", type=int,
                           metavar="N", help="retries before a message goes to the group's DLQ (broker-side, "
                           "wins over the members' setting)")
    sub_group.set_defaults(handler=_admin_command(_update_sub_group, check=_check_update_sub_group))
    reset = action("reset-offset", "resetOffsetByTime",
                   "set a consumer group's committed offsets of a topic to the first message stored at or "
                   "after a time (-s now: skip to the end); the group's members must be stopped")
    reset.add_argument("-g", "--group", required=True)
    reset.add_argument("-t", "--topic", required=True)
    reset.add_argument("-s", "--timestamp", required=True, metavar="TIME",
                       help="now, ms since the epoch, 2026-11-24T10:30:00 or 2026-11-24#10:30:00:000")
    reset.add_argument("--force", action="store_true",
                       help="reset even while members are live (they may commit over it)")
    reset.set_defaults(handler=_admin_command(_reset_offset, check=_check_reset_offset))
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
    promote.set_defaults(handler=_admin_command(_promote, check=_check_promote))
    return actions
