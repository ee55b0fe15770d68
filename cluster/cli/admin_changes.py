"""`tidemq admin` actions that change the cluster: send a message, delete expired files,
the live config and write permission, topics, subscription groups, offsets, promotion."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

from store.cli import EXIT_OK, EXIT_PROBLEM, UsageError, error, print_json

from .admin_common import (
    UNIQ_KEY,
    emit,
    new_uniq_key,
    parse_time_ms,
    target_brokers,
)
from .common import source


def check_send_message(args: argparse.Namespace) -> None:
    if not args.body:
        raise UsageError("-p BODY must not be empty")
    if args.queue_id is not None and args.broker_name is None:
        raise UsageError("-i QUEUE_ID needs -b BROKER_NAME (the queue of which group)")


async def send_message(args: argparse.Namespace, admin: Any) -> int:
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
    emit(args, [row], f"sent to {args.topic}")
    return EXIT_OK


async def delete_expired(args: argparse.Namespace, admin: Any) -> int:
    masters = sorted({b.address for b in await admin.cluster_info() if b.is_master})
    rows = [{"address": address, "deleted_files": await admin.delete_expired_files(address)}
            for address in masters]
    emit(args, rows, "expired files deleted")
    if not masters:
        error("no master is registered")
        return EXIT_PROBLEM
    return EXIT_OK


def check_update_broker_config(args: argparse.Namespace) -> None:
    """Both a target and a key the node reads live, with a value it takes; else exit 2."""
    from node.live_config import check_live_value

    targets = target_brokers(args)
    if targets["cluster"] is None and targets["broker_names"] is None:
        raise UsageError("give -c CLUSTER (every broker of it) or -b BROKER (an address, or a broker name: "
                         "every broker of the group)")
    try:
        args.key, _ = check_live_value(args.key, args.value)
    except ValueError as e:
        raise UsageError(str(e)) from None


async def update_broker_config(args: argparse.Namespace, admin: Any) -> int:
    rows = []
    for b in await admin.brokers(**target_brokers(args, brokers_key="brokers")):
        answer = await admin.update_broker_config(b.address, args.key, args.value)
        rows.append({"broker_name": b.broker_name, "broker_id": b.broker_id, "address": b.address,
                     "key": answer.key, "old": answer.old, "new": answer.new})
    emit(args, rows, f"{args.key} updated (in memory: until each broker restarts)")
    return EXIT_OK


def check_write_perm(args: argparse.Namespace) -> None:
    if args.broker:
        raise UsageError("wipeWritePerm / addWritePerm change the name servers' routes: give -n/--namesrv, "
                         "not --broker")


def write_perm(writeable: bool) -> Callable[[argparse.Namespace, Any], Awaitable[int]]:
    async def run(args: argparse.Namespace, admin: Any) -> int:
        rows = await admin.set_write_perm(args.broker_name, writeable)
        what = ("accepts sends again; routes show its topics' perm as registered" if writeable
                else "refuses sends; routes show its topics without the write bit")
        emit(args, [{"broker_name": args.broker_name, **r} for r in rows], f"{args.broker_name} {what}")
        failed = [r for r in rows if r["error"]]
        if failed:
            error(f"{len(failed)} of {len(rows)} could not be told: "
                  + "; ".join(f"{r['address']}: {r['error']}" for r in failed))
            return EXIT_PROBLEM
        return EXIT_OK

    return run


def check_update_topic(args: argparse.Namespace) -> None:
    for flag, value, low, high in (("-r", args.read_queue_nums, 1, 1024), ("-w", args.write_queue_nums, 1, 1024),
                                   ("-p", args.perm, 0, 7)):
        if not low <= value <= high:
            raise UsageError(f"{flag} must be in {low}..{high}, got {value}")


async def update_topic(args: argparse.Namespace, admin: Any) -> int:
    targets = target_brokers(args)
    created = await admin.create_topic(args.topic, read_queue_nums=args.read_queue_nums,
                                       write_queue_nums=args.write_queue_nums, perm=args.perm, **targets)
    emit(args, [{"topic": t.topic, "broker_name": t.broker_name, "read_queue_nums": t.read_queue_nums,
                  "write_queue_nums": t.write_queue_nums, "perm": t.perm} for t in created],
          f"topic {args.topic} created or updated")
    return EXIT_OK


async def delete_topic(args: argparse.Namespace, admin: Any) -> int:
    targets = target_brokers(args)
    deleted = await admin.delete_topic(args.topic, **targets)
    emit(args, [{"topic": args.topic, "broker_name": name, "deleted": had} for name, had in deleted.items()],
          f"topic {args.topic} deleted")
    if not any(deleted.values()):
        error(f"no master had topic {args.topic!r}")
        return EXIT_PROBLEM
    return EXIT_OK


def check_update_sub_group(args: argparse.Namespace) -> None:
    if args.consume_enable is None and args.retry_max_times is None:
        raise UsageError("give --consumeEnable true|false and/or --retryMaxTimes N")
    if args.retry_max_times is not None and not 0 <= args.retry_max_times <= 10_000:
        raise UsageError(f"--retryMaxTimes must be in 0..10000, got {args.retry_max_times}")


async def update_sub_group(args: argparse.Namespace, admin: Any) -> int:
    targets = target_brokers(args)
    stored = await admin.update_sub_group(args.group, consume_enable=args.consume_enable,
                                          retry_max_times=args.retry_max_times, **targets)
    emit(args, [{"broker_name": name, **config} for name, config in stored.items()],
          f"subscription group {args.group}")
    return EXIT_OK


def check_reset_offset(args: argparse.Namespace) -> None:
    parse_time_ms(args.timestamp)  # a bad time is a usage error before anything connects


async def reset_offset(args: argparse.Namespace, admin: Any) -> int:
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
    emit(args, rows, f"offsets of {args.group} on {args.topic} reset to "
                      f"{'now' if when is None else args.timestamp}")
    return EXIT_OK


def check_promote(args: argparse.Namespace) -> None:
    if args.broker_id < 1:
        raise UsageError(f"BROKER_ID must be a slave's id (1 or more), got {args.broker_id}")


async def promote(args: argparse.Namespace, admin: Any) -> int:
    """Without --unclean the node refuses a slave outside the in-sync set (its reason is the
    error); with it, what the promotion drops is printed first (a clean slave drops nothing
    a consumer may have seen, so nothing is printed for it)."""
    check = None
    if args.unclean:
        check = await admin.promote_check(args.broker_name, args.broker_id)
        if not check["clean"] and not args.json:
            print(drop_line(args.broker_name, check), flush=True)
    result = await admin.promote(args.broker_name, args.broker_id, role=args.role, timeout=args.timeout,
                                 unclean=args.unclean)
    if args.json:
        print_json({**result, "dropped": None if check is None or check["clean"] else {
            k: check[k] for k in ("drop_from", "drop_to", "drop_count", "count_note")}})
    else:
        if result.get("answer_lost"):
            print(f"{args.broker_name}: the promotion's answer was lost ({result['answer_lost']}); "
                  f"{result['address']} serves as master since", flush=True)
        elif result["serving_epoch"] != result["epoch"]:
            print(f"{args.broker_name}: {result['address']} took epoch {result['epoch']} and restarted since",
                  flush=True)
        print(f"{args.broker_name}: {result['address']} is the master now (brokerId 0, {result['role']}), "
              f"epoch {result['serving_epoch']} from CommitLog offset {result['start_offset']}")
        if result.get("offsets_clamped"):
            print(f"{args.broker_name}: {result['offsets_clamped']} committed consumer offset(s) past the new "
                  "log's queue ends set back to the ends (their records were dropped)")
    return EXIT_OK


def drop_line(broker_name: str, check: dict[str, Any]) -> str:
    """What an unclean promotion drops: the offset range and the message count, or why it is unknown."""
    count = check["drop_count"]
    what = f"{count} message(s)" if count is not None else f"message count {check['count_note']}"
    return (f"{broker_name}: unclean promotion of {check['address']}: drops CommitLog "
            f"[{check['drop_from']}, {check['drop_to']}) ({check['drop_to'] - check['drop_from']} bytes, {what}): "
            f"{check['reason']}")


async def delete_sub_group(args: argparse.Namespace, admin: Any) -> int:
    deleted = await admin.delete_sub_group(args.group, **target_brokers(args))
    emit(args, [{"group": args.group, "broker_name": name, "deleted": had} for name, had in deleted.items()],
          f"subscription group {args.group} deleted")
    if not any(deleted.values()):
        error(f"no master had settings for consumer group {args.group!r}")
        return EXIT_PROBLEM
    return EXIT_OK
