"""The `orderly` drill (framework: cluster/drills/framework.py): orderly consumption across
a kill-master.

Beside the framework's load, producers send sequenced messages of 16 keys to
`OrderlyTopic` by sharding key (a key's next message only once its previous one was
acknowledged), and orderly members consume them (cluster/client/orderly.py). The drill
SIGKILLs broker-a's master, starts a third member while broker-a has no master (its
queues change hands across the failover), promotes broker-a's slave, and waits until
every queue is consumed again and every acknowledged message was consumed.

Promises: no key's messages were first consumed out of their order (an order violation:
a message consumed for the first time after a later one of its key; a redelivery of one
already consumed is a duplicate, not a violation); no two members ran the handler on one
queue at once (a double holder, from the handlers' own clock); every acknowledged message
was consumed; broker-a's queues are consumed again after the promotion, within the new
master's lock fence (30 s) plus the members' rebalance.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

import attrs
import trio

from wire.client import OutcomeUnknown, TidemqError
from wire.protocol import CLIENT_LOCK_LIFE_MS

from ..client.admin import Admin
from ..client.base import ReceivedMessage
from ..client.orderly import OrderlyConsumer
from ..client.producer import Producer
from ..client.routing import MessageQueue
from .framework import DrillRun, drill
from .promotion import _promote

ORDERLY_TOPIC = "OrderlyTopic"
ORDERLY_GROUP = "drill-orderly"
KEYS_PER_PRODUCER = 8
PRODUCERS = 2
HANDLER_S = 0.002
"""Each handler call takes this long, so two members running one queue at once would overlap."""
RECOVER_S = CLIENT_LOCK_LIFE_MS / 1000 + 30.0
DRAIN_S = 40.0


@attrs.frozen
class Call:
    member: str
    key: str
    seq: int
    queue: MessageQueue
    start: float
    end: float


def order_violations(calls: list[Call]) -> list[str]:
    """Messages first consumed after a later message of their key (see the module docstring)."""
    firsts: dict[str, list[int]] = {}
    for c in sorted(calls, key=lambda c: c.end):
        seen = firsts.setdefault(c.key, [])
        if c.seq not in seen:
            seen.append(c.seq)
    out = []
    for key, seqs in firsts.items():
        highest = -1
        for seq in seqs:
            if seq < highest:
                out.append(f"{key}:{seq} first consumed after {key}:{highest}")
            highest = max(highest, seq)
    return out


def double_holders(calls: list[Call]) -> list[str]:
    """Handler calls of two members on one queue that overlap in time."""
    out = []
    by_queue: dict[MessageQueue, list[Call]] = {}
    for c in calls:
        by_queue.setdefault(c.queue, []).append(c)
    for queue, cs in by_queue.items():
        cs.sort(key=lambda c: c.start)
        running: Call | None = None  # the call that ends last so far
        for c in cs:
            if running is not None and c.member != running.member and c.start < running.end:
                out.append(f"{queue}: {running.member} and {c.member} at {c.start:.3f} s")
            if running is None or c.end > running.end:
                running = c
    return out


class OrderlyLoad:
    """The drill's ordered producers and orderly members, and what they saw."""

    def __init__(self, run: DrillRun) -> None:
        self.run = run
        self.calls: list[Call] = []
        self.acked: dict[str, int] = {}
        """key → the highest seq acknowledged."""
        self.producing = True
        self.members: dict[str, OrderlyConsumer] = {}

    def handler(self, member: str) -> Callable[[ReceivedMessage], Awaitable[None]]:
        async def handle(msg: ReceivedMessage) -> None:
            start = self.run.now()
            await trio.sleep(HANDLER_S)  # poll: the handler's work
            key, seq = msg.body.decode().split(":")
            self.calls.append(Call(member, key, int(seq), msg.queue, start, self.run.now()))
        return handle

    async def produce(self, producer_id: int) -> None:
        keys = [f"k{producer_id}-{i}" for i in range(KEYS_PER_PRODUCER)]
        nxt = dict.fromkeys(keys, 0)
        async with Producer(namesrv=self.run.namesrv, send_timeout=3.0, retries=2, route_ttl_s=3.0) as producer:
            while self.producing:
                for key in keys:
                    if not self.producing:
                        break
                    try:
                        await producer.send(ORDERLY_TOPIC, f"{key}:{nxt[key]}", sharding_key=key)
                    except OutcomeUnknown:
                        continue  # maybe stored: the same seq again (a duplicate at most)
                    except TidemqError:
                        continue  # its group has no master: this key waits, the others go on
                    self.acked[key] = nxt[key]
                    nxt[key] += 1
                await trio.sleep(len(keys) / self.run.rate)  # poll: the producers' pace

    async def start_member(self, stack: contextlib.AsyncExitStack, member: str) -> None:
        run = self.run
        self.members[member] = await stack.enter_async_context(OrderlyConsumer(
            ORDERLY_GROUP, ORDERLY_TOPIC, self.handler(member), namesrv=run.namesrv,
            client_id=f"127.0.0.1@orderly@{member}", heartbeat_interval_s=run.heartbeat_s,
            rebalance_interval_s=run.rebalance_s, lock_interval_s=2.0, poll_ms=300, route_ttl_s=3.0))
        run.event(f"orderly member {member} started")

    def consumed_since(self, t: float) -> set[MessageQueue]:
        return {c.queue for c in self.calls if c.start >= t}

    def unconsumed(self) -> list[str]:
        done = {(c.key, c.seq) for c in self.calls}
        return [f"{k}:{s}" for k, top in self.acked.items() for s in range(top + 1) if (k, s) not in done]


def _queues() -> set[MessageQueue]:
    return {MessageQueue(ORDERLY_TOPIC, b, q) for b in ("broker-a", "broker-b") for q in range(4)}


@drill("orderly", "orderly members across a kill-master (a member joins meanwhile, the slave is promoted): "
       "0 order violations, 0 double holders")
async def orderly(run: DrillRun) -> None:
    async with Admin(namesrv=run.namesrv) as admin:
        await admin.create_topic(ORDERLY_TOPIC, read_queue_nums=4, write_queue_nums=4)

        async def routed() -> bool:
            return len((await admin.route(ORDERLY_TOPIC, refresh=True)).groups) == 2
        await run.wait_until(routed, 30, f"{ORDERLY_TOPIC} routed on both groups")
    load = OrderlyLoad(run)
    async with trio.open_nursery() as nursery:
        async with contextlib.AsyncExitStack() as stack:  # the members, closed before the producers stop
            for i in range(PRODUCERS):
                nursery.start_soon(load.produce, i)
            await load.start_member(stack, "o1")
            await load.start_member(stack, "o2")
            await run.wait_until(lambda: load.consumed_since(0) == _queues(), 30, "every orderly queue consumed")
            await trio.sleep(2.0)  # poll: steady ordered load before the fault
            run.fault("SIGKILL broker-a (master) under ordered load")
            await run.kill("broker-a", "KILL")
            await load.start_member(stack, "o3")  # broker-a's queues change hands across the failover
            result = await _promote(run)
            run.promise("broker-a's slave is promoted with a new epoch", result is not None and result["epoch"] >= 2)
            promoted = run.now()
            again = await run.wait_until(lambda: load.consumed_since(promoted) == _queues(), RECOVER_S,
                                         "every orderly queue consumed again after the promotion")
            if again:
                run.event(f"orderly consumption of every queue resumed {run.now() - promoted:.1f} s after the "
                          "promotion (the new master's lock fence is 30 s)")
            run.promise(f"every orderly queue is consumed again within {RECOVER_S:g} s of the promotion", again)
            load.producing = False
            drained = await run.wait_until(lambda: not load.unconsumed(), DRAIN_S,
                                           "every acknowledged ordered message consumed")
            lost = load.unconsumed()
            run.promise(f"every acknowledged ordered message is consumed ({len(lost)} not: {', '.join(lost[:5]) or '-'})",
                        drained)
        nursery.cancel_scope.cancel()
    violations, doubles = order_violations(load.calls), double_holders(load.calls)
    run.report.order_violations, run.report.double_holders = len(violations), len(doubles)
    run.event(f"orderly: {len(load.calls)} handler calls, {sum(load.acked.values()) + len(load.acked)} "
              f"acknowledged, {len(violations)} order violations, {len(doubles)} double holders")
    for v in (violations + doubles)[:10]:
        run.event(f"orderly: {v}")
    run.promise("no key's messages are consumed out of order (0 order violations)", not violations)
    run.promise("no queue is consumed by two members at once (0 double holders)", not doubles)
