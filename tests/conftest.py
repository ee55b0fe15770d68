"""Fixtures shared by the whole suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cluster.launch.etcd_server import EtcdServer, etcd_binary
from tests import examples  # noqa: F401 (registers the `quick` hypothesis profile before it loads)
from tests.node.nodeproc import Nodes


@pytest.fixture
def nodes() -> Iterator[Nodes]:
    """Node and name-server processes a test starts; all stopped when it ends."""
    n = Nodes()
    yield n
    n.cleanup()


@pytest.fixture
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """A real single-member etcd on free loopback ports with a scratch data dir (scripts/test
    installs Debian's etcd-server when `etcd` is missing)."""
    if etcd_binary() is None:
        pytest.fail("etcd is not installed: run scripts/test, or apt-get install etcd-server")
    server = EtcdServer(tmp_path_factory.mktemp("etcd") / "data")
    server.start()
    yield server
    server.stop()
