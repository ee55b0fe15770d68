"""The store's put API (DefaultMessageStore's putMessage / putMessages), split in steps so a
caller holding many requests can group them: `prepare_message` / `prepare_batch` check and
encode, `append_prepared` appends a group in order (no await: the put lock's critical
section; `append_message` / `append_batch` do both for one put), and
`finish_puts` waits once for the flush and the slave a whole group of appends asks for
(RocketMQ's GroupCommitService / GroupTransferService serve one request per group the
same way). `put_message` / `put_messages` are the two steps for one put.
MessageStore builds one in `load()`, handing it what it reads."""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import trio

from .config import BrokerRole, StoreConfig
from .message import Message, topic_error
from .properties import PROPERTY_DELAY
from .record_codec import EncodeError, PreparedRecord, prepare_plain, prepare_record
from .schedule import DelayError, rewrite_delayed
from .status import AppendMessageResult, AppendMessageStatus, PutMessageResult, PutMessageStatus
from .sysflag import transaction_type

if TYPE_CHECKING:
    from .commit_log import CommitLog
    from .flush import GroupCommitService
    from .replica_log import ReplicaLog
    from .running_flags import RunningFlags


class Prepared(NamedTuple):
    """A put checked and encoded, to append: its records and the topic-queue they go to."""

    records: list[PreparedRecord]
    topic: str
    queue_id: int


Appended = AppendMessageResult | PutMessageResult
"""What an append returns: the AppendMessageResult to finish, or a PutMessageResult when
the put already failed (nothing was written)."""

_GOOD_TOPICS: set[str] = set()
"""Topics that passed topic_error (puts name the same few topics over and over)."""

_STATUS_TEXT = {
    PutMessageStatus.FLUSH_DISK_TIMEOUT: "stored, but not flushed to disk within syncFlushTimeout",
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: "stored on the master, but no slave acknowledged it within slaveTimeout",
    PutMessageStatus.SLAVE_NOT_AVAILABLE: "stored on the master only: no slave connected, or it is too far behind",
}


class MessagePuts:
    """The puts of one MessageStore (see the module docstring)."""

    def __init__(self, config: StoreConfig, commit_log: CommitLog, flags: RunningFlags,
                 delay_levels: tuple[int, ...], group_commit: GroupCommitService | None,
                 replica_log: ReplicaLog) -> None:
        self.config = config
        self.commit_log = commit_log
        self.flags = flags
        self.delay_levels = delay_levels
        self.group_commit = group_commit
        self.replica_log = replica_log
        """Its `replicator` (the HA service, once attached) is what SYNC_MASTER puts wait on."""

    def refusal(self) -> PutMessageResult | None:
        """Why the store takes no put now (shut down, a slave, not writeable, the put lock
        held too long), or None."""
        return self._check_writes_taken() or (
            PutMessageResult(PutMessageStatus.OS_PAGECACHE_BUSY, error="the put lock is held too long")
            if self.commit_log.is_os_page_cache_busy() else None)

    def _check_writes_taken(self) -> PutMessageResult | None:
        if not self.flags.running:
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, error="store is shut down")
        if not self.config.broker_role.is_master:
            return PutMessageResult(
                PutMessageStatus.SERVICE_NOT_AVAILABLE,
                error="this node is a SLAVE and refuses writes; send to its master",
            )
        if not self.flags.is_writeable():
            return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, error=self.flags.why_not_writeable())
        return None

    @staticmethod
    def _check_message(msg: Message) -> PutMessageResult | None:
        if msg.topic not in _GOOD_TOPICS:
            problem = topic_error(msg.topic)
            if problem:
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, error=problem)
            if len(_GOOD_TOPICS) < 4096:
                _GOOD_TOPICS.add(msg.topic)
        if msg.queue_id < 0:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, error=f"queue_id {msg.queue_id} is negative")
        return None

    def _prepare(self, msgs: Sequence[Message]) -> list[PreparedRecord] | PutMessageResult:
        store_host, max_size = self.config.store_host, self.config.max_message_size
        try:
            return [prepare_record(msg, store_host, max_size) for msg in msgs]
        except EncodeError as e:
            return PutMessageResult(PutMessageStatus[e.status], error=str(e))
        except (ValueError, struct.error) as e:  # a bad host string, a field out of its range
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, error=f"cannot encode the message: {e}")

    # ---- step 1: prepare and append (no await) --------------------------------------------
    def prepare_message(self, msg: Message) -> Prepared | PutMessageResult:
        """Check and encode one message for `append_prepared` (a PutMessageResult when it
        is refused: nothing will be written)."""
        bad = self.refusal() or self._check_message(msg)
        if bad:
            return bad
        try:
            msg = rewrite_delayed(msg, self.delay_levels)  # DELAY > 0: onto SCHEDULE_TOPIC_XXXX
        except DelayError as e:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, error=str(e))
        records = self._prepare((msg,))
        if isinstance(records, PutMessageResult):
            return records
        return Prepared(records, msg.topic, msg.queue_id)

    def prepare_plain(self, topic: str, body: bytes, queue_id: int, tags: str | None, flag: int,
                      born_timestamp: int | None, born_host: str | None,
                      properties: dict[str, str] | None = None, keys: Sequence[str] = ()) -> Prepared | None:
        """`prepare_message` of a plain message (a valid topic, a body, tags, keys and other
        properties without DELAY) that the caller checked, with `refusal()`, the store
        takes: built without its Message (store.record_codec.prepare_plain). None when it is
        refused: `prepare_message` then says why."""
        if properties and PROPERTY_DELAY in properties:  # rewrite_delayed's: prepare_message decides
            return None
        try:
            record = prepare_plain(topic, body, queue_id, tags, flag, born_timestamp, born_host,
                                   self.config.store_host, self.config.max_message_size, properties, keys)
        except (EncodeError, ValueError, struct.error):
            return None
        return Prepared([record], topic, queue_id)

    def prepare_plain_batch(self, topic: str, queue_id: int, messages: Sequence[tuple[bytes, str | None]],
                            born_host: str | None) -> Prepared | None:
        """`prepare_batch` of plain messages, each `(body, tags)`, that the caller checked,
        with `refusal()`, the store takes: built without their Messages. None when it is
        refused: `prepare_batch` then says why."""
        config = self.config
        if not messages or sum(len(body) for body, _ in messages) > config.max_message_size:
            return None
        try:
            records = [prepare_plain(topic, body, queue_id, tags, 0, None, born_host, config.store_host,
                                     config.max_message_size) for body, tags in messages]
        except (EncodeError, ValueError, struct.error):
            return None
        return Prepared(records, topic, queue_id)

    def prepare_batch(self, msgs: Sequence[Message]) -> Prepared | PutMessageResult:
        """Check and encode a batch of one topic-queue (contiguous records, one segment, one
        result) for `append_prepared`."""
        bad = self.refusal()
        if bad:
            return bad
        if not msgs:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, error="empty batch")
        first = msgs[0]
        bad = self._check_message(first)
        if bad:
            return bad
        topic, queue_id = first.topic, first.queue_id
        for msg in msgs:
            if msg.topic != topic or msg.queue_id != queue_id:
                return self._check_message(msg) or PutMessageResult(
                    PutMessageStatus.MESSAGE_ILLEGAL, error="a batch must go to one topic and queue"
                )
            if transaction_type(msg.sys_flag) or msg.properties.get(PROPERTY_DELAY, "0") not in ("", "0"):
                return PutMessageResult(
                    PutMessageStatus.MESSAGE_ILLEGAL, error="a batch may not hold transaction or delayed messages"
                )
        total_body = sum(len(m.body) for m in msgs)
        if total_body > self.config.max_message_size:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL,
                error=f"batch bodies total {total_body} bytes; maxMessageSize is {self.config.max_message_size}",
            )
        records = self._prepare(msgs)
        if isinstance(records, PutMessageResult):
            return records
        return Prepared(records, topic, queue_id)

    def append_prepared(self, puts: Sequence[Prepared | PutMessageResult]) -> list[Appended]:
        """Append prepared puts in order as one group (CommitLog.append_group: one lock, one
        write per segment, one notification); refused ones stay as they are. The store's
        state is checked again first: puts prepared earlier (a node gathers a turn's puts
        before appending them) are refused if it shut down or stopped taking writes since."""
        group = [p for p in puts if isinstance(p, Prepared)]
        if not group:
            return [p for p in puts if isinstance(p, PutMessageResult)]
        refused = self._check_writes_taken()
        if refused is not None:
            return [refused if isinstance(p, Prepared) else p for p in puts]
        if len(group) == len(puts):
            return list(self.commit_log.append_group(group))
        appended = iter(self.commit_log.append_group(group))
        return [next(appended) if isinstance(p, Prepared) else p for p in puts]

    def append_message(self, msg: Message) -> Appended:
        """Check, encode and append one message; finish it with `finish_puts`."""
        return self.append_prepared((self.prepare_message(msg),))[0]

    def append_batch(self, msgs: Sequence[Message]) -> Appended:
        """Check, encode and append a batch of one topic-queue; finish it with `finish_puts`."""
        return self.append_prepared((self.prepare_batch(msgs),))[0]

    # ---- step 2: wait for what the puts ask for, once for the group -----------------------
    async def finish_puts(
        self, appended: Sequence[tuple[Appended, bool]], *, since: float | None = None
    ) -> list[PutMessageResult]:
        """The results of appends, each `(append result, wait)`: a put with `wait` on a
        SYNC_FLUSH store waits for the flush, on a SYNC_MASTER for a slave's ack. The group
        waits once, for its largest end offset, within the timeouts counted from `since`
        (trio time of the group's first append; default now); then each put is judged by
        its own end offset, so a timeout goes to exactly the puts it concerns. Returns
        without a checkpoint when nothing waits."""
        flush_end = replica_end = -1
        sync_master = self.config.broker_role is BrokerRole.SYNC_MASTER
        replicator = self.replica_log.replicator
        no_slave: set[int] = set()
        for i, (result, wait) in enumerate(appended):
            if not wait or not isinstance(result, AppendMessageResult) or result.status is not AppendMessageStatus.PUT_OK:
                continue
            end = result.end_offset
            if self.group_commit is not None:
                flush_end = max(flush_end, end)
            if sync_master:
                if replicator is None or not replicator.is_slave_ok(end):
                    no_slave.add(i)
                else:
                    replica_end = max(replica_end, end)
        flushed = replicated = -1  # the largest end offset known flushed / acked
        if flush_end >= 0 or replica_end >= 0:
            start = trio.current_time() if since is None else since
            if flush_end >= 0 and self.group_commit is not None:  # set only with a group commit
                flushed = await self._reached(
                    self.group_commit.wait_for_flush, self._ends(appended, flush_end),
                    self.config.sync_flush_timeout / 1000 - (trio.current_time() - start))
            if replica_end >= 0 and replicator is not None:  # set only with a replicator
                replicated = await self._reached(
                    replicator.wait_for_slave, self._ends(appended, replica_end),
                    self.config.slave_timeout / 1000 - (trio.current_time() - start))
        results = []
        for i, (result, wait) in enumerate(appended):
            if not isinstance(result, AppendMessageResult):
                results.append(result)
            elif result.status is not AppendMessageStatus.PUT_OK:
                results.append(_refused(result))
            else:
                status = PutMessageStatus.PUT_OK
                if wait and flush_end >= 0 and result.end_offset > flushed:
                    if self.flags.is_set(self.flags.FLUSH_DISK_ERROR):  # never retried: see flush.py
                        results.append(PutMessageResult(
                            PutMessageStatus.SERVICE_NOT_AVAILABLE, result, indeterminate=True,
                            error=f"appended, but not durable: {self.flags.why_not_writeable()}"))
                        continue
                    status = PutMessageStatus.FLUSH_DISK_TIMEOUT
                if i in no_slave:
                    status = PutMessageStatus.SLAVE_NOT_AVAILABLE  # replica wins, as in RocketMQ
                elif wait and replica_end >= 0 and result.end_offset > replicated:
                    status = PutMessageStatus.FLUSH_SLAVE_TIMEOUT
                error = "" if status is PutMessageStatus.PUT_OK else _STATUS_TEXT[status]
                results.append(PutMessageResult(status, result, error=error))
        return results

    @staticmethod
    def _ends(appended: Sequence[tuple[Appended, bool]], limit: int) -> list[int]:
        """The distinct end offsets of the waiting puts, up to `limit`, ascending."""
        return sorted({r.end_offset for r, wait in appended
                       if wait and isinstance(r, AppendMessageResult) and r.status is AppendMessageStatus.PUT_OK
                       and r.end_offset <= limit})

    @staticmethod
    async def _reached(wait_for: Callable[[int, float], Awaitable[bool]], ends: list[int], timeout_s: float) -> int:
        """The largest of `ends` that `wait_for(offset, timeout)` reached: one wait for the
        largest; after a timeout, the smaller ones are checked (they were reached or not
        by then, so only the first miss can cost a timer round)."""
        if await wait_for(ends[-1], max(0.0, timeout_s)):
            return ends[-1]
        reached = -1
        for end in ends[:-1]:
            if not await wait_for(end, 0.0):
                break
            reached = end
        return reached

    async def put_message(self, msg: Message) -> PutMessageResult:
        """Store one message; returns after the flush/replication its WAIT asks for."""
        return await self._put(self.append_message(msg), msg.wait_store_msg_ok)

    async def put_messages(self, msgs: Sequence[Message]) -> PutMessageResult:
        """Store a batch of one topic-queue: contiguous records, one segment, one result."""
        return await self._put(self.append_batch(msgs), bool(msgs) and all(m.wait_store_msg_ok for m in msgs))

    async def _put(self, appended: Appended, wait: bool) -> PutMessageResult:
        before = trio.current_time()
        (result,) = await self.finish_puts(((appended, wait),), since=before)
        if result.status is PutMessageStatus.PUT_OK and not self.put_waits(wait):
            # nothing was waited for: still yield, so dispatch, flush and HA writers get
            # turns under a tight put loop (a trio checkpoint per put)
            await trio.lowlevel.checkpoint()
        return result

    def put_waits(self, wait: bool) -> bool:
        """Whether `finish_puts` may wait for a put with this WAIT (SYNC_FLUSH or SYNC_MASTER)."""
        return wait and (self.group_commit is not None or self.config.broker_role is BrokerRole.SYNC_MASTER)


def _refused(result: AppendMessageResult) -> PutMessageResult:
    if result.status is AppendMessageStatus.MESSAGE_SIZE_EXCEEDED:
        return PutMessageResult(
            PutMessageStatus.MESSAGE_ILLEGAL, result,
            error="record is larger than a CommitLog segment (mappedFileSizeCommitLog)",
        )
    return PutMessageResult(
        PutMessageStatus.CREATE_MAPEDFILE_FAILED, result, error=result.error or "could not create a segment"
    )
