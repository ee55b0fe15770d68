"""One local[2] Spark session (loopback, UI off) per test worker, shared by the modules that
worker runs (starting one costs 7-15 s on two cores). No module sees another's configuration
or cached state: each module gets the session as the one before found it (its runtime
configuration, no cached tables, no temporary views, no running queries). A module that
needs a session of its own (another master) asks for `no_shared_spark` first: getOrCreate
would hand it the shared one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")

_shared: dict[str, Any] = {}


def _stop_shared() -> None:
    session = _shared.pop("session", None)
    if session is not None:
        session.stop()


@pytest.fixture(scope="session")
def _shared_spark() -> Iterator[dict[str, Any]]:
    yield _shared
    _stop_shared()


@pytest.fixture(scope="module")
def spark(_shared_spark: dict[str, Any]) -> Iterator[Any]:
    from pipeline import local_session
    from tests.pipeline.sessions import SESSION_CONF

    session = _shared_spark.get("session")
    if session is None:
        session = _shared_spark["session"] = local_session("tidemq-tests", **SESSION_CONF)
    conf = dict(session.conf.getAll)
    yield session
    for query in session.streams.active:
        query.stop()
    session.catalog.clearCache()
    for table in session.catalog.listTables():
        if table.isTemporary:
            session.catalog.dropTempView(table.name)
    now = dict(session.conf.getAll)
    for key in now.keys() - conf.keys():
        if session.conf.isModifiable(key):
            session.conf.unset(key)
    for key, value in conf.items():
        if now.get(key) != value and session.conf.isModifiable(key):
            session.conf.set(key, value)


@pytest.fixture(scope="module")
def no_shared_spark(_shared_spark: dict[str, Any]) -> None:
    """The shared session stopped (the next module asking for `spark` starts another)."""
    _stop_shared()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that needs a SparkSession starts a JVM: it belongs to the slow tier, not to
    `scripts/test --quick`'s in-process one."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
