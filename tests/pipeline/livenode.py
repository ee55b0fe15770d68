"""One name server and one master with topics ready: the live cluster a pipeline test
writes to and reads from when it needs no slave."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import trio

from cluster.client import Admin
from tests.cluster.helpers import broker_conf, start_namesrv, wait_for
from tests.node.nodeproc import Nodes


@contextlib.contextmanager
def master_with_topics(directory: Path, topics: dict[str, int], role: str = "ASYNC_MASTER") -> Iterator[str]:
    """Started processes until the block ends; yields the name server's address. `topics`
    maps each topic to its queue count; each is routable when the block starts."""
    nodes = Nodes()
    try:
        ns = start_namesrv(nodes, directory)
        nodes.start(broker_conf(directory, "m", "broker-a", ns.address, role=role))

        async def prepare() -> None:
            async with Admin(namesrv=ns.address) as admin:
                await wait_for(lambda: _has_master(admin), what="a master registered")
                for topic, queues in topics.items():
                    await admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)
                    await wait_for(lambda t=topic: admin.route(t, refresh=True), what=f"a route of {topic}")

        trio.run(prepare)
        yield ns.address
    finally:
        nodes.cleanup()


async def _has_master(admin: Admin) -> bool:
    return any(b.is_master for b in await admin.cluster_info())
