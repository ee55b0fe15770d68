"""Node processes end to end: real `tidemq node start` processes on 127.0.0.1, real files,
the client protocol spoken raw (tests/node/wire.py).

Waits are on conditions with deadlines (tests/waiting.py); nothing sleeps to
synchronize. One ASYNC_MASTER without auto-created topics is shared by the module's
protocol tests (each uses its own topic); the replication, restart and crash tests start
their own nodes.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import cbor2
import pytest
import trio

from tests.node.nodeproc import (
    REPO,
    Nodes,
    free_port,
    master_conf,
    slave_conf,
    store_root,
    write_conf,
)
from tests.node.wire import Wire, call
from tests.waiting import wait_until
from wire.framing import encode_frame

pytestmark = pytest.mark.slow  # every test here starts node processes

NO_MESSAGE = {"NO_MESSAGE_IN_QUEUE", "OFFSET_OVERFLOW_ONE", "NO_MATCHED_LOGIC_QUEUE"}


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """An ASYNC_MASTER with autoCreateTopicEnable = false, shared by the protocol tests."""
    n = Nodes()
    try:
        yield n.start(master_conf(tmp_path_factory.mktemp("shared"), role="ASYNC_MASTER",
                                  autoCreateTopicEnable=False))
    finally:
        n.cleanup()


@pytest.fixture
async def wire(shared):
    w = await Wire.connect(shared.address)
    yield w
    await w.aclose()


def body_of(response: dict) -> list[bytes]:
    return [m["body"] for m in response["messages"]]


# ---------------------------------------------------------------- master and slave


async def test_reads_on_master_then_on_its_slave(tmp_path, nodes):
    mconf = master_conf(tmp_path)  # SYNC_MASTER, topics auto-created
    master = nodes.start(mconf)
    w = await Wire.connect(master.address)

    first = await w.call("send", topic="Orders", body=b"first", queue_id=1, tags="TagA", keys=["k1"],
                         properties={"p": "v"}, wait=False)
    assert first["status"] == "PUT_OK", first
    assert (first["queue_id"], first["queue_offset"], first["commitlog_offset"]) == (1, 0, 0)
    assert len(first["msg_id"]) == 32
    topics = await w.call("topic_list")
    assert topics["topics"] == [{"topic": "Orders", "read_queue_nums": 4, "write_queue_nums": 4, "perm": 6}]
    # WAIT on a SYNC_MASTER without a slave: stored, but only on the master
    second = await w.call("send", topic="Orders", body=b"second", queue_id=1, tags="TagB", keys=["k2"])
    assert second["status"] == "SLAVE_NOT_AVAILABLE" and second["queue_offset"] == 1, second
    batch = await w.call("send_batch", topic="Orders", queue_id=2, wait=False,
                         messages=[{"body": b"b0", "keys": ["kb"]}, {"body": b"b1", "flag": 7}])
    assert batch["status"] == "PUT_OK" and len(batch["msg_ids"]) == 2, batch
    assert (batch["queue_id"], batch["queue_offset"]) == (2, 0)
    # a commit too: stored on the master, not confirmed on a slave (as the send above)
    committed = await w.call("commit_offset", group="G1", topic="Orders", queue_id=1, offset=2)
    assert committed["status"] == "SLAVE_NOT_AVAILABLE" and set(committed) == {"id", "status"}

    async def reads(w: Wire) -> dict[str, Any]:
        got = {
            "pull": await w.call("pull", topic="Orders", queue_id=1, offset=0),
            "tagged": await w.call("pull", topic="Orders", queue_id=1, offset=0, tag_filter="TagB"),
            "batch": await w.call("pull", topic="Orders", queue_id=2, offset=0, max_msgs=1),
            "query": await w.call("query_by_key", topic="Orders", key="k2"),
            "by_id": await w.call("get_by_msg_id", msg_id=first["msg_id"]),
            "by_id_missing": await w.call("get_by_msg_id", msg_id=first["msg_id"][:-4] + "FFFF"),
            "min": await w.call("min_offset", topic="Orders", queue_id=1),
            "max": await w.call("max_offset", topic="Orders", queue_id=1),
            "fetch": await w.call("fetch_offset", group="G1", topic="Orders", queue_id=1),
        }
        ts = got["pull"]["messages"][1]["store_timestamp"]
        got["by_time"] = await w.call("offset_by_time", topic="Orders", queue_id=1, timestamp=ts)
        for r in got.values():
            r.pop("id")
        return got

    on_master = await reads(w)
    pull = on_master["pull"]
    assert pull["status"] == "FOUND" and body_of(pull) == [b"first", b"second"]
    assert (pull["next_begin_offset"], pull["min_offset"], pull["max_offset"]) == (2, 0, 2)
    m0 = pull["messages"][0]
    assert (m0["topic"], m0["queue_id"], m0["queue_offset"], m0["msg_id"]) == ("Orders", 1, 0, first["msg_id"])
    assert (m0["tags"], m0["keys"], m0["properties"], m0["flag"]) == ("TagA", ["k1"], {"p": "v"}, 0)
    assert body_of(on_master["tagged"]) == [b"second"]
    assert body_of(on_master["batch"]) == [b"b0"] and on_master["batch"]["next_begin_offset"] == 1
    assert body_of(on_master["query"]) == [b"second"]
    assert on_master["by_id"]["message"] == m0
    assert on_master["by_id_missing"]["status"] == "NOT_FOUND"
    assert (on_master["min"]["offset"], on_master["max"]["offset"]) == (0, 2)
    at = on_master["by_time"]["offset"]  # the message stored at that time (both may share the ms)
    assert pull["messages"][at]["store_timestamp"] == pull["messages"][1]["store_timestamp"]
    assert on_master["fetch"] == {"status": "OK", "offset": 2}

    # the slave starts after the commit: it replicates the log and syncs offsets and topics
    slave = nodes.start(slave_conf(tmp_path, mconf))
    ws = await Wire.connect(slave.address)

    async def caught_up() -> bool:
        r1 = await ws.call("max_offset", topic="Orders", queue_id=1)
        r2 = await ws.call("max_offset", topic="Orders", queue_id=2)
        fetched = await ws.call("fetch_offset", group="G1", topic="Orders", queue_id=1)
        # topics come by the slave's pull of the master's tables, the log and offsets by the
        # HA stream: either may land first (under load the topics came last: CI)
        listed = (await ws.call("topic_list"))["topics"]
        return r1["offset"] == 2 and r2["offset"] == 2 and fetched["status"] == "OK" and listed == topics["topics"]

    await wait_until(caught_up, timeout=15, what="the slave to catch up")
    assert await reads(ws) == on_master
    for op, fields in (
        ("send", {"topic": "Orders", "body": b"x"}),
        ("send_batch", {"topic": "Orders", "messages": [{"body": b"x"}]}),
        ("commit_offset", {"group": "G1", "topic": "Orders", "queue_id": 1, "offset": 0}),
        ("topic_create", {"topic": "Other"}),
    ):
        refused = await ws.call(op, **fields)
        assert refused["status"] == "SERVICE_NOT_AVAILABLE" and "SLAVE" in refused["error"], refused

    # with the slave connected a WAIT send is acknowledged by it, and replication wakes a
    # pull long-polling on the slave
    slave_pull = await ws.send("pull", topic="Orders", queue_id=1, offset=2, timeout_ms=20_000)
    await ws.call("status")  # the pull is parked by now
    third = await w.call("send", topic="Orders", body=b"third", queue_id=1)
    assert third["status"] == "PUT_OK", third
    woken = await ws.recv_id(slave_pull)
    assert woken["status"] == "FOUND" and body_of(woken) == [b"third"]
    assert woken["messages"][0]["msg_id"] == third["msg_id"]

    m_status = await w.call("status")
    assert (m_status["role"], m_status["broker_id"], m_status["address"]) == ("SYNC_MASTER", 0, master.address)
    assert [s["ack_offset"] for s in m_status["ha"]["slaves"]] == [m_status["max_phy_offset"]]
    assert m_status["disk"]["total"] > 0 and m_status["running_flags"] == []
    s_status = await ws.call("status")
    assert (s_status["role"], s_status["ha"]["connected"]) == ("SLAVE", True)
    assert s_status["max_phy_offset"] == m_status["max_phy_offset"]
    assert s_status["sync"]["master_addr"] == master.address and s_status["sync"]["last_error"] is None
    await w.aclose()
    await ws.aclose()


# ---------------------------------------------------------------- topics


async def test_topics_must_exist_and_queue_ids_be_in_range(wire):
    missing = await wire.call("send", topic="NoSuchTopic", body=b"x")
    assert missing["status"] == "NOT_FOUND" and "NoSuchTopic" in missing["error"]
    created = await wire.call("topic_create", topic="Two", read_queue_nums=2, write_queue_nums=2)
    assert created["topic"] == {"topic": "Two", "read_queue_nums": 2, "write_queue_nums": 2, "perm": 6}
    out_of_range = await wire.call("send", topic="Two", body=b"x", queue_id=2)
    assert out_of_range["status"] == "BAD_REQUEST" and "queue_id 2" in out_of_range["error"]
    picked = [(await wire.call("send", topic="Two", body=b"x"))["queue_id"] for _ in range(4)]
    assert sorted(picked) == [0, 0, 1, 1]
    await wire.call("topic_create", topic="ReadOnly", perm=4)
    assert (await wire.call("send", topic="ReadOnly", body=b"x"))["status"] == "SERVICE_NOT_AVAILABLE"


# ---------------------------------------------------------------- long polling


async def test_long_poll_is_woken_by_a_send_from_another_connection(wire, shared):
    await wire.call("topic_create", topic="Poll")
    assert (await wire.call("send", topic="Poll", body=b"before", queue_id=0))["status"] == "PUT_OK"
    start = trio.current_time()
    pull_id = await wire.send("pull", topic="Poll", queue_id=0, offset=1, timeout_ms=20_000)
    # a later request on the same connection is answered while the pull waits
    assert (await wire.call("status"))["status"] == "OK"
    assert not [f for f in wire.received if f["id"] == pull_id]
    sent = await call(shared.address, "send", topic="Poll", body=b"wake up", queue_id=0)
    assert sent["status"] == "PUT_OK"
    woken = await wire.recv_id(pull_id)
    assert woken["status"] == "FOUND" and body_of(woken) == [b"wake up"]
    assert trio.current_time() - start < 10, "woken long after the send"


async def test_long_poll_with_nothing_arriving_times_out(wire):
    await wire.call("topic_create", topic="Quiet")
    for queue_id, offset in ((0, 0), (1, 1)):
        if offset:
            await wire.call("send", topic="Quiet", body=b"m", queue_id=queue_id)
        start = time.monotonic()
        r = await wire.call("pull", topic="Quiet", queue_id=queue_id, offset=offset, timeout_ms=400)
        elapsed = time.monotonic() - start
        assert r["status"] in NO_MESSAGE and r["messages"] == [], r
        assert r["next_begin_offset"] == offset
        assert 0.35 <= elapsed < 5, elapsed


# ---------------------------------------------------------------- protocol errors


@pytest.mark.parametrize(
    "data, words",
    [
        (struct.pack(">I", 5) + b"\xff\xff\xff\xff\xff", "not valid CBOR"),
        (struct.pack(">I", 3) + cbor2.dumps([1, 2]), "CBOR array, expected a map"),
        (struct.pack(">I", 8 * 1024 * 1024 + 1), "exceeds the limit"),
    ],
    ids=["garbage", "non-map", "oversized-header"],
)
async def test_malformed_frame_closes_only_its_connection(shared, wire, data, words):
    bad = await Wire.connect(shared.address)
    await bad.send_raw(data)
    error = await bad.recv()
    assert error["id"] is None and error["status"] == "BAD_REQUEST" and words in error["error"], error
    await bad.wait_closed()
    await bad.aclose()
    assert (await wire.call("status"))["status"] == "OK"


async def test_oversized_body_is_message_illegal_and_the_connection_stays(wire):
    await wire.call("topic_create", topic="Big")
    big = await wire.call("send", topic="Big", body=b"x" * (64 * 1024 + 1))
    assert big["status"] == "MESSAGE_ILLEGAL" and "maxMessageSize" in big["error"], big
    assert (await wire.call("send", topic="Big", body=b"x" * (64 * 1024)))["status"] == "PUT_OK"


async def test_bad_requests_are_answered_and_the_connection_stays(wire):
    unknown = await wire.call("sned", topic="T")
    assert unknown["status"] == "BAD_REQUEST" and "did you mean 'send'" in unknown["error"]
    missing = await wire.call("pull", topic="T", queue_id=0)
    assert missing["status"] == "BAD_REQUEST" and "missing field 'offset'" in missing["error"]
    await wire.send_raw(encode_frame({"v": 1, "op": "status"}))
    no_id = await wire.recv_id(None)
    assert no_id["status"] == "BAD_REQUEST" and "'id'" in no_id["error"]
    admin = await wire.call("admin.delete_expired_files")
    assert admin["status"] == "OK" and isinstance(admin["deleted_files"], int), admin
    assert (await wire.call("topic_list"))["status"] == "OK"


async def test_many_requests_in_flight_on_one_connection(wire):
    await wire.call("topic_create", topic="Busy")
    await wire.call("topic_create", topic="BusyPoll")
    pull_id = await wire.send("pull", topic="BusyPoll", queue_id=0, offset=0, timeout_ms=20_000)
    ids = {}
    for i in range(150):
        if i % 3 == 2:
            ids[await wire.send("max_offset", topic="Busy", queue_id=i % 4)] = "max_offset"
        else:
            ids[await wire.send("send", topic="Busy", body=b"m%d" % i, queue_id=i % 4, wait=False)] = "send"
    responses = [await wire.recv() for _ in ids]
    assert sorted(r["id"] for r in responses) == sorted(ids)  # the waiting pull is not among them
    for r in responses:
        assert r["status"] == ("PUT_OK" if ids[r["id"]] == "send" else "OK"), r
    await wire.send("send", topic="BusyPoll", body=b"last", queue_id=0)
    pulled = await wire.recv_id(pull_id)
    assert pulled["status"] == "FOUND" and body_of(pulled) == [b"last"]


# ---------------------------------------------------------------- lifecycle


async def test_graceful_shutdown_persists_offsets_and_restart_keeps_them(tmp_path, nodes):
    conf = master_conf(tmp_path, role="ASYNC_MASTER")
    root = store_root(conf)
    node = nodes.start(conf)
    w = await Wire.connect(node.address)
    sent = [await w.call("send", topic="Keep", body=b"m%d" % i, queue_id=0) for i in range(3)]
    assert {s["status"] for s in sent} == {"PUT_OK"}
    assert (await w.call("commit_offset", group="G", topic="Keep", queue_id=0, offset=2))["status"] == "OK"
    pull_id = await w.send("pull", topic="Keep", queue_id=0, offset=3, timeout_ms=60_000)
    await w.call("status")  # the pull is parked by now
    assert (root / "abort").exists()
    # a second node on the same store (other ports) is refused while this one runs
    twin = write_conf(tmp_path, "twin", {**tomllib.loads(conf.read_text()),
                                          "listenPort": free_port(), "haListenPort": free_port()})
    refused = subprocess.run([sys.executable, "-m", "tidemq", "node", "start", "-c", str(twin)],
                             cwd=REPO, capture_output=True, text=True, timeout=30)
    assert refused.returncode == 2 and "is locked by another process" in refused.stderr, refused

    node.proc.send_signal(signal.SIGTERM)
    parked = await w.recv_id(pull_id, timeout=10)  # answered at shutdown, not after 60 s
    assert parked["status"] == "OFFSET_OVERFLOW_ONE", parked
    await w.wait_closed()
    assert node.stop() == 0, node.stderr()
    assert not (root / "abort").exists()
    assert (root / "config" / "consumerOffset.json").exists()
    written = (root / "config" / "broker.properties").read_text()  # the offline tools' geometry
    assert "maxHashSlotNum=1000\n" in written and "maxIndexNum=4000\n" in written, written
    assert "received SIGTERM" in (root / "logs" / "node.log").read_text()

    node = nodes.start(conf)
    w = await Wire.connect(node.address)
    assert (await w.call("fetch_offset", group="G", topic="Keep", queue_id=0))["offset"] == 2
    assert [t["topic"] for t in (await w.call("topic_list"))["topics"]] == ["Keep"]
    assert body_of(await w.call("pull", topic="Keep", queue_id=0, offset=0)) == [b"m0", b"m1", b"m2"]
    await w.aclose()
    assert node.stop() == 0


async def test_sigkill_leaves_the_abort_file_and_the_next_start_recovers(tmp_path, nodes):
    conf = master_conf(tmp_path, role="ASYNC_MASTER")
    root = store_root(conf)
    node = nodes.start(conf)
    w = await Wire.connect(node.address)
    bodies = [b"crash %d " % i * 300 for i in range(40)]  # ~100 KB: the 256 KiB segment rolls once
    for i, body in enumerate(bodies):
        r = await w.call("send", topic="Crash", body=body, queue_id=0, keys=[f"k{i}"], wait=False)
        assert r["status"] == "PUT_OK"
    await w.aclose()
    assert node.kill() == -signal.SIGKILL
    assert (root / "abort").exists()

    node = nodes.start(conf)
    w = await Wire.connect(node.address)
    got: list[bytes] = []
    offset = 0
    while offset < len(bodies):
        r = await w.call("pull", topic="Crash", queue_id=0, offset=offset)
        assert r["status"] == "FOUND", r
        got += body_of(r)
        offset = r["next_begin_offset"]
    assert got == bodies
    assert body_of(await w.call("query_by_key", topic="Crash", key="k7")) == [bodies[7]]
    # it may have acknowledged its whole recovered log before the crash: a promotion check
    # counts it as confirmed (docs/failover.md)
    status = await w.call("status")
    assert status["acked_floor"] == status["max_phy_offset"] > 0
    await w.aclose()
    assert node.stop() == 0
    assert not (root / "abort").exists()
    node = nodes.start(conf)  # a clean exit: no floor
    assert (await call(node.address, "status"))["acked_floor"] is None


def test_config_errors_exit_2_with_the_key_on_stderr(tmp_path):
    bad = write_conf(tmp_path, "bad", {"brokerName": "b", "listenPrt": 1234})
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        taken = master_conf(tmp_path, name="taken", listenPort=port)
        for conf, words in (
            (bad, ["'listenPrt'", "did you mean 'listenPort'?", str(bad)]),
            (taken, [f"listenPort {port} on 127.0.0.1 is not available"]),
        ):
            done = subprocess.run(
                [sys.executable, "-m", "tidemq", "node", "start", "-c", str(conf)],
                cwd=REPO, capture_output=True, text=True, timeout=30,
            )
            assert done.returncode == 2, done
            assert done.stdout == ""
            for w in words:
                assert w in done.stderr, done.stderr
    assert not Path(tmp_path / "store" / "taken").exists()


async def test_admin_delete_expired_files_moves_consumers_to_the_new_minimum(tmp_path, nodes):
    conf = master_conf(tmp_path, role="ASYNC_MASTER", mappedFileSizeCommitLog=64 * 1024,
                       mappedFileSizeConsumeQueue=20 * 100)
    node = nodes.start(conf)
    for i in range(0, 240, 8):
        batch = [{"body": bytes([i % 251]) * 2000, "keys": [f"k{j}"]} for j in range(i, i + 8)]
        assert (await call(node.address, "send_batch", topic="Old", queue_id=0, messages=batch))["status"] == "PUT_OK"
    segments = sorted((store_root(conf) / "commitlog").iterdir())
    assert len(segments) >= 4
    old = time.time() - 100 * 3600  # older than fileReservedTime (72 h)
    for seg in segments[:-1]:
        os.utime(seg, (old, old))
    admin = await call(node.address, "admin.delete_expired_files")
    assert admin["status"] == "OK" and admin["deleted_files"] >= 1, admin
    status = await call(node.address, "status")
    assert status["min_phy_offset"] > 0
    pulled = await call(node.address, "pull", topic="Old", queue_id=0, offset=0, max_msgs=4)
    assert pulled["status"] == "OFFSET_TOO_SMALL" and pulled["next_begin_offset"] > 0
    resumed = await call(node.address, "pull", topic="Old", queue_id=0, offset=pulled["next_begin_offset"], max_msgs=4)
    assert resumed["status"] == "FOUND"


@pytest.mark.slow
def test_a_slave_with_other_segment_sizes_refuses_to_replicate(tmp_path):
    """Replicating into segments of another size would split records across files: the
    slave says why in its status and keeps its store empty, while the master serves on."""
    nodes = Nodes()
    try:
        mconf = master_conf(tmp_path, role="ASYNC_MASTER")
        master = nodes.start(mconf)
        slave = nodes.start(slave_conf(tmp_path, mconf, mappedFileSizeCommitLog=128 * 1024))

        async def run():
            for i in range(5):
                r = await call(master.address, "send", topic="Geo", body=f"m{i}".encode())
                assert r["status"] == "PUT_OK"

            async def refused() -> bool:
                return bool((await call(slave.address, "status")).get("replication_refused"))

            await wait_until(refused, what="the slave refusing its master")
            s = await call(slave.address, "status")
            assert "mappedFileSizeCommitLog=262144 and this slave 131072" in s["replication_refused"]
            assert s["max_phy_offset"] == 0

        trio.run(run)
    finally:
        nodes.cleanup()
