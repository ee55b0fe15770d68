"""Broadcasting consumption against real processes: every member of a broadcasting group
gets every message, a clustering group on the same topic still splits it, a member
started again with the same client id continues from its offsets file (also after a
SIGKILL, once the file was written), and the brokers list the members as broadcasting but
hold no offset for the group."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
import trio

from cluster.client import Admin, BroadcastConsumer, Consumer, NotFound, Producer
from cluster.client.local_offsets import LocalOffsetStore
from tests.cluster.helpers import broker_conf, call, cli, start_namesrv, wait_for
from tests.node.nodeproc import REPO, Nodes
from tests.waiting import wait_until
from wire.protocol import ConsumerList, FetchOffset

pytestmark = pytest.mark.slow  # a name server and a master, as processes

QUEUES = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    directory = tmp_path_factory.mktemp("broadcast")
    nodes = Nodes()
    try:
        ns = start_namesrv(nodes, directory)
        master = nodes.start(broker_conf(directory, "m", "broker-a", ns.address))
        yield {"namesrv": ns.address, "master": master.address}
    finally:
        nodes.cleanup()


async def _topic(ns: str, topic: str) -> None:
    async with Admin(namesrv=ns) as admin:
        await wait_for(lambda: admin.cluster_info(), what="a broker registered")
        await admin.create_topic(topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        await wait_for(lambda: admin.route(topic, refresh=True), what="route")


async def _send(ns: str, topic: str, keys: list[str]) -> None:
    async with Producer(namesrv=ns) as producer:
        for key in keys:
            await producer.send(topic, key.encode(), keys=[key])


def test_every_broadcast_member_gets_every_message_and_a_clustering_group_is_unaffected(cluster, tmp_path):
    ns, topic = cluster["namesrv"], "BcastPrices"

    async def main() -> None:
        await _topic(ns, topic)
        got: dict[str, list[str]] = {"b1": [], "b2": [], "c1": [], "c2": []}

        def keep(name: str):
            return lambda msg: got[name].append(msg.keys[0])

        async with (
            BroadcastConsumer("bcast", topic, keep("b1"), namesrv=ns, client_id="b1", offsets_dir=tmp_path,
                              poll_ms=200) as b1,
            BroadcastConsumer("bcast", topic, keep("b2"), namesrv=ns, client_id="b2", offsets_dir=tmp_path,
                              poll_ms=200),
            Consumer("clust", topic, keep("c1"), namesrv=ns, client_id="c1", poll_ms=200) as c1,
            Consumer("clust", topic, keep("c2"), namesrv=ns, client_id="c2", poll_ms=200) as c2,
        ):
            assert len(b1.queues) == QUEUES, "a broadcasting member reads every queue"

            async def listed() -> bool:
                reply = await call(cluster["master"], ConsumerList(group="bcast"))
                models = {d["client_id"]: d["message_model"] for d in reply.details}
                return reply.members == [] and models == {"b1": "BROADCASTING", "b2": "BROADCASTING"}

            await wait_for(listed, what="the master lists both broadcasting members, allocating them nothing")
            await wait_until(lambda: len(c1.owned | c2.owned) == QUEUES + 1 and not (c1.owned & c2.owned),
                             timeout=20, what="the clustering members split the queues (and the retry queue)")
            keys = [f"k{i}" for i in range(24)]
            await _send(ns, topic, keys)
            await wait_until(lambda: sorted(got["b1"]) == sorted(got["b2"]) == sorted(keys)
                             and sorted(got["c1"] + got["c2"]) == sorted(keys),
                             timeout=20, what="every message at each broadcast member, once across the cluster group")
            assert got["c1"] and got["c2"], "the clustering members shared the topic"
        assert (await call(cluster["master"], ConsumerList(group="bcast"))).details == [], "they unregistered"
        for member in ("b1", "b2"):  # left: each file holds the end of every queue
            store = LocalOffsetStore(member, "bcast", tmp_path)
            store.open()
            assert sum(store.offsets.values()) == len(keys) and len(store.offsets) == QUEUES
            store.close()
        for queue_id in range(QUEUES):  # nothing committed on the broker for the broadcasting group
            with pytest.raises(NotFound):
                await call(cluster["master"], FetchOffset(group="bcast", topic=topic, queue_id=queue_id))

    trio.run(main)


def _lines(result: subprocess.CompletedProcess[bytes]) -> list[dict]:
    assert result.returncode == 0, result.stderr.decode()
    return [json.loads(line) for line in result.stdout.decode().splitlines()]


def test_the_cli_member_continues_from_its_file_and_names_a_corrupt_one(cluster, tmp_path):
    ns, topic = cluster["namesrv"], "BcastCli"
    keys = [f"c{i}" for i in range(10)]

    async def setup() -> None:
        await _topic(ns, topic)
        await _send(ns, topic, keys)

    trio.run(setup)
    member = ["consume", "--namesrv", ns, "--topic", topic, "--group", "bcast-cli", "--broadcast",
              "--offsets-dir", str(tmp_path), "--timeout-ms", "1500"]
    first = _lines(cli(*member, "--client-id", "r1", "--max", "4"))
    rest = _lines(cli(*member, "--client-id", "r1"))
    assert len(first) == 4 and sorted(m["keys"][0] for m in first + rest) == sorted(keys), "no re-read, no skip"
    assert _lines(cli(*member, "--client-id", "r1")) == [], "a third run has nothing left"
    other = _lines(cli(*member, "--client-id", "r2"))
    assert sorted(m["keys"][0] for m in other) == sorted(keys), "another member gets every message too"

    usage = cli(*member[:-2], "--client-id", "r1", "--commit")
    assert usage.returncode == 2 and b"--broadcast" in usage.stderr
    spaced = cli(*member, "--client-id", "web 1")
    assert spaced.returncode == 2 and b"client id 'web 1'" in spaced.stderr, spaced.stderr

    path = tmp_path / "r1" / "bcast-cli" / "offsets.json"
    path.write_text("{torn")
    bad = cli(*member, "--client-id", "r1")
    assert bad.returncode == 1 and bad.stdout == b""
    err = bad.stderr.decode()
    assert str(path) in err and "offsets.json.bak" in err and "Traceback" not in err, err


def test_a_stopped_or_killed_member_continues_from_what_its_file_holds(cluster, tmp_path):
    """The promise: at least once. SIGTERM stops a member cleanly: it writes its file on the
    way out. A member SIGKILLed after its file was written (every 5 s) gets nothing again;
    one killed before that would get again what it handled since (not forced here)."""
    ns, topic = cluster["namesrv"], "BcastKill"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    member = [sys.executable, "-m", "tidemq", "consume", "--namesrv", ns, "--topic", topic, "--group", "bcast-kill",
              "--broadcast", "--offsets-dir", str(tmp_path), "--client-id", "k1"]
    path = tmp_path / "k1" / "bcast-kill" / "offsets.json"

    def saved() -> int:
        try:
            return sum(e["offset"] for e in json.loads(path.read_text())["offsetTable"])
        except (OSError, ValueError):
            return -1

    def run_until(keys: list[str], sig: int) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([*member, "--timeout-ms", "60000"], cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env)
        try:
            assert proc.stdout is not None
            printed = [json.loads(proc.stdout.readline()) for _ in keys]
            assert sorted(m["keys"][0] for m in printed) == sorted(keys)
            if sig == signal.SIGTERM:
                listed = _lines(cli("admin", "consumerConnection", "--namesrv", ns, "-g", "bcast-kill", "--json"))
                assert [(m["client_id"], m["message_model"]) for m in listed] == [("k1", "BROADCASTING")], listed
            else:
                trio.run(lambda: wait_until(lambda: saved() == total + len(keys), timeout=15,
                                            what="the member's file holds every offset"))
            proc.send_signal(sig)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        return proc

    async def setup() -> None:
        await _topic(ns, topic)
        await _send(ns, topic, first)

    first, total = [f"x{i}" for i in range(8)], 0
    trio.run(setup)
    stopped = run_until(first, signal.SIGTERM)
    assert stopped.returncode == 143 and stopped.stderr is not None and b"stopped by" in stopped.stderr.read()
    assert saved() == len(first), "a clean stop writes the file on the way out"
    second, total = [f"y{i}" for i in range(4)], len(first)
    trio.run(_send, ns, topic, second)
    killed = run_until(second, signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    third = [f"z{i}" for i in range(3)]
    trio.run(_send, ns, topic, third)
    again = _lines(subprocess.run([*member, "--timeout-ms", "1500"], cwd=REPO, capture_output=True, timeout=60,
                                  env=env))
    assert sorted(m["keys"][0] for m in again) == sorted(third)
