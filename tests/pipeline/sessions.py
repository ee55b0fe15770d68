"""The settings every Spark JVM the pipeline tests start gets.

`-XX:TieredStopAtLevel=1`: the JIT compiles with C1 only. A test's JVM lives for seconds to a
minute of small jobs, which C2's optimising compiles never pay back: measured here on two
cores, a session that writes, reads and streams 40 messages spent 30-35 s of CPU in its JVM
with both compilers and 14-15 s with C1 alone, and answered sooner. What the tests prove is
unchanged: the same Spark, plans and Python workers, only compiled less. (Jobs outside the
tests keep the JVM's default, which long scans need.) The class-data-sharing archive
(pipeline.spark_cds) maps either way.
"""

from __future__ import annotations

JIT = "-XX:TieredStopAtLevel=1"

SUBMIT_ENV = {"SPARK_SUBMIT_OPTS": JIT}
"""The same for a `tidemq pipeline` process: the driver JVM spark-submit starts takes it."""

SESSION_CONF = {"spark.ui.showConsoleProgress": "false", "spark.driver.extraJavaOptions": JIT}
"""`local_session(..., **SESSION_CONF)`: a test's local session (its driver runs the tasks)."""
