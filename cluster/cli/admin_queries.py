"""`tidemq admin` actions that only read: topics, routes, queue and consumer progress,
statistics, messages by id or key, clusters, broker configs, group and producer connections."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from store.cli import EXIT_OK, EXIT_PROBLEM, UsageError, error
from store.msg_id import decode_msg_id

from .admin_common import (
    UNIQ_KEY,
    config_key,
    emit,
    target_brokers,
)
from .client import message_json
from .tables import timestamp


async def topics(args: argparse.Namespace, admin: Any) -> int:
    topics = await admin.topics(cluster=args.cluster)
    emit(args, [{"topic": t.topic, "broker_name": t.broker_name, "read_queue_nums": t.read_queue_nums,
                  "write_queue_nums": t.write_queue_nums, "perm": t.perm} for t in topics],
          f"topics of cluster {args.cluster}" if args.cluster else "topics")
    if not topics:
        error("no topic is registered" + (f" in cluster {args.cluster!r}" if args.cluster else ""))
        return EXIT_PROBLEM
    return EXIT_OK


async def route(args: argparse.Namespace, admin: Any) -> int:
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
    emit(args, rows, f"route of {args.topic}", table_rows=table_rows)
    return EXIT_OK


async def topic_status(args: argparse.Namespace, admin: Any) -> int:
    rows = await admin.topic_status(args.topic)
    emit(args, [{"topic": args.topic, **r} for r in rows], f"status of topic {args.topic}",
          table_rows=[{"broker_name": r["broker_name"], "queue_id": r["queue_id"], "min_offset": r["min_offset"],
                       "max_offset": r["max_offset"], "last_updated": timestamp(r["last_update_timestamp"])}
                      for r in rows])
    return EXIT_OK


async def progress_of(admin: Any, group: str, topic: str) -> list[dict[str, Any]]:
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


async def progress(args: argparse.Namespace, admin: Any) -> int:
    """Of `-t TOPIC`, or of every topic the group has committed offsets for or subscribes
    (mqadmin consumerProgress -g G)."""
    from wire.client import NotFound

    if args.topic is not None:
        rows = await progress_of(admin, args.group, args.topic)
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
                rows += await progress_of(admin, args.group, topic)
            except NotFound:  # offsets of a deleted topic: nothing serves it any more
                continue
    total = sum(r["lag"] for r in rows)
    where = f"on {args.topic}" if args.topic is not None else "on every topic"
    if args.json:
        emit(args, [*rows, {"group": args.group, "topic": args.topic, "total_lag": total}], "")
    else:
        emit(args, rows, f"progress of {args.group} {where}: total lag {total}")
    return EXIT_OK


async def stats_all(args: argparse.Namespace, admin: Any) -> int:
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
    emit(args, rows, "messages in (stored) and out (pulled) per topic and consumer group: TPS of the last "
                      "minute, counts since each broker started")
    return EXIT_OK


def message_rows(messages: Sequence[Any]) -> list[dict[str, Any]]:
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


def print_messages(args: argparse.Namespace, messages: Sequence[Any], title: str) -> None:
    emit(args, [message_json(m) for m in messages], title, table_rows=message_rows(messages))


def check_msg_id(args: argparse.Namespace) -> None:
    try:
        decode_msg_id(args.msg_id)
    except ValueError as e:
        raise UsageError(f"-i {args.msg_id!r} is not a msgId: {e}") from None


async def by_id(args: argparse.Namespace, admin: Any) -> int:
    print_messages(args, [await admin.get_by_msg_id(args.msg_id)], f"message {args.msg_id}")
    return EXIT_OK


def check_max(args: argparse.Namespace) -> None:
    if args.max < 1:
        raise UsageError(f"--max must be >= 1, got {args.max}")


async def by_key(args: argparse.Namespace, admin: Any) -> int:
    messages = await admin.query_by_key(args.topic, args.key, max_num=args.max)
    if not messages:
        error(f"no message of topic {args.topic!r} has key {args.key!r}")
        return EXIT_PROBLEM
    print_messages(args, messages, f"messages of {args.topic} with key {args.key}, newest first")
    return EXIT_OK


async def by_unique_key(args: argparse.Namespace, admin: Any) -> int:
    messages = await admin.query_by_unique_key(args.topic, args.uniq_key)
    if not messages:
        error(f"no message of topic {args.topic!r} has UNIQ_KEY {args.uniq_key!r}")
        return EXIT_PROBLEM
    print_messages(args, messages, f"messages of {args.topic} with UNIQ_KEY {args.uniq_key}, newest first")
    return EXIT_OK


async def msg_trace(args: argparse.Namespace, admin: Any) -> int:
    """mqadmin queryMsgTraceById: the message's steps in time order (JSON: one per line)."""
    life = await admin.query_msg_trace(args.msg_id, trace_topic=args.trace_topic, max_num=args.max)
    if not life.found:
        error(f"no trace of message {args.msg_id} in {args.trace_topic or 'RMQ_SYS_TRACE_TOPIC'} (was it sent or "
              "consumed with enable_msg_trace?) and no stored message with that msgId")
        return EXIT_PROBLEM
    steps = life.steps()
    table = [{**row, "time": timestamp(row["time"]), "cost_ms": "" if row["cost_ms"] is None else row["cost_ms"],
              "client_host": row["client_host"] or "", "group": row["group"] or ""} for row in steps]
    emit(args, steps, f"life of message {args.msg_id}", table_rows=table)
    if life.unreadable:
        error(f"{life.unreadable} trace message(s) keyed {args.msg_id} are not in the trace format")
    return EXIT_OK


async def clusters(args: argparse.Namespace, admin: Any) -> int:
    from ..client.insync import in_sync_sets

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

    # each group's in-sync set as its master judges it (manual and etcd mode alike)
    sets = in_sync_sets(s.status for s in statuses if s.status is not None)

    def row(s: Any) -> dict[str, Any]:
        b, live = s.registration, s.status
        sync = sets.get(b.broker_name)
        return {"cluster": b.cluster, "broker_name": b.broker_name, "broker_id": s.broker_id,
                "role": s.role, "address": b.address,
                "epoch": live.epoch if live is not None and live.epoch is not None else b.epoch,
                "alive": b.alive, "max_offset": live.max_phy_offset if live is not None else b.max_offset,
                "in_sync": None if sync is None else sync.has(b.address),
                "confirm_offset": live.confirm_offset if live is not None else None,
                "topics": len(b.topics), "age_ms": b.age_ms}
    rows = sorted((row(s) for s in statuses), key=lambda r: (r["cluster"], r["broker_name"], r["broker_id"]))
    emit(args, rows, "clusters")
    if not rows:
        error("no broker is registered")
        return EXIT_PROBLEM
    return EXIT_OK


def check_broker_config(args: argparse.Namespace) -> None:
    target_brokers(args)
    config_key(args)


async def broker_config(args: argparse.Namespace, admin: Any) -> int:
    """JSON: one line per broker and key; the table: one row per key, a column per broker."""
    brokers = await admin.brokers(**target_brokers(args, brokers_key="brokers"))
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
    emit(args, rows, "broker config (live: updateBrokerConfig may change it while the broker runs)",
          table_rows=table_rows)
    return EXIT_OK


async def online_members(admin: Any, group: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]] | None:
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


async def consumer_connection(args: argparse.Namespace, admin: Any) -> int:
    online = await online_members(admin, args.group)
    if online is None:
        return EXIT_PROBLEM
    _, members = online
    emit(args, [{"group": args.group, "client_id": cid, "address": m.get("address"),
                  "topics": m["topics"], "message_model": m.get("message_model", "CLUSTERING"),
                  "heartbeat_interval_ms": m["heartbeat_interval_ms"],
                  "silent_ms": m["silent_ms"], "brokers": m["brokers"]} for cid, m in sorted(members.items())],
          f"connections of consumer group {args.group}")
    return EXIT_OK


async def consumer_status(args: argparse.Namespace, admin: Any) -> int:
    from ..client import MessageQueue

    online = await online_members(admin, args.group)
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
    emit(args, rows, f"status of consumer group {args.group} (queues per member)")
    return EXIT_OK


async def producer_connection(args: argparse.Namespace, admin: Any) -> int:
    rows = await admin.producer_connections(args.group, args.topic)
    if not rows:
        error(f"producer group {args.group!r} has no live producer on the masters of topic {args.topic!r}")
        return EXIT_PROBLEM
    emit(args, [{"group": args.group, "client_id": r["client_id"], "address": r["address"],
                  "broker_name": r["broker_name"], "heartbeat_interval_ms": r["heartbeat_interval_ms"],
                  "silent_ms": r["silent_ms"]} for r in sorted(rows, key=lambda r: (r["client_id"], r["broker_name"]))],
          f"connections of producer group {args.group} on {args.topic}")
    return EXIT_OK
