"""Spark itself retries a write task that failed half way (local[1,2]: one core, two
attempts per task): the job succeeds, every row is stored, and the rows the first attempt
had already sent are stored twice with the same UNIQ_KEY, so they can be found."""

from __future__ import annotations

import pytest

from tests.pipeline.livenode import master_with_topics

pytestmark = pytest.mark.slow
TOPIC = "Retried"
ROWS = 300
FAIL_AT = 120
BATCH = 50


@pytest.fixture(scope="module")
def spark(no_shared_spark):
    from pipeline import local_session
    from tests.pipeline.sessions import SESSION_CONF

    session = local_session("tidemq-task-retry", master="local[1,2]", **SESSION_CONF)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory):
    with master_with_topics(tmp_path_factory.mktemp("retry"), {TOPIC: 1}) as address:
        yield address


def test_spark_retries_a_failed_write_task_with_the_same_uniq_keys(spark, namesrv):
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType

    def body_of(i):  # no type hints: they would make Spark guess a pandas UDF
        from pyspark import TaskContext

        # on the first attempt one row has no body: the writer refuses it after it has sent
        # the batches before it, and the task fails there
        if i == FAIL_AT and TaskContext.get().attemptNumber() == 0:
            return None
        return f"row-{i}".encode()

    df = spark.range(ROWS, numPartitions=1).select(
        F.lit(TOPIC).alias("topic"), F.udf(body_of, BinaryType())("id").alias("body"))
    df.write.format("tidemq").option("namesrv", namesrv).option("batchSize", str(BATCH)).mode("append").save()

    stored = spark.read.format("tidemq").option("namesrv", namesrv).option("topic", TOPIC).load() \
        .select("body", F.col("properties")["UNIQ_KEY"].alias("uniq")).collect()
    bodies_by_key: dict[str, set[bytes]] = {}
    for r in stored:
        bodies_by_key.setdefault(r["uniq"], set()).add(bytes(r["body"]))
    assert {b for bs in bodies_by_key.values() for b in bs} == {f"row-{i}".encode() for i in range(ROWS)}
    assert all(len(bs) == 1 for bs in bodies_by_key.values()), "one UNIQ_KEY, one row"
    assert len(bodies_by_key) == ROWS
    duplicates = len(stored) - ROWS
    assert duplicates == FAIL_AT // BATCH * BATCH, "the first attempt's full batches, sent again"
