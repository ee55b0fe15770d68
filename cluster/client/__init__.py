"""The tidemq client library (trio): Producer, PullConsumer, Consumer (a push-style group
member, cluster/client/push_consumer.py), Admin,
BroadcastConsumer (every member gets every message; its offsets in a local file),
OrderlyConsumer (each queue in order, by one member at a time: cluster/client/orderly.py).

Each is an async context manager that owns a nursery (for the connections' reader tasks)
and finds brokers either through name servers (`namesrv="host:port[;host:port]"`) or from
a fixed list of broker addresses (`brokers=[...]`, no name server needed):

    async with Producer(namesrv="127.0.0.1:9876") as producer:
        result = await producer.send("Orders", b"...", keys=["order-42"])

    async with PullConsumer(namesrv="127.0.0.1:9876", group="G", topic="Orders") as consumer:
        async for msg in consumer.messages(idle_timeout_ms=2000):
            ...

    async with Consumer("G", "Orders", handle, namesrv="127.0.0.1:9876"):  # handle(msg) per message
        await trio.sleep_forever()

Failures raise the typed errors of `wire.client` (re-exported here): `TidemqError(status,
message)` and its subclasses `BadRequest`, `NotFound`, `ServiceUnavailable`, `PutFailed`,
`InternalError`, `ConnectionLost`, and `OutcomeUnknown` for a request the node may have
acted on: `RequestTimeout`, `ConnectionLostInFlight` (also a ConnectionLost) and
`Indeterminate` (a node that stored a write but may no longer acknowledge it).

Delivery is at least once: a send that times out or loses its connection is retried on
another queue (preferring another broker group), and may then be stored twice. A send
whose every attempt failed raises OutcomeUnknown when any attempt's outcome is unknown (it
may be stored: report it as indeterminate), and another error only when no attempt can
have stored it. The send
statuses FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE are *returned*,
not raised: the message is stored on the master, only the requested durability (disk
flush, slave copy) was not confirmed in time. Retrying such a send would duplicate it.
"""


from __future__ import annotations

from wire.client import (
    AuthenticationFailed,
    BadRequest,
    Connection,
    ConnectionLost,
    ConnectionLostInFlight,
    Indeterminate,
    InternalError,
    NoPermission,
    NotFound,
    OutcomeUnknown,
    PutFailed,
    RequestTimeout,
    ServiceUnavailable,
    TidemqError,
    connect,
)
from wire.credentials import Credentials, CredentialsError, set_default_credentials
from wire.options import ConnectOptions
from wire.protocol import Status
from wire.tls import TlsError, TlsSettings, set_default_client_tls

from .admin import Admin
from .base import BrokerStatus, OutgoingMessage, PullResult, ReceivedMessage, SendResult, TopicInfo
from .broadcast import BroadcastConsumer
from .consumer import PullConsumer
from .local_offsets import OffsetFileError
from .orderly import OrderlyConsumer
from .producer import Producer
from .push_consumer import Consumer, ConsumerStats
from .routing import BrokerInfo, GroupRoute, MessageQueue, QueueData, TopicRoute
from .transaction_producer import TransactionCheck, TransactionProducer, TransactionResult

__all__ = [
    "TransactionCheck",
    "TransactionProducer",
    "TransactionResult",
    "Admin",
    "AuthenticationFailed",
    "BadRequest",
    "BroadcastConsumer",
    "BrokerInfo",
    "BrokerStatus",
    "ConnectOptions",
    "Connection",
    "ConnectionLost",
    "ConnectionLostInFlight",
    "Consumer",
    "ConsumerStats",
    "Credentials",
    "CredentialsError",
    "GroupRoute",
    "Indeterminate",
    "InternalError",
    "OutgoingMessage",
    "MessageQueue",
    "NoPermission",
    "NotFound",
    "OffsetFileError",
    "OrderlyConsumer",
    "OutcomeUnknown",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PutFailed",
    "QueueData",
    "ReceivedMessage",
    "RequestTimeout",
    "SendResult",
    "ServiceUnavailable",
    "Status",
    "TidemqError",
    "TlsError",
    "TlsSettings",
    "TopicInfo",
    "TopicRoute",
    "connect",
    "set_default_client_tls",
    "set_default_credentials",
]
