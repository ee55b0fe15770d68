"""`df.write.format("tidemq")`: rows sent in batches through `cluster.client.Producer`.

Each task sends its rows in `send_batch` calls of consecutive rows with the same topic
and queue_id. A send the cluster does not store (an error raised by the Producer after its
retries) fails the task with the status and message, and so the job. Every message gets a
UNIQ_KEY made of the write's id (fixed on the driver), the partition and the row's place
in it, so a retried task sends the same UNIQ_KEYs again and duplicates can be found
(`tidemq query --key`, or a group-by on properties['UNIQ_KEY']).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import attrs
import pyarrow as pa
import trio

from cluster.client import Credentials, OutgoingMessage, Producer, Status, TidemqError
from pipeline.live import credentials_option, tls_context, tls_option
from pipeline.schema import require_write_columns
from pipeline.store_scan import parse_bool, parse_positive
from store.properties import PROPERTY_UNIQ_KEY

STORED = {Status.PUT_OK, Status.FLUSH_DISK_TIMEOUT, Status.FLUSH_SLAVE_TIMEOUT, Status.SLAVE_NOT_AVAILABLE}
MAX_BATCH_BYTES = 512 * 1024


class WriteFailed(RuntimeError):
    """A send was not stored (or, with requireOk, not PUT_OK): status and message."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


@attrs.frozen
class WriteOptions:
    namesrv: str | None
    brokers: tuple[str, ...] | None
    write_id: str
    batch_size: int = 32
    require_ok: bool = False
    wait: bool = True
    send_timeout: float = 5.0
    retries: int = 2
    credentials: Credentials | None = None  # options user + secretFile
    tls_ca: str | None = None  # option tlsCa

    @classmethod
    def from_options(cls, options: dict[str, str]) -> WriteOptions:
        o = {k.lower(): v for k, v in options.items()}
        if not o.get("namesrv") and not o.get("brokers"):
            raise ValueError("a tidemq write needs option namesrv (host:port[;host:port]) or brokers")
        brokers = tuple(b.strip() for b in o["brokers"].split(",") if b.strip()) if o.get("brokers") else None
        return cls(
            namesrv=o.get("namesrv") or None, brokers=brokers, write_id=uuid.uuid4().hex[:16].upper(),
            batch_size=parse_positive(o.get("batchsize", "32"), "batchSize"),
            require_ok=parse_bool(o.get("requireok", "false"), "requireOk"),
            wait=parse_bool(o.get("wait", "true"), "wait"),
            send_timeout=float(o.get("sendtimeout", "5.0")),
            retries=int(o.get("retries", "2")),
            credentials=credentials_option(o), tls_ca=tls_option(o),
        )


@attrs.frozen
class WriteReport:
    """What one task sent (the commit message)."""

    partition: int
    messages: int
    batches: int
    statuses: dict[str, int]


def uniq_key(write_id: str, partition: int, index: int) -> str:
    return f"{write_id}{partition:06X}{index:010X}"


def write_partition(opts: WriteOptions, partition: int, batches: Iterator[pa.RecordBatch]) -> WriteReport:
    """Send every row of one task; raises WriteFailed on the first send not stored."""
    return trio.run(_write, opts, partition, batches)


def _rows(batches: Iterator[pa.RecordBatch]) -> Iterator[dict[str, Any]]:
    for batch in batches:
        require_write_columns(batch.schema.names)
        yield from batch.to_pylist()


async def _write(opts: WriteOptions, partition: int, batches: Iterator[pa.RecordBatch]) -> WriteReport:
    statuses: dict[str, int] = {}
    sent = nbatches = 0
    pending: list[OutgoingMessage] = []
    pending_key: tuple[str, int | None] | None = None
    pending_bytes = 0

    async def flush() -> None:
        nonlocal sent, nbatches, pending, pending_bytes
        if not pending:
            return
        assert pending_key is not None
        topic, qid = pending_key
        try:
            result = await producer.send_batch(topic, pending, queue_id=qid, wait=opts.wait)
        except TidemqError as e:
            raise WriteFailed(e.status, f"sending {len(pending)} message(s) to {topic!r} "
                                        f"(partition {partition}, rows from {sent}): {e}") from None
        if result.status not in STORED or (opts.require_ok and result.status is not Status.PUT_OK):
            raise WriteFailed(result.status.name, f"sending {len(pending)} message(s) to {topic!r} "
                                                  f"on {result.broker_name}: not confirmed")
        statuses[result.status.name] = statuses.get(result.status.name, 0) + len(pending)
        sent += len(pending)
        nbatches += 1
        pending, pending_bytes = [], 0

    async with Producer(namesrv=opts.namesrv, brokers=list(opts.brokers) if opts.brokers else None,
                        send_timeout=opts.send_timeout, retries=opts.retries,
                        credentials=opts.credentials, tls=tls_context(opts.tls_ca)) as producer:
        for index, row in enumerate(_rows(batches)):
            msg, key = _message(row, uniq_key(opts.write_id, partition, index))
            size = len(msg.body)
            if pending and (key != pending_key or len(pending) >= opts.batch_size
                            or pending_bytes + size > MAX_BATCH_BYTES):
                await flush()
            pending_key = key
            pending.append(msg)
            pending_bytes += size
        await flush()
    return WriteReport(partition, sent, nbatches, statuses)


def _message(row: dict[str, Any], uniq: str) -> tuple[OutgoingMessage, tuple[str, int | None]]:
    topic, body = row.get("topic"), row.get("body")
    if not topic or body is None:
        raise ValueError(f"a row to write needs a topic and a body; got topic={topic!r}, body={body!r}")
    if isinstance(body, str):
        body = body.encode("utf-8")
    props = dict(row.get("properties") or {})
    props.setdefault(PROPERTY_UNIQ_KEY, uniq)
    keys = row.get("keys") or ()
    if isinstance(keys, str):
        keys = [k for k in keys.split(" ") if k]
    qid = row.get("queue_id")
    return OutgoingMessage(bytes(body), row.get("tags"), tuple(keys), props), (topic, qid)
