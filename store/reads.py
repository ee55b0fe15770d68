"""The store's read API (DefaultMessageStore's getMessage, lookMessageByOffset,
queryMessage, ...): plain methods reading memory, no awaits except long polling.
MessageStore builds one in `load()`, handing it what it reads."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import attrs
import psutil
import trio

from .config import CQ_STORE_UNIT_SIZE, StoreConfig
from .consume_queue import ConsumeQueue, ConsumeQueueTable, is_blank_unit, iter_units
from .damage import DamagedRange
from .message import StoredMessage
from .msg_id import decode_msg_id
from .record_codec import RecordKind
from .status import GetMessageStatus
from .tag_filter import MessageFilter, TagFilter

if TYPE_CHECKING:
    from .commit_log import CommitLog
    from .index_file import IndexService
    from .reput import ReputMessageService
    from .running_flags import RunningFlags


class MessageReads:
    """The reads of one MessageStore (see the module docstring)."""

    def __init__(self, config: StoreConfig, commit_log: CommitLog, consume_queues: ConsumeQueueTable,
                 index: IndexService | None, reput: ReputMessageService, flags: RunningFlags) -> None:
        self.config = config
        self.commit_log = commit_log
        self.consume_queues = consume_queues
        self.index = index
        self.reput = reput
        self.flags = flags
        # RocketMQ's "still in memory" bound for reads: 40% of RAM (read once, not per pull)
        self._memory_in_page_cache = psutil.virtual_memory().total * 0.4
        self._check_all = config.check_crc_on_read == "all"  # else only sealed segments' records

    # ---- reads: plain methods, memory reads --------------------------------------------------
    def _check_readable(self) -> None:
        if self.flags.shut_down:
            raise StoreUnavailableError("store is shut down")
        if not self.flags.is_readable():
            raise StoreUnavailableError("store is not readable: " + ", ".join(self.flags.names()))

    def get_min_phy_offset(self) -> int:
        return self.commit_log.min_offset()

    def get_max_phy_offset(self) -> int:
        return self.commit_log.max_offset()

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        return cq.min_offset_in_queue if cq is not None else 0

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        return cq.max_offset_in_queue if cq is not None else 0

    def get_queue_offset_at_or_after(self, topic: str, queue_id: int, commitlog_offset: int) -> int:
        """The first queue offset whose record starts at or past `commitlog_offset`."""
        cq = self.consume_queues.find(topic, queue_id)
        return cq.first_offset_at_or_after(commitlog_offset) if cq is not None else 0

    def look_message_by_offset(self, commitlog_offset: int, size: int | None = None) -> StoredMessage | None:
        """The message whose record starts at `commitlog_offset` (None if there is none).
        A record known damaged is None; in a sealed segment (every segment with
        checkCrcOnRead=all) its body's CRC is checked first (about 0.3 us/KiB): one that fails
        it is noted damaged (damage.py) and is None, never served as good."""
        self._check_readable()
        cl = self.commit_log
        if cl.damage.ranges and commitlog_offset in cl.damage.ranges:
            return None
        check = self._check_all
        if not check:  # a sealed segment's record: below the newest segment's start
            files = cl.queue.files
            check = bool(files) and commitlog_offset < files[-1].file_from_offset
        decoded = cl.read_record(commitlog_offset, check_crc=check)
        if decoded is None:
            return None
        if decoded.kind is not RecordKind.MESSAGE:
            if decoded.kind is RecordKind.INVALID:
                self._note_damage(commitlog_offset, decoded.error)
            return None
        if size is not None and decoded.size != size:
            return None
        return decoded.message

    def _note_damage(self, offset: int, error: str) -> DamagedRange | None:
        """A record that failed its body CRC is damage (noted once, logged with its range);
        any other INVALID record is no message (a stale unit, a cut log), as before."""
        if not error.startswith("body CRC mismatch"):
            return None
        whole = self.commit_log.read_record(offset, read_body=False)  # its structure is intact
        end = offset + (whole.size if whole is not None and whole.size > 0 else 0)
        return self.commit_log.damage.note(offset, end, "body CRC mismatch", "read")

    def iter_messages(self, from_offset: int) -> Iterator[StoredMessage]:
        """The messages of the CommitLog from the record starting at `from_offset` (clamped to
        the min offset) to its end, in order, dispatched or not: for the node's scans of the
        undispatched tail (transaction state on start). Stops at a record it cannot decode."""
        self._check_readable()
        cl = self.commit_log
        offset = max(from_offset, cl.min_offset())
        while 0 <= offset < cl.max_offset():
            decoded = cl.read_record(offset)
            if decoded is None or decoded.kind is RecordKind.INVALID:
                return
            if decoded.kind is RecordKind.BLANK:
                offset = cl.roll_next_file(offset)
                continue
            assert decoded.message is not None  # a MESSAGE is decoded with its message
            yield decoded.message
            offset += decoded.size

    def message_bytes(self, commitlog_offset: int) -> bytes | None:
        """The message record at `commitlog_offset` byte for byte as stored (None when no
        message record starts there): what RocketMQ's clients take in a lookup answer."""
        if self.look_message_by_offset(commitlog_offset) is None:  # its CRC checked: no damaged bytes out
            return None
        decoded = self.commit_log.read_record(commitlog_offset, read_body=False)
        if decoded is None or decoded.kind is not RecordKind.MESSAGE:
            return None
        return self.commit_log.copy_spans([(commitlog_offset, decoded.size)])[0]

    def records_bytes(self, messages: Sequence[StoredMessage]) -> list[bytes | None]:
        """The records of messages a read just decoded (a pull's, a query's), byte for byte
        as stored: what RocketMQ's clients take in a pull answer and decode themselves. One
        copy each, no decode; None for one removed since."""
        self._check_readable()
        return self.commit_log.copy_spans([(m.commitlog_offset, m.size) for m in messages])

    def look_message_by_msg_id(self, msg_id: str) -> StoredMessage | None:
        """Offset msgIds hold the physical offset: a direct read (raises ValueError on a bad id)."""
        _host, offset = decode_msg_id(msg_id)
        msg = self.look_message_by_offset(offset)
        if msg is None or msg.msg_id != msg_id.upper():
            return None
        return msg

    def _store_time_at(self, commitlog_offset: int, size: int) -> int | None:
        decoded = self.commit_log.read_record(commitlog_offset, read_body=False)
        if decoded is None or decoded.message is None:  # a message is decoded only for MESSAGE
            return None
        return decoded.message.store_timestamp

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        cq = self.consume_queues.find(topic, queue_id)
        if cq is None:
            return 0
        return cq.get_offset_in_queue_by_time(timestamp_ms, self._store_time_at, self.commit_log.min_offset())

    def get_earliest_message_time(self, topic: str | None = None, queue_id: int = 0) -> int | None:
        """Store time of the oldest message (of one queue, or of the whole CommitLog)."""
        if topic is None:
            offset = self.commit_log.min_offset()
            return self._store_time_at(offset, 0) if offset >= 0 else None
        cq = self.consume_queues.find(topic, queue_id)
        if cq is None:
            return None
        unit = cq.get_unit(cq.min_offset_in_queue)
        return self._store_time_at(unit[0], unit[1]) if unit else None

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int,
        tag_filter: str | None = None,
        message_filter: MessageFilter | None = None,
    ) -> GetMessageResult:
        """Pull up to `max_msgs` messages from a queue, RocketMQ's GetMessageStatus semantics.

        `tag_filter` is "*" / None (everything) or tags joined by "||" (store/tag_filter.py;
        one naming no tag raises ValueError). `message_filter`, when given, is asked about each
        message the tags let through (RocketMQ's isMatchedByCommitLog: a SQL92 subscription's
        expression over the properties). The next offset always lets a consumer continue
        past removed or filtered units.
        """
        self._check_readable()
        cq = self.consume_queues.find(topic, queue_id)
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, next_begin_offset=0)
        min_off, max_off = cq.min_offset_in_queue, cq.max_offset_in_queue
        result = GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, min_offset=min_off, max_offset=max_off)
        if max_off == 0:
            result.next_begin_offset = 0
        elif offset < min_off:
            result.status, result.next_begin_offset = GetMessageStatus.OFFSET_TOO_SMALL, min_off
        elif offset == max_off:
            result.status, result.next_begin_offset = GetMessageStatus.OFFSET_OVERFLOW_ONE, offset
        elif offset > max_off:
            result.status, result.next_begin_offset = GetMessageStatus.OFFSET_OVERFLOW_BADLY, max_off
        else:
            self._read_units(cq, offset, max_msgs, TagFilter.parse(tag_filter), result, message_filter)
        return result

    def _read_units(self, cq: ConsumeQueue, offset: int, max_msgs: int, tags: TagFilter, result: GetMessageResult,
                    message_filter: MessageFilter | None = None) -> None:
        buf = cq.get_index_buffer(offset)
        if buf is None:
            result.status = GetMessageStatus.OFFSET_FOUND_NULL
            result.next_begin_offset = cq.roll_next_file(offset)
            return
        result.status = GetMessageStatus.NO_MATCHED_MESSAGE
        max_bytes = self.config.max_transfer_bytes_on_message_in_memory
        max_count = min(max_msgs, self.config.max_transfer_count_on_message_in_memory)
        max_scan = max(16000, max_msgs * CQ_STORE_UNIT_SIZE)
        next_phy_file_start = -1
        total_bytes = 0
        scanned = 0
        with buf:
            for phy, size, code in iter_units(buf.view[:max_scan]):
                if result.messages and (len(result.messages) >= max_count or total_bytes + size > max_bytes):
                    break
                scanned += 1
                if is_blank_unit(phy, size) or (next_phy_file_start >= 0 and phy < next_phy_file_start):
                    continue
                if not tags.matches_code(code):
                    continue
                msg = self.look_message_by_offset(phy, size)
                if msg is None and (damaged := self.commit_log.damage.at(phy)) is not None:
                    scanned -= 1  # the next pull starts at the damaged unit, and meets it again
                    if result.messages:
                        break  # serve what lies before it
                    raise CorruptRecordError(damaged)
                if msg is None:
                    if not result.messages:
                        result.status = GetMessageStatus.MESSAGE_WAS_REMOVING
                    next_phy_file_start = self.commit_log.roll_next_file(phy)
                    continue
                if not tags.matches_tag(msg.tags) or (message_filter is not None and not message_filter(msg)):
                    continue
                result.messages.append(msg)
                total_bytes += size
                result.status = GetMessageStatus.FOUND
                next_phy_file_start = -1
        result.next_begin_offset = offset + scanned
        diff = self.commit_log.max_offset() - (result.messages[-1].commitlog_offset if result.messages else 0)
        result.suggest_pulling_from_slave = diff > self._memory_in_page_cache

    def query_message(
        self, topic: str, key: str, max_num: int = 32, begin_ts: int = 0, end_ts: int = 2**63 - 1
    ) -> list[StoredMessage]:
        """`query_message_result(...).messages`."""
        return self.query_message_result(topic, key, max_num, begin_ts, end_ts).messages

    def query_message_result(
        self, topic: str, key: str, max_num: int = 32, begin_ts: int = 0, end_ts: int = 2**63 - 1
    ) -> QueryMessageResult:
        """Messages of `topic` whose KEYS or UNIQ_KEY equal `key`, stored in [begin_ts, end_ts],
        newest first, and where the index stood (DefaultMessageStore.queryMessage). The
        index gives candidates; each is re-read so hash collisions never return another
        key's message, and each offset once: a crash's recovery indexes again the record at
        the newest file's end offset, which it cannot tell apart from one half indexed."""
        self._check_readable()
        result = QueryMessageResult()
        if self.index is None:
            return result
        candidates = self.index.query_offset(topic, key, self.config.max_msgs_num_batch, begin_ts, end_ts)
        result.index_last_update_timestamp = candidates.index_last_update_timestamp
        result.index_last_update_phyoffset = candidates.index_last_update_phyoffset
        for offset in dict.fromkeys(candidates.phy_offsets):
            msg = self.look_message_by_offset(offset)
            if msg is not None and msg.topic == topic and (key in msg.keys or msg.uniq_key == key):
                result.messages.append(msg)
                if len(result.messages) >= max_num:
                    break
        return result

    async def wait_for_message(self, topic: str, queue_id: int, offset: int, timeout: float) -> bool:
        """Long polling: True as soon as the queue holds a message at `offset`, False at timeout."""
        with trio.move_on_after(timeout):
            while self.get_max_offset_in_queue(topic, queue_id) <= offset:
                await self.reput.wait_dispatched(topic, queue_id)
            return True
        return False

    def dispatch_behind_bytes(self) -> int:
        return self.reput.dispatch_behind_bytes() if self.reput else 0


class StoreUnavailableError(RuntimeError):
    """Reads refused: the store is shut down or flagged NOT_READABLE."""


class CorruptRecordError(StoreUnavailableError):
    """A read met a damaged record (damage.py) before any good one: it answers this, naming
    the range, never the bytes (a pull answers SERVICE_NOT_AVAILABLE with this text)."""

    def __init__(self, damaged: DamagedRange) -> None:
        super().__init__(f"the CommitLog record at [{damaged.start}, {damaged.end}) is damaged "
                         f"({damaged.reason}); it is not served")
        self.damaged = damaged


@attrs.define
class GetMessageResult:
    status: GetMessageStatus
    messages: list[StoredMessage] = attrs.field(factory=list)
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
    suggest_pulling_from_slave: bool = False


@attrs.define
class QueryMessageResult:
    messages: list[StoredMessage] = attrs.field(factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0
