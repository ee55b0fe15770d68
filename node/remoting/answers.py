"""CBOR reply statuses in RocketMQ's terms: the response code a remoting client gets for
what the node's handler answered.

Failover answers, checked against the clients: only SUCCESS is an acknowledgement. The C++
client (1.2.3, sendDefaultImpl) retries a sync send over the queues, up to 5 tries, on any
other answer, the stored-but-unconfirmed ones (10, 11, 12) included, and throws once they
are spent; Java retries SYSTEM_ERROR, SERVICE_NOT_AVAILABLE, TOPIC_NOT_EXIST and
NO_PERMISSION on another broker. So a slave's or a fenced master's refusal
(SERVICE_NOT_AVAILABLE) and a write that cannot be confirmed (INDETERMINATE, as
SYSTEM_ERROR) move both clients on, and no failover answer tells a client "stored" for a
message a promotion may drop."""

from __future__ import annotations

from wire.remoting.codes import ResponseCode

__all__ = ["response_code"]

_CODES = {
    "OK": ResponseCode.SUCCESS, "PUT_OK": ResponseCode.SUCCESS, "FOUND": ResponseCode.SUCCESS,
    "FLUSH_DISK_TIMEOUT": ResponseCode.FLUSH_DISK_TIMEOUT, "FLUSH_SLAVE_TIMEOUT": ResponseCode.FLUSH_SLAVE_TIMEOUT,
    "SLAVE_NOT_AVAILABLE": ResponseCode.SLAVE_NOT_AVAILABLE, "SERVICE_NOT_AVAILABLE": ResponseCode.SERVICE_NOT_AVAILABLE,
    "MESSAGE_ILLEGAL": ResponseCode.MESSAGE_ILLEGAL, "PROPERTIES_SIZE_EXCEEDED": ResponseCode.MESSAGE_ILLEGAL,
    "OS_PAGECACHE_BUSY": ResponseCode.SYSTEM_BUSY, "NO_PERMISSION": ResponseCode.NO_PERMISSION,
}


def response_code(status: str, not_found: int = ResponseCode.SYSTEM_ERROR) -> int:
    """A CBOR reply status as RocketMQ's response code (`not_found`: what NOT_FOUND means
    for the op: TOPIC_NOT_EXIST for a send, QUERY_NOT_FOUND for a lookup, ...). Everything
    without a RocketMQ twin (BAD_REQUEST, INDETERMINATE, INTERNAL_ERROR, ...) is
    SYSTEM_ERROR, which RocketMQ's clients retry on another broker."""
    if status == "NOT_FOUND":
        return not_found
    return _CODES.get(status, ResponseCode.SYSTEM_ERROR)
