"""A message's life from its traces (RocketMQ's QueryMsgTraceByIdSubCommand and TraceView).

`message_life(admin, msg_id)` finds the trace messages keyed by `msg_id` in the trace topic,
decodes their records (wire/protocol/trace.py) and keeps the ones about `msg_id`: who sent
it (producer group, and the host the trace came from), where it was stored (the stored
message itself, asked by its offset msgId), which consumer groups took it and when, how
each try ended and with which retry count, and whether the message sits in a group's retry
or dead-letter topic (found there by the message's keys and msgId). What `tidemq admin
queryMsgTraceById` prints and the web console can show.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Protocol

import attrs

from store.msg_id import decode_msg_id
from wire.client import TidemqError
from wire.protocol.trace import (
    TRACE_TOPIC,
    ConsumeReturn,
    EndTransactionTrace,
    PubTrace,
    SubAfterTrace,
    SubBeforeTrace,
    TraceFormatError,
    decode_traces,
)

from .base import ReceivedMessage

log = logging.getLogger("tidemq.client.trace")

__all__ = ["Consumed", "Copy", "MessageLife", "Sent", "message_life"]

RETRY_PREFIX, DLQ_PREFIX = "%RETRY%", "%DLQ%"


class _Admin(Protocol):
    async def query_by_key(self, topic: str, key: str, *, max_num: int = 32) -> list[ReceivedMessage]: ...

    async def get_by_msg_id(self, msg_id: str) -> ReceivedMessage: ...


@attrs.frozen
class Sent:
    """A Pub record: the send of the message."""

    group: str
    client_host: str | None  # the host that sent the trace message (TraceView's clientHost)
    timestamp: int
    cost_ms: int
    success: bool
    topic: str
    tags: str
    keys: str
    store_host: str
    offset_msg_id: str
    msg_type: str


@attrs.frozen
class Consumed:
    """One handler call of a consumer group: its SubBefore and (once it returned) SubAfter."""

    group: str
    client_host: str | None
    timestamp: int
    retry_times: int
    cost_ms: int | None = None  # None: no SubAfter (yet)
    success: bool | None = None
    result: str | None = None  # ConsumeReturn's name: SUCCESS, FAILED, EXCEPTION, ...

    @property
    def status(self) -> str:
        return "no result" if self.success is None else "success" if self.success else "failed"


@attrs.frozen
class Copy:
    """The message as stored: the original, or a copy in a retry or dead-letter topic."""

    kind: str  # "stored", "retry" or "dlq"
    topic: str
    broker_name: str | None
    store_host: str | None
    store_timestamp: int
    msg_id: str
    reconsume_times: int


@attrs.define
class MessageLife:
    msg_id: str
    sent: list[Sent] = attrs.field(factory=list)
    stored: Copy | None = None
    consumed: list[Consumed] = attrs.field(factory=list)
    transactions: list[EndTransactionTrace] = attrs.field(factory=list)
    retries: list[Copy] = attrs.field(factory=list)
    dead: list[Copy] = attrs.field(factory=list)
    unreadable: int = 0  # trace messages that are not in the trace format

    @property
    def groups(self) -> list[str]:
        """The consumer groups that took the message, in the order they first did."""
        return list(dict.fromkeys(c.group for c in self.consumed))

    @property
    def found(self) -> bool:
        return bool(self.sent or self.consumed or self.transactions or self.stored)

    def steps(self) -> list[dict[str, Any]]:
        """One row per step, in time order: what the CLI prints."""
        rows: list[dict[str, Any]] = []
        for s in self.sent:
            rows.append({"type": "Pub", "group": s.group, "client_host": s.client_host, "time": s.timestamp,
                         "cost_ms": s.cost_ms, "status": "success" if s.success else "failed",
                         "detail": f"topic {s.topic}" + (f", tags {s.tags}" if s.tags else "")
                         + (f", keys {s.keys}" if s.keys else "") + f", to {s.store_host}"})
        for k in [*([self.stored] if self.stored else []), *self.retries, *self.dead]:
            rows.append({"type": {"stored": "Stored", "retry": "Retry", "dlq": "DLQ"}[k.kind],
                         "group": k.broker_name, "client_host": k.store_host, "time": k.store_timestamp,
                         "cost_ms": None, "status": "dead-lettered" if k.kind == "dlq" else "stored",
                         "detail": f"topic {k.topic}, msgId {k.msg_id}"
                         + (f", reconsume {k.reconsume_times}" if k.kind != "stored" else "")})
        for t in self.transactions:
            rows.append({"type": "EndTransaction", "group": t.group, "client_host": None, "time": t.timestamp,
                         "cost_ms": None, "status": t.transaction_state,
                         "detail": "from a check" if t.from_transaction_check else ""})
        for c in self.consumed:
            rows.append({"type": "Sub", "group": c.group, "client_host": c.client_host, "time": c.timestamp,
                         "cost_ms": c.cost_ms, "status": c.status,
                         "detail": f"retry {c.retry_times}" + (f", {c.result}" if c.result else "")})
        return sorted(rows, key=lambda r: r["time"])


async def message_life(admin: _Admin, msg_id: str, *, trace_topic: str = TRACE_TOPIC,
                       max_num: int = 64) -> MessageLife:
    """See the module docstring. An absent trace topic gives a life with no traces."""
    life = MessageLife(msg_id)
    befores: dict[str, tuple[SubBeforeTrace, str | None]] = {}
    afters: list[tuple[SubAfterTrace, str | None]] = []
    for message in await _by_key(admin, trace_topic, msg_id, max_num):
        try:
            records = decode_traces(message.body)
        except TraceFormatError as e:
            life.unreadable += 1
            log.warning("trace message %s is not in the trace format: %s", message.msg_id, e)
            continue
        host = message.born_host
        for r in records:
            if r.msg_id != msg_id:
                continue
            if isinstance(r, PubTrace):
                life.sent.append(Sent(r.group, r.client_host or host, r.timestamp, r.cost_ms, r.success, r.topic,
                                      r.tags, r.keys, r.store_host, r.offset_msg_id, r.msg_type.name))
            elif isinstance(r, SubBeforeTrace):
                befores[r.request_id] = (r, host)
            elif isinstance(r, SubAfterTrace):
                afters.append((r, host))
            elif isinstance(r, EndTransactionTrace):
                life.transactions.append(r)
    ended = {a.request_id: a for a, _ in afters}
    for request_id, (b, host) in befores.items():
        a = ended.pop(request_id, None)
        life.consumed.append(Consumed(b.group, host, b.timestamp, b.retry_times,
                                      a.cost_ms if a else None, a.success if a else None,
                                      _result(a.context_code) if a else None))
    for a, host in afters:  # a SubAfter whose SubBefore is missing
        if a.request_id in ended:
            life.consumed.append(Consumed(a.group or "", host, a.timestamp or 0, 0, a.cost_ms, a.success,
                                          _result(a.context_code)))
    life.consumed.sort(key=lambda c: c.timestamp)
    life.sent.sort(key=lambda s: s.timestamp)
    life.stored = await _stored(admin, life)
    keys = {k for s in life.sent for k in s.keys.split(" ") if k}
    for group in life.groups:
        life.retries += await _copies(admin, "retry", RETRY_PREFIX + group, msg_id, keys, max_num)
        life.dead += await _copies(admin, "dlq", DLQ_PREFIX + group, msg_id, keys, max_num)
    return life


def _result(code: int) -> str:
    try:
        return ConsumeReturn(code).name
    except ValueError:
        return str(code)


async def _by_key(admin: _Admin, topic: str, key: str, max_num: int) -> list[ReceivedMessage]:
    """Messages of `topic` keyed `key`; none when the topic is unknown or unreachable."""
    try:
        return await admin.query_by_key(topic, key, max_num=max_num)
    except TidemqError as e:
        log.info("no messages of %s keyed %s: %s", topic, key, e)
        return []


async def _stored(admin: _Admin, life: MessageLife) -> Copy | None:
    """The stored message: by the offset msgId a Pub record names (else the msgId itself),
    else by UNIQ_KEY in the topic the Pub names."""
    for candidate in dict.fromkeys([*(s.offset_msg_id for s in life.sent if s.offset_msg_id), life.msg_id]):
        try:
            m = await admin.get_by_msg_id(candidate)
        except (TidemqError, ValueError):
            continue
        return Copy("stored", m.topic, m.broker_name, _host_of(candidate), m.store_timestamp, m.msg_id,
                    m.reconsume_times)
    for topic in dict.fromkeys(s.topic for s in life.sent if s.topic):  # a Pub without offsetMsgId: by UNIQ_KEY
        for m in await _by_key(admin, topic, life.msg_id, 32):
            if m.properties.get("UNIQ_KEY") == life.msg_id and not m.topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
                return Copy("stored", m.topic, m.broker_name, _host_of(m.msg_id), m.store_timestamp, m.msg_id,
                            m.reconsume_times)
    return None


def _host_of(msg_id: str) -> str | None:
    try:
        return decode_msg_id(msg_id)[0]
    except ValueError:
        return None


async def _copies(admin: _Admin, kind: str, topic: str, msg_id: str, keys: Iterable[str],
                  max_num: int) -> list[Copy]:
    """The message's copies in a retry or dead-letter topic: looked up by its msgId (a
    RocketMQ client's UNIQ_KEY is indexed) and its keys, kept when they name it as their
    original (ORIGIN_MESSAGE_ID or UNIQ_KEY)."""
    found: dict[str, Copy] = {}
    for key in [msg_id, *sorted(keys)]:
        for m in await _by_key(admin, topic, key, max_num):
            p = m.properties
            if msg_id in (p.get("ORIGIN_MESSAGE_ID"), p.get("UNIQ_KEY")):
                found.setdefault(m.msg_id, Copy(kind, m.topic, m.broker_name, _host_of(m.msg_id),
                                                m.store_timestamp, m.msg_id, m.reconsume_times))
    return sorted(found.values(), key=lambda c: c.store_timestamp)
