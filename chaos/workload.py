"""The chaos workload: producers with unique keys and per-producer sequence numbers, a
consumer group, and a monitor that remembers each node's offsets (to name the window a
fault could lose).

Producers send to one address (the client proxy in front of the serving master) over the
node client protocol, one connection each, pinned queue `seq % queues`, and record every
outcome in the History; a lost connection is reopened after a short back-off. They do not
retry a send: an indeterminate send stays indeterminate, so a duplicate in the store is
the store's doing. The consumer is a cluster.client PullConsumer through the name server,
which hands it the brokers' advertised addresses: their client proxies.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import attrs
import trio

from cluster.client.consumer import PullConsumer
from cluster.judge.history import FAIL, INFO, OK, History, Op, key_of
from store import runtime
from wire.client import ConnectionLost, Indeterminate, OutcomeUnknown, TidemqError, connect
from wire.protocol import GetStatus, Send, SendReply, StatusReply, TopicCreate

log = logging.getLogger("tidemq.chaos")

TOPIC = "ChaosTopic"
CONSUMER_GROUP = "chaos-consumer"


@attrs.define
class WorkloadConfig:
    producers: int = 3
    rate: float = 60.0  # sends per second per producer (a pace, not a target)
    body_size: int = 300
    queues: int = 4
    send_timeout: float = 4.0
    topic: str = TOPIC


@attrs.define
class NodeSample:
    at: float
    max_phy_offset: int
    flushed_offset: int
    min_phy_offset: int
    slave_ack: int | None  # master only: the best slave's acknowledged offset
    running_flags: list[str]
    dispatch_behind_bytes: int = 0  # CommitLog bytes not yet in the ConsumeQueues (a slave: past its confirm offset)


class Workload:
    """Runs until `stop` is set; outcomes go to `history`, consumed keys to
    `consumed` (key → CommitLog offset)."""

    def __init__(self, send_address: str, namesrv: str, status_addresses: dict[str, str],
                 history: History, run_id: str, cfg: WorkloadConfig | None = None) -> None:
        self.send_address = send_address
        self.namesrv = namesrv
        self.status_addresses = status_addresses
        self.history = history
        self.run_id = run_id
        self.cfg = cfg or WorkloadConfig()
        self.consumed: dict[str, int] = {}
        self.samples: dict[str, NodeSample] = {}
        self.consumer_errors = 0
        self.consumer: PullConsumer | None = None  # the live one: scenarios ask where it reads

    async def create_topic(self) -> None:
        async with connect(self.send_address, connect_timeout=5.0, request_timeout=10.0) as conn:
            await conn.request(TopicCreate(topic=self.cfg.topic, read_queue_nums=self.cfg.queues,
                                           write_queue_nums=self.cfg.queues))

    async def run(self, stop: trio.Event, *, consume: bool = True) -> None:
        async with trio.open_nursery() as nursery:
            for p in range(self.cfg.producers):
                nursery.start_soon(self._producer, p, stop)
            if consume:
                nursery.start_soon(self._consumer, stop)
            nursery.start_soon(self._monitor, stop)

    # ---- producers

    async def _producer(self, process: int, stop: trio.Event) -> None:
        seq = 0
        interval = 1.0 / self.cfg.rate if self.cfg.rate > 0 else 0.0
        next_at = trio.current_time()
        while not stop.is_set():
            try:
                async with connect(self.send_address, connect_timeout=2.0,
                                   request_timeout=self.cfg.send_timeout) as conn:
                    while not stop.is_set():
                        op = self.history.invoke(process, seq, key_of(self.run_id, process, seq))
                        body = op.key.encode().ljust(self.cfg.body_size, b".")
                        seq += 1
                        if not await self._send(conn, op, body):
                            break
                        next_at = max(next_at + interval, trio.current_time() - 1.0)
                        with trio.move_on_at(next_at):
                            await stop.wait()  # pace; wakes at once on stop
            except TidemqError as e:  # connect failed: the node or the link is down
                log.debug("producer %d: %s", process, e)
            with trio.move_on_after(0.2):
                await stop.wait()  # back off before reconnecting

    async def _send(self, conn: Any, op: Any, body: bytes) -> bool:
        """One send; False when the connection is unusable afterwards."""
        return await record_send(self.history, conn, op, Send(topic=self.cfg.topic, body=body, keys=[op.key],
                                                               queue_id=op.seq % self.cfg.queues))

    # ---- consumer and monitor

    async def _consumer(self, stop: trio.Event) -> None:
        def made(consumer: PullConsumer) -> None:
            self.consumer = consumer

        def failed(e: TidemqError) -> None:
            self.consumer_errors += 1
            log.debug("consumer: %s", e)

        await consume(stop, self.consumed, lambda: PullConsumer(
            self.namesrv, group=CONSUMER_GROUP, topic=self.cfg.topic, request_timeout=3.0, master_retry_s=0.5),
            poll_ms=300, on_consumer=made, on_error=failed)

    async def _monitor(self, stop: trio.Event) -> None:
        while not stop.is_set():
            for name, address in self.status_addresses.items():
                sample = await sample_node(address)
                if sample is not None:
                    self.samples[name] = sample
            with trio.move_on_after(0.25):
                await stop.wait()


async def consume(stop: trio.Event, consumed: dict[str, int], make: Callable[[], PullConsumer], *,
                  poll_ms: int, pull_interval_ms: int = 0, on_consumer: Callable[[PullConsumer], None] | None = None,
                  on_error: Callable[[TidemqError], None] | None = None,
                  by_group: dict[str, dict[str, int]] | None = None,
                  read: dict[str, dict[tuple[str, str], float]] | None = None) -> None:
    """Consume with auto-commit until `stop`, noting each key's CommitLog offset in
    `consumed` (and in `by_group`, under the group it was read from: the same key may be
    read from two groups), and in `read` (msgId, first key) of every record read per group,
    with the wall time it was first read (a retried key read twice, once from a copy a node later
    dropped, keeps both; a msgId names the node that stored the record and its offset, so a
    node that cuts a record and stores another at its offset makes the same msgId again: the
    time tells them apart); a consumer that
    fails is replaced by a fresh one (`make`) after 0.3 s."""
    with trio.CancelScope() as scope:
        async def cancel_on_stop() -> None:
            await stop.wait()
            scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_on_stop)
            while True:
                try:
                    async with make() as consumer, \
                            contextlib.aclosing(consumer.messages(
                                poll_ms=poll_ms, auto_commit=True, pull_interval_ms=pull_interval_ms)) as it:
                        if on_consumer is not None:
                            on_consumer(consumer)
                        async for msg in it:
                            for key in msg.keys:
                                consumed[key] = msg.commitlog_offset
                                if by_group is not None and msg.broker_name is not None:
                                    by_group.setdefault(msg.broker_name, {})[key] = msg.commitlog_offset
                            if read is not None:
                                record = (msg.msg_id, msg.keys[0] if msg.keys else "")
                                read.setdefault(msg.broker_name or "", {}).setdefault(record, runtime.wall_clock())
                except TidemqError as e:
                    if on_error is not None:
                        on_error(e)
                await trio.sleep(0.3)  # poll: a deliberate back-off before a fresh consumer


async def record_send(history: History, conn: Any, op: Op, request: Send) -> bool:
    """Send `request` on `conn` and record its outcome as `op`'s: ok (stored, with where),
    fail (not stored) or info (indeterminate). False when the connection is unusable afterwards."""
    try:
        r: SendReply = await conn.call(request)
    except OutcomeUnknown as e:  # timed out, lost after writing, INDETERMINATE: may be stored
        history.complete(op, INFO, status=e.status, error=str(e)[:200])
        return isinstance(e, Indeterminate)  # the connection is still good only then
    except ConnectionLost as e:  # lost before the request was written: not stored
        history.complete(op, FAIL, status=e.status, error=str(e)[:200])
        return False
    except TidemqError as e:
        history.complete(op, FAIL, status=e.status, error=str(e)[:200])
        return True
    history.complete(op, OK, status=r.status.value, msg_id=r.msg_id, queue_id=r.queue_id,
                     queue_offset=r.queue_offset, commitlog_offset=r.commitlog_offset)
    return True


async def node_status(address: str, timeout: float = 1.0) -> StatusReply | None:
    """The node's `status` answer, None when it does not answer in time."""
    try:
        with trio.fail_after(timeout + 1.0):
            async with connect(address, connect_timeout=timeout, request_timeout=timeout) as conn:
                return await conn.call(GetStatus())
    except (TidemqError, trio.TooSlowError):
        return None


async def sample_node(address: str, timeout: float = 1.0) -> NodeSample | None:
    """The node's offsets from its `status`, None when it does not answer in time."""
    s = await node_status(address, timeout)
    if s is None:
        return None
    slaves = s.ha.slaves
    ack = max((x.ack_offset for x in slaves), default=None) if slaves is not None else None
    return NodeSample(time.time(), s.max_phy_offset, s.flushed_offset, s.min_phy_offset, ack, list(s.running_flags),
                      s.dispatch_behind_bytes)
