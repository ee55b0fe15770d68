"""Reads from a live cluster through the client protocol (cluster.client), for batch and
streaming queries.

An offset range is a (brokerName, queueId, start, end) of logical queue offsets; offsets
as a whole are `{"broker-a": {"0": 12, "1": 7}, ...}` (Kafka's shape, with the group's
brokerName where Kafka has the topic), which is what Spark keeps in the streaming
checkpoint. Executors run plain Python: each partition read runs `trio.run` in a helper
thread that hands Arrow batches to Spark's iterator through a small queue, so a slow
consumer holds back the pulls rather than buffering the whole range.

Reads go through `PullConsumer.pull(offset=...)` and so fall back to a slave of the group
while its master is down; offsets are never committed (Spark's checkpoint owns them).
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
from collections.abc import Iterator
from typing import Any

import attrs
import pyarrow as pa
import trio

from cluster.client import (
    Admin,
    Credentials,
    CredentialsError,
    MessageQueue,
    PullConsumer,
    Status,
    TlsError,
    TlsSettings,
)
from pipeline.schema import BatchBuilder
from pipeline.store_scan import parse_bool, parse_positive, parse_time
from store.record_codec import masked_crc32

Offsets = dict[str, dict[str, int]]
EARLIEST, LATEST = -2, -1
PULL_BATCH = 256
READER_GROUP = "tidemq-spark"
_NO_MESSAGE = {Status.NO_MESSAGE_IN_QUEUE, Status.OFFSET_OVERFLOW_ONE, Status.NO_MATCHED_LOGIC_QUEUE}


@attrs.frozen
class LiveOptions:
    topic: str
    namesrv: str | None = None
    brokers: tuple[str, ...] | None = None
    starting: str = "earliest"
    ending: str = "latest"
    include_body: bool = True
    max_offsets_per_trigger: int | None = None
    request_timeout: float = 5.0
    batch_rows: int = 8192
    credentials: Credentials | None = None  # options user + secretFile (read on the driver)
    tls_ca: str | None = None  # option tlsCa: connect with TLS, checking servers with this CA

    @classmethod
    def from_options(cls, options: dict[str, str], *, streaming: bool = False) -> LiveOptions:
        o = {k.lower(): v for k, v in options.items()}
        topic = o.get("topic") or ""
        if not topic or "," in topic:
            raise ValueError("a live read needs option topic with one topic name")
        if not o.get("namesrv") and not o.get("brokers"):
            raise ValueError("a live read needs option namesrv (host:port[;host:port]) or brokers")
        brokers = tuple(b.strip() for b in o["brokers"].split(",") if b.strip()) if o.get("brokers") else None
        ending = o.get("endingoffsets", "latest")
        if streaming and "endingoffsets" in o:
            raise ValueError("endingOffsets is for batch reads; a stream reads until it is stopped")
        mopt = o.get("maxoffsetspertrigger")
        return cls(
            topic=topic, namesrv=o.get("namesrv") or None, brokers=brokers,
            starting=o.get("startingoffsets", "latest" if streaming else "earliest"), ending=ending,
            include_body=parse_bool(o.get("includebody", "true"), "includeBody"),
            max_offsets_per_trigger=parse_positive(mopt, "maxOffsetsPerTrigger") if mopt else None,
            request_timeout=float(o.get("requesttimeout", "5.0")),
            credentials=credentials_option(o), tls_ca=tls_option(o),
        )

    def client_args(self) -> dict[str, Any]:
        """The cluster client's arguments (the TLS context is built where the task runs:
        a context does not pickle)."""
        return {"namesrv": self.namesrv, "brokers": list(self.brokers) if self.brokers else None,
                "credentials": self.credentials, "tls": tls_context(self.tls_ca)}


def credentials_option(o: dict[str, str]) -> Credentials | None:
    """Options `user` + `secretFile` (lower-cased keys): the account a job's clients log in as
    (docs/security.md). The secret is read on the driver and travels to the executors with
    the task, as any connector's credentials option does; without these options the
    process's default (TIDEMQ_USER ...) applies."""
    user, secret_file = o.get("user"), o.get("secretfile")
    if not user and not secret_file:
        return None
    if not user or not secret_file:
        raise ValueError("options user and secretFile go together")
    try:
        return Credentials.from_file(user, secret_file)
    except CredentialsError as e:
        raise ValueError(f"option secretFile: {e}") from None


def tls_option(o: dict[str, str]) -> str | None:
    """Option `tlsCa` (lower-cased keys): the CA file, checked on the driver."""
    ca = o.get("tlsca")
    if ca:
        tls_context(ca)  # a clear error now rather than in every task
    return ca or None


def tls_context(ca_file: str | None) -> Any:
    if ca_file is None:
        return None
    try:
        return TlsSettings("enforcing", ca_file=ca_file).client_context()
    except TlsError as e:
        raise ValueError(f"option tlsCa: {e}") from None


@attrs.frozen
class QueueRange:
    """Logical offsets [start, end) of one queue (picklable, sent to executors)."""

    broker_name: str
    queue_id: int
    start: int
    end: int


# ---------------------------------------------------------------------------------------
# offsets on the driver


async def _bounds(opts: LiveOptions) -> dict[MessageQueue, tuple[int, int]]:
    """(min, max) offset of every readable queue of the topic."""
    async with Admin(**opts.client_args(), request_timeout=opts.request_timeout) as admin:
        route = await admin.route(opts.topic, refresh=True)
        queues = [
            MessageQueue(opts.topic, g.broker_name, q)
            for g in route.groups if g.queue_data is not None and g.queue_data.readable
            for q in range(g.queue_data.read_queue_nums)
        ]
        out: dict[MessageQueue, tuple[int, int]] = {}
        for q in queues:
            out[q] = (await admin.min_offset(q), await admin.max_offset(q))
        return out


async def _resolve(opts: LiveOptions, spec: str, what: str) -> Offsets:
    """`earliest`, `latest`, `timestamp:T` or JSON offsets per queue → offsets of every queue."""
    bounds = await _bounds(opts)
    spec = spec.strip()
    out: Offsets = {}
    explicit: Offsets = {}
    ts: int | None = None
    if spec.startswith("{"):
        try:
            raw = json.loads(spec)
            explicit = {str(b): {str(q): int(o) for q, o in qs.items()} for b, qs in raw.items()}
        except (ValueError, AttributeError, TypeError):
            raise ValueError(
                f'{what} must be earliest, latest, timestamp:T or JSON like {{"broker-a": {{"0": 5}}}}; '
                f"got {spec!r}") from None
    elif spec.lower().startswith("timestamp:"):
        ts = parse_time(spec.split(":", 1)[1], what)
    elif spec.lower() not in ("earliest", "latest"):
        raise ValueError(f"{what} must be earliest, latest, timestamp:T or JSON offsets; got {spec!r}")
    async with Admin(**opts.client_args(), request_timeout=opts.request_timeout) as admin:
        for q, (lo, hi) in sorted(bounds.items()):
            value = explicit.get(q.broker_name, {}).get(str(q.queue_id))
            if ts is not None:
                offset = await admin.offset_by_time(q, ts)
            elif value is None:
                offset = lo if spec.lower() == "earliest" or (explicit and what == "startingOffsets") else hi
            else:
                offset = lo if value == EARLIEST else hi if value == LATEST else value
            out.setdefault(q.broker_name, {})[str(q.queue_id)] = max(lo, min(offset, hi))
    return out


def resolve_offsets(opts: LiveOptions, spec: str, what: str) -> Offsets:
    return trio.run(_resolve, opts, spec, what)


def latest_offsets(opts: LiveOptions) -> Offsets:
    return resolve_offsets(opts, "latest", "latest")


def ranges(start: Offsets, end: Offsets) -> list[QueueRange]:
    """Non-empty per-queue ranges between two offset maps (a queue new in `end` starts at 0)."""
    out = []
    for broker, queues in sorted(end.items()):
        for qid, hi in sorted(queues.items(), key=lambda kv: int(kv[0])):
            lo = start.get(broker, {}).get(qid, 0)
            if hi > lo:
                out.append(QueueRange(broker, int(qid), lo, hi))
    return out


def cap(start: Offsets, end: Offsets, max_rows: int) -> Offsets:
    """`end` moved back so that at most `max_rows` offsets lie past `start`, shared evenly
    (Kafka's maxOffsetsPerTrigger): every queue with data gets its fair share, the rest
    goes to the queues that can use it."""
    pending = {(b, q): hi - start.get(b, {}).get(q, 0) for b, qs in end.items() for q, hi in qs.items()}
    pending = {k: v for k, v in pending.items() if v > 0}
    grant = dict.fromkeys(pending, 0)
    left = max_rows
    while left > 0 and any(grant[k] < pending[k] for k in pending):
        open_keys = sorted(k for k in pending if grant[k] < pending[k])
        share = max(1, left // len(open_keys))
        for k in open_keys:
            add = min(share, pending[k] - grant[k], left)
            grant[k] += add
            left -= add
            if left == 0:
                break
    out: Offsets = {b: dict(qs) for b, qs in end.items()}
    for (b, q), g in grant.items():
        out[b][q] = start.get(b, {}).get(q, 0) + g
    return out


# ---------------------------------------------------------------------------------------
# reading a range on an executor


def read_range(opts: LiveOptions, r: QueueRange, source: str) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the messages at offsets [start, end) of one queue, in order."""
    handoff: queue.Queue[Any] = queue.Queue(maxsize=2)
    stop = threading.Event()
    done = object()

    def run() -> None:
        try:
            trio.run(_pull_range, opts, r, source, handoff, stop)
            handoff.put(done)
        except BaseException as e:  # handed to the iterating thread
            handoff.put(e)

    thread = threading.Thread(target=run, name=f"tidemq-pull-{r.broker_name}-{r.queue_id}", daemon=True)
    thread.start()
    try:
        while True:
            item = handoff.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while thread.is_alive():
            with contextlib.suppress(queue.Empty):
                handoff.get(timeout=0.1)  # unblock a producer waiting on a full queue
        thread.join()


async def _pull_range(
    opts: LiveOptions, r: QueueRange, source: str, handoff: queue.Queue[Any], stop: threading.Event
) -> None:
    builder = BatchBuilder(batch_rows=opts.batch_rows)
    mq = MessageQueue(opts.topic, r.broker_name, r.queue_id)
    async with PullConsumer(**opts.client_args(), group=READER_GROUP, topic=opts.topic,
                            request_timeout=opts.request_timeout) as consumer:
        offset = r.start
        while offset < r.end and not stop.is_set():
            result = await consumer.pull(mq, min(PULL_BATCH, r.end - offset), timeout_ms=0, offset=offset)
            if result.status in _NO_MESSAGE or not result.messages:
                raise RuntimeError(
                    f"{mq}: offset {offset} was available when the query was planned (range up to "
                    f"{r.end}) but {result.address or 'the broker'} answered {result.status.name}"
                    f"{' (a slave that has not caught up)' if result.from_slave else ''}")
            for m in result.messages:
                if m.queue_offset >= r.end:
                    break
                if m.queue_offset < offset:
                    continue
                builder.add_received(m, source, masked_crc32(m.body), opts.include_body)
                offset = m.queue_offset + 1
                if builder.full:
                    await trio.to_thread.run_sync(handoff.put, builder.flush())
            offset = max(offset, min(result.next_begin_offset, r.end))
    batch = builder.flush()
    if batch is not None:
        await trio.to_thread.run_sync(handoff.put, batch)
