"""Issue 40's admin actions as an operator types them (`tidemq admin <mqadmin name> -n ...`),
against a real name server, SYNC_MASTER and slave (one cluster for the module): their
output, table and --json, and their exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import trio

from tests.cluster.helpers import (
    REPO,
    call,
    cli,
    sync_group,
)
from tests.waiting import wait_until
from wire.protocol import Pull

pytestmark = pytest.mark.slow  # every test here starts `tidemq` processes


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with sync_group(tmp_path_factory.mktemp("admin")) as addresses:
        yield addresses


def admin(*args: str) -> subprocess.CompletedProcess[bytes]:
    return cli("admin", *args)


def lines(result) -> list[dict]:
    assert result.returncode == 0, (result.stdout, result.stderr.decode())
    return [json.loads(line) for line in result.stdout.decode().splitlines()]


def table(result) -> str:
    """A table, not JSON lines, and no Python spelling of a boolean."""
    assert result.returncode == 0, result.stderr.decode()
    out = result.stdout.decode()
    assert not out.lstrip().startswith("{") and "True" not in out and "False" not in out, out
    return out


def one_line_error(result, code: int = 1) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    err = result.stderr.decode().strip()
    assert err.startswith("tidemq: error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def send(ns: str, topic: str, count: int, *extra: str) -> list[dict]:
    return lines(cli("send", "--namesrv", ns, "--topic", topic, "--count", str(count), *extra, "m{i}"))


def wait(check, what: str, timeout: float = 30.0):
    """Until `check()` (a CLI run per probe) returns something truthy; that value."""
    async def probe():
        return await trio.to_thread.run_sync(check)

    return trio.run(lambda: wait_until(probe, timeout=timeout, what=what, interval=0.2))


def test_consumer_progress_of_every_topic_and_cluster_filters(cluster):
    ns = cluster["namesrv"]
    for topic in ("ProgA", "ProgB"):
        send(ns, topic, 2)
        lines(cli("consume", "--namesrv", ns, "--topic", topic, "--group", "PGG", "--max", "1", "--commit"))

    *rows, total = lines(admin("consumerProgress", "-n", ns, "-g", "PGG", "--json"))
    assert {"ProgA", "ProgB"} <= {r["topic"] for r in rows}
    assert sum(r["lag"] for r in rows if r["topic"] in ("ProgA", "ProgB")) == 2
    assert total == {"group": "PGG", "topic": None, "total_lag": total["total_lag"]} and total["total_lag"] >= 2
    out = table(admin("consumerProgress", "-n", ns, "-g", "PGG"))
    assert "ProgA" in out and "ProgB" in out and "on every topic" in out
    assert "has no committed offset and no live member" in one_line_error(
        admin("consumerProgress", "-n", ns, "-g", "Nobody"))

    topics = lines(admin("topicList", "-n", ns, "-c", "DefaultCluster", "--json"))
    assert any(t["topic"] == "ProgA" for t in topics)
    assert "clusters: DefaultCluster" in one_line_error(admin("topicList", "-n", ns, "-c", "Nope"))
    brokers = lines(admin("clusterList", "-n", ns, "-c", "DefaultCluster", "--json"))
    assert sorted(b["role"] for b in brokers) == ["SLAVE", "SYNC_MASTER"]
    assert "clusters: DefaultCluster" in one_line_error(admin("clusterList", "-n", ns, "-c", "Nope"))
    assert "alive" in table(admin("clusterList", "-n", ns, "-c", "DefaultCluster"))


def test_topic_status_and_a_readable_route_table(cluster):
    ns = cluster["namesrv"]
    lines(admin("updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", "StatusT", "-r", "2", "-w", "2",
                "--json"))
    send(ns, "StatusT", 3, "--queue-id", "0")
    queues = lines(admin("topicStatus", "-n", ns, "-t", "StatusT", "--json"))
    assert [(q["broker_name"], q["queue_id"], q["min_offset"], q["max_offset"]) for q in queues] == [
        ("broker-a", 0, 0, 3), ("broker-a", 1, 0, 0)]
    assert queues[0]["last_update_timestamp"] > 0 and queues[1]["last_update_timestamp"] is None
    out = table(admin("topicStatus", "-n", ns, "-t", "StatusT"))
    assert "last updated" in out and "min offset" in out and "max offset" in out
    assert "'NoSuchTopic'" in one_line_error(admin("topicStatus", "-n", ns, "-t", "NoSuchTopic"))

    out = table(admin("topicRoute", "-n", ns, "-t", "StatusT"))
    rows = [line for line in out.splitlines() if "broker-a" in line]
    assert len(rows) == 2, out  # a row per broker, no JSON in a cell
    assert cluster["master"] in rows[0] and "SYNC_MASTER" in rows[0] and "true" in rows[0]
    assert cluster["slave"] in rows[1] and "SLAVE" in rows[1]
    assert "{" not in out and "broker id" in out
    [route] = lines(admin("topicRoute", "-n", ns, "-t", "StatusT", "--json"))
    assert [b["role"] for b in route["brokers"]] == ["SYNC_MASTER", "SLAVE"]  # JSON keeps the nesting


def test_get_and_update_broker_config_take_effect_while_running(cluster):
    ns, master = cluster["namesrv"], cluster["master"]
    key = "maxTransferCountOnMessageInMemory"
    [before] = lines(admin("getBrokerConfig", "-n", ns, "-b", master, "-k", key, "--json"))
    assert (before["value"], before["live"], before["address"]) == (32, True, master)
    try:
        updated = lines(admin("updateBrokerConfig", "-n", ns, "-c", "DefaultCluster", "-k", key, "-v", "2",
                              "--json"))
        assert sorted((u["address"], u["old"], u["new"]) for u in updated) == sorted(
            [(master, 32, 2), (cluster["slave"], 32, 2)])
        send(ns, "ConfT", 5, "--queue-id", "0")
        pulled = trio.run(lambda: call(master, Pull(topic="ConfT", queue_id=0, offset=0, max_msgs=32)))
        assert len(pulled.messages) == 2, "the running node caps a pull at the new value"
        out = table(admin("getBrokerConfig", "-n", ns, "-b", "broker-a", "-k", key))
        [row] = [line for line in out.splitlines() if key in line]
        assert row.split("│")[2].strip() == "2" and row.split("│")[3].strip() == "2" and "true" in row, out
        everything = lines(admin("getBrokerConfig", "-n", ns, "-b", master, "--json"))
        assert {"listenPort", "brokerRole", "syncFlushTimeout"} <= {r["key"] for r in everything}
    finally:
        lines(admin("updateBrokerConfig", "-n", ns, "-c", "DefaultCluster", "-k", key, "-v", "32", "--json"))

    assert "listenPort cannot change while the node runs" in one_line_error(
        admin("updateBrokerConfig", "-n", ns, "-b", master, "-k", "listenPort", "-v", "1"), code=2)
    assert "bad value for 'syncFlushTimeout': 'soon'" in one_line_error(
        admin("updateBrokerConfig", "-n", ns, "-b", master, "-k", "syncFlushTimeout", "-v", "soon"), code=2)
    assert "did you mean 'syncFlushTimeout'" in one_line_error(
        admin("getBrokerConfig", "-n", ns, "-k", "syncFlushTimout"), code=2)
    assert "give -c CLUSTER" in one_line_error(
        admin("updateBrokerConfig", "-n", ns, "-k", "slaveTimeout", "-v", "3000"), code=2)
    assert "no broker 'broker-z'" in one_line_error(
        admin("updateBrokerConfig", "-n", ns, "-b", "broker-z", "-k", "slaveTimeout", "-v", "3000"))


def test_wipe_write_perm_refuses_sends_until_add_write_perm(cluster):
    ns, master = cluster["namesrv"], cluster["master"]
    send(ns, "PermT", 1)
    try:
        rows = lines(admin("wipeWritePerm", "-n", ns, "-b", "broker-a", "--json"))
        assert {(r["where"].split()[0], r["writeable"]) for r in rows} == {("broker", False), ("name", False)}
        assert next(r for r in rows if r["where"] == "name server")["topics"] >= 1
        [route] = lines(admin("topicRoute", "-n", ns, "-t", "PermT", "--json"))
        assert route["perm"] == 4, "routes lose the write bit"
        assert {t["perm"] for t in lines(admin("topicList", "-n", ns, "--json")) if t["topic"] == "PermT"} == {4}
        refused = cli("send", "--broker", master, "--topic", "PermT", "x")
        assert "write permission is wiped" in one_line_error(refused), "the node itself refuses"
        assert "no writable master" in one_line_error(cli("send", "--namesrv", ns, "--topic", "PermT", "x"))
    finally:
        rows = lines(admin("addWritePerm", "-n", ns, "-b", "broker-a", "--json"))
    assert {r["writeable"] for r in rows} == {True}
    [route] = lines(admin("topicRoute", "-n", ns, "-t", "PermT", "--json"))
    assert route["perm"] == 6
    assert send(ns, "PermT", 1)[0]["status"] == "PUT_OK"
    assert "broker groups: broker-a" in one_line_error(admin("wipeWritePerm", "-n", ns, "-b", "broker-z"))
    assert "not --broker" in one_line_error(admin("wipeWritePerm", "--broker", master, "-b", "broker-a"), code=2)


def test_delete_sub_group(cluster):
    ns = cluster["namesrv"]
    lines(admin("updateSubGroup", "-n", ns, "-c", "DefaultCluster", "-g", "DelG", "--consumeEnable", "false",
                "--json"))
    assert lines(admin("deleteSubGroup", "-n", ns, "-g", "DelG", "-c", "DefaultCluster", "--json")) == [
        {"group": "DelG", "broker_name": "broker-a", "deleted": True}]
    assert "no master had settings for consumer group 'DelG'" in one_line_error(
        admin("deleteSubGroup", "-n", ns, "-g", "DelG", "-b", "broker-a"))


PRODUCER = textwrap.dedent("""
    import sys, trio
    from cluster.client import Producer

    async def main():
        async with Producer(namesrv=sys.argv[1], group="PGroup") as producer:
            await producer.send("ProdT", b"x")
            print("READY", producer.heartbeats.client_id, flush=True)
            await trio.to_thread.run_sync(sys.stdin.read)  # until the test closes stdin

    trio.run(main)
""")


def test_producer_connection_lists_a_live_producer_of_the_group(cluster):
    ns = cluster["namesrv"]
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER, ns], cwd=REPO, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        ready = producer.stdout.readline().decode().split()
        assert ready[:1] == ["READY"], producer.stderr.read()

        def listed():
            r = admin("producerConnection", "-n", ns, "-g", "PGroup", "-t", "ProdT", "--json")
            return lines(r) if r.returncode == 0 else None

        [row] = wait(listed, "the producer's first heartbeat")
        assert (row["client_id"], row["broker_name"]) == (ready[1], "broker-a")
        assert row["address"].startswith("127.0.0.1:") and row["heartbeat_interval_ms"] == 30_000
        assert ready[1] in table(admin("producerConnection", "-n", ns, "-g", "PGroup", "-t", "ProdT"))
    finally:
        producer.stdin.close()
        producer.wait(timeout=30)
    assert producer.returncode == 0, producer.stderr.read()
    assert "no live producer" in one_line_error(
        admin("producerConnection", "-n", ns, "-g", "PGroup", "-t", "ProdT")), "it unregistered on close"


def test_stats_all_per_topic_and_group(cluster):
    ns = cluster["namesrv"]
    send(ns, "StatsT", 3)
    assert len(lines(cli("consume", "--namesrv", ns, "--topic", "StatsT", "--group", "StatsG", "--max", "3"))) == 3
    [row] = lines(admin("statsAll", "-n", ns, "-t", "StatsT", "--json"))
    assert (row["topic"], row["group"], row["in_msgs"], row["out_msgs"]) == ("StatsT", "StatsG", 3, 3)
    assert row["in_tps"] >= 0 and row["out_tps"] >= 0
    out = table(admin("statsAll", "-n", ns))
    assert "StatsT" in out and "StatsG" in out and "in tps" in out
    assert "topic 'NoStats'" in one_line_error(admin("statsAll", "-n", ns, "-t", "NoStats"))


def test_send_message_and_the_queries_print_tables(cluster):
    ns = cluster["namesrv"]
    [sent] = lines(admin("sendMessage", "-n", ns, "-t", "QueryT", "-p", "hello", "-k", "qk1 qk2", "-c", "TagQ",
                         "--json"))
    assert sent["status"] == "PUT_OK" and sent["broker_name"] == "broker-a" and len(sent["uniq_key"]) == 32
    out = table(admin("sendMessage", "-n", ns, "-t", "QueryT", "-p", "again"))
    assert "PUT_OK" in out and "uniq key" in out

    [found] = lines(admin("queryMsgByUniqueKey", "-n", ns, "-i", sent["uniq_key"], "-t", "QueryT", "--json"))
    assert (found["msg_id"], found["body"], found["tags"], found["keys"]) == (sent["msg_id"], "hello", "TagQ",
                                                                              ["qk1", "qk2"])
    assert sent["msg_id"] in table(admin("queryMsgByUniqueKey", "-n", ns, "-i", sent["uniq_key"], "-t",
                                         "QueryT"))
    assert "has UNIQ_KEY" in one_line_error(admin("queryMsgByUniqueKey", "-n", ns, "-i", "0" * 32,
                                                  "-t", "QueryT"))

    out = table(admin("queryMsgByKey", "-n", ns, "-t", "QueryT", "-k", "qk1"))  # a table, not JSON lines
    assert sent["msg_id"] in out and "hello" in out and "TagQ" in out
    [by_key] = lines(admin("queryMsgByKey", "-n", ns, "-t", "QueryT", "-k", "qk2", "--json"))
    assert by_key["msg_id"] == sent["msg_id"]
    out = table(admin("queryMsgById", "-n", ns, "-i", sent["msg_id"]))
    assert "hello" in out and "stored" in out
    [by_id] = lines(admin("queryMsgById", "-n", ns, "-i", sent["msg_id"], "--json"))
    assert by_id["body"] == "hello"
    assert "is not a msgId" in one_line_error(admin("queryMsgById", "-n", ns, "-i", "xyz"), code=2)
