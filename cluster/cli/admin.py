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
| `send-message` | `sendMessage` | send one message, print where it was stored |
| `delete-expired` | `deleteExpiredCommitLog` | ask each master to delete its expired files now |
| `clusters` | `clusterList` | every registered broker per cluster (of `-c CLUSTER`): role, epoch, offsets, liveness |
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
| `promote` | | make a slave its group's master with a new epoch (docs/failover.md) |

Every action prints a table (tables.rows_table: booleans `true`/`false`, times as local
time), or JSON lines with `--json`; exit codes as store/cli.py: 1 for an unknown group,
topic, cluster or broker, 2 for a bad value. Another action registers on the subparsers
`add_admin_commands` returns.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from store.cli import EXIT_OK, EXIT_PROBLEM, UsageError, error, print_json
from store.msg_id import decode_msg_id

from .client import message_json, print_broker_status
from .common import add_source, handled, run_async, source
from .tables import rows_table, timestamp

UNIQ_KEY = "UNIQ_KEY"
"""The property RocketMQ's clients set to each message's own id (what queryMsgByUniqueKey finds)."""


def _emit(args: argparse.Namespace, rows: Sequence[Mapping[str, Any]], title: str, *,
          table_rows: Sequence[Mapping[str, Any]] | None = None) -> None:
    """`rows` as JSON lines (--json), else `table_rows` (default: the same rows) as one table."""
    if getattr(args, "json", False):
        for row in rows:
            print_json(dict(row))
        return
    from rich.console import Console

    Console(width=None if sys.stdout.isatty() else 200).print(
        rows_table(rows if table_rows is None else table_rows, title))


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
    topics = await admin.topics(cluster=args.cluster)
    _emit(args, [{"topic": t.topic, "broker_name": t.broker_name, "read_queue_nums": t.read_queue_nums,
                  "write_queue_nums": t.write_queue_nums, "perm": t.perm} for t in topics],
          f"topics of cluster {args.cluster}" if args.cluster else "topics")
    if not topics:
        error("no topic is registered" + (f" in cluster {args.cluster!r}" if args.cluster else ""))
        return EXIT_PROBLEM
    return EXIT_OK


async def _route(args: argparse.Namespace, admin: Any) -> int:
    """JSON: one line per group, its brokers nested; the table: one row per broker."""
    route = await admin.route(args.topic)
    rows, table_rows = [], []
    for g in route.groups:
        qd = g.queue_data
        group = {
            "topic": route.topic, "broker_name": g.broker_name, "cluster": g.cluster,
            "read_queue_nums": qd.read_queue_nums if qd else None,
            "write_queue_nums": qd.write_queue_nums if qd else None, "perm": qd.perm if qd else None,
            **g.controller_view(),
        }
        brokers = [{"broker_id": b.broker_id, "role": b.role, "address": b.address, "alive": b.alive,
                    "epoch": b.epoch} for b in g.brokers]
        rows.append({**group, "brokers": brokers})
        table_rows += [{**group, **b} for b in brokers]
    _emit(args, rows, f"route of {args.topic}", table_rows=table_rows)
    return EXIT_OK


async def _topic_status(args: argparse.Namespace, admin: Any) -> int:
    rows = await admin.topic_status(args.topic)
    _emit(args, [{"topic": args.topic, **r} for r in rows], f"status of topic {args.topic}",
          table_rows=[{"broker_name": r["broker_name"], "queue_id": r["queue_id"], "min_offset": r["min_offset"],
                       "max_offset": r["max_offset"], "last_updated": timestamp(r["last_update_timestamp"])}
                      for r in rows])
    return EXIT_OK


async def _progress_of(admin: Any, group: str, topic: str) -> list[dict[str, Any]]:
    from ..client import MessageQueue

    route = await admin.route(topic)
    rows = []
    for g in route.groups:
        for queue_id in range(g.queue_data.read_queue_nums if g.queue_data else 0):
            mq = MessageQueue(topic, g.broker_name, queue_id)
            broker_offset = await admin.max_offset(mq)
            consumer_offset = await admin.consumer_offset(mq, group)
            rows.append({"topic": topic, "broker_name": g.broker_name, "queue_id": queue_id,
                         "broker_offset": broker_offset, "consumer_offset": consumer_offset,
                         "lag": broker_offset - (consumer_offset or 0)})
    return rows


async def _progress(args: argparse.Namespace, admin: Any) -> int:
    """Of `-t TOPIC`, or of every topic the group has committed offsets for or subscribes
    (mqadmin consumerProgress -g G)."""
    from wire.client import NotFound

    if args.topic is not None:
        rows = await _progress_of(admin, args.group, args.topic)
        members = any(v.members for v in (await admin.consumer_list(args.group)).values())
        if all(r["consumer_offset"] is None for r in rows) and not members:
            error(f"consumer group {args.group!r} has no committed offset on {args.topic!r} and no live member")
            return EXIT_PROBLEM
    else:
        topics = await admin.group_topics(args.group)
        if not topics:
            error(f"consumer group {args.group!r} has no committed offset and no live member")
            return EXIT_PROBLEM
        rows = []
        for topic in topics:
            try:
                rows += await _progress_of(admin, args.group, topic)
            except NotFound:  # offsets of a deleted topic: nothing serves it any more
                continue
    total = sum(r["lag"] for r in rows)
    where = f"on {args.topic}" if args.topic is not None else "on every topic"
    if args.json:
        _emit(args, [*rows, {"group": args.group, "topic": args.topic, "total_lag": total}], "")
    else:
        _emit(args, rows, f"progress of {args.group} {where}: total lag {total}")
    return EXIT_OK


async def _stats_all(args: argparse.Namespace, admin: Any) -> int:
    """Per topic and consumer group (a topic nobody reads: one row without a group)."""
    puts, gets = await admin.stats_all()
    put_of = {p["topic"]: p for p in puts}
    topics = sorted({p["topic"] for p in puts} | {g["topic"] for g in gets})
    if args.topic is not None:
        if args.topic not in topics:
            error(f"no broker has stored or served a message of topic {args.topic!r} since it started")
            return EXIT_PROBLEM
        topics = [args.topic]
    rows = []
    for topic in topics:
        put = put_of.get(topic, {"put_tps": 0.0, "put_total": 0})
        groups = [g for g in gets if g["topic"] == topic] or [{"group": None, "get_tps": None, "get_total": None}]
        rows += [{"topic": topic, "group": g["group"] or None, "in_tps": put["put_tps"], "in_msgs": put["put_total"],
                  "out_tps": g["get_tps"], "out_msgs": g["get_total"]} for g in groups]
    _emit(args, rows, "messages in (stored) and out (pulled) per topic and consumer group: TPS of the last "
                      "minute, counts since each broker started")
    return EXIT_OK


def _message_rows(messages: Sequence[Any]) -> list[dict[str, Any]]:
    rows = []
    for m in messages:
        try:
            body = m.body.decode("utf-8")
        except UnicodeDecodeError:
            body = f"({len(m.body)} bytes, not UTF-8; --json has it in base64)"
        rows.append({"msg_id": m.msg_id, "topic": m.topic, "broker_name": m.broker_name, "queue_id": m.queue_id,
                     "queue_offset": m.queue_offset, "tags": m.tags, "keys": list(m.keys),
                     "uniq_key": m.properties.get(UNIQ_KEY), "stored": timestamp(m.store_timestamp),
                     "body": body if len(body) <= 200 else body[:200] + "..."})
    return rows


def _print_messages(args: argparse.Namespace, messages: Sequence[Any], title: str) -> None:
    _emit(args, [message_json(m) for m in messages], title, table_rows=_message_rows(messages))


def _check_msg_id(args: argparse.Namespace) -> None:
    try:
        decode_msg_id(args.msg_id)
    except ValueError as e:
        raise UsageError(f"-i {args.msg_id!r} is not a msgId: {e}") from None


async def _by_id(args: argparse.Namespace, admin: Any) -> int:
    _print_messages(args, [await admin.get_by_msg_id(args.msg_id)], f"message {args.msg_id}")
    return EXIT_OK


def _check_max(args: argparse.Namespace) -> None:
    if args.max < 1:
        raise UsageError(f"--max must be >= 1, got {args.max}")


async def _by_key(args: argparse.Namespace, admin: Any) -> int:
    messages = await admin.query_by_key(args.topic, args.key, max_num=args.max)
    if not messages:
        error(f"no message of topic {args.topic!r} has key {args.key!r}")
        return EXIT_PROBLEM
    _print_messages(args, messages, f"messages of {args.topic} with key {args.key}, newest first")
    return EXIT_OK


async def _by_unique_key(args: argparse.Namespace, admin: Any) -> int:
    messages = await admin.query_by_unique_key(args.topic, args.uniq_key)
    if not messages:
        error(f"no message of topic {args.topic!r} has UNIQ_KEY {args.uniq_key!r}")
        return EXIT_PROBLEM
    _print_messages(args, messages, f"messages of {args.topic} with UNIQ_KEY {args.uniq_key}, newest first")
    return EXIT_OK


def new_uniq_key() -> str:
    """A message's own id, 32 hex digits as RocketMQ's MessageClientIDSetter makes them."""
    return uuid.uuid4().hex.upper()


def _check_send_message(args: argparse.Namespace) -> None:
    if not args.body:
        raise UsageError("-p BODY must not be empty")
    if args.queue_id is not None and args.broker_name is None:
        raise UsageError("-i QUEUE_ID needs -b BROKER_NAME (the queue of which group)")


async def _send_message(args: argparse.Namespace, admin: Any) -> int:
    """mqadmin sendMessage: one message, sent as a producer sends it, with a UNIQ_KEY."""
    from ..client import Producer

    keys = [k for k in (args.keys or "").replace(",", " ").split() if k]
    uniq = new_uniq_key()
    src = source(args)
    async with Producer(**src) as producer:
        result = await producer.send(args.topic, args.body.encode("utf-8"), tags=args.tags, keys=keys,
                                     properties={UNIQ_KEY: uniq}, queue_id=args.queue_id,
                                     broker_name=args.broker_name)
    row = {"topic": args.topic, "broker_name": result.broker_name, "queue_id": result.queue_id,
           "status": result.status.value, "msg_id": result.msg_id, "uniq_key": uniq,
           "queue_offset": result.queue_offset, "address": result.address}
    _emit(args, [row], f"sent to {args.topic}")
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
    # each broker's own answer for what moves (role, epoch, max offset), as mqadmin asks each
    # broker's runtime info; the registration (up to registerNameServerPeriod old) when it
    # does not answer, so after a failover this agrees with `cluster status`
    statuses = await admin.status()
    if args.cluster is not None:
        picked = [s for s in statuses if s.registration.cluster == args.cluster]
        if not picked:
            known = ", ".join(sorted({s.registration.cluster for s in statuses})) or "none"
            error(f"no broker of cluster {args.cluster!r} is registered (clusters: {known})")
            return EXIT_PROBLEM
        statuses = picked

    def row(s: Any) -> dict[str, Any]:
        b, live = s.registration, s.status
        return {"cluster": b.cluster, "broker_name": b.broker_name, "broker_id": s.broker_id,
                "role": s.role, "address": b.address,
                "epoch": live.epoch if live is not None and live.epoch is not None else b.epoch,
                "alive": b.alive, "max_offset": live.max_phy_offset if live is not None else b.max_offset,
                "topics": len(b.topics), "age_ms": b.age_ms}
    rows = sorted((row(s) for s in statuses), key=lambda r: (r["cluster"], r["broker_name"], r["broker_id"]))
    _emit(args, rows, "clusters")
    if not rows:
        error("no broker is registered")
        return EXIT_PROBLEM
    return EXIT_OK


def _config_key(args: argparse.Namespace) -> None:
    """-k names a key of the node's config: canonical camelCase, or a usage error."""
    from node.live_config import canonical_key

    if args.key is not None:
        try:
            args.key = canonical_key(args.key)
        except ValueError as e:
            raise UsageError(str(e)) from None


def _check_broker_config(args: argparse.Namespace) -> None:
    _targets(args)
    _config_key(args)


async def _broker_config(args: argparse.Namespace, admin: Any) -> int:
    """JSON: one line per broker and key; the table: one row per key, a column per broker."""
    brokers = await admin.brokers(**_targets(args, brokers_key="brokers"))
    rows: list[dict[str, Any]] = []
    pivot: dict[str, dict[str, Any]] = {}  # key -> {"key": key, column: value, ..., "live": bool}
    for b in brokers:
        answer = await admin.broker_config(b.address)
        live = set(answer.live_keys)
        column = f"{b.broker_name}/{b.broker_id} {b.address}"
        for key, value in answer.config.items():
            if args.key is not None and key != args.key:
                continue
            rows.append({"broker_name": b.broker_name, "broker_id": b.broker_id, "address": b.address,
                         "key": key, "value": value, "live": key in live})
            pivot.setdefault(key, {"key": key})[column] = value
            pivot[key]["live"] = key in live
    table_rows = [{"key": k, **{c: v for c, v in r.items() if c not in ("key", "live")}, "live": r["live"]}
                  for k, r in sorted(pivot.items())]
    _emit(args, rows, "broker config (live: updateBrokerConfig may change it while the broker runs)",
          table_rows=table_rows)
    return EXIT_OK


def _check_update_broker_config(args: argparse.Namespace) -> None:
    """Both a target and a key the node reads live, with a value it takes; else exit 2."""
    from node.live_config import check_live_value

    targets = _targets(args)
    if targets["cluster"] is None and targets["broker_names"] is None:
        raise UsageError("give -c CLUSTER (every broker of it) or -b BROKER (an address, or a broker name: "
                         "every broker of the group)")
    try:
        args.key, _ = check_live_value(args.key, args.value)
    except ValueError as e:
        raise UsageError(str(e)) from None


async def _update_broker_config(args: argparse.Namespace, admin: Any) -> int:
    rows = []
    for b in await admin.brokers(**_targets(args, brokers_key="brokers")):
        answer = await admin.update_broker_config(b.address, args.key, args.value)
        rows.append({"broker_name": b.broker_name, "broker_id": b.broker_id, "address": b.address,
                     "key": answer.key, "old": answer.old, "new": answer.new})
    _emit(args, rows, f"{args.key} updated (in memory: until each broker restarts)")
    return EXIT_OK


def _check_write_perm(args: argparse.Namespace) -> None:
    if args.broker:
        raise UsageError("wipeWritePerm / addWritePerm change the name servers' routes: give -n/--namesrv, "
                         "not --broker")


def _write_perm(writeable: bool) -> Callable[[argparse.Namespace, Any], Awaitable[int]]:
    async def run(args: argparse.Namespace, admin: Any) -> int:
        rows = await admin.set_write_perm(args.broker_name, writeable)
        what = ("accepts sends again; routes show its topics' perm as registered" if writeable
                else "refuses sends; routes show its topics without the write bit")
        _emit(args, [{"broker_name": args.broker_name, **r} for r in rows], f"{args.broker_name} {what}")
        failed = [r for r in rows if r["error"]]
        if failed:
            error(f"{len(failed)} of {len(rows)} could not be told: "
                  + "; ".join(f"{r['address']}: {r['error']}" for r in failed))
            return EXIT_PROBLEM
        return EXIT_OK

    return run


def _targets(args: argparse.Namespace, *, brokers_key: str = "broker_names") -> dict[str, Any]:
    if args.cluster and args.on_broker:
        raise UsageError("give -c CLUSTER or -b BROKER, not both")
    return {"cluster": args.cluster, brokers_key: args.on_broker}


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


async def _delete_sub_group(args: argparse.Namespace, admin: Any) -> int:
    deleted = await admin.delete_sub_group(args.group, **_targets(args))
    _emit(args, [{"group": args.group, "broker_name": name, "deleted": had} for name, had in deleted.items()],
          f"subscription group {args.group} deleted")
    if not any(deleted.values()):
        error(f"no master had settings for consumer group {args.group!r}")
        return EXIT_PROBLEM
    return EXIT_OK


async def _producer_connection(args: argparse.Namespace, admin: Any) -> int:
    rows = await admin.producer_connections(args.group, args.topic)
    if not rows:
        error(f"producer group {args.group!r} has no live producer on the masters of topic {args.topic!r}")
        return EXIT_PROBLEM
    _emit(args, [{"group": args.group, "client_id": r["client_id"], "address": r["address"],
                  "broker_name": r["broker_name"], "heartbeat_interval_ms": r["heartbeat_interval_ms"],
                  "silent_ms": r["silent_ms"]} for r in sorted(rows, key=lambda r: (r["client_id"], r["broker_name"]))],
          f"connections of producer group {args.group} on {args.topic}")
    return EXIT_OK


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
        "deleteSubGroup, consumerConnection, consumerStatus, producerConnection, resetOffsetByTime. "
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
    topics.set_defaults(handler=_admin_command(_topics))
    route = action("route", "topicRoute", "a topic's route: its groups, their brokers and queue counts "
                   "(the table: a row per broker)")
    route.add_argument("-t", "--topic", required=True)
    route.set_defaults(handler=_admin_command(_route))
    topic_status = action("topic-status", "topicStatus",
                          "per queue of a topic: its broker group, min and max offsets and when it last stored "
                          "a message")
    topic_status.add_argument("-t", "--topic", required=True)
    topic_status.set_defaults(handler=_admin_command(_topic_status))
    progress = action("progress", "consumerProgress",
                      "a consumer group's committed offset, the queue's max offset and the lag, per queue of -t "
                      "TOPIC (else of every topic the group committed offsets for or subscribes), then the total")
    progress.add_argument("-g", "--group", required=True)
    progress.add_argument("-t", "--topic")
    progress.set_defaults(handler=_admin_command(_progress))
    status = action("status", "brokerStatus", "every broker's status table (as `tidemq status`)")
    status.set_defaults(handler=handled(print_broker_status))
    stats = action("stats-all", "statsAll",
                   "per topic and consumer group: messages in (stored) and out (pulled), TPS of the last minute "
                   "and counts since each broker started, summed over the brokers")
    stats.add_argument("-t", "--topic", help="this topic only")
    stats.set_defaults(handler=_admin_command(_stats_all))
    by_id = action("msg", "queryMsgById", "the message with this msgId")
    by_id.add_argument("-i", "--msg-id", required=True, metavar="ID")
    by_id.set_defaults(handler=_admin_command(_by_id, check=_check_msg_id))
    by_key = action("key", "queryMsgByKey", "the messages of a topic with this key, newest first")
    by_key.add_argument("-t", "--topic", required=True)
    by_key.add_argument("-k", "--key", required=True)
    by_key.add_argument("--max", type=int, default=32, metavar="N", help="at most N messages (default 32)")
    by_key.set_defaults(handler=_admin_command(_by_key, check=_check_max))
    by_uniq = action("unique-key", "queryMsgByUniqueKey",
                     "the messages of a topic whose UNIQ_KEY (the id RocketMQ's clients and sendMessage give "
                     "each message) is this one, newest first")
    by_uniq.add_argument("-i", "--uniq-key", required=True, metavar="UNIQ_KEY")
    by_uniq.add_argument("-t", "--topic", required=True)
    by_uniq.set_defaults(handler=_admin_command(_by_unique_key))
    send = action("send-message", "sendMessage",
                  "send one message as a producer does (with a UNIQ_KEY) and print where it was stored")
    send.add_argument("-t", "--topic", required=True)
    send.add_argument("-p", "--body", required=True, help="the message body (text)")
    send.add_argument("-k", "--keys", help="its keys, separated by spaces or commas")
    send.add_argument("-c", "--tags", help="its tag")
    send.add_argument("-b", "--broker-name", metavar="BROKER_NAME", help="send to this broker group")
    send.add_argument("-i", "--queue-id", type=int, metavar="QUEUE_ID", help="to this queue (with -b)")
    send.set_defaults(handler=_admin_command(_send_message, check=_check_send_message))
    action("delete-expired", "deleteExpiredCommitLog",
           "ask every master to delete its expired CommitLog, ConsumeQueue and index files now") \
        .set_defaults(handler=_admin_command(_delete_expired))
    clusters = action("clusters", "clusterList",
                      "every registered broker per cluster: role, epoch, max offset, liveness")
    clusters.add_argument("-c", "--cluster", help="this brokerClusterName's brokers only")
    clusters.set_defaults(handler=_admin_command(_clusters))
    get_config = action("broker-config", "getBrokerConfig",
                        "the config of every broker of a cluster (-c), of some (-b), or of all, as they run; "
                        "`live` keys are the ones updateBrokerConfig may change")
    targets(get_config, "broker")
    get_config.add_argument("-k", "--key", help="this key only (camelCase, as in the config file)")
    get_config.set_defaults(handler=_admin_command(_broker_config, check=_check_broker_config))
    set_config = action("update-broker-config", "updateBrokerConfig",
                        "set a key on every broker of a cluster (-c) or some (-b) while they run; only keys the "
                        f"brokers read live: {', '.join(_live_keys())}; in memory until a broker restarts")
    targets(set_config, "broker")
    set_config.add_argument("-k", "--key", required=True)
    set_config.add_argument("-v", "--value", required=True)
    set_config.set_defaults(handler=_admin_command(_update_broker_config, check=_check_update_broker_config))
    for name, alias, writeable, summary in (
            ("wipe-write-perm", "wipeWritePerm", False,
             "a broker group refuses sends (SERVICE_NOT_AVAILABLE, saying why: producers go to other groups) and "
             "the name servers route its topics without the write bit, until addWritePerm; reads go on"),
            ("add-write-perm", "addWritePerm", True,
             "undo wipeWritePerm: the group accepts sends and routes show its topics' perm as registered")):
        perm = action(name, alias, summary)
        perm.add_argument("-b", "--broker-name", required=True, metavar="BROKER_NAME", help="the group, e.g. broker-a")
        perm.set_defaults(handler=_admin_command(_write_perm(writeable), check=_check_write_perm))
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
    producers = action("producer-connection", "producerConnection",
                       "a producer group's live producers (client id, address, heartbeat) on the masters serving "
                       "a topic; producers say their group when built with Producer(group=...); exit 1 when none")
    producers.add_argument("-g", "--group", required=True, help="the producer group")
    producers.add_argument("-t", "--topic", required=True)
    producers.set_defaults(handler=_admin_command(_producer_connection))
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
    delete_group = action("delete-sub-group", "deleteSubGroup",
                          "drop a consumer group's settings (updateSubGroup's) from every master of a cluster (-c) "
                          "or some (-b); slaves copy that; exit 1 when no master had any")
    delete_group.add_argument("-g", "--group", required=True)
    targets(delete_group)
    delete_group.set_defaults(handler=_admin_command(_delete_sub_group))
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
