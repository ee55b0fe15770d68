"""The network seam (ha/net.py) with chaos/sim/network.py's in-memory network: the node's
client-protocol server, the client library and HA replication run unchanged over simulated
links in one trio run, with real stores in tmp_path; a cut link ends its connections and
refuses new ones until healed."""

from __future__ import annotations

from functools import partial

import pytest
import trio
import trio.testing

from chaos.sim.network import SimNetwork
from ha.master import HAService
from ha.slave import HAClient
from node.config import load_config
from node.ops.dispatch import BATCHED_OPS, append_requests, finish_requests, handle_now
from node.ops.services import NodeServices
from node.server import ClientServer
from node.tables.offsets import ConsumerOffsetManager
from node.tables.topics import TopicConfigManager
from store.config import BrokerRole
from store.message_store import open_store
from tests.ha.test_replication import assert_identical, caught_up, make_config
from tests.node.nodeproc import master_conf
from tests.waiting import wait_until
from wire.client import ConnectionLost, connect
from wire.protocol import Send, Status

M, S, C = "10.0.0.1", "10.0.0.2", "10.0.0.3"  # hosts are addresses: a message stores its born host


async def test_sends_and_replication_run_over_the_simulated_network(tmp_path):
    net = SimNetwork()
    cfg = load_config(str(master_conf(tmp_path, role="ASYNC_MASTER")))
    root = cfg.store.store_path_root_dir
    topics = TopicConfigManager(root, auto_create=True, default_queue_nums=4)
    topics.load()
    offsets = ConsumerOffsetManager(root)
    offsets.load()
    async with open_store(cfg.store) as master, \
            open_store(make_config(tmp_path / "slave", BrokerRole.SLAVE,
                                   mapped_file_size_commit_log=cfg.store.mapped_file_size_commit_log)) as slave, \
            trio.open_nursery() as nursery:
        services = NodeServices(cfg=cfg, store=master, topics=topics, offsets=offsets)
        server = ClientServer(partial(handle_now, services), host=M, port=10911, max_frame_size=cfg.max_frame_size,
                              batched_ops=BATCHED_OPS, commit=partial(append_requests, services),
                              finish=partial(finish_requests, services), net=net.host(M))
        await nursery.start(server.run)
        ha = HAService(master.replica_log, master.config, host=M, port=10912, net=net.host(M))
        await nursery.start(ha.run)
        client = HAClient(slave.replica_log, slave.config, f"{M}:10912", net=net.host(S))
        await nursery.start(client.run)

        async with connect(f"{M}:10911", net=net.host(C)) as conn:
            for i in range(20):
                answer = await conn.call(Send(topic="Sim", queue_id=i % 4, body=b"m%d" % i))
                assert answer.status is Status.PUT_OK, answer
        await wait_until(caught_up(master, slave), what="the slave caught up")
        assert ha.status()[0].address == client.local_address  # both ends name the link alike
        assert client.local_address.startswith(f"{S}:")
        assert master.look_message_by_offset(0).born_host.startswith(f"{C}:")  # the client's end
        net.cut(M, S)
        await wait_until(lambda: not client.connected, what="the cut ended the replication link")
        async with connect(f"{M}:10911", net=net.host(C)) as conn:  # other links stay up
            for i in range(20, 30):
                assert (await conn.call(Send(topic="Sim", queue_id=0, body=b"m%d" % i))).status is Status.PUT_OK
        with pytest.raises(ConnectionLost, match="refused"):
            async with connect(f"{M}:10911", net=net.host(S)):
                pass
        assert slave.commit_log.max_offset() < master.commit_log.max_offset()
        net.heal(M, S)
        await wait_until(caught_up(master, slave), timeout=20, what="the slave caught up after the heal")
        assert_identical(master, slave)
        nursery.cancel_scope.cancel()


async def test_a_simulated_connection_behaves_as_a_tcp_stream_does(autojump_clock):
    """Bytes arrive in order, chunked by `max_bytes`; the peer's close reads as EOF and its
    sends after that as a broken pipe; a closed end refuses its own use; a cut wakes a
    receive in progress; `send_nowait` (ha/net.py write_now) writes at once or would block
    while the host is paused or the link held."""
    net = SimNetwork()
    [listener], _ = await net.host(M).listen(M, 7000)
    client = await net.host(C).connect(M, 7000)
    server = await listener.accept()

    await client.send_all(b"hello ")
    assert client.send_nowait(b"world") == 5
    assert await server.receive_some(3) == b"hel"
    assert await server.receive_some() == b"lo world"

    net.pause(C)
    with pytest.raises(BlockingIOError):
        client.send_nowait(b"x")
    net.resume(C)
    net.cut(C, M, one_way=True)
    with pytest.raises(BlockingIOError):
        client.send_nowait(b"x")
    net.heal(C, M)

    await client.send_eof()
    assert await server.receive_some() == b""  # EOF
    with pytest.raises(trio.ClosedResourceError):
        await client.send_all(b"after eof")
    await server.send_all(b"still one way")  # half-closed: the other direction works
    assert await client.receive_some() == b"still one way"

    server.close_now()
    assert await client.receive_some() == b""  # the peer closed: EOF
    with pytest.raises(trio.ClosedResourceError):
        await server.receive_some()

    writer = await net.host(C).connect(M, 7000)
    (await listener.accept()).close_now()
    with pytest.raises(trio.BrokenResourceError):
        await writer.send_all(b"to a closed peer")

    other = await net.host(C).connect(M, 7000)
    accepted = await listener.accept()
    async with trio.open_nursery() as nursery:
        async def receive() -> None:
            with pytest.raises(trio.ClosedResourceError):
                await accepted.receive_some()

        nursery.start_soon(receive)
        await trio.testing.wait_all_tasks_blocked()  # the receive is parked
        net.cut(C, M)  # ends both ends of every connection between the hosts
    with pytest.raises(BrokenPipeError):
        other.send_nowait(b"x")
    with pytest.raises(ConnectionRefusedError):
        await net.host(C).connect(M, 7000)
