"""A whole cluster in one trio run over chaos/sim/network.py's in-memory network: a name
server, a master and a slave (node.broker.Broker and cluster.namesrv.NameServer as the
node processes run them, real stores in tmp_path) and a Producer and a PullConsumer of
the client library, every connection through one `SimNetwork`. The brokers register,
the producer routes through the name server, the slave replicates, and a cut
master–slave link stops only replication until it is healed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from chaos.sim.cluster import CLIENT_HOST, NAMESRV_ADDRESS, SimCluster
from chaos.sim.network import SimNetwork
from cluster.client.consumer import PullConsumer
from cluster.client.producer import Producer
from cluster.client.routing import MessageQueue
from cluster.namesrv.config import NamesrvConfig
from cluster.namesrv.server import NameServer
from node.broker import Broker
from node.config import load_config
from store import runtime
from store.message_store import MessageStore
from tests.ha.test_replication import assert_identical, caught_up
from tests.node.nodeproc import master_conf, slave_conf
from tests.waiting import wait_until

NAMESRV, M, S, C = "10.0.0.9", "10.0.0.1", "10.0.0.2", "10.0.0.3"


@asynccontextmanager
async def sim_cluster(tmp_path: Path, net: SimNetwork) -> AsyncIterator[tuple[Broker, Broker]]:
    """The name server, the master and the slave on their simulated hosts, until the block ends."""
    namesrv = f"{NAMESRV}:9876"
    master_cfg = master_conf(tmp_path, role="ASYNC_MASTER", brokerIP1=M, listenPort=10911, haListenPort=10912,
                             namesrvAddr=namesrv)
    slave_cfg = slave_conf(tmp_path, master_cfg, brokerIP1=S, listenPort=10911, haListenPort=10912,
                           namesrvAddr=namesrv, haMasterAddress=f"{M}:10912", masterAddr=f"{M}:10911")
    async with trio.open_nursery() as nursery:
        name_server = NameServer(NamesrvConfig(listen_address=NAMESRV, listen_port=9876), handle_signals=False,
                                 net=net.host(NAMESRV))
        await nursery.start(name_server.run)
        master = Broker(load_config(str(master_cfg)), handle_signals=False, net=net.host(M))
        slave = Broker(load_config(str(slave_cfg)), handle_signals=False, net=net.host(S))
        await nursery.start(master.run)
        await nursery.start(slave.run)
        try:
            yield master, slave
        finally:
            master.stop()
            slave.stop()
            name_server.stop()
            nursery.cancel_scope.deadline = trio.current_time() + 30  # a bounded stop


async def test_a_cluster_runs_in_one_trio_run_over_the_simulated_network(tmp_path):
    net = SimNetwork()
    async with sim_cluster(tmp_path, net) as (master, slave):
        def stores() -> tuple[MessageStore, MessageStore]:  # each term has its own
            return master.services.store, slave.services.store

        async with Producer(namesrv=f"{NAMESRV}:9876", net=net.host(C)) as producer:
            await wait_until(lambda: master.services is not None and slave.services is not None, what="both serving")
            sent = [await producer.send("Sim", b"m%d" % i, queue_id=i % 2) for i in range(20)]
            assert {r.status.value for r in sent} == {"PUT_OK"}
            assert {r.broker_name for r in sent} == {master.cfg.broker_name}  # routed by the name server
            await wait_until(lambda: caught_up(*stores())(), what="the slave caught up")

            net.cut(M, S)
            await wait_until(lambda: not slave.services.ha_client.connected, what="the cut ended replication")
            more = [await producer.send("Sim", b"n%d" % i, queue_id=0) for i in range(10)]
            assert {r.status.value for r in more} == {"PUT_OK"}  # the client's link is not cut
            assert slave.services.store.commit_log.max_offset() < master.services.store.commit_log.max_offset()
            net.heal(M, S)
            await wait_until(lambda: caught_up(*stores())(), timeout=20, what="the slave caught up after the heal")
            assert_identical(*stores())

        async with PullConsumer(namesrv=f"{NAMESRV}:9876", group="sim", topic="Sim", net=net.host(C)) as consumer:
            got = await consumer.pull(MessageQueue("Sim", master.cfg.broker_name, 0), 32, timeout_ms=0, offset=0)
            assert [m.body for m in got.messages] == [b"m%d" % i for i in range(0, 20, 2)] + [
                b"n%d" % i for i in range(10)]
            assert all(m.born_host.startswith(f"{C}:") for m in got.messages)  # the client's simulated end



async def test_a_send_retried_after_unknown_outcomes_says_how_many_it_may_have_stored(tmp_path, autojump_clock):
    """The master pauses under a send: each attempt times out, its request buffered; on
    resume every buffered attempt is stored and the last one answers. The result counts the
    earlier attempts of unknown outcome (`unknown_attempts`), as many extra copies as the
    store holds: delivery is at least once, and the client says by how much."""
    net = SimNetwork()
    cluster = SimCluster(str(tmp_path), net, replication="ASYNC_MASTER", flush="ASYNC_FLUSH")
    with runtime.simulated(0.0):
        async with trio.open_nursery() as nursery:
            await cluster.start(nursery)
            master = cluster.master
            async with Producer(namesrv=NAMESRV_ADDRESS, net=net.host(CLIENT_HOST), send_timeout=1.0,
                                retries=2) as producer:
                warm = await producer.send("Sim", b"warm", queue_id=0)
                assert warm.unknown_attempts == 0
                net.pause(master.host)

                async def resume_in_the_last_attempt() -> None:
                    await trio.sleep(2.5)  # poll: simulated time; attempts time out at 1 s and 2 s, the third is answered
                    net.resume(master.host)

                nursery.start_soon(resume_in_the_last_attempt)
                result = await producer.send("Sim", b"again", keys=["retried"], queue_id=0)
            assert result.unknown_attempts == 2
            store = master.broker.services.store
            await wait_until(lambda: store.dispatch_behind_bytes() == 0, what="dispatched")
            copies = store.get_max_offset_in_queue("Sim", 0) - 1  # every attempt went to queue 0, after "warm"
            assert copies == 1 + result.unknown_attempts
            await cluster.stop()
            nursery.cancel_scope.cancel()
