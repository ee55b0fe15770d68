"""Fixtures shared by the whole suite."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from cluster.launch.etcd_server import EtcdServer, etcd_binary
from cluster.launch.layout import FREE_PORTS, FREE_PORTS_ENV
from tests import examples  # noqa: F401 (registers the `quick` hypothesis profile before it loads)
from tests.node.nodeproc import Nodes


def _own_port_slice() -> None:
    """Each xdist worker (and every process it starts) draws free ports from its own slice
    of FREE_PORTS: workers remember only their own hand-outs, and CI once saw a node fail
    to bind a port the other worker had chosen for its own cluster a moment before."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not worker.startswith("gw") or not count.isdigit() or FREE_PORTS_ENV in os.environ:
        return
    size = len(FREE_PORTS) // max(1, int(count))
    lo = FREE_PORTS.start + int(worker[2:]) * size
    os.environ[FREE_PORTS_ENV] = f"{lo}-{lo + size - 1}"


_own_port_slice()


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


LONGEST_FILES = (
    "tests/chaos/test_sim.py",  # the two 300-seed sweeps, one after the other
    "tests/chaos/test_scenarios.py",
    "tests/cluster/test_auto_failover.py",
    "tests/tidemq/test_readme.py",
    "tests/pipeline/test_standalone.py",
    "tests/pipeline/test_live.py",
    "tests/cluster/test_launcher.py",
)
"""The files that take longest (a minute or more each on two idle cores), longest first."""


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Whole files in the order that lets the workers end together (scripts/test runs the
    whole suite with `--dist loadfile --no-loadscope-reorder`, so workers take files in this
    order): the longest files first, then every other file with a slow test, then the
    in-process files, which fill the end. A file's tests keep their order."""
    def rank(item: pytest.Item) -> tuple[int, int]:
        path = item.nodeid.split("::", 1)[0]
        if path in LONGEST_FILES:
            return 0, LONGEST_FILES.index(path)
        return (1 if path in slow_files else 2), 0

    slow_files = {i.nodeid.split("::", 1)[0] for i in items if i.get_closest_marker("slow")}
    items.sort(key=rank)  # stable: within a rank, files and tests keep the collection order


ONE_WORKER_DIRS = ("tests/pipeline/",)
"""Directories whose files one xdist worker runs, together: the Spark tests share one local
session per worker (tests/pipeline/conftest.py), and a session costs 7-15 s of CPU to start and
~1 GB while it lives; spread over three workers there were three of them, each with a cold JIT."""


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """`--dist loadfile`, but the files under ONE_WORKER_DIRS make one unit of work."""
    if config.getoption("dist", None) != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return next((d for d in ONE_WORKER_DIRS if path.startswith(d)), path)

    return Scheduling(config, log)
