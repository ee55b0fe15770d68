"""A real cluster for the remoting tests: a name server, a SYNC_MASTER and its SLAVE, shared
by a test file (module scope: starting three processes per test would cost the suite
minutes). Tests use their own topics and groups so they do not see each other's messages."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from tests.cluster.helpers import broker_conf, slave_of, start_namesrv
from tests.node.nodeproc import Nodes


@attrs.frozen
class RemotingCluster:
    namesrv: str
    master: str
    slave: str
    directory: Path


@pytest.fixture(scope="module")
def rmq_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RemotingCluster]:
    directory = tmp_path_factory.mktemp("rmq")
    nodes = Nodes()
    try:
        ns = start_namesrv(nodes, directory)
        master = broker_conf(directory, "m", "broker-r", ns.address, role="SYNC_MASTER")
        m = nodes.start(master)
        s = nodes.start(slave_of(directory, master, "s", ns.address))
        yield RemotingCluster(ns.address, m.address, s.address, directory)
    finally:
        nodes.cleanup()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test on the cluster starts processes: the slow tier, not `scripts/test --quick`'s."""
    for item in items:
        if "rmq_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
