"""`tidemq send / consume / query / status / namesrv` as subprocesses, against a real name
server, SYNC_MASTER and slave (one cluster for the module)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import trio

from tests.cluster.helpers import (
    REPO,
    cli,
    sync_group,
)
from tests.node.nodeproc import free_port, write_conf

pytestmark = pytest.mark.slow  # every test here starts `tidemq` processes


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with sync_group(tmp_path_factory.mktemp("cli")) as addresses:
        yield addresses


def lines(result) -> list[dict]:
    assert result.returncode == 0, result.stderr.decode()
    return [json.loads(line) for line in result.stdout.decode().splitlines()]


def one_line_error(result, code: int = 1) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    err = result.stderr.decode().strip()
    assert err.startswith("tidemq: error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def test_send_consume_commit_and_query(cluster):
    ns = cluster["namesrv"]
    sent = lines(cli("send", "--namesrv", ns, "--topic", "CliT", "--tags", "TagA", "--keys", "k1,k2",
                     "--count", "3", "body {i}"))
    assert [s["status"] for s in sent] == ["PUT_OK"] * 3  # SYNC_MASTER: the slave has them
    assert {s["broker_name"] for s in sent} == {"broker-a"} and {s["address"] for s in sent} == {cluster["master"]}
    assert set(sent[0]) == {"status", "msg_id", "broker_name", "queue_id", "queue_offset",
                            "commitlog_offset", "address", "unknown_attempts"}
    assert {s["unknown_attempts"] for s in sent} == {0}  # no retry after an unknown outcome
    binary = lines(cli("send", "--broker", cluster["master"], "--topic", "CliT", "--keys", "bin",
                       "--no-wait", "-", stdin=b"\xff\x00\xfe"))
    assert binary[0]["status"] == "PUT_OK"

    first = lines(cli("consume", "--namesrv", ns, "--topic", "CliT", "--group", "G", "--max", "2", "--commit"))
    assert len(first) == 2
    rest = lines(cli("consume", "--namesrv", ns, "--topic", "CliT", "--group", "G", "--timeout-ms", "500"))
    assert len(rest) == 2, "the second run starts where the first committed"
    everything = first + rest
    assert sorted(m["msg_id"] for m in everything) == sorted(s["msg_id"] for s in sent + binary)
    texts = sorted(m["body"] for m in everything if "body" in m)
    assert texts == ["body 0", "body 1", "body 2"]
    [raw] = [m for m in everything if "body_base64" in m]
    assert base64.b64decode(raw["body_base64"]) == b"\xff\x00\xfe" and raw["keys"] == ["bin"]
    text = next(m for m in everything if m.get("body") == "body 1")
    assert (text["tags"], text["keys"], text["topic"], text["broker_name"]) == ("TagA", ["k1", "k2"], "CliT", "broker-a")
    assert {"queue", "offset", "msg_id", "store_timestamp"} <= set(text)

    by_key = lines(cli("query", "--namesrv", ns, "--topic", "CliT", "--key", "k2"))
    assert sorted(m["body"] for m in by_key) == ["body 0", "body 1", "body 2"]
    [by_id] = lines(cli("query", "--namesrv", ns, "--msg-id", sent[1]["msg_id"]))
    assert (by_id["body"], by_id["msg_id"], by_id["broker_name"]) == ("body 1", sent[1]["msg_id"], "broker-a")

    missing = cli("query", "--namesrv", ns, "--topic", "CliT", "--key", "nope")
    assert "has key 'nope'" in one_line_error(missing)


def test_status_json_and_table(cluster):
    lines(cli("send", "--namesrv", cluster["namesrv"], "--topic", "StatT", "--count", "2", "x"))
    lines(cli("consume", "--namesrv", cluster["namesrv"], "--topic", "StatT", "--group", "SG", "--max", "2"))
    [doc] = lines(cli("status", "--namesrv", cluster["namesrv"], "--json"))
    brokers = {b["address"]: b for b in doc["brokers"]}
    assert set(brokers) == {cluster["master"], cluster["slave"]}
    master, slave = brokers[cluster["master"]], brokers[cluster["slave"]]
    assert (master["role"], master["broker_id"], master["reachable"]) == ("SYNC_MASTER", 0, True)
    assert (slave["role"], slave["broker_id"], slave["reachable"]) == ("SLAVE", 1, True)
    assert isinstance(master["status"]["max_phy_offset"], int) and master["status"]["running_flags"] == []
    assert slave["status"]["ha"]["connected"] is True
    assert master["registration"]["alive"] is True
    stats = master["status"]["stats"]
    assert stats["put_total"] >= 2 and stats["get_total"] >= 2 and {"put_tps", "get_tps"} <= set(stats)
    assert master["status"]["last_store_timestamp"] > 0
    # the group's in-sync set by client address (the slave acked each PUT_OK: it is in it)
    assert doc["in_sync"]["broker-a"]["master"] == cluster["master"]
    assert doc["in_sync"]["broker-a"]["in_sync"] == [cluster["slave"]], doc["in_sync"]

    table = cli("status", "--namesrv", cluster["namesrv"])
    assert table.returncode == 0, table.stderr.decode()
    out = table.stdout.decode()
    for text in ("group", "role", "epoch", "max offset", "lag", "lag s", "disk", "put/s", "get/s", "notes",
                 "broker-a", "SYNC_MASTER", "SLAVE", cluster["master"], cluster["slave"], "1 slave(s)",
                 "connected"):
        assert text in out, (text, out)
    assert out.index("SYNC_MASTER") < out.index("SLAVE "), "the master's row comes first in its group"

    same = cli("admin", "brokerStatus", "--namesrv", cluster["namesrv"])
    assert same.returncode == 0 and "SYNC_MASTER" in same.stdout.decode(), same.stderr.decode()


def test_admin_commands_and_their_mqadmin_aliases(cluster):
    ns = cluster["namesrv"]
    sent = lines(cli("send", "--namesrv", ns, "--topic", "AdmT", "--keys", "adm-1", "--count", "3", "m{i}"))
    lines(cli("consume", "--namesrv", ns, "--topic", "AdmT", "--group", "AG", "--max", "1", "--commit"))

    for name in ("topics", "topicList"):
        topics = lines(cli("admin", name, "--namesrv", ns, "--json"))
        assert any(t["topic"] == "AdmT" and t["broker_name"] == "broker-a" for t in topics), topics
    [route] = lines(cli("admin", "topicRoute", "--namesrv", ns, "--topic", "AdmT", "--json"))
    assert route["broker_name"] == "broker-a"
    assert {b["address"] for b in route["brokers"]} == {cluster["master"], cluster["slave"]}

    *queues, total = lines(cli("admin", "consumerProgress", "--namesrv", ns, "-g", "AG", "-t", "AdmT", "--json"))
    assert sum(q["broker_offset"] for q in queues) == 3
    assert total == {"group": "AG", "topic": "AdmT", "total_lag": 2}, total
    assert "consumer group 'Nobody' has no committed offset" in one_line_error(
        cli("admin", "consumerProgress", "--namesrv", ns, "-g", "Nobody", "-t", "AdmT"))

    [by_id] = lines(cli("admin", "queryMsgById", "--namesrv", ns, "--msg-id", sent[0]["msg_id"], "--json"))
    assert by_id["body"] == "m0"
    by_key = lines(cli("admin", "queryMsgByKey", "--namesrv", ns, "--topic", "AdmT", "--key", "adm-1", "--json"))
    assert sorted(m["body"] for m in by_key) == ["m0", "m1", "m2"]
    [deleted] = lines(cli("admin", "deleteExpiredCommitLog", "--namesrv", ns, "--json"))
    assert deleted == {"address": cluster["master"], "deleted_files": 0}
    table = cli("admin", "topicRoute", "--namesrv", ns, "-t", "AdmT")  # without --json: a table
    assert table.returncode == 0 and "broker-a" in table.stdout.decode() and "{" not in table.stdout.decode()[:3]


def _wait(predicate, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.2)  # poll: a CLI subprocess per probe
    raise AssertionError(f"timed out waiting for {what}")


def test_operator_actions_from_the_cli(cluster):
    """clusterList, updateTopic -c, consumerConnection, consumerStatus, resetOffsetByTime and
    deleteTopic against the real cluster, with a live `tidemq consume` member."""
    ns = cluster["namesrv"]
    brokers = lines(cli("admin", "clusterList", "--namesrv", ns, "--json"))
    assert {(b["cluster"], b["broker_name"], b["role"]) for b in brokers} >= {
        ("DefaultCluster", "broker-a", "SYNC_MASTER"), ("DefaultCluster", "broker-a", "SLAVE")}
    created = lines(cli("admin", "updateTopic", "--namesrv", ns, "-c", "DefaultCluster", "-t", "OpsT",
                        "-r", "2", "-w", "2", "--json"))
    assert created == [{"topic": "OpsT", "broker_name": "broker-a", "read_queue_nums": 2, "write_queue_nums": 2,
                        "perm": 6}]
    assert "clusters: DefaultCluster" in one_line_error(cli("admin", "updateTopic", "--namesrv", ns, "-c", "Nope",
                                                             "-t", "OpsT"))
    assert "no master 'broker-z'" in one_line_error(cli("admin", "updateTopic", "--namesrv", ns, "-b", "broker-z",
                                                         "-t", "OpsT"))
    assert "-r must be in 1..1024" in one_line_error(cli("admin", "updateTopic", "--namesrv", ns, "-t", "OpsT",
                                                          "-r", "0"), code=2)
    lines(cli("send", "--namesrv", ns, "--topic", "OpsT", "--count", "4", "ops {i}"))

    member = subprocess.Popen([sys.executable, "-m", "tidemq", "consume", "--namesrv", ns, "--topic", "OpsT",
                               "--group", "OG", "--commit", "--timeout-ms", "60000"],
                              cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        def online():
            r = cli("admin", "consumerConnection", "--namesrv", ns, "-g", "OG", "--json")
            return lines(r) if r.returncode == 0 else None

        [conn] = _wait(online, "the consume member online")
        assert "OpsT" in conn["topics"] and conn["brokers"] == ["broker-a"] and conn["address"].startswith("127.0.0.1:")

        def holding():
            rows = lines(cli("admin", "consumerStatus", "--namesrv", ns, "-g", "OG", "--json"))
            return rows if {r["queue_id"] for r in rows if r["topic"] == "OpsT"} == {0, 1} else None

        held = _wait(holding, "the member holding both queues")
        assert {r["client_id"] for r in held} == {conn["client_id"]}
        assert "live member" in one_line_error(cli("admin", "resetOffsetByTime", "--namesrv", ns, "-g", "OG",
                                                    "-t", "OpsT", "-s", "0"))
    finally:
        member.send_signal(signal.SIGTERM)
        member.wait(timeout=30)
    assert member.returncode == 143, member.stderr.read()
    assert "no live member" in one_line_error(cli("admin", "consumerConnection", "--namesrv", ns, "-g", "OG"))

    def lag() -> int:
        return lines(cli("admin", "consumerProgress", "--namesrv", ns, "-g", "OG", "-t", "OpsT", "--json"))[-1]["total_lag"]

    assert lag() == 0  # the member committed what it printed
    rewound = lines(cli("admin", "resetOffsetByTime", "--namesrv", ns, "-g", "OG", "-t", "OpsT", "-s", "0", "--json"))
    assert sorted((r["queue_id"], r["new_offset"]) for r in rewound) == [(0, 0), (1, 0)] and lag() == 4
    lines(cli("admin", "resetOffsetByTime", "--namesrv", ns, "-g", "OG", "-t", "OpsT", "-s", "now", "--json"))
    assert lag() == 0
    assert "is not a time" in one_line_error(cli("admin", "resetOffsetByTime", "--namesrv", ns, "-g", "OG",
                                                  "-t", "OpsT", "-s", "yesterday"), code=2)

    assert lines(cli("admin", "deleteTopic", "--namesrv", ns, "-c", "DefaultCluster", "-t", "OpsT", "--json")) == [
        {"topic": "OpsT", "broker_name": "broker-a", "deleted": True}]
    _wait(lambda: not any(t["topic"] == "OpsT" for t in lines(cli("admin", "topicList", "--namesrv", ns, "--json"))),
          "the topic gone from the registrations")
    assert "no master had topic 'OpsT'" in one_line_error(cli("admin", "deleteTopic", "--namesrv", ns,
                                                               "-t", "OpsT"))


def test_a_peer_that_speaks_http_is_named():
    server = socket.create_server(("127.0.0.1", 0))

    def answer_like_http() -> None:
        with contextlib.suppress(OSError):
            conn, _ = server.accept()
            with conn:
                conn.recv(1024)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=answer_like_http, daemon=True)
    thread.start()
    try:
        err = one_line_error(cli("status", "--namesrv", f"127.0.0.1:{server.getsockname()[1]}"))
    finally:
        server.close()
        thread.join(10)
    assert "does not speak the tidemq protocol: it sent 'HTTP'" in err and "1213486160" not in err, err


def test_clear_errors(cluster, tmp_path):
    dead = f"127.0.0.1:{free_port()}"
    assert "no name server reachable" in one_line_error(cli("status", "--namesrv", dead))
    assert "no broker reachable" in one_line_error(cli("send", "--broker", dead, "--topic", "T", "x"))
    assert "no name server reachable" in one_line_error(
        cli("consume", "--namesrv", dead, "--topic", "T", "--group", "G"))
    assert "no broker serves topic 'Nowhere'" in one_line_error(
        cli("consume", "--namesrv", cluster["namesrv"], "--topic", "Nowhere", "--group", "G"))

    assert "--namesrv ADDR" in one_line_error(cli("send", "--topic", "T", "x"), code=2)
    assert "--msg-id" in one_line_error(cli("query", "--namesrv", dead), code=2)
    assert "is not a msgId" in one_line_error(cli("query", "--namesrv", dead, "--msg-id", "ZZZ"), code=2)
    port = cluster["namesrv"].rsplit(":", 1)[1]
    assert "cannot listen" in one_line_error(cli("namesrv", "start", "--port", port), code=2)
    bad = write_conf(tmp_path, "bad-namesrv", {"listenPort": 0, "brokerExpiry": 5})
    assert "unknown key 'brokerExpiry'; did you mean 'brokerExpireMs'?" in one_line_error(
        cli("namesrv", "start", "-c", str(bad)), code=2)


def test_send_with_a_delay_level_and_properties(cluster):
    """Issue 24: `tidemq send --delay-level N --property K=V` (mqadmin sendMessage's flags)."""
    ns = cluster["namesrv"]
    sent = lines(cli("send", "--namesrv", ns, "--topic", "DelayT", "--keys", "late", "--delay-level", "1",
                     "--property", "color=red", "--property", "size=L", "later"))
    assert sent[0]["status"] == "PUT_OK"
    found: list[dict] = []
    for _ in range(100):  # level 1 is 1 s: poll the query (exit 1 while none) against a deadline
        result = cli("query", "--namesrv", ns, "--topic", "DelayT", "--key", "late")
        if result.returncode == 0:
            found = lines(result)
            break
        trio.run(trio.sleep, 0.1)  # poll: the CLI has no wait-for-delivery
    assert found and found[0]["body"] == "later"
    assert found[0]["properties"]["color"] == "red" and found[0]["properties"]["size"] == "L"
    assert "DELAY" not in found[0]["properties"]  # delivered to the real topic after its delay
    for bad in ("nokey", "=v", "k="):
        assert f"--property takes KEY=VALUE (both non-empty), got {bad!r}" in one_line_error(
            cli("send", "--namesrv", ns, "--topic", "DelayT", "--property", bad, "x"), code=2)
    assert "--delay-level must be >= 1, got 0" in one_line_error(
        cli("send", "--namesrv", ns, "--topic", "DelayT", "--delay-level", "0", "x"), code=2)
