"""`tidemq admin transactions`: the open half messages of every master, with their check
counts; `tidemq admin resume-half`: write half messages the check service discarded (after
transactionCheckMax checks, to TRANS_CHECK_MAX_TIME_TOPIC) back as open ones, so checks
start again from 0 (RocketMQ mqadmin resumeCheckHalfMessage; docs/transactions.md)."""

from __future__ import annotations

import argparse
from typing import Any

from store.cli import EXIT_OK, EXIT_PROBLEM, UsageError, error

from .admin_common import emit, target_brokers


def check_resume(args: argparse.Namespace) -> None:
    if not args.all and not args.offset:
        raise UsageError("give --offset OFFSET (a transaction's origin CommitLog offset: TRAN_HALF_OFFSET of its "
                         "record on TRANS_CHECK_MAX_TIME_TOPIC; repeatable) or --all")
    if args.all and args.offset:
        raise UsageError("give --offset or --all, not both")
    if any(o < 0 for o in args.offset or ()):
        raise UsageError("an --offset is a CommitLog offset, >= 0")


async def open_transactions(args: argparse.Namespace, admin: Any) -> int:
    """On every master of -c / -b (else all): its open half messages, oldest first."""
    rows = []
    totals = []
    for b in await admin.masters(**target_brokers(args, brokers_key="brokers")):
        answer = await admin.transactions(b.address, topic=args.topic, limit=args.limit)
        totals.append(f"{b.broker_name}: {answer.open} open, {answer.discarded} discarded")
        rows += [{"broker_name": b.broker_name, **t} for t in answer.transactions]
    title = "open transactions (" + "; ".join(totals) + ")"
    if rows or args.json:
        emit(args, rows, title)
    else:
        print(title)  # an empty table prints nothing, not even its title
    return EXIT_OK


async def resume(args: argparse.Namespace, admin: Any) -> int:
    """On every master of -c / -b (else all): resume the discarded transactions asked for."""
    rows = []
    for b in await admin.masters(**target_brokers(args, brokers_key="brokers")):
        answer = await admin.transaction_resume(b.address, None if args.all else args.offset)
        rows.append({"broker_name": b.broker_name, "address": b.address, "resumed": answer.resumed,
                     "not_resumed": answer.not_resumed})
    emit(args, rows, "discarded half messages written back as open")
    if not any(row["resumed"] for row in rows):
        error("no master had such a discarded half message")
        return EXIT_PROBLEM
    return EXIT_OK
