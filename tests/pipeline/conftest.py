"""One local[2] Spark session (loopback, UI off) per test module, as the pipeline issue asks:
a module's tests share it (starting one costs 7-15 s on two cores), and no module sees
another's configuration or cached state."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")


@pytest.fixture(scope="module")
def spark():
    from pipeline import local_session

    session = local_session("tidemq-tests", **{"spark.ui.showConsoleProgress": "false"})
    yield session
    session.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that needs a SparkSession starts a JVM: it belongs to the slow tier, not to
    `scripts/test --quick`'s in-process one."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
