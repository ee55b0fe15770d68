"""`tidemq namesrv/send/consume/query/status`: the name server and the client commands.

Registered through cluster/cli/__init__.py's `add_commands`. Every command that
talks to a cluster takes `--namesrv ADDR[;ADDR]` (`-n`, or the NAMESRV_ADDR environment
variable) or `--broker ADDR` (repeatable, no name server); `-t`, `-g`, `-k` and `-i` are
mqadmin's topic, group, key(s) and msg id. Output is for scripts: `send`, `consume` and
`query` print one JSON object per line; `status` prints a table (or one JSON object with
`--json`). Errors are one line on stderr: exit 1 when the cluster could not do it (nothing
reachable, not found, not allowed, an outcome unknown), exit 2 for usage errors
(store/cli.py); a stop by SIGTERM / Ctrl-C exits 143 / 130.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import logging
import sys
from typing import Any

import trio

from store.cli import EXIT_OK, EXIT_PROBLEM, UsageError, error, print_json
from store.msg_id import decode_msg_id
from store.properties import PROPERTY_DELAY
from wire.client import NoPermission, NotFound, OutcomeUnknown, TidemqError

from .common import add_source, handled, run_async, source, until_signal
from .tables import BrokerRow, broker_table, failover_lines

__all__ = ["add_client_commands", "message_json", "print_broker_status", "run_query", "status_rows"]


def message_json(msg: Any) -> dict[str, Any]:
    """A received message as one JSON object: the body as text when it is UTF-8, else as
    base64 under `body_base64`; `properties` only when the message has user properties."""
    out: dict[str, Any] = {
        "topic": msg.topic,
        "broker_name": msg.broker_name,
        "queue": msg.queue_id,
        "offset": msg.queue_offset,
        "msg_id": msg.msg_id,
        "keys": list(msg.keys),
        "tags": msg.tags,
    }
    try:
        out["body"] = msg.body.decode("utf-8")
    except UnicodeDecodeError:
        out["body_base64"] = base64.b64encode(msg.body).decode("ascii")
    if msg.properties:
        out["properties"] = dict(msg.properties)
    out["store_timestamp"] = msg.store_timestamp
    return out


# ---------------------------------------------------------------- namesrv


def _cmd_namesrv_start(args: argparse.Namespace) -> int:
    import attrs

    from node.config import ConfigError
    from node.metrics import MetricsError
    from node.security.acl import AclError
    from wire.tls import TlsError

    from ..namesrv import NameServer, NamesrvConfig, load_namesrv_config

    try:
        cfg = load_namesrv_config(args.config) if args.config else NamesrvConfig()
        overrides = {
            name: value
            for name, value in (("listen_port", args.port), ("listen_address", args.listen_address),
                                ("broker_expire_ms", args.broker_expire_ms))
            if value is not None
        }
        if overrides:
            cfg = attrs.evolve(cfg, **overrides)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s [namesrv] %(name)s: %(message)s")
    try:
        server = NameServer(cfg)
    except (AclError, TlsError, MetricsError) as e:
        raise UsageError(str(e)) from None

    async def serve() -> None:
        async with trio.open_nursery() as nursery:
            address = await nursery.start(server.run)
            print(f"READY namesrv {address}", flush=True)  # the launcher and tests wait for it

    try:
        trio.run(serve)
    except KeyboardInterrupt:
        return 130
    except BaseException as e:
        cause = e
        while isinstance(cause, BaseExceptionGroup) and len(cause.exceptions) == 1:
            cause = cause.exceptions[0]
        if isinstance(cause, OSError) and not server.address:
            where = f"{cfg.source}: " if cfg.source else ""
            raise UsageError(f"{where}cannot listen on {cfg.listen_address}:{cfg.listen_port}: "
                               f"{cause.strerror or cause}") from None
        raise
    return EXIT_OK


def _add_namesrv_commands(subparsers: argparse._SubParsersAction) -> None:
    namesrv = subparsers.add_parser(
        "namesrv", help="run the name server",
        description="The name server: brokers register with it, clients ask it for routes.",
    )
    namesrv.set_defaults(group_parser=namesrv)
    actions = namesrv.add_subparsers(dest="action", metavar="ACTION")
    start = actions.add_parser(
        "start", help="run the name server in the foreground until SIGTERM/SIGINT",
        description="Start a name server from a namesrv config file (listenPort, listenAddress, "
        "brokerExpireMs) or from --port. Prints 'READY namesrv <host:port>' once serving; "
        "SIGTERM or SIGINT stops it (exit 0). Exit 2 on a config error or a port in use.",
    )
    start.add_argument("-c", "--config", metavar="FILE", help="namesrv config file, e.g. conf/1m-1s-dev/namesrv.toml")
    start.add_argument("--port", type=int, metavar="PORT", help="listen port (overrides the file; 0 picks one)")
    start.add_argument("--listen-address", metavar="HOST", help="listen address (default 127.0.0.1)")
    start.add_argument("--broker-expire-ms", type=int, metavar="MS",
                       help="drop a broker not heard from for MS ms (default 30000)")
    start.set_defaults(handler=handled(_cmd_namesrv_start))


# ---------------------------------------------------------------- send


def _cmd_send(args: argparse.Namespace) -> int:
    from ..client import Producer

    src = source(args)
    if args.count < 1:
        raise UsageError(f"--count must be >= 1, got {args.count}")
    keys = [k for k in (args.keys or "").split(",") if k]
    properties = _properties(args.property or [])
    if args.delay_level is not None:
        if args.delay_level < 1:
            raise UsageError(f"--delay-level must be >= 1, got {args.delay_level}")
        properties[PROPERTY_DELAY] = str(args.delay_level)
    if args.body == "-":
        body_template: bytes | None = sys.stdin.buffer.read()
    else:
        body_template = None

    if args.transaction is not None and args.delay_level is not None:
        raise UsageError("--transaction and --delay-level do not go together (a half message is never delayed)")
    if args.sharding_key is not None and (args.queue_id is not None or args.transaction is not None):
        raise UsageError("--sharding-key picks the queue: it goes without --queue-id and --transaction")

    async def main() -> int:
        unknown = 0
        async with Producer(**src, send_timeout=args.timeout, retries=args.retries) as producer:
            for i in range(args.count):
                body = body_template if body_template is not None else args.body.replace("{i}", str(i)).encode()
                if args.transaction is not None:
                    print_json(await _send_transaction(producer, args, body, keys, properties))
                    continue
                try:
                    result = await producer.send(args.topic, body, tags=args.tags, keys=keys,
                                                 properties=properties, queue_id=args.queue_id, wait=args.wait,
                                                 sharding_key=args.sharding_key)
                except OutcomeUnknown as e:  # not failed: it may be stored
                    unknown += 1
                    print_json({"status": "INDETERMINATE", "index": i, "error": e.message})
                    error(f"message {i}: outcome unknown, it may be stored: {e}")
                    continue
                out = result.to_json()
                del out["msg_ids"]
                print_json(out)
        return EXIT_PROBLEM if unknown else EXIT_OK  # not failed either, but not done: said above

    return run_async(args, main)


async def _send_transaction(producer: Any, args: argparse.Namespace, body: bytes, keys: list[str],
                            properties: dict[str, str]) -> dict[str, Any]:
    """`send --transaction`: a half message, then its END; both answers in one JSON object."""
    prepared = await producer.send_prepared(args.topic, body, args.group, tags=args.tags, keys=keys,
                                            properties=properties, queue_id=args.queue_id)
    out = prepared.to_json()
    del out["msg_ids"]
    end = await producer.end_transaction(prepared, args.group, args.transaction.upper())
    out["transaction"] = end.to_json()
    return out


def _properties(pairs: list[str]) -> dict[str, str]:
    """`--property K=V` (repeatable) as a map; a pair without `=`, or with an empty key or
    value (the node refuses those), is a usage error."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip() or not value:
            raise UsageError(f"--property takes KEY=VALUE (both non-empty), got {pair!r}")
        out[key.strip()] = value
    return out


def _add_send_command(subparsers: argparse._SubParsersAction) -> None:
    send = subparsers.add_parser(
        "send", help="send messages; one JSON result per line",
        description="Send BODY to TOPIC (COUNT times; '{i}' in BODY becomes the message's index; "
        "BODY '-' reads it from stdin). Prints one JSON object per message: status, msg_id, "
        "broker_name, queue_id, queue_offset, commitlog_offset, address. FLUSH_DISK_TIMEOUT, "
        "FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE are printed as results: the message is "
        "stored on the master. A send whose outcome is unknown (timed out, connection lost after "
        "writing, or INDETERMINATE: the node was replaced while it waited) prints status "
        "INDETERMINATE with the error, and the others go on. Exit 1 when a send fails (nothing "
        "was stored, the rest are not sent) or some outcome is unknown.",
    )
    add_source(send)
    send.add_argument("-t", "--topic", required=True)
    send.add_argument("--tags", help="the message's tag")
    send.add_argument("-k", "--keys", metavar="K1,K2", help="comma-separated keys (indexed for query --key)")
    send.add_argument("--property", action="append", metavar="K=V",
                      help="a user property (repeatable), as mqadmin sendMessage's")
    send.add_argument("--delay-level", type=int, metavar="N",
                      help="deliver after delay level N (1 = 1 s, 2 = 5 s, 3 = 10 s, ... messageDelayLevel)")
    send.add_argument("--transaction", choices=("commit", "rollback", "unknown"),
                      help="send each message as a transaction's half message, then end it so "
                      "(docs/transactions.md); prints the send's answer with a 'transaction' object: "
                      "outcome, and for a commit where the message now is")
    send.add_argument("--group", default="tidemq-cli", metavar="G",
                      help="the producer group of --transaction's half messages (default tidemq-cli)")
    send.add_argument("--count", type=int, default=1, metavar="N", help="send N messages (default 1)")
    send.add_argument("--queue-id", type=int, metavar="Q", help="pin the queue id")
    send.add_argument("--sharding-key", metavar="KEY",
                      help="send to the queue the hash of KEY picks, the same for every message of KEY, "
                      "for `consume --orderly` (docs/consumer-groups.md, Orderly consumption)")
    send.add_argument("--wait", action=argparse.BooleanOptionalAction, default=True,
                      help="wait for the flush / the slave per the node's config (default: --wait)")
    send.add_argument("--timeout", type=float, default=5.0, metavar="S", help="per-attempt timeout (default 5)")
    send.add_argument("--retries", type=int, default=2, metavar="N", help="retries on another queue (default 2)")
    send.add_argument("body", metavar="BODY")
    send.set_defaults(handler=handled(_cmd_send))


# ---------------------------------------------------------------- consume


def _cmd_consume(args: argparse.Namespace) -> int:
    from ..client import PullConsumer

    src = source(args)
    if args.max is not None and args.max < 1:
        raise UsageError(f"--max must be >= 1, got {args.max}")

    if (args.client_id is not None or args.offsets_dir is not None) and not args.broadcast:
        raise UsageError("--client-id and --offsets-dir go with --broadcast")
    if args.broadcast and args.commit:
        raise UsageError("--broadcast keeps its offsets in a local file: it commits nothing, drop --commit")
    if args.orderly and (args.broadcast or args.sql is not None):
        raise UsageError("--orderly is a clustering member with a tag filter: not with --broadcast or --sql")
    stop = trio.Event()  # a member stops on a signal by itself: it commits and leaves its group

    async def main() -> int:
        if args.broadcast:  # every message, offsets in ~/.tidemq_offsets/<client id>/<group>/
            from ..client.broadcast import consume_broadcast
            from ..client.local_offsets import OffsetFileError

            await _check_may_consume(src, args)
            try:
                await consume_broadcast(lambda m: print_json(message_json(m)), group=args.group, topic=args.topic,
                                        max_messages=args.max, idle_timeout_ms=args.timeout_ms, stop=stop,
                                        tag_filter=args.tags, start=args.start, client_id=args.client_id,
                                        offsets_dir=args.offsets_dir, **src)
            except OffsetFileError as e:  # corrupt or in use: the file is named, nothing is read
                error(str(e))
                return EXIT_PROBLEM
            return EXIT_OK
        if args.orderly:  # a member consuming each queue in order under its lock (client/orderly.py)
            from ..client.orderly import consume_orderly

            await _check_may_consume(src, args)
            await consume_orderly(lambda m: print_json(message_json(m)), group=args.group, topic=args.topic,
                                  max_messages=args.max, idle_timeout_ms=args.timeout_ms, stop=stop,
                                  tag_filter=args.tags, start=args.start, **src)
            return EXIT_OK
        if args.commit:  # a member of the group (push_consumer.Consumer): commits what it printed
            from ..client.push_consumer import consume_as_member

            await _check_may_consume(src, args)
            await consume_as_member(lambda m: print_json(message_json(m)), group=args.group, topic=args.topic,
                                    max_messages=args.max, idle_timeout_ms=args.timeout_ms, stop=stop,
                                    tag_filter=args.tags, sql_filter=args.sql, start=args.start, **src)
            return EXIT_OK
        async with PullConsumer(**src, group=args.group, topic=args.topic, tag_filter=args.tags,
                                sql_filter=args.sql, start=args.start) as consumer:  # a reader: commits nothing
            await consumer.route(args.topic)  # NotFound: say so rather than wait for nothing
            count = 0
            async with contextlib.aclosing(consumer.messages(idle_timeout_ms=args.timeout_ms)) as stream:
                async for msg in stream:
                    print_json(message_json(msg))
                    count += 1
                    if args.max is not None and count >= args.max:
                        break
        return EXIT_OK

    member = args.commit or args.broadcast or args.orderly
    return run_async(args, lambda: until_signal(main, graceful=stop if member else None))


async def _check_may_consume(src: dict[str, Any], args: argparse.Namespace) -> None:
    """Before joining GROUP: raise NotFound when no broker serves TOPIC, NoPermission when
    a master refuses the group's pulls (its consumption is disabled, or the account lacks
    SUB), once, rather than a member retrying such pulls every second. Other errors (a
    master down) are the member's to ride out."""
    from ..client import PullConsumer

    async with PullConsumer(**src, group=args.group, topic=args.topic, tag_filter=args.tags,
                            sql_filter=args.sql, start=args.start) as probe:
        await probe.route(args.topic)
        asked: set[str | None] = set()
        for queue in await probe.queues():
            if queue.broker_name in asked:
                continue
            asked.add(queue.broker_name)
            try:
                await probe.pull(queue, 1, timeout_ms=0)  # reads; commits nothing
            except (NoPermission, NotFound):
                raise
            except TidemqError:
                continue


def _add_consume_command(subparsers: argparse._SubParsersAction) -> None:
    consume = subparsers.add_parser(
        "consume", help="print a topic's messages as JSON lines",
        description="Read TOPIC for GROUP from its committed offsets (the queue's first offset "
        "when the group never committed), across every queue, and print each message as one "
        "JSON object: topic, broker_name, queue, offset, msg_id, keys, tags, body (text when "
        "UTF-8, else body_base64), properties (only when the message has user properties: `send` sets none), store_timestamp. Stops after --max messages or "
        "when no message arrives for --timeout-ms. With --commit it runs as a member of GROUP "
        "(sharing the queues with the group's other members, retries and DLQ as in "
        "docs/consumer-groups.md) and commits exactly what it printed; with --broadcast it gets every "
        "message whatever other members do and keeps its offsets in its own file "
        "(~/.tidemq_offsets/<client id>/<group>/offsets.json), so it continues there next time; "
        "with neither, it only reads. "
        "Reads fall back to a slave when a master is down. A group a master refuses (its "
        "consumption disabled by updateSubGroup --consumeEnable false, or an account without SUB on "
        "it) is one error line and exit 1. SIGTERM or Ctrl-C stops it cleanly: a member leaves the "
        "group and commits what it printed, says so on stderr, and exits 143 / 130.",
    )
    add_source(consume)
    consume.add_argument("-t", "--topic", required=True)
    consume.add_argument("-g", "--group", required=True)
    consume.add_argument("--max", type=int, metavar="N", help="stop after N messages")
    consume.add_argument("--timeout-ms", type=int, default=2000, metavar="MS",
                         help="stop when no message arrives for MS ms (default 2000)")
    consume.add_argument("--commit", action="store_true", help="commit the offsets of what was printed")
    consume.add_argument("--broadcast", action="store_true",
                         help="consume every message as a broadcasting member of GROUP, its offsets in a local "
                         "file (docs/consumer-groups.md, Broadcasting)")
    consume.add_argument("--orderly", action="store_true",
                         help="consume as an orderly member of GROUP: each queue it locks read in queue "
                         "order, committing what it printed (docs/consumer-groups.md, Orderly consumption)")
    consume.add_argument("--client-id", metavar="ID",
                         help="with --broadcast: the member's id, naming its offsets file (default ip@DEFAULT)")
    consume.add_argument("--offsets-dir", metavar="DIR",
                         help="with --broadcast: where offsets files live (default ~/.tidemq_offsets)")
    consume.add_argument("--tags", metavar="EXPR", help="tag filter, e.g. 'a||b' (default: all)")
    consume.add_argument("--sql", metavar="EXPR",
                         help="SQL92 filter over properties and TAGS, e.g. \"a > 5 AND TAGS IN ('x')\" "
                              "(the node needs enablePropertyFilter)")
    consume.add_argument("--start", choices=["first", "last"], default="first",
                         help="where a group without a committed offset starts (default first)")
    consume.set_defaults(handler=handled(_cmd_consume))


# ---------------------------------------------------------------- query


def run_query(args: argparse.Namespace) -> int:
    """`tidemq query` and `tidemq admin msg/key`."""
    from ..client import Admin

    src = source(args)
    if bool(args.msg_id) == bool(args.key):
        raise UsageError("give --msg-id ID, or --topic T with --key K")
    if args.key and not args.topic:
        raise UsageError("--key needs --topic")
    if args.msg_id:
        try:
            decode_msg_id(args.msg_id)
        except ValueError as e:
            raise UsageError(f"--msg-id {args.msg_id!r} is not a msgId: {e}") from None

    async def main() -> int:
        async with Admin(**src) as admin:
            if args.msg_id:
                print_json(message_json(await admin.get_by_msg_id(args.msg_id)))
                return EXIT_OK
            messages = await admin.query_by_key(args.topic, args.key, max_num=args.max)
            for msg in messages:
                print_json(message_json(msg))
            if not messages:
                error(f"no message of topic {args.topic!r} has key {args.key!r}")
                return EXIT_PROBLEM
        return EXIT_OK

    return run_async(args, main)


def _add_query_command(subparsers: argparse._SubParsersAction) -> None:
    query = subparsers.add_parser(
        "query", help="look messages up by key or by msgId",
        description="Print the messages of TOPIC whose keys include KEY (newest first), or the "
        "message with an offset msgId (asked of the broker it names, else of its group's "
        "slaves), as JSON lines like `consume`. Exit 1 when nothing is found.",
    )
    add_source(query)
    query.add_argument("-t", "--topic")
    query.add_argument("-k", "--key")
    query.add_argument("-i", "--msg-id", metavar="ID")
    query.add_argument("--max", type=int, default=32, metavar="N", help="at most N messages (default 32)")
    query.set_defaults(handler=handled(run_query))


# ---------------------------------------------------------------- status


def status_rows(brokers: list[Any]) -> list[BrokerRow]:
    """cluster.client BrokerStatus answers as table rows."""
    return [BrokerRow(group=b.broker_name or "?", broker_id=b.broker_id, role=b.role or "?", address=b.address,
                      answer=b.status, error=None if b.reachable else f"unreachable: {b.error}")
            for b in brokers]


def print_broker_status(args: argparse.Namespace) -> int:
    """`tidemq status` and `tidemq admin brokerStatus`."""
    from ..client import Admin

    src = source(args)

    async def main() -> int:
        async with Admin(**src) as admin:
            rows = await admin.status()
        if args.json:
            from ..client.insync import in_sync_sets

            sets = in_sync_sets(r.status for r in rows if r.status is not None)
            print_json({"brokers": [r.to_json() for r in rows],
                        "in_sync": {group: sync.to_json() for group, sync in sorted(sets.items())}})
        elif rows:
            from rich.console import Console

            where = f"name server {args.namesrv}" if args.namesrv else f"brokers {', '.join(args.broker)}"
            console = Console(width=None if sys.stdout.isatty() else 200)
            table_rows = status_rows(rows)
            console.print(broker_table(table_rows, f"tidemq cluster ({where})"))
            for line in failover_lines(table_rows):
                console.print(line, markup=False, highlight=False)
        if not rows:
            error("no broker is registered")
            return EXIT_PROBLEM
        return EXIT_OK if all(r.reachable for r in rows) else EXIT_PROBLEM

    return run_async(args, main)


def add_status_arguments(status: argparse.ArgumentParser) -> None:
    add_source(status)
    status.add_argument("--json", action="store_true",
                        help="print one JSON object {\"brokers\": [...]} instead of a table")
    status.set_defaults(handler=handled(print_broker_status))


_STATUS_HELP = ("Ask every broker the name server knows (or every --broker) for its status and show one "
                "row per broker, grouped by broker group: role, epoch, max CommitLog offset, replication "
                "lag in bytes and seconds, disk use, put/get TPS of the last minute, HA state and running "
                "flags. Exit 1 when a broker does not answer or none is registered.")


def add_client_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register namesrv, send, consume, query and status."""
    _add_namesrv_commands(subparsers)
    _add_send_command(subparsers)
    _add_consume_command(subparsers)
    _add_query_command(subparsers)
    add_status_arguments(subparsers.add_parser("status", help="every broker's state as a table (or JSON)",
                                               description=_STATUS_HELP))
