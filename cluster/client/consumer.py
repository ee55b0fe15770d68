"""PullConsumer: long polling, committed offsets, reads from a slave while the master is
down (see cluster.client)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Any, Literal, Unpack

import attrs
import trio

from wire.client import (
    ConnectionLost,
    NotFound,
    ServiceUnavailable,
    TidemqError,
)
from wire.options import ConnectKeywords, ConnectOptions
from wire.protocol import (
    CommitOffset,
    FetchOffset,
    MaxOffset,
    MinOffset,
    OffsetForEpoch,
    Pull,
    Status,
    WireRequest,
)
from wire.protocol.sql92 import compile_sql92
from wire.protocol.trace import ConsumeReturn

from .base import (
    CLIENT_OPTIONS,
    ROUTE_TTL_S,
    PullResult,
    ReceivedMessage,
    _Client,
    _with_message,
)
from .routing import (
    UNREACHABLE,
    MessageQueue,
    TopicRoute,
)
from .trace import consume_begins, trace_dispatcher, tracing

log = logging.getLogger("tidemq.client")


# ---------------------------------------------------------------- PullConsumer


@attrs.define
class _GroupState:
    """Which node of a broker group the consumer reads from."""

    broker_name: str
    master: str | None = None  # last known master address (kept when the route drops it)
    slaves: list[str] = attrs.field(factory=list)
    on_slave: bool = False
    retry_at: float = 0.0
    backoff: float = 0.0
    commits_retry_at: float | None = None
    """Pending commits the master refused when its reads came back (a master restarted after
    an abnormal exit takes writes only once its new epoch begins): tried again from then on,
    with a read from the master, until they go through."""


@attrs.frozen
class _Start:
    """A position taken from the group's committed offset (`on_slave`: a slave's copy), and
    the epoch of the master that answered its pulls since (None: none has)."""

    offset: int
    on_slave: bool
    node_epoch: int | None = None
    address: str | None = None

    def due(self, node_epoch: int | None, address: str) -> bool:
        """Check it against the master's committed offset now: the first master answer for a
        slave's copy, another master than before, or one answering in a newer epoch."""
        if self.on_slave or (self.address is not None and address != self.address):
            return True
        return self.node_epoch is not None and node_epoch is not None and node_epoch > self.node_epoch


@attrs.frozen
class _ReadMark:
    """A queue's last record read: its CommitLog offset and epoch, and the newest epoch the
    node that served it knew (KIP-320: a node in a newer epoch is asked first whether its
    log still holds that record's epoch past it)."""

    commitlog_offset: int
    epoch: int
    node_epoch: int


class PullConsumer(_Client):
    """Pulls one topic for one consumer group, queue by queue, with committed offsets.

    Position: each queue starts at the group's committed offset (`fetch_offset`), or, for
    a queue the group never committed, at the queue's first offset (`start="first"`) or
    its end (`start="last"`); every pull moves it to the result's `next_begin_offset`.

    Reads go to the group's master. When the master is unreachable (connection refused or
    lost, timeout, SERVICE_NOT_AVAILABLE) they go to a slave of the same group, which
    holds everything the master acknowledged as replicated; the master is tried again
    after a back-off (`master_retry_s`, doubling up to `master_retry_max_s`) and reads
    return to it as soon as it answers.

    Commits go to the master only (a slave refuses them). While only a slave is
    reachable, `commit` keeps the offset in this consumer and returns False; pending
    offsets are committed when the master answers again (or by `flush_commits`, or on
    leaving the `async with`); a master that answers reads but refuses writes still (one
    restarted after a kill, until its new epoch begins) gets them again with a later read,
    `master_retry_s` on. If the process ends first they are lost and the group re-reads
    from its last committed offset: at-least-once, never a skip.

    After a promotion (a pull answered by a node in a newer epoch than the one that served
    the queue's last record) the consumer first asks that node whether its log still holds
    the last record's epoch past it (`offset_for_epoch`). When an unclean promotion cut the
    records it read, it moves back to where the logs diverge, commits that offset, and
    reads the new epoch's records there: duplicates allowed, skips never (Kafka's KIP-320).

    With `enable_msg_trace` each message `messages()` yields is traced (docs/trace.md):
    SubBefore when it is yielded, SubAfter (success) when the caller asks for the next one,
    as RocketMQ's lite pull consumer traces a poll; `pull` itself traces nothing.
    """

    def __init__(
        self,
        namesrv: str | Sequence[str] | None = None,
        brokers: Sequence[str] | str | None = None,
        *,
        group: str,
        topic: str,
        tag_filter: str | None = None,
        sql_filter: str | None = None,
        start: Literal["first", "last"] = "first",
        master_retry_s: float = 1.0,
        master_retry_max_s: float = 30.0,
        route_ttl_s: float = ROUTE_TTL_S,
        enable_msg_trace: bool = False,
        trace_topic: str | None = None,
        options: ConnectOptions | None = None,
        **connection: Unpack[ConnectKeywords],
    ) -> None:
        super().__init__(namesrv, brokers, options=ConnectOptions.of(options, connection, CLIENT_OPTIONS),
                         route_ttl_s=route_ttl_s)
        self.tracer = trace_dispatcher(namesrv, brokers, self.options, trace_topic) if enable_msg_trace else None
        if start not in ("first", "last"):
            raise ValueError(f"start must be 'first' or 'last', got {start!r}")
        self.group = group
        self.topic = topic
        self.tag_filter = tag_filter or "*"
        self.sql_filter = sql_filter
        """A SQL92 expression over the messages' properties and TAGS (RocketMQ's
        MessageSelector.bySql), evaluated by the node (enablePropertyFilter); checked here
        first, so a bad one raises Sql92Error (a ValueError with its line and column)."""
        if sql_filter is not None:
            if self.tag_filter != "*":
                raise ValueError("give tag_filter or sql_filter, not both (a SQL92 filter can test TAGS itself)")
            compile_sql92(sql_filter)
        self.start = start
        self.master_retry_s = master_retry_s
        self.master_retry_max_s = master_retry_max_s
        self._groups: dict[str, _GroupState] = {}
        self._positions: dict[MessageQueue, int] = {}
        self._pending_commits: dict[MessageQueue, int] = {}
        self.on_committed: Callable[[MessageQueue, int, str], None] | None = None
        """Called with (queue, offset, master address) once a master answered a commit OK
        (a SYNC_MASTER: on its in-sync slaves too): for applications and judges that keep
        what the group promised to hold."""
        self._marks: dict[MessageQueue, _ReadMark] = {}
        self._unconfirmed: dict[MessageQueue, _Start] = {}
        """Positions taken from a committed offset and not yet confirmed by a read from the
        master (`_confirm_start`)."""
        self.moved_back: list[tuple[MessageQueue, int, int]] = []
        """(queue, from, to) of every move back to a divergence point, oldest first."""

    @contextlib.asynccontextmanager
    async def _running(self) -> AsyncIterator[None]:
        """The client's life inside its trace dispatcher's (with msg_trace on)."""
        async with tracing(self.tracer), super()._running():
            yield

    # ---- queues and positions -----------------------------------------------------------

    async def queues(self, *, refresh: bool = False) -> list[MessageQueue]:
        """The topic's readable queues on every group serving it. Groups the latest route
        no longer lists (their brokers expired) are kept: their slaves may still serve."""
        try:
            route = await self.route(self.topic, refresh=refresh)
        except NotFound:
            route = TopicRoute(self.topic, ())
        self._learn(route)
        out: set[MessageQueue] = set()
        for group in route.groups:
            qd = group.queue_data
            if qd is not None and qd.readable:
                out.update(MessageQueue(self.topic, group.broker_name, q) for q in range(qd.read_queue_nums))
        out.update(self._positions)  # queues seen before stay readable
        return sorted(out)

    def position(self, queue: MessageQueue) -> int | None:
        """The next offset `pull(queue)` reads, or None before the first pull."""
        return self._positions.get(queue)

    def seek(self, queue: MessageQueue, offset: int) -> None:
        """Continue `queue` from `offset` (does not commit)."""
        self._positions[queue] = offset

    def forget(self, queue: MessageQueue) -> None:
        """Drop the queue's position: its next pull starts from the committed offset again
        (a consumer group member that gained the queue from another member)."""
        self._positions.pop(queue, None)
        self._marks.pop(queue, None)
        self._unconfirmed.pop(queue, None)

    async def master_address(self, broker_name: str) -> str | None:
        """The last known master of a broker group (None when no route named one)."""
        return (await self._state(broker_name)).master

    @property
    def pending_commits(self) -> dict[MessageQueue, int]:
        """Offsets committed while the master was unreachable, not yet on the master."""
        return dict(self._pending_commits)

    def reading_from_slave(self, broker_name: str) -> bool:
        state = self._groups.get(broker_name)
        return bool(state and state.on_slave)

    # ---- pull ---------------------------------------------------------------------------

    async def pull(
        self,
        queue: MessageQueue,
        max_msgs: int = 32,
        *,
        timeout_ms: int = 3000,
        offset: int | None = None,
    ) -> PullResult:
        """Up to `max_msgs` messages from the queue's position (or from `offset`). With
        `timeout_ms` > 0 the node holds the pull until a message arrives or the time is up
        (long polling), so an empty result after the wait is normal."""
        begin = offset if offset is not None else await self._position(queue)
        response, address, from_slave = await self._read(
            queue.broker_name, Pull(topic=queue.topic, queue_id=queue.queue_id, offset=begin, max_msgs=max_msgs,
                                    tag_filter=self.tag_filter, timeout_ms=timeout_ms, group=self.group,
                                    sql_filter=self.sql_filter),
            timeout=timeout_ms / 1000 + self.options.request_timeout,
        )
        start = self._unconfirmed.get(queue) if offset is None and not from_slave else None
        if start is not None and start.due(response.node_epoch, address):
            back = await self._confirm_start(queue, begin, start)
            if back < begin:
                return await self.pull(queue, max_msgs, timeout_ms=timeout_ms)
        if start is not None:
            if response.messages:
                del self._unconfirmed[queue]  # read from the master: the mark takes over
            else:
                self._unconfirmed[queue] = attrs.evolve(start, node_epoch=response.node_epoch, on_slave=False,
                                                        address=address)
        mark = self._marks.get(queue) if offset is None else None
        if mark is not None and response.node_epoch is not None and response.node_epoch > mark.node_epoch:
            back = await self._diverged(queue, address, mark, begin)
            self._marks[queue] = attrs.evolve(mark, node_epoch=response.node_epoch)
            if back < begin:  # what the pull answered lies past the divergence: read from there
                return await self.pull(queue, max_msgs, timeout_ms=timeout_ms)
        status = response.status
        messages = [ReceivedMessage.from_wire(m, queue.broker_name) for m in response.messages]
        following = self._advance(queue, begin, status, response.next_begin_offset, from_slave)
        if status is Status.OFFSET_OVERFLOW_BADLY and not from_slave and offset is None:
            following = await self._past_the_end(queue, following)
        self._positions[queue] = following
        if offset is None and response.messages and response.epoch is not None and response.node_epoch is not None:
            self._marks[queue] = _ReadMark(response.messages[-1].commitlog_offset, response.epoch,
                                           response.node_epoch)
        return PullResult(status, messages, following, response.min_offset, response.max_offset, address,
                          from_slave)

    async def _diverged(self, queue: MessageQueue, address: str, mark: _ReadMark, begin: int) -> int:
        """Ask the node at `address` (in a newer epoch than `mark`'s) where to continue; move
        the queue back there and commit it when its log no longer holds the mark's epoch past
        the mark. Returns the position (`begin` when nothing moved)."""
        answer = await self._offset_for_epoch(queue, address, mark, begin)
        back = min(int(answer.offset), begin)
        if back < begin:
            log.warning("%s: the log of %s (epoch %d) holds epoch %d only up to CommitLog offset %d, not past the "
                        "last record read (%d): an unclean promotion dropped it; reading again from queue offset "
                        "%d (was %d)", queue, address, answer.node_epoch, mark.epoch, answer.end_offset,
                        mark.commitlog_offset, back, begin)
            self._positions[queue] = back
            self.moved_back.append((queue, begin, back))
            await self.commit(queue, back)
        return back

    async def _masters_committed(self, queue: MessageQueue) -> int | None:
        """The group's committed offset for `queue` as its master has it now; None when the
        master does not answer (a slave's copy is not asked for) or has none."""
        try:
            response, _, on_slave = await self._read(
                queue.broker_name, FetchOffset(group=self.group, topic=queue.topic, queue_id=queue.queue_id))
        except (NotFound, *UNREACHABLE, ServiceUnavailable):
            return None
        return None if on_slave else int(response.offset)

    async def _confirm_start(self, queue: MessageQueue, begin: int, start: _Start) -> int:
        """A position taken from a committed offset, nothing read since, meets the master in
        another epoch than it was taken in (or it came from a slave's copy while the master
        was away): a master that lost records (a power loss) set its committed offset back to
        its queue's end when its new epoch began, and the epoch's records took those offsets.
        Continue from the master's committed offset when it is below where this consumer
        started (storage seeds 1584, a position from the slave's copy while the master was
        down; 7770, from the master itself as an etcd candidate before its election; 2842,
        from an old master before another was elected).
        Returns the position (`begin` when nothing moved)."""
        committed = await self._masters_committed(queue)
        if committed is None or committed >= start.offset or committed >= begin:
            return begin
        log.warning("%s: the master's committed offset %d is below the %d this consumer started from; reading "
                    "again from %d", queue, committed, start.offset, committed)
        del self._unconfirmed[queue]
        self._positions[queue] = committed
        self._marks.pop(queue, None)
        self._pending_commits.pop(queue, None)
        self.moved_back.append((queue, begin, committed))
        return committed

    async def _past_the_end(self, queue: MessageQueue, end: int) -> int:
        """The position was past the master's queue end: the records it counted are gone (a
        power loss, an unclean promotion), and the new epoch's records took their offsets
        from the end the queue had when that epoch began, where the master set the group's
        committed offset back (Failover._clamp_offsets). Continue from the master's
        committed offset when it is below the end now, else from the end (storage seed
        6388: a consumer that restarted during a group power loss took the old committed 7,
        met a queue the new epoch had written 0 into, and skipped it)."""
        committed = await self._masters_committed(queue)
        if committed is None or committed >= end:
            return end
        log.warning("%s: continuing from the group's committed offset %d, below the queue's end %d", queue,
                    committed, end)
        self._pending_commits.pop(queue, None)  # a commit kept from before counts what is gone
        return committed

    @staticmethod
    def _advance(queue: MessageQueue, begin: int, status: Status, reported: int, from_slave: bool) -> int:
        """Where to pull next. Never backwards on a no-message answer from a slave: one that
        lags (or lacks the queue) answers with its own end, which would re-read; a master's
        empty queue is the one exception."""
        if status is Status.NO_MESSAGE_IN_QUEUE and not from_slave and reported < begin:
            # a master's empty queue under a consumer that read from it: what it read is gone
            # (a power loss took the whole queue), and the queue's next messages start at 0
            # (storage seed 414: a consumer at 6 waited there and skipped 0..5; RocketMQ's
            # broker answers 0 too, and its client takes it)
            log.warning("%s: the master's queue is empty below offset %d; continuing from %d", queue, begin, reported)
            return reported
        if status in (Status.NO_MESSAGE_IN_QUEUE, Status.OFFSET_OVERFLOW_ONE, Status.NO_MATCHED_LOGIC_QUEUE):
            return begin
        if status is Status.OFFSET_OVERFLOW_BADLY:
            if from_slave:
                return begin  # the slave has not caught up yet
            log.warning("%s: offset %d is beyond the queue's end; continuing from %d (the master's answer)",
                        queue, begin, reported)
            return reported
        if status is Status.OFFSET_TOO_SMALL:
            log.warning("%s: offset %d was removed; continuing from %d", queue, begin, reported)
            return reported
        return max(begin, reported)

    async def messages(
        self,
        *,
        idle_timeout_ms: int | None = None,
        poll_ms: int = 1000,
        max_msgs: int = 32,
        auto_commit: bool = False,
        pull_interval_ms: int = 0,
    ) -> AsyncGenerator[ReceivedMessage, None]:
        """Every message of the topic, walking all queues from their positions (committed
        offsets at first). Waits (long polling on all queues at once) when caught up; ends
        after `idle_timeout_ms` without a message (never, when None). With `auto_commit`,
        a queue's offset is committed once all messages of a pull were consumed.
        `pull_interval_ms` pauses after each round that found messages (RocketMQ's
        pullInterval): fewer, fuller pulls, for a consumer that need not see each message
        the moment it lands.

        Use `async with contextlib.aclosing(consumer.messages()) as it:` when breaking out."""
        idle_since = trio.current_time()
        while True:
            queues = await self.queues()
            got = False
            for queue in queues:
                result = await self.pull(queue, max_msgs, timeout_ms=0)
                for msg in result.messages:
                    got = True
                    ended = consume_begins(self.tracer, self.group, msg)
                    yield msg
                    ended(ConsumeReturn.SUCCESS)  # the caller came back for the next one
                if auto_commit and result.messages:
                    await self.commit(queue, result.next_begin_offset)
            now = trio.current_time()
            if got:
                idle_since = now
                if pull_interval_ms > 0:
                    await trio.sleep(pull_interval_ms / 1000)  # poll: the pacing asked for (pullInterval)
                continue
            wait_ms = poll_ms
            if idle_timeout_ms is not None:
                left_ms = int((idle_since + idle_timeout_ms / 1000 - now) * 1000)
                if left_ms <= 0:
                    return
                wait_ms = min(wait_ms, left_ms)
            await self._wait_any(queues, wait_ms)

    async def _wait_any(self, queues: Sequence[MessageQueue], timeout_ms: int) -> None:
        """Long-poll every queue at once; return when one has a message or time is up.
        Nothing is consumed here (positions are not moved); the caller pulls again."""
        if not queues:
            await trio.sleep(timeout_ms / 1000)
            return
        async with trio.open_nursery() as nursery:
            async def one(queue: MessageQueue) -> None:
                begin = await self._position(queue)
                deadline = trio.current_time() + timeout_ms / 1000
                try:
                    response, _, _ = await self._read(
                        queue.broker_name,
                        Pull(topic=queue.topic, queue_id=queue.queue_id, offset=begin, max_msgs=1,
                             tag_filter=self.tag_filter, timeout_ms=timeout_ms, group=self.group,
                                    sql_filter=self.sql_filter),
                        timeout=timeout_ms / 1000 + self.options.request_timeout,
                    )
                except TidemqError as e:
                    log.debug("long poll on %s failed: %s", queue, e)
                    await trio.sleep(min(timeout_ms / 1000, 1.0))  # do not spin on a dead group
                    return
                if response.messages or response.next_begin_offset > begin:
                    nursery.cancel_scope.cancel()
                    return
                # answered before the time was up without news (a lagging slave answers
                # OFFSET_OVERFLOW_BADLY at once): wait the rest, or the caller polls in a busy loop
                await trio.sleep_until(deadline)

            for queue in queues:
                nursery.start_soon(one, queue)

    async def _position(self, queue: MessageQueue) -> int:
        if queue not in self._positions:
            committed, address, on_slave = await self._fetch_committed(queue)
            if committed is not None and address is not None:
                # where the offset came from, not where reads go now: a slave's copy fetched
                # while the group's reads had not failed over yet is a slave's copy still
                # (storage seed 5150: taken as the master's, its 6 was never checked
                # against the elected slave's clamped 0, and the new epoch's 0..5 were skipped)
                self._unconfirmed[queue] = _Start(committed, on_slave, address=None if on_slave else address)
            if committed is None:
                committed = await (self.min_offset(queue) if self.start == "first" else self.max_offset(queue))
            self._positions.setdefault(queue, committed)
        return self._positions[queue]

    # ---- offsets ------------------------------------------------------------------------

    async def commit(self, queue: MessageQueue, offset: int) -> bool:
        """Commit the group's next offset for `queue` on the master: True when the master
        has it, False when it is kept here until the master is reachable again."""
        state = await self._state(queue.broker_name)
        self._pending_commits[queue] = offset
        now = trio.current_time()
        if state.master is None or (state.on_slave and now < state.retry_at):
            return False
        try:
            if state.on_slave:  # read while the master was away: it may have lost what was read
                offset = await self._checked(queue, offset, state.master)
            answer = await self.pool.request(state.master, self._commit(queue, offset))
        except (*UNREACHABLE, ServiceUnavailable) as e:
            self._master_failed(state, e)
            return False
        self._committed(queue, offset, state.master, answer)
        if self._pending_commits.get(queue) == offset:
            del self._pending_commits[queue]
        if state.on_slave:
            await self._master_back(state)
        return True

    async def flush_commits(self) -> dict[MessageQueue, int]:
        """Try to commit every pending offset now; returns those still pending."""
        for queue, offset in list(self._pending_commits.items()):
            state = await self._state(queue.broker_name)
            if state.master is None:
                continue
            try:
                checked = await self._checked(queue, offset, state.master)
                answer = await self.pool.request(state.master, self._commit(queue, checked))
            except (*UNREACHABLE, ServiceUnavailable) as e:
                log.debug("pending commit of %s=%d still waits: %s", queue, offset, e)
                continue
            self._committed(queue, checked, state.master, answer)
            if self._pending_commits.get(queue) in (offset, checked):
                del self._pending_commits[queue]
        return dict(self._pending_commits)

    async def _offset_for_epoch(self, queue: MessageQueue, address: str, mark: _ReadMark, offset: int) -> Any:
        """The node's `offset_for_epoch` answer for the last record read (`mark`)."""
        return await self.pool.call(address, OffsetForEpoch(
            topic=queue.topic, queue_id=queue.queue_id, epoch=mark.epoch, commitlog_offset=mark.commitlog_offset,
            offset=offset, group=self.group))

    async def _checked(self, queue: MessageQueue, offset: int, master: str) -> int:
        """The offset to commit on `master` for reads that may be gone from it: a commit kept
        while the master was unreachable (or made from a slave's reads) goes after the
        divergence check a pull makes (`_diverged`), since the master may have lost what was
        read meanwhile (a power loss of an ASYNC_FLUSH master, restarted with a shorter log:
        storage seed 898, whose new messages took those queue offsets and a consumer that
        started from the commit skipped them). Moves the queue back when the master's log no
        longer holds the last record read."""
        mark = self._marks.get(queue)
        if mark is None:
            return offset
        answer = await self._offset_for_epoch(queue, master, mark, offset)
        back = min(int(answer.offset), offset)
        if back < offset:
            log.warning("%s: the master %s holds epoch %d only up to CommitLog offset %d, not past the last "
                        "record read (%d): committing queue offset %d (was %d) and reading again from there",
                        queue, master, mark.epoch, answer.end_offset, mark.commitlog_offset, back, offset)
            self._pending_commits[queue] = back
            self._positions[queue] = min(self._positions.get(queue, back), back)
            self.moved_back.append((queue, offset, back))
        return back

    def _committed(self, queue: MessageQueue, offset: int, master: str, answer: dict[str, Any]) -> None:
        """The master holds the commit; a SYNC_MASTER's FLUSH_SLAVE_TIMEOUT says its in-sync
        slaves may not (logged; `on_committed` hears only of OK ones)."""
        if answer.get("status", Status.OK.value) != Status.OK.value:
            log.debug("commit of %s=%d: %s (kept by the master %s; a promotion may lose it)",
                     queue, offset, answer.get("status"), master)
        elif self.on_committed is not None:
            self.on_committed(queue, offset, master)

    async def fetch_offset(self, queue: MessageQueue) -> int | None:
        """The group's committed offset for `queue` (a pending local commit wins), from the
        master, or from a slave's synced copy while the master is unreachable; None when
        the group never committed one."""
        return (await self._fetch_committed(queue))[0]

    async def _fetch_committed(self, queue: MessageQueue) -> tuple[int | None, str | None, bool]:
        """`fetch_offset`'s answer, the node that gave it (None: a pending local commit) and
        whether that node answered as a slave."""
        if queue in self._pending_commits:
            return self._pending_commits[queue], None, False
        try:
            response, address, on_slave = await self._read(
                queue.broker_name, FetchOffset(group=self.group, topic=queue.topic, queue_id=queue.queue_id))
        except NotFound:
            return None, None, False
        return int(response.offset), address, on_slave

    async def min_offset(self, queue: MessageQueue) -> int:
        response, _, _ = await self._read(queue.broker_name, MinOffset(topic=queue.topic, queue_id=queue.queue_id))
        return int(response.offset)

    async def max_offset(self, queue: MessageQueue) -> int:
        response, _, _ = await self._read(queue.broker_name, MaxOffset(topic=queue.topic, queue_id=queue.queue_id))
        return int(response.offset)

    # ---- master / slave selection -------------------------------------------------------

    def _learn(self, route: TopicRoute) -> None:
        for group in route.groups:
            state = self._groups.setdefault(group.broker_name, _GroupState(group.broker_name))
            if group.master is not None:
                state.master = group.master.address
            slaves = [b.address for b in group.slaves]
            if slaves:
                state.slaves = slaves

    async def _state(self, broker_name: str) -> _GroupState:
        if broker_name not in self._groups:
            with contextlib.suppress(NotFound):
                self._learn(await self.route(self.topic))
        if broker_name not in self._groups:
            with contextlib.suppress(NotFound):
                self._learn(await self.route(self.topic, refresh=True))
        if broker_name not in self._groups:
            raise NotFound(Status.NOT_FOUND.value, f"no group {broker_name!r} serves topic {self.topic!r}")
        return self._groups[broker_name]

    def _master_failed(self, state: _GroupState, error: TidemqError) -> None:
        now = trio.current_time()
        if state.on_slave and state.retry_at > now:
            return  # a concurrent request already recorded this failure
        state.backoff = self.master_retry_s if not state.on_slave else min(
            max(state.backoff * 2, self.master_retry_s), self.master_retry_max_s)
        if not state.on_slave:
            log.warning("master %s of %s is unreachable (%s); reading from its slaves, retrying the "
                        "master in %.1f s", state.master, state.broker_name, error, state.backoff)
        state.on_slave = True
        state.retry_at = now + state.backoff
        self.invalidate(self.topic)

    async def _master_back(self, state: _GroupState) -> None:
        log.info("master %s of %s answers again; reading from it", state.master, state.broker_name)
        state.on_slave = False
        state.backoff = 0.0
        await self._flush_group_commits(state)

    async def _flush_group_commits(self, state: _GroupState) -> None:
        """The group's pending commits to its master; what it refuses is tried again with a
        later read (`commits_retry_at`, master_retry_s on)."""
        state.commits_retry_at = None
        if any(q.broker_name == state.broker_name for q in self._pending_commits):
            left = await self.flush_commits()
            if any(q.broker_name == state.broker_name for q in left):
                state.commits_retry_at = trio.current_time() + self.master_retry_s

    def _commits_due(self, state: _GroupState) -> bool:
        """The group has pending commits to try with a read its master answered: at once, or
        from `commits_retry_at` after a refusal (seed 106 --storage: commits kept while the
        route named no master waited for a later commit of the same queue, which a consumer
        at the end never makes)."""
        if not any(q.broker_name == state.broker_name for q in self._pending_commits):
            return False
        return state.commits_retry_at is None or trio.current_time() >= state.commits_retry_at

    def _commit(self, queue: MessageQueue, offset: int) -> CommitOffset:
        return CommitOffset(group=self.group, topic=queue.topic, queue_id=queue.queue_id, offset=offset)

    async def _read(self, broker_name: str, request: WireRequest, *,
                    timeout: float | None = None) -> tuple[Any, str, bool]:
        """`request` on the group's master when it is (or may again be) reachable, else on a
        slave; returns (its reply, address, answered_by_slave)."""
        state = await self._state(broker_name)
        if state.master is None and trio.current_time() >= state.retry_at:
            # no route named a master yet (an election): look again every master_retry_s (the
            # route is asked again once its cache expires, as RocketMQ's 30 s route poll)
            self._learn_quietly(await self._route_or_none())
            if state.master is None:
                state.retry_at = trio.current_time() + self.master_retry_s
        elif state.on_slave and trio.current_time() >= state.retry_at:
            self._learn_quietly(await self._route_or_none())
        try_master = state.master is not None and (not state.on_slave or trio.current_time() >= state.retry_at)
        order = ([state.master] if try_master else []) + [s for s in state.slaves if s != state.master]
        if not order and state.master is not None:
            order = [state.master]
        errors: list[TidemqError] = []
        for address in order:
            assert address is not None
            try:
                response = await self.pool.call(address, request, timeout=timeout)
            except (*UNREACHABLE, ServiceUnavailable) as e:
                errors.append(e)
                if address == state.master:
                    self._master_failed(state, e)
                continue
            is_master = address == state.master
            if is_master and state.on_slave:
                await self._master_back(state)
            elif is_master and self._commits_due(state):
                await self._flush_group_commits(state)
            return response, address, not is_master
        self.invalidate(self.topic)
        if not errors:
            raise ConnectionLost(f"group {broker_name} has no known broker")
        raise _with_message(errors[-1], f"no broker of group {broker_name} answered {request.OP}: "
                            + "; ".join(str(e) for e in errors))

    async def _route_or_none(self) -> TopicRoute | None:
        try:
            return await self.route(self.topic)
        except TidemqError:
            return None

    def _learn_quietly(self, route: TopicRoute | None) -> None:
        if route is not None:
            self._learn(route)

    async def _before_close(self) -> None:
        if self._pending_commits:
            with trio.move_on_after(self.options.connect_timeout + self.options.request_timeout):
                await self.flush_commits()
            if self._pending_commits:
                log.warning("%d offset commit(s) of group %s could not reach the master and are lost; "
                            "the group will re-read from its last committed offsets",
                            len(self._pending_commits), self.group)
