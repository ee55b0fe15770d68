"""The floor of PySpark's Python Data Source API for the `tidemq` schema: a data source that
does no work of its own. Before timing, `prebuild` writes the record batches the `tidemq`
source would yield (same schema, same partitions, same rows) to one Arrow IPC file per
partition; `format("tidemq_floor")` then yields those batches, held in the Python worker's memory
once a first (untimed) run has loaded them.
What Spark spends reading it (the Python worker handing Arrow batches over, the JVM taking
them in) is what any Python data source of this schema pays: `scripts/bench pipeline`
reads the `tidemq` source as a fraction of it. With `nullBody=true` the body column is
null, the floor of `includeBody=false`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from pipeline import store_scan
from pipeline.schema import arrow_schema, ddl


def prebuild(roots: list[str], out_dir: str, opts: store_scan.ScanOptions) -> dict[str, int]:
    """Write the `tidemq` source's batches for `roots`, one IPC file per partition."""
    os.makedirs(out_dir, exist_ok=True)
    rows = files = 0
    for i, part in enumerate(store_scan.plan(roots, opts)):
        with pa.OSFile(os.path.join(out_dir, f"part-{i:05d}.arrow"), "wb") as sink, \
                pa.ipc.new_file(sink, arrow_schema()) as writer:
            for batch in store_scan.read_partition(part, opts):
                writer.write_batch(batch)
                rows += batch.num_rows
        files += 1
    return {"rows": rows, "partitions": files}


_LOADED: dict[tuple[str, bool], list[pa.RecordBatch]] = {}
"""Batches already in this Python worker's memory (Spark reuses its workers between jobs)."""


class _File(InputPartition):
    """One prebuilt IPC file."""


class FloorReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.path = options["path"]
        self.null_body = options.get("nullBody", "false").lower() == "true"

    def partitions(self) -> Sequence[InputPartition]:
        return [_File(os.path.join(self.path, n)) for n in sorted(os.listdir(self.path))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if (partition.value, self.null_body) not in _LOADED:
            self._load_all()  # untimed first run: every file, so any later task finds its own
        yield from _LOADED[(partition.value, self.null_body)]

    def _load_all(self) -> None:
        for name in sorted(os.listdir(self.path)):
            path = os.path.join(self.path, name)
            with open(path, "rb") as f:
                reader = pa.ipc.open_file(pa.py_buffer(f.read()))
            batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
            if self.null_body:
                body = reader.schema.get_field_index("body")
                batches = [b.set_column(body, "body", pa.nulls(b.num_rows, pa.binary())) for b in batches]
            _LOADED[(path, self.null_body)] = batches


class FloorDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "tidemq_floor"

    def schema(self) -> str:
        return ddl()

    def reader(self, schema: Any) -> DataSourceReader:
        return FloorReader(dict(self.options))


def register(spark: Any) -> None:
    """Register `format("tidemq_floor")` on `spark`."""
    spark.dataSource.register(FloorDataSource)
