"""Put/get statuses and results (RocketMQ 4.9 names); the running flags are in running_flags.py."""

from __future__ import annotations

import enum

import attrs


class PutMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPEDFILE_FAILED = "CREATE_MAPEDFILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"

    @property
    def stored(self) -> bool:
        """The message is in the master's log (RocketMQ counts these four as sent)."""
        return self in _STORED


_STORED = {
    PutMessageStatus.PUT_OK,
    PutMessageStatus.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE,
}


class AppendMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    END_OF_FILE = "END_OF_FILE"
    MESSAGE_SIZE_EXCEEDED = "MESSAGE_SIZE_EXCEEDED"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"


class GetMessageStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@attrs.define
class AppendMessageResult:
    status: AppendMessageStatus
    wrote_offset: int = 0
    wrote_bytes: int = 0
    msg_id: str = ""
    store_timestamp: int = 0
    queue_offset: int = 0
    msg_num: int = 1
    error: str = ""  # why the append failed (e.g. the segment that could not be created)

    @property
    def end_offset(self) -> int:
        return self.wrote_offset + self.wrote_bytes


@attrs.define
class PutMessageResult:
    """What a put returns. `msg_id` is the offset msgId (comma-joined for a batch)."""

    status: PutMessageStatus
    append: AppendMessageResult | None = None
    error: str = ""
    indeterminate: bool = False
    """Appended, but its flush failed: the record is in the CommitLog's page cache (read,
    dispatched, maybe replicated) yet may never reach the disk. Status SERVICE_NOT_AVAILABLE
    (the store takes no writes), answered on the wire as INDETERMINATE: neither "stored"
    (FLUSH_DISK_TIMEOUT promises a flush to come) nor "not stored"."""

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK

    @property
    def msg_id(self) -> str:
        return self.append.msg_id if self.append else ""

    @property
    def commitlog_offset(self) -> int:
        return self.append.wrote_offset if self.append else -1

    @property
    def queue_offset(self) -> int:
        return self.append.queue_offset if self.append else -1

    @property
    def msg_num(self) -> int:
        return self.append.msg_num if self.append else 0
