"""A real cluster for the remoting tests: a name server, a SYNC_MASTER and its SLAVE, shared
by a test file (module scope: starting three processes per test would cost the suite
minutes). Tests use their own topics and groups so they do not see each other's messages."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import trio

from tests.cluster.helpers import sync_group
from tests.waiting import wait_until
from wire.client import NotFound, connect
from wire.protocol.namesrv import GetRoute


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
        trio.run(_routes_tbw102, cluster["namesrv"])
        yield RemotingCluster(cluster["namesrv"], cluster["master"], cluster["slave"], directory)


async def _routes_tbw102(namesrv: str) -> None:
    """Until the name server routes TBW102: a C++ producer sending to a new topic asks for its
    route at once and is answered TBW102's (autoCreateTopicEnable); before the master's
    registration with it arrived, "No route info of this topic" (a full run failed so)."""
    async def routed() -> bool:
        try:
            async with connect(namesrv) as conn:
                await conn.call(GetRoute(topic="TBW102"))
        except NotFound:
            return False
        return True

    await wait_until(routed, what="the name server routing TBW102")

def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test on the cluster starts processes: the slow tier, not `scripts/test --quick`'s."""
    for item in items:
        if "rmq_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
