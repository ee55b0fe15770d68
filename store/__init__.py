"""tidemq's embedded storage engine (RocketMQ 4.x layout): no sockets, no processes."""

from .config import BrokerRole, FlushDiskType, StoreConfig
from .markers import StoreLockedError
from .message import Message, StoredMessage
from .message_store import MessageStore, open_store, truncate_store
from .recovery import TruncateReport
from .status import GetMessageStatus, PutMessageResult, PutMessageStatus

__all__ = [
    "BrokerRole",
    "FlushDiskType",
    "GetMessageStatus",
    "Message",
    "MessageStore",
    "PutMessageResult",
    "PutMessageStatus",
    "StoreConfig",
    "StoreLockedError",
    "StoredMessage",
    "TruncateReport",
    "open_store",
    "truncate_store",
]
