"""The row schema of the `tidemq` data source, in Spark DDL and in Arrow, and the builder
that turns decoded messages into Arrow record batches.

Spark checks an Arrow batch against the declared schema exactly (int32 for int, int64 for
long, timestamp[us, UTC] for timestamp), so both are derived from one column table here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from store.message import PROPERTY_KEYS, PROPERTY_TAGS, StoredMessage, decode_msg_id

CORRUPT_COLUMN = "_corrupt"

# name, Spark DDL type, Arrow type
COLUMNS: tuple[tuple[str, str, pa.DataType], ...] = (
    ("topic", "string", pa.string()),
    ("queue_id", "int", pa.int32()),
    ("queue_offset", "long", pa.int64()),
    ("commitlog_offset", "long", pa.int64()),
    ("size", "int", pa.int32()),
    ("body", "binary", pa.binary()),
    ("body_crc", "int", pa.int32()),
    ("crc_ok", "boolean", pa.bool_()),
    ("flag", "int", pa.int32()),
    ("sysflag", "int", pa.int32()),
    ("born_timestamp", "long", pa.int64()),
    ("born_time", "timestamp", pa.timestamp("us", tz="UTC")),
    ("born_host", "string", pa.string()),
    ("store_timestamp", "long", pa.int64()),
    ("store_time", "timestamp", pa.timestamp("us", tz="UTC")),
    ("store_host", "string", pa.string()),
    ("reconsume_times", "int", pa.int32()),
    ("tags", "string", pa.string()),
    ("keys", "array<string>", pa.list_(pa.string())),
    ("properties", "map<string,string>", pa.map_(pa.string(), pa.string())),
    ("msg_id", "string", pa.string()),
    ("source", "string", pa.string()),
)
NAMES = tuple(c[0] for c in COLUMNS)
_DERIVED = {"born_time": "born_timestamp", "store_time": "store_timestamp"}

# what a writer accepts: topic and body required, the rest optional
WRITE_COLUMNS = {"topic", "body", "keys", "tags", "properties", "queue_id"}


def ddl(permissive: bool = False) -> str:
    """The schema as a Spark DDL string (with `_corrupt` in permissive mode)."""
    cols = [f"{name} {kind}" for name, kind, _ in COLUMNS]
    if permissive:
        cols.append(f"{CORRUPT_COLUMN} string")
    return ", ".join(cols)


def arrow_schema(permissive: bool = False) -> pa.Schema:
    fields = [pa.field(name, kind) for name, _, kind in COLUMNS]
    if permissive:
        fields.append(pa.field(CORRUPT_COLUMN, pa.string()))
    return pa.schema(fields)


class BatchBuilder:
    """Accumulates rows column by column and emits Arrow record batches of `batch_rows`."""

    def __init__(self, *, permissive: bool = False, batch_rows: int = 8192) -> None:
        self.permissive = permissive
        self.schema = arrow_schema(permissive)
        self.batch_rows = batch_rows
        self._names = [n for n in self.schema.names if n not in _DERIVED]
        self._reset()

    def _reset(self) -> None:
        self.cols: dict[str, list[Any]] = {n: [] for n in self._names}
        self.rows = 0

    def add_stored(
        self, m: StoredMessage, source: str, *, crc_ok: bool | None, include_body: bool,
        corrupt: str | None = None,
    ) -> None:
        """One CommitLog record, as the store's decoder returned it."""
        c = self.cols
        props = m.properties
        c["topic"].append(m.topic)
        c["queue_id"].append(m.queue_id)
        c["queue_offset"].append(m.queue_offset)
        c["commitlog_offset"].append(m.commitlog_offset)
        c["size"].append(m.size)
        c["body"].append(m.body if include_body else None)
        c["body_crc"].append(m.body_crc)
        c["crc_ok"].append(crc_ok)
        c["flag"].append(m.flag)
        c["sysflag"].append(m.sys_flag)
        c["born_timestamp"].append(m.born_timestamp)
        c["born_host"].append(m.born_host)
        c["store_timestamp"].append(m.store_timestamp)
        c["store_host"].append(m.store_host)
        c["reconsume_times"].append(m.reconsume_times)
        c["tags"].append(props.get(PROPERTY_TAGS))
        c["keys"].append(list(m.keys))
        c["properties"].append(list(props.items()))
        c["msg_id"].append(m.msg_id)
        c["source"].append(source)
        if self.permissive:
            c[CORRUPT_COLUMN].append(corrupt)
        self.rows += 1

    def add_received(self, m: Any, source: str, body_crc: int, include_body: bool) -> None:
        """One message from a pull (cluster.client ReceivedMessage): TAGS and KEYS go back
        into `properties` so rows read live and from a store directory compare equal."""
        c = self.cols
        props = dict(m.properties)
        if m.tags:
            props[PROPERTY_TAGS] = m.tags
        if m.keys:
            props[PROPERTY_KEYS] = " ".join(m.keys)
        try:
            store_host = decode_msg_id(m.msg_id)[0]
        except ValueError:
            store_host = None
        values = {
            "topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
            "commitlog_offset": m.commitlog_offset, "size": None,
            "body": m.body if include_body else None, "body_crc": body_crc, "crc_ok": None,
            "flag": m.flag, "sysflag": None, "born_timestamp": m.born_timestamp,
            "born_host": None, "store_timestamp": m.store_timestamp, "store_host": store_host,
            "reconsume_times": m.reconsume_times, "tags": m.tags, "keys": list(m.keys),
            "properties": list(props.items()), "msg_id": m.msg_id, "source": source,
        }
        for name, value in values.items():
            c[name].append(value)
        if self.permissive:
            c[CORRUPT_COLUMN].append(None)
        self.rows += 1

    def add_corrupt(self, source: str, offset: int, reason: str) -> None:
        """A bad range (permissive mode): only `commitlog_offset`, `source` and `_corrupt`."""
        for col in self.cols.values():
            col.append(None)
        self.cols["commitlog_offset"][-1] = offset
        self.cols["source"][-1] = source
        self.cols[CORRUPT_COLUMN][-1] = reason
        self.rows += 1

    @property
    def full(self) -> bool:
        return self.rows >= self.batch_rows

    def flush(self) -> pa.RecordBatch | None:
        """The rows so far as one record batch (None when empty); starts a new one."""
        if not self.rows:
            return None
        arrays = []
        for field in self.schema:
            if field.name in _DERIVED:
                millis = pa.array(self.cols[_DERIVED[field.name]], pa.int64())
                arrays.append(pa.compute.multiply(millis, 1000).cast(field.type))
            else:
                arrays.append(pa.array(self.cols[field.name], field.type))
        batch = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        self._reset()
        return batch


def rows_to_dicts(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    """Rows of a batch as dicts, the map column as a dict (for tests and jobs)."""
    out = batch.to_pylist()
    for row in out:
        if row.get("properties") is not None:
            row["properties"] = dict(row["properties"])
    return out


def require_write_columns(names: Sequence[str]) -> None:
    """A DataFrame to write needs topic and body, and nothing the writer would drop."""
    missing = {"topic", "body"} - set(names)
    if missing:
        raise ValueError(f"tidemq write needs columns {sorted(missing)}; it has {list(names)}")
    extra = set(names) - WRITE_COLUMNS
    if extra:
        raise ValueError(
            f"tidemq write does not know columns {sorted(extra)}; "
            f"it takes {sorted(WRITE_COLUMNS)}"
        )


def as_properties(value: Mapping[str, str] | Sequence[tuple[str, str]] | None) -> dict[str, str]:
    if value is None:
        return {}
    return dict(value)
