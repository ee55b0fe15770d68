"""The `tidemq` PySpark data source (pyspark.sql.datasource, PySpark 4.x).

- `spark.read.format("tidemq").load(path)`: store directories (store_scan).
- `spark.read.format("tidemq").option("namesrv", ...).option("topic", ...)`: a live
  cluster (live), `startingOffsets` / `endingOffsets`.
- `spark.readStream.format("tidemq")...`: offsets per group/queue in Spark's checkpoint,
  `maxOffsetsPerTrigger`, `Trigger.AvailableNow`.
- `df.write.format("tidemq").mode("append")`: sends through Producer (sink).

The classes here only adapt Spark's calls to those modules; everything they do is
testable without a JVM.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from pipeline import store_scan
from pipeline.schema import ddl
from store.layout import StoreToolError

if TYPE_CHECKING:
    from pipeline import live, sink

# live reads and writes import the cluster client (trio, the node's codec, SCRAM): only
# when used, so that a store read's planners and workers start without them


def _expected_errors() -> tuple[type[BaseException], ...]:
    """Errors whose message says all there is (file, offset, what is wrong; a bad option;
    the node's refusal; a failed write): a traceback adds nothing for the user."""
    errors: list[type[BaseException]] = [store_scan.StoreReadError, StoreToolError, ValueError]
    if (client := sys.modules.get("wire.client")) is not None:
        errors.append(client.TidemqError)
    if (writer := sys.modules.get("pipeline.sink")) is not None:
        errors.append(writer.WriteFailed)
    return tuple(errors)


@contextlib.contextmanager
def _message_first() -> Iterator[None]:
    """Let tidemq's message open the error Spark shows.

    PySpark's Python worker reports an error as its traceback with the message last, and
    Spark prefixes that text (`An exception was thrown from the Python worker:`,
    `[PYTHON_DATA_SOURCE_ERROR] ...:`). For the expected errors, ask the worker for the
    message alone (its `SPARK_HIDE_TRACEBACK`, read when it reports), so the text after
    Spark's prefix starts with `StoreReadError: <file>: at CommitLog offset N ...`. Only
    inside a Spark worker (it has PYTHON_WORKER_FACTORY_SECRET), which exits after
    reporting: nothing else it runs is affected. Other errors keep their traceback."""
    try:
        yield
    except Exception as e:
        if isinstance(e, _expected_errors()) and "PYTHON_WORKER_FACTORY_SECRET" in os.environ:
            os.environ["SPARK_HIDE_TRACEBACK"] = "1"
        raise


def _message_first_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    with _message_first():
        yield from batches


class _Partition(InputPartition):
    """Wraps a StorePartition or a QueueRange."""


class TidemqDataSource(DataSource):
    """`format("tidemq")`: see the module docstring and docs/pipeline.md."""

    @classmethod
    def name(cls) -> str:
        return "tidemq"

    def _live(self) -> bool:
        keys = {k.lower() for k in self.options}
        return "namesrv" in keys or "brokers" in keys

    def schema(self) -> str:
        permissive = not self._live() and str(self.options.get("mode", "")).upper() == "PERMISSIVE"
        return ddl(permissive)

    def reader(self, schema: StructType) -> DataSourceReader:
        with _message_first():
            if self._live():
                return LiveReader(dict(self.options))
            return StoreReader(dict(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        with _message_first():
            if not self._live():
                raise ValueError("a tidemq stream reads a live cluster: give option namesrv or brokers")
            return LiveStreamReader(dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        with _message_first():
            if overwrite:
                raise ValueError("a message store is append-only: use .mode('append')")
            from pipeline import sink

            return TidemqWriter(sink.WriteOptions.from_options(dict(self.options)))


class StoreReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.opts = store_scan.ScanOptions.from_options(options)
        path = options.get("path") or options.get("paths")
        if not path:
            raise ValueError("load(path): give a store directory, a glob or a comma-separated list")
        self.roots = store_scan.expand_paths(path.strip("[]").replace('"', ""))

    def partitions(self) -> Sequence[InputPartition]:
        with _message_first():
            return [_Partition(p) for p in store_scan.plan(self.roots, self.opts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if getattr(partition, "value", None) is None:  # Spark reads once when nothing is planned
            return iter(())
        return _message_first_batches(store_scan.read_partition(partition.value, self.opts))


class LiveReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        from pipeline import live

        self.opts = live.LiveOptions.from_options(options)

    def partitions(self) -> Sequence[InputPartition]:
        from pipeline import live

        with _message_first():
            start = live.resolve_offsets(self.opts, self.opts.starting, "startingOffsets")
            end = live.resolve_offsets(self.opts, self.opts.ending, "endingOffsets")
            return [_Partition(r) for r in live.ranges(start, end)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_live(self.opts, partition)


class LiveStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are `{brokerName: {queueId: next offset}}`; a micro-batch reads [start, end)."""

    def __init__(self, options: dict[str, str]) -> None:
        from pipeline import live

        self.opts = live.LiveOptions.from_options(options, streaming=True)
        self._initial: live.Offsets | None = None
        self._until: live.Offsets | None = None  # availableNow: the end fixed at its start

    def initialOffset(self) -> dict:
        from pipeline import live

        if self._initial is None:  # Spark asks several times: answer the same
            self._initial = live.resolve_offsets(self.opts, self.opts.starting, "startingOffsets")
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        from pipeline import live

        self._until = live.latest_offsets(self.opts)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        from pipeline import live

        latest = self._until if self._until is not None else live.latest_offsets(self.opts)
        # never behind start (a slave answering while its master is down may lag)
        end = {b: {q: max(o, start.get(b, {}).get(q, 0)) for q, o in qs.items()} for b, qs in latest.items()}
        for b, qs in start.items():
            for q, o in qs.items():
                end.setdefault(b, {}).setdefault(q, o)
        if isinstance(limit, ReadMaxRows):
            end = live.cap(start, end, limit.max_rows)
        return end

    def reportLatestOffset(self) -> dict | None:
        return None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        from pipeline import live

        return [_Partition(r) for r in live.ranges(start, end)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_live(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: Spark's checkpoint holds the offsets; the cluster keeps the data."""


def _read_live(opts: live.LiveOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    from pipeline import live

    if getattr(partition, "value", None) is None:  # Spark reads once when nothing is planned
        return iter(())
    return _message_first_batches(
        live.read_range(opts, partition.value, opts.namesrv or ",".join(opts.brokers or ())))


class _Report(WriterCommitMessage):
    def __init__(self, report: sink.WriteReport) -> None:
        self.report = report


class TidemqWriter(DataSourceArrowWriter):
    def __init__(self, opts: sink.WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        from pipeline import sink

        with _message_first():
            return _Report(sink.write_partition(self.opts, partition, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every task's sends are stored already; nothing left to do."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Sent messages cannot be taken back; their UNIQ_KEYs identify them."""
