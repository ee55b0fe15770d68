"""tidemq's embedded storage engine (RocketMQ 4.x layout): no sockets, no processes.

The names below load their module on first use (PEP 562), so a reader that needs only
the record codec (`store.record_codec`, `store.segment_walker`: the pipeline's Spark workers)
does not import the engine and trio with it."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .config import BrokerRole, FlushDiskType, StoreConfig
    from .markers import StoreLockedError
    from .message import Message, StoredMessage
    from .message_store import MessageStore, open_store, truncate_store
    from .recovery import TruncateReport
    from .status import GetMessageStatus, PutMessageResult, PutMessageStatus

_HOME = {
    "BrokerRole": "config", "FlushDiskType": "config", "StoreConfig": "config",
    "StoreLockedError": "markers",
    "Message": "message", "StoredMessage": "message",
    "MessageStore": "message_store", "open_store": "message_store", "truncate_store": "message_store",
    "TruncateReport": "recovery",
    "GetMessageStatus": "status", "PutMessageResult": "status", "PutMessageStatus": "status",
}

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


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'store' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value
