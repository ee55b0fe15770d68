"""One local[2] Spark session (loopback, UI off) shared by the pipeline tests: starting one
costs 7-15 s on two cores, so every module uses the same session."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")


@pytest.fixture(scope="session")
def spark():
    from pipeline import local_session

    session = local_session("tidemq-tests", **{"spark.ui.showConsoleProgress": "false"})
    yield session
    session.stop()
