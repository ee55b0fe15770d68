"""`tidemq store ...`: offline, read-only tools over stores (verify, dump, query).

Also home of what every layer's `cli.py` shares, kept in the lowest layer so no package
imports upward: the exit codes, `UsageError` and the one-line output helpers. The `tidemq`
entry (tidemq/cli.py) assembles each layer's `add_commands(subparsers)`; each action sets
`handler=fn`, `fn(args) -> int`; an action that reads files and talks to no server also sets
`offline=True`, so the entry adds no login options (--user, --secret-file, --tls-ca) to it.

Exit codes, the same for the same kind of mistake in every command: 0 ok, 1 the command ran
and found a problem (a damaged store, nothing found, a node down), 2 a usage error or
unusable input (a message on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import trio

from store import layout, queue_tools, tools

EXIT_OK = 0
EXIT_PROBLEM = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """Unusable input (a bad value, a missing directory): one line on stderr, exit 2."""


def print_json(obj: Any) -> None:
    """One JSON object on one line of stdout (flushed: a reader may be a pipe)."""
    print(json.dumps(obj, separators=(",", ":"), ensure_ascii=False), flush=True)


def error(message: str) -> None:
    print(f"tidemq: error: {message}", file=sys.stderr, flush=True)


def sole_cause(exc: BaseException, types: tuple[type[BaseException], ...]) -> BaseException | None:
    """The error to report for `exc` when it is one of `types`, or a (nested) exception
    group, as trio's nurseries raise, whose every error is one of `types`: the first of
    them (one line, not a traceback per task). None when something else is in it."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc if isinstance(exc, types) else None
    causes = [sole_cause(inner, types) for inner in exc.exceptions]
    if not causes or any(c is None for c in causes):
        return None
    return causes[0]


def non_negative_int(text: str, *, least: int = 0) -> int:
    """argparse type: an integer >= `least` (decimal, or 0x... hex)."""
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be >= {least}, got {value}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return non_negative_int(text, least=1)


# ---------------------------------------------------------------------------------------
# progress on a terminal


@contextlib.contextmanager
def segment_progress(what: str) -> Iterator[tools.Progress | None]:
    """A rich progress bar on stderr over segments, when stderr is a terminal (else None:
    a pipe or a log gets no control characters)."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("segments"),
               TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


# ---------------------------------------------------------------------------------------
# the commands


def _stores(path: str) -> list[tuple[str, str]]:
    try:
        return layout.find_stores(path)
    except layout.StoreToolError as e:
        raise UsageError(str(e)) from None


def _tagged(record: dict[str, Any], name: str, many: bool) -> dict[str, Any]:
    return {"store": name, **record} if many else record


def _cmd_dump(args: argparse.Namespace) -> int:
    if (args.topic is None) != (args.queue is None):
        raise UsageError("--topic and --queue go together")
    stores = _stores(args.dir)
    if args.from_offset is not None and len(stores) > 1:
        raise UsageError(f"--from is an offset in one store; {args.dir} holds {len(stores)}: "
                         f"{', '.join(root for _, root in stores)}")
    status = EXIT_OK
    for name, root in stores:
        with segment_progress(f"dump {name}") as progress:
            if args.topic is not None:
                records = queue_tools.dump_queue(root, args.topic, args.queue, limit=args.limit)
            else:
                records = tools.dump(root, from_offset=args.from_offset, limit=args.limit, progress=progress)
            for record in records:
                print_json(_tagged(record, name, len(stores) > 1))
                if "error" in record:
                    status = EXIT_PROBLEM
    return status


def _cmd_query(args: argparse.Namespace) -> int:
    if (args.max_hash_slot_num is None) != (args.max_index_num is None):
        raise UsageError("--max-hash-slot-num and --max-index-num go together")
    stores = _stores(args.dir)
    found = 0
    for name, root in stores:
        for record in queue_tools.query_key(root, args.topic, args.key, max_num=args.max,
                                      hash_slot_num=args.max_hash_slot_num, index_num=args.max_index_num):
            print_json(_tagged(record, name, len(stores) > 1))
            found += 1
    if not found:
        error(f"no message of topic {args.topic!r} has key {args.key!r} in {args.dir}")
    return EXIT_OK if found else EXIT_PROBLEM


def _cmd_verify(args: argparse.Namespace) -> int:
    stores = _stores(args.dir)
    clean = True
    for name, root in stores:
        with segment_progress(f"verify {name}") as progress:
            summary = tools.verify(root, progress=progress)
        print_json(_tagged(summary, name, len(stores) > 1))
        clean = clean and summary["clean"]
    return EXIT_OK if clean else EXIT_PROBLEM


Handler = Callable[[argparse.Namespace], int]


def handled(fn: Handler, usage: tuple[type[Exception], ...] = (),
            problem: tuple[type[Exception], ...] = ()) -> Handler:
    """Every layer's command wrapper: `fn` with UsageError and the `usage` errors as one
    line on stderr and exit 2 (unusable input), the `problem` errors exit 1 (it ran and
    found a problem), whichever entry point (tidemq, scripts/drill, ...) calls it."""

    usage_errors: tuple[type[Exception], ...] = (UsageError, *usage)

    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except usage_errors as e:
            error(str(e))
            return EXIT_USAGE
        except problem as e:
            error(str(e))
            return EXIT_PROBLEM
        except BaseExceptionGroup as group:  # the same errors, raised out of a nursery
            cause = sole_cause(group, (UsageError, *usage, *problem))
            if cause is None:
                raise
            error(str(cause))
            return EXIT_USAGE if isinstance(cause, (UsageError, *usage)) else EXIT_PROBLEM

    return run


async def until_signal(body: Callable[[], Awaitable[int]], *, graceful: trio.Event | None = None) -> int:
    """Run `body`; SIGTERM or SIGINT cancels it, so its context managers leave cleanly (a
    drill stops its cluster), then one line on stderr that says so (not an error: the stop
    was asked for) and 128 + the signal (143, 130) instead of a traceback. Every
    long-running command runs under it. With `graceful`, the first signal sets it instead
    and `body` winds down on its own: a cancellation would also end its clients' connection
    readers, and a consumer's last commits and its leaving need them. A second signal
    cancels."""
    got: list[int] = []
    failed: Exception | None = None
    code = 0
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            async def watch() -> None:
                async for signum in signals:
                    got.append(signum)
                    if graceful is not None and not graceful.is_set():
                        graceful.set()
                        continue
                    nursery.cancel_scope.cancel()
                    return

            nursery.start_soon(watch)
            try:
                code = await body()
            except Exception as e:  # raised below as itself, not in the nursery's group
                failed = e
            nursery.cancel_scope.cancel()
    if failed is not None:
        raise failed
    if got:
        print(f"tidemq: stopped by {signal.Signals(got[0]).name}: what was done so far is kept",
              file=sys.stderr, flush=True)
        return 128 + got[0]
    return code


def _handled(fn: Handler) -> Handler:
    return handled(fn, usage=(layout.StoreToolError,))


_DIR_HELP = ("a store (a node's storePathRootDir, e.g. data/store/broker-a), or a cluster base dir "
             "(e.g. data) to walk every node's store under <DIR>/store/<node>")


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `tidemq store {dump,query,verify}`."""
    group = subparsers.add_parser(
        "store",
        help="offline, read-only tools over stores",
        description="Offline, read-only tools over stores. They take no lock and write nothing, "
        "so they run beside a live node. DIR is one store or a cluster base dir; with several "
        "stores every output line carries \"store\": the node's name.",
    )
    group.set_defaults(group_parser=group)
    actions = group.add_subparsers(dest="action", metavar="ACTION")

    dump = actions.add_parser(
        "dump",
        help="print every CommitLog record as one JSON object per line",
        description="Print every CommitLog record as one JSON object per line (BLANK "
        "fillers as {\"offset\",\"blank\"}); stops at the end of data or at the first "
        "invalid record (printed as {\"offset\",\"error\"}, exit 1). With --topic and --queue, "
        "one queue's messages through its ConsumeQueue.",
    )
    dump.add_argument("dir", metavar="DIR", help=_DIR_HELP)
    dump.add_argument("--from", dest="from_offset", metavar="OFFSET", type=non_negative_int,
                      help="start at this CommitLog offset; it must be a record start (one store only)")
    dump.add_argument("--limit", metavar="N", type=non_negative_int, help="print at most N records per store")
    dump.add_argument("--topic", help="dump one topic-queue through its ConsumeQueue (with --queue)")
    dump.add_argument("--queue", type=non_negative_int, metavar="QUEUE_ID", help="queue id (with --topic)")
    dump.set_defaults(handler=_handled(_cmd_dump), offline=True)  # no login options (tidemq/cli.py)

    query = actions.add_parser(
        "query",
        help="find messages by key through the index files",
        description="Print, newest first, the messages of TOPIC whose KEYS or UNIQ_KEY is KEY, "
        "found through the index and re-checked against the CommitLog. Each index file's "
        "geometry comes from <store>/config/broker.properties (the node writes it) or from the "
        "file's size; the two flags override both. Exit 1 when nothing is found.",
    )
    query.add_argument("dir", metavar="DIR", help=_DIR_HELP)
    query.add_argument("--topic", required=True)
    query.add_argument("--key", required=True)
    query.add_argument("--max", type=non_negative_int, default=64, help="at most this many per store (default 64)")
    query.add_argument("--max-hash-slot-num", type=non_negative_int, metavar="N",
                       help="the store's maxHashSlotNum (normally worked out)")
    query.add_argument("--max-index-num", type=non_negative_int, metavar="N",
                       help="the store's maxIndexNum (normally worked out)")
    query.set_defaults(handler=_handled(_cmd_query), offline=True)  # no login options (tidemq/cli.py)

    verify = actions.add_parser(
        "verify",
        help="check the CommitLog and print a JSON summary (exit 1 when damaged)",
        description="Walk every CommitLog segment, check record structure and body CRCs, "
        "and print one JSON summary per store. Exit 0 when clean, 1 when damaged.",
    )
    verify.add_argument("dir", metavar="DIR", help=_DIR_HELP)
    verify.set_defaults(handler=_handled(_cmd_verify), offline=True)  # no login options (tidemq/cli.py)
