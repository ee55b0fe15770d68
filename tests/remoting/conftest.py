"""A real cluster for the remoting tests: a name server, a SYNC_MASTER and its SLAVE, shared
by a test file (module scope: starting three processes per test would cost the suite
minutes). Tests use their own topics and groups so they do not see each other's messages."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from tests.cluster.helpers import sync_group


@attrs.frozen
class RemotingCluster:
    namesrv: str
    master: str
    slave: str
    directory: Path


@pytest.fixture(scope="module")
def rmq_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RemotingCluster]:
    directory = tmp_path_factory.mktemp("rmq")
    with sync_group(directory) as cluster:
        yield RemotingCluster(cluster["namesrv"], cluster["master"], cluster["slave"], directory)

def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test on the cluster starts processes: the slow tier, not `scripts/test --quick`'s."""
    for item in items:
        if "rmq_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
