"""The data source, the sink and a job on a Spark standalone cluster: a master and two
workers started as processes with pyspark's `spark-class` (pipeline.standalone), a driver
whose partitions run on both workers; a store read, `export`, a write into a live tidemq
node and a streaming read of it."""

from __future__ import annotations

import os

import pytest

from pipeline import jobs
from pipeline.standalone import StandaloneCluster
from tests.pipeline.livenode import master_with_topics
from tests.pipeline.sessions import JIT, SESSION_CONF
from tests.store.test_tools import sample_messages, write_store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    cluster = StandaloneCluster(tmp_path_factory.mktemp("standalone"), workers=2, java_options=JIT)
    with cluster:
        yield cluster


@pytest.fixture(scope="module")
def session(no_shared_spark, standalone):
    from pipeline import local_session, spark_cds

    spark = local_session("tidemq-standalone", master=standalone.url, **{
        **SESSION_CONF, "spark.executor.memory": "512m",
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",  # both executors before the first task
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
        # the executors' JVMs (on this machine) map Spark's classes from the session's archive
        "spark.executor.extraJavaOptions": f"{JIT} {spark_cds.java_options()}".strip()})
    yield spark
    spark.stop()


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with master_with_topics(tmp_path_factory.mktemp("node"), {"Spread": 2}, role="SYNC_MASTER") as address:
        yield address


def test_a_store_read_and_export_run_on_both_workers(standalone, session, tmp_path):
    store = write_store(tmp_path / "store", sample_messages(240), seg_size=16 * 1024)
    df = session.read.format("tidemq").load(str(store.root))
    assert df.rdd.getNumPartitions() > 4
    # an executor's Python worker runs in that executor's directory under its worker's
    where = set(df.rdd.mapPartitions(lambda rows: [os.getcwd()]).collect())
    workers = {str(d) for d in standalone.worker_dirs()}
    assert {next(w for w in workers if cwd.startswith(w)) for cwd in where} == workers, where
    result = jobs.export(session, str(store.root), None, str(tmp_path / "out.parquet"))
    assert result["rows"] == 240
    assert session.read.parquet(str(tmp_path / "out.parquet")).count() == 240


def test_a_write_and_a_stream_through_a_live_node(session, node, tmp_path):
    rows = [("Spread", f"m{i}".encode()) for i in range(40)]
    (session.createDataFrame(rows, "topic string, body binary").repartition(4)
     .write.format("tidemq").option("namesrv", node).mode("append").save())
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    q = (session.readStream.format("tidemq").option("namesrv", node).option("topic", "Spread")
         .option("startingOffsets", "earliest").load().select("body")
         .writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(ckpt))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(120)
    got = sorted(r["body"] for r in session.read.parquet(str(out)).collect())
    assert got == sorted(b for _, b in rows)


def test_a_process_that_exits_is_named_by_its_main_class(tmp_path):
    """No Spark here: a 'master' that exits at once, and the wait names it and its exit code."""
    import re
    import sys

    cluster = StandaloneCluster(tmp_path, workers=0, timeout=30.0)
    try:
        cluster._spawn("master", [sys.executable, "-c", "raise SystemExit(3)"], dict(os.environ))
        with pytest.raises(RuntimeError, match=r"^Spark standalone: a process exited \(-c, code 3\); "
                           rf"see {re.escape(str(tmp_path))}/\*\.log$"):
            cluster._wait(lambda state: True, "the master")
    finally:
        cluster.stop()
    assert cluster.procs == []
