"""The row schema of the `tidemq` data source, in Spark DDL and in Arrow, and the builder
that turns decoded messages into Arrow record batches.

Spark checks an Arrow batch against the declared schema exactly (int32 for int, int64 for
long, timestamp[us, UTC] for timestamp), so both are derived from one column table here.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from store.message import PROPERTY_KEYS, PROPERTY_TAGS, StoredMessage, decode_msg_id
from store.msg_id import msg_id_prefix

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


# the order of a row tuple in BatchBuilder: the schema's columns without the derived ones
_ROW = tuple(name for name, _, _ in COLUMNS if name not in _DERIVED) + (CORRUPT_COLUMN,)
_INDEX = {name: i for i, name in enumerate(_ROW)}
_KEYS, _PROPS = _INDEX["keys"], _INDEX["properties"]


class BatchBuilder:
    """Accumulates rows (one tuple each: cheaper than an append per column) and emits
    Arrow record batches of `batch_rows`; the list and map columns are built from flat
    value arrays and offsets rather than from Python objects per row."""

    def __init__(self, *, permissive: bool = False, batch_rows: int = 8192) -> None:
        self.permissive = permissive
        self.schema = arrow_schema(permissive)
        self.batch_rows = batch_rows
        self.rows: list[tuple[Any, ...]] = []
        self._clean = True  # no row with null keys/properties (a corrupt row) in this batch

    def add_stored(
        self, m: StoredMessage, source: str, *, crc_ok: bool | None, include_body: bool,
        corrupt: str | None = None,
    ) -> None:
        """One CommitLog record, as the store's decoder returned it."""
        props = m.properties
        raw_keys = props.get(PROPERTY_KEYS)
        self.rows.append((
            m.topic, m.queue_id, m.queue_offset, m.commitlog_offset, m.size,
            m.body if include_body else None, m.body_crc, crc_ok, m.flag, m.sys_flag,
            m.born_timestamp, m.born_host, m.store_timestamp, m.store_host, m.reconsume_times,
            props.get(PROPERTY_TAGS), [k for k in raw_keys.split(" ") if k] if raw_keys else [], props,
            msg_id_prefix(m.store_host) + f"{m.commitlog_offset:016X}", source, corrupt,
        ))

    def add_received(self, m: Any, source: str, body_crc: int, include_body: bool) -> None:
        """One message from a pull (cluster.client ReceivedMessage): TAGS and KEYS go back
        into `properties` so rows read live and from a store directory compare equal.
        `body_crc` is the CRC of the body as received; `crc_ok` compares it with the CRC the
        store holds (null when the node did not send one)."""
        props = dict(m.properties)
        if m.tags:
            props[PROPERTY_TAGS] = m.tags
        if m.keys:
            props[PROPERTY_KEYS] = " ".join(m.keys)
        try:
            store_host = decode_msg_id(m.msg_id)[0]
        except ValueError:
            store_host = None
        self.rows.append((
            m.topic, m.queue_id, m.queue_offset, m.commitlog_offset, m.size,
            m.body if include_body else None, body_crc,
            None if m.body_crc is None else m.body_crc == body_crc, m.flag, m.sys_flag,
            m.born_timestamp, m.born_host, m.store_timestamp, store_host, m.reconsume_times,
            m.tags, list(m.keys), props, m.msg_id, source, None,
        ))

    def add_corrupt(self, source: str, offset: int, reason: str) -> None:
        """A bad range (permissive mode): only `commitlog_offset`, `source` and `_corrupt`."""
        row: list[Any] = [None] * len(_ROW)
        row[_INDEX["commitlog_offset"]] = offset
        row[_INDEX["source"]] = source
        row[_INDEX[CORRUPT_COLUMN]] = reason
        self.rows.append(tuple(row))
        self._clean = False

    @property
    def full(self) -> bool:
        return len(self.rows) >= self.batch_rows

    def flush(self) -> pa.RecordBatch | None:
        """The rows so far as one record batch (None when empty); starts a new one."""
        if not self.rows:
            return None
        cols = list(zip(*self.rows, strict=True))
        arrays = []
        for field in self.schema:
            name = field.name
            if name in _DERIVED:
                millis = pa.array(cols[_INDEX[_DERIVED[name]]], pa.int64())
                arrays.append(pa.compute.multiply(millis, 1000).cast(field.type))
            elif name == "keys" and self._clean:
                arrays.append(_list_array(cols[_KEYS]))
            elif name == "properties" and self._clean:
                arrays.append(_map_array(cols[_PROPS]))
            elif name == "properties":
                arrays.append(pa.array([None if p is None else list(p.items()) for p in cols[_PROPS]], field.type))
            else:
                arrays.append(pa.array(cols[_INDEX[name]], field.type))
        self.rows = []
        self._clean = True
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


def _list_array(values: Sequence[list[str]]) -> pa.Array:
    offsets = [0, *itertools.accumulate(map(len, values))]
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()),
                                    pa.array(list(itertools.chain.from_iterable(values)), pa.string()))


def _map_array(values: Sequence[Mapping[str, str]]) -> pa.Array:
    offsets = [0, *itertools.accumulate(map(len, values))]
    keys = list(itertools.chain.from_iterable(values))
    items = list(itertools.chain.from_iterable(v.values() for v in values))
    return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(keys, pa.string()),
                                   pa.array(items, pa.string()))


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
