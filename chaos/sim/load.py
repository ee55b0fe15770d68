"""The simulation's workload: each group's sync and pipelined producers, the retrying
producer (the client library's `Producer`, as applications send) and the consumer group,
all on the client host, every send's outcome in the run's History and event log.

Keys are `sim-p{process}-{seq}`; processes 0-5 write to broker-a's master, 7-12 to
broker-b's, and 6 is the retrying producer, which goes wherever the name server's routes
lead it. What the consumer read is kept per key, per group and per CommitLog offset, for
the verdict's skip and known-gap rules (verdict.py).
"""

from __future__ import annotations

from typing import Any

import trio

from cluster.client.consumer import PullConsumer
from cluster.client.producer import Producer
from cluster.client.routing import MessageQueue
from cluster.judge.history import FAIL, INFO, OK, History
from store import runtime
from wire.client import OutcomeUnknown, TidemqError, connect
from wire.protocol import Send

from ..workload import consume, record_send
from .cluster import CLIENT_HOST, NAMESRV_ADDRESS, SimCluster, SimGroup
from .events import EventLog, op_line
from .network import SimNetwork
from .schedule import Schedule

__all__ = ["GROUP", "GROUP_LANES", "QUEUES", "RETRYING", "TOPIC", "SimLoad"]

TOPIC = "SimTopic"
QUEUES = 4
GROUP = "sim-consumer"
SYNC_PRODUCERS = 2
PIPELINE_LANES = 4  # one connection, this many sends in flight
GROUP_LANES = SYNC_PRODUCERS + PIPELINE_LANES  # the producer processes that write to one group's master
RETRYING = GROUP_LANES  # the retrying producer's process (broker-a's lanes come first, broker-b's after it)
RETRIES = 2  # the retrying producer: the client library's Producer, as applications send
SEND_TIMEOUT_S = 3.0
PULL_INTERVAL_MS = 500  # the consumer's pause after a round with messages: fuller pulls, fewer steps


class SimLoad:
    """The producers and the consumer of one run, and what they were told and read."""

    def __init__(self, cluster: SimCluster, network: SimNetwork, schedule: Schedule, history: History,
                 log: EventLog) -> None:
        self.cluster = cluster
        self.network = network
        self.schedule = schedule
        self.history = history
        self.log = log
        self.consumed: dict[str, int] = {}
        self.consumed_by: dict[str, dict[str, int]] = {}  # group → what the consumer read from it
        self.read_ids: dict[str, dict[tuple[str, str], float]] = {}
        """group → (msgId, first key) of each record the consumer read → when it first did."""
        self.retried_to: dict[str, str] = {}  # the retrying producer's acknowledged keys → the group that stored them
        self.commits: dict[str, list[tuple[float, int, int]]] = {}
        """group → (wall time, queue, offset) of each commit a master of it answered OK."""
        self.consumers: list[PullConsumer] = []  # every consumer the run made (a failed one is replaced)

    def lanes(self, group: SimGroup) -> range:
        """The processes of the group's own producers."""
        first = self.first_lane(group)
        return range(first, first + GROUP_LANES)

    async def producers(self, done: trio.Event) -> None:
        """Each group's master gets sync producers and a pipelined one (processes 0-5 write to
        broker-a, 7-12 to broker-b); the retrying producer (6) writes wherever the name
        server's routes lead it."""
        groups = self.cluster.groups
        per_lane = -(-self.schedule.sends // (len(groups) * GROUP_LANES + 1))
        interval = self.schedule.span / per_lane
        async with trio.open_nursery() as nursery:
            for group in groups:
                first = self.first_lane(group)
                for p in range(first, first + SYNC_PRODUCERS):
                    nursery.start_soon(self._producer, group, [p], per_lane, interval)
                nursery.start_soon(self._producer, group, list(range(first + SYNC_PRODUCERS, first + GROUP_LANES)),
                                   per_lane, interval)
            nursery.start_soon(self._retrying_producer, RETRYING, per_lane, interval)
        done.set()

    def first_lane(self, group: SimGroup) -> int:
        index = self.cluster.groups.index(group)
        return index * GROUP_LANES + (1 if index else 0)  # (the retrying producer is 6)

    async def _retrying_producer(self, p: int, quota: int, interval: float) -> None:
        """The client library's `Producer`: routes from the name server, any queue, and a send
        that failed or timed out is tried again (RETRIES), so a message whose first attempt's
        outcome was unknown may be stored more than once (`Op.copies`)."""
        async with Producer(NAMESRV_ADDRESS, retries=RETRIES, send_timeout=SEND_TIMEOUT_S, connect_timeout=2.0,
                            net=self.network.host(CLIENT_HOST)) as producer:
            for seq in range(quota):
                op = self.history.invoke(p, seq, f"sim-p{p}-{seq}")
                try:
                    r = await producer.send(TOPIC, op.key.encode().ljust(200, b"."), keys=[op.key])
                except OutcomeUnknown as e:  # every attempt failed, one or more of them unknown
                    self.history.complete(op, INFO, status=e.status, error=str(e)[:200], copies=1 + RETRIES)
                except TidemqError as e:
                    self.history.complete(op, FAIL, status=e.status, error=str(e)[:200])
                else:
                    self.history.complete(op, OK, status=r.status.value, msg_id=r.msg_id, queue_id=r.queue_id,
                                          queue_offset=r.queue_offset, commitlog_offset=r.commitlog_offset,
                                          copies=1 + r.unknown_attempts)
                    self.retried_to[op.key] = r.broker_name
                self.log.add(op_line(op, self.retried_to.get(op.key) if len(self.cluster.groups) > 1 else None))
                await trio.sleep(interval)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)

    async def _producer(self, group: SimGroup, processes: list[int], quota: int, interval: float) -> None:
        """One connection to the group's master; each send goes out from every process in
        `processes` at once (one process: a sync producer; several: a pipelined one)."""
        seq = 0
        net = self.network.host(CLIENT_HOST)
        while seq < quota:
            address = group.master.address
            try:
                async with connect(address, connect_timeout=2.0, request_timeout=SEND_TIMEOUT_S, net=net) as conn:
                    while seq < quota:
                        good = await self._send_round(conn, processes, seq)
                        seq += 1
                        await trio.sleep(interval)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)
                        if not good or address != group.master.address:
                            break  # a new connection, to the master (etcd mode: another may be elected)
            except TidemqError:
                await trio.sleep(0.2)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)

    async def _send_round(self, conn: Any, processes: list[int], seq: int) -> bool:
        good = [True]

        async def one(p: int) -> None:
            op = self.history.invoke(p, seq, f"sim-p{p}-{seq}")
            request = Send(topic=TOPIC, body=op.key.encode().ljust(200, b"."), keys=[op.key], queue_id=seq % QUEUES)
            if not await record_send(self.history, conn, op, request):
                good[0] = False
            self.log.add(op_line(op))

        if len(processes) == 1:  # a sync producer: no nursery, fewer task steps
            await one(processes[0])
            return good[0]
        async with trio.open_nursery() as nursery:
            for p in processes:
                nursery.start_soon(one, p)
        return good[0]

    async def consume(self, stop: trio.Event) -> None:
        await consume(stop, self.consumed, lambda: PullConsumer(
            NAMESRV_ADDRESS, group=GROUP, topic=TOPIC, request_timeout=3.0, master_retry_s=0.5,
            net=self.network.host(CLIENT_HOST)), poll_ms=1000, pull_interval_ms=PULL_INTERVAL_MS,
            by_group=self.consumed_by, read=self.read_ids, on_consumer=self._on_consumer)

    def _on_consumer(self, consumer: PullConsumer) -> None:
        """Keep every consumer the run made (a failed one is replaced), and note each commit
        a master answered OK."""
        self.consumers.append(consumer)

        def committed(queue: MessageQueue, offset: int, _master: str) -> None:
            self.commits.setdefault(queue.broker_name, []).append((runtime.wall_clock(), queue.queue_id, offset))

        consumer.on_committed = committed

    async def drain_consumer(self) -> None:
        """Let the consumer reach the end of every queue of every group (bounded)."""
        def caught_up(group: SimGroup) -> bool:
            broker = group.master.broker
            if broker is None or broker.services is None:
                return False
            store = broker.services.store
            return all((broker.offsets.fetch(GROUP, TOPIC, q) or 0) == store.get_max_offset_in_queue(TOPIC, q)
                       for q in range(QUEUES))

        with trio.move_on_after(30.0) as waiting:
            while not all(caught_up(group) for group in self.cluster.groups):
                await trio.sleep(0.1)  # poll: simulated time (the schedule's holds, pacing, polls of the nodes)
        if waiting.cancelled_caught:
            self.log.add("the consumer did not reach the end of every queue")

    def committed(self, group: SimGroup) -> dict[int, int]:
        broker = group.master.broker
        if broker is None:
            return {}
        return {q: o for q in range(QUEUES) if (o := broker.offsets.fetch(GROUP, TOPIC, q)) is not None}
