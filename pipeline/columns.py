"""Arrow record batches straight from column buffers: the compiled scan
(`store._accel.scan_columns`) fills Arrow's own layouts (native ints, int32 offsets, validity
bits), so a batch of clean rows is assembled without a Python object per row or per value.
tests/pipeline/test_columns.py holds these batches equal to BatchBuilder's from the same
records."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.schema import _DERIVED, CORRUPT_COLUMN


def _fixed(kind: pa.DataType, n: int, data: bytes) -> pa.Array:
    return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(data)])


def _text(kind: pa.DataType, n: int, parts: tuple) -> pa.Array:
    valid, offsets, data = parts
    return pa.Array.from_buffers(
        kind, n, [None if valid is None else pa.py_buffer(valid), pa.py_buffer(offsets), pa.py_buffer(data)],
    )


def batch_from_columns(
    schema: pa.Schema, n: int, cols: dict, source: str, *, verify_crc: bool
) -> pa.RecordBatch:
    """The record batch of `n` rows of `scan_columns` output, in `schema` (the reader's)."""
    arrays = []
    for field in schema:
        name, kind = field.name, field.type
        if name in _DERIVED:
            millis = _fixed(pa.int64(), n, cols[_DERIVED[name]])
            arrays.append(pc.multiply(millis, 1000).cast(kind))
        elif name == "body":
            parts = cols["body"]
            arrays.append(pa.nulls(n, kind) if parts is None else _text(kind, n, parts))
        elif name == "crc_ok":
            arrays.append(pa.array(np.ones(n, np.bool_)) if verify_crc else pa.nulls(n, kind))
        elif name == "keys":
            offsets, child = cols["keys"]
            values = _text(pa.string(), len(child[1]) // 4 - 1, child)
            arrays.append(pa.ListArray.from_arrays(_fixed(pa.int32(), n + 1, offsets), values))
        elif name == "properties":
            offsets, names, values = cols["properties"]
            count = len(names[1]) // 4 - 1
            arrays.append(pa.MapArray.from_arrays(
                _fixed(pa.int32(), n + 1, offsets), _text(pa.string(), count, names),
                _text(pa.string(), count, values)))
        elif name == "source":
            raw = source.encode("utf-8")  # one value n times, without a Python list
            offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(raw))
            arrays.append(pa.Array.from_buffers(kind, n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)]))
        elif name == CORRUPT_COLUMN:
            arrays.append(pa.nulls(n, kind))
        elif isinstance(cols[name], tuple):
            arrays.append(_text(kind, n, cols[name]))
        else:
            arrays.append(_fixed(kind, n, cols[name]))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
