"""The lean load client's codecs: byte-level parsing, and runs against the real servers
(a tidemq node, the trio floor, redis-server, nats-server with JetStream)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time

import cbor2
import pytest
import trio

from bench import lean, peers
from bench.lean import NatsCodec, RemotingCodec, RespCodec, TidemqCodec
from bench.procs import Processes
from tests.node.nodeproc import REPO, master_conf
from wire.framing import encode_frame
from wire.remoting.command import CommandDecoder, RemotingCommand, encode_command


def _feed_bytewise(codec, data: bytes) -> list[tuple[int, bool]]:
    done = []
    for i in range(len(data)):
        done += codec.feed(data[i:i + 1])
    return done


def test_tidemq_codec_pairs_responses_out_of_order_in_any_chunking():
    codec = TidemqCodec(body=b"x" * 10, id_base=7 << 20)
    frames = b"".join(encode_frame(r) for r in (
        {"id": (7 << 20) + 3, "status": "PUT_OK", "msg_id": "a"},
        {"id": (7 << 20) + 0, "status": "FLUSH_DISK_TIMEOUT", "error": "slow disk"},
        {"id": None, "status": "BAD_REQUEST", "error": "broken frame"},
    ))
    assert _feed_bytewise(codec, frames) == [(3, True), (0, False)]
    assert codec.errors == {"FLUSH_DISK_TIMEOUT: slow disk": 1, "BAD_REQUEST: broken frame": 1}
    request = cbor2.loads(codec.request(5)[4:])
    assert request == {"v": 1, "op": "send", "id": (7 << 20) + 5, "topic": lean.TOPIC, "body": b"x" * 10,
                       "tags": "bench"}


def test_tidemq_codec_batch_request_is_a_send_batch():
    request = cbor2.loads(TidemqCodec(body=b"y", batch=3).request(0)[4:])
    assert request["op"] == "send_batch" and request["messages"] == [{"body": b"y", "tags": "bench"}] * 3
    assert "body" not in request


def test_resp_codec_pairs_in_order_and_counts_a_short_wait_as_failed():
    codec = RespCodec(body=b"z", replicas=1)
    for slot in (4, 9):
        codec.sent(slot)
    replies = b"$15\r\n1700000000000-0\r\n:1\r\n$15\r\n1700000000000-1\r\n:0\r\n"
    assert _feed_bytewise(codec, replies) == [(4, True), (9, False)]
    assert codec.errors == {"WAIT reached 0 replicas": 1}
    assert codec.request(0).endswith(RespCodec.command("WAIT", "1", str(lean.WAIT_TIMEOUT_MS)))


def test_nats_codec_answers_ping_and_reads_acks():
    codec = NatsCodec(body=b"p")
    ack = b'{"stream":"BENCH","seq":1}'
    err = b'{"error":{"code":503}}'
    data = (b"INFO {}\r\nPING\r\nPONG\r\n"
            + f"MSG {codec.inbox}.2 1 {len(ack)}\r\n".encode() + ack + b"\r\n"
            + f"MSG {codec.inbox}.0 1 {len(err)}\r\n".encode() + err + b"\r\n")
    assert _feed_bytewise(codec, data) == [(2, True), (0, False)]
    assert codec.ready and codec.outgoing == b"PONG\r\n"
    assert codec.request(2).startswith(f"PUB bench {codec.inbox}.2 1\r\n".encode())


def _drive(port: int | list[int], kind: str, **kw) -> dict:
    factory = lean.codec_factory(kind, batch=kw.pop("batch", 1), replicas=kw.pop("replicas", 0))
    return asyncio.run(lean.drive("127.0.0.1", port, factory, **kw))


@pytest.mark.slow
def test_against_a_real_node_every_response_pairs_and_is_stored(nodes, tmp_path):
    node = nodes.start(master_conf(tmp_path, role="ASYNC_MASTER"))
    port = int(node.address.rsplit(":", 1)[1])
    single = _drive(port, "tidemq", connections=2, in_flight=8, seconds=0.5, warmup=0.1)
    batch = _drive(port, "tidemq", connections=2, in_flight=2, batch=4, seconds=0.5, warmup=0.1)
    for r in (single, batch):
        assert r["requests"] > 0 and r["failed"] == 0 and r["errors"] == {}, r
    assert batch["msgs_per_s"] == round(batch["requests"] * 4 / 0.5)

    async def stored() -> int:
        status = await peers.tidemq_status(node.address)
        return status.stats.put_total if status.stats else 0

    total = trio.run(stored)
    # every counted response was a PUT_OK of a message the node holds (warm-up ones too)
    assert total >= single["requests"] + batch["requests"] * 4


def test_remoting_codec_writes_cpp_style_send_message_and_pairs_answers_by_opaque():
    codec = RemotingCodec(body=b"x" * 16, id_base=3 << 20)
    (cmd,) = CommandDecoder().feed(codec.request(5))
    assert (cmd.code, cmd.opaque, cmd.language, cmd.version, cmd.body) == (10, (3 << 20) + 5, "CPP", 63, b"x" * 16)
    assert cmd.ext_fields is not None and cmd.ext_fields["queueId"] == "1" and cmd.ext_fields["topic"] == lean.TOPIC
    assert cmd.ext_fields["properties"] == "WAIT\x01true\x02TAGS\x01bench\x02"  # the CBOR rows' message
    (with_key,) = CommandDecoder().feed(RemotingCodec(body=b"x", id_base=3 << 20, uniq_key=True).request(5))
    assert with_key.ext_fields is not None
    assert with_key.ext_fields["properties"].startswith(f"UNIQ_KEY\x01{(3 << 20) + 5:032X}\x02WAIT")
    answers = b"".join(encode_command(RemotingCommand(code, (3 << 20) + slot, 1, remark, {"msgId": "M"}))
                       for code, slot, remark in ((0, 5, None), (14, 2, "a slave"), (0, 0, None)))
    assert _feed_bytewise(codec, answers) == [(5, True), (2, False), (0, True)]
    assert codec.errors == {"14: a slave": 1}


@pytest.mark.slow
def test_remoting_frames_against_a_real_node_are_each_stored(nodes, tmp_path):
    node = nodes.start(master_conf(tmp_path, role="ASYNC_MASTER"))
    port = int(node.address.rsplit(":", 1)[1])
    r = _drive(port, "remoting", connections=2, in_flight=8, seconds=0.5, warmup=0.1)
    assert r["requests"] > 0 and r["failed"] == 0 and r["errors"] == {}, r

    async def stored() -> int:
        status = await peers.tidemq_status(node.address)
        return status.stats.put_total if status.stats else 0

    assert trio.run(stored) >= r["requests"]


@pytest.mark.slow
def test_against_the_floor_process():
    procs = Processes(REPO / ".pytest_cache" / "bench-floor")
    port = peers.free_port()
    s = procs.start("floor", [sys.executable, "-m", "bench.floor", "--port", str(port)])
    try:
        trio.run(peers.wait_port, port, s)
        r = _drive(port, "tidemq", connections=2, in_flight=16, seconds=0.3, warmup=0.1)
        assert r["requests"] > 0 and r["failed"] == 0 and r["errors"] == {}
    finally:
        procs.stop_all()
    assert s.proc.returncode is not None


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")
def test_against_real_redis_every_xadd_lands(tmp_path):
    procs = Processes(tmp_path / "logs")

    async def check() -> None:
        async with peers.redis(procs, tmp_path, "everysec", replica=False) as target:
            r = await trio.to_thread.run_sync(lambda: _drive(target.ports[0], "redis", connections=2,
                                                             in_flight=4, seconds=0.3, warmup=0.1))
            assert r["requests"] > 0 and r["failed"] == 0 and r["errors"] == {}
            xlen = await peers._resp(target.ports[0], "XLEN", "bench")
            assert int(xlen[1:]) >= r["requests"]  # the stream is capped far above this

    try:
        trio.run(check)
    finally:
        procs.stop_all()
    assert procs.started == []


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server not installed")
def test_against_real_jetstream_every_publish_is_acked(tmp_path):
    procs = Processes(tmp_path / "logs")

    async def check() -> None:
        async with peers.jetstream(procs, tmp_path, 1) as target:
            r = await trio.to_thread.run_sync(lambda: _drive(target.ports, "nats", connections=2,
                                                             in_flight=4, seconds=0.3, warmup=0.1))
            assert r["requests"] > 0 and r["failed"] == 0 and r["errors"] == {}

    try:
        trio.run(check)
    finally:
        procs.stop_all()


@pytest.mark.slow
def test_cli_prints_json_and_refuses_bad_ports():
    bad = subprocess.run([sys.executable, "-m", "bench.lean", "tidemq", "--port", "x"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--port" in bad.stderr
    closed = peers.free_port()
    t0 = time.monotonic()
    down = subprocess.run([sys.executable, "-m", "bench.lean", "tidemq", "--port", str(closed)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert down.returncode == 1 and "cannot drive tidemq" in down.stderr and "Traceback" not in down.stderr
    assert time.monotonic() - t0 < 30


@pytest.mark.slow
def test_the_secure_row_logs_in_over_tls_before_it_sends(tmp_path):
    """tidemq-secure: the lean client does TLS and the SCRAM login, then every send is PUT_OK;
    a wrong secret is refused before any send."""

    def lean_run(target, *extra: str) -> subprocess.CompletedProcess[bytes]:
        argv = [sys.executable, "-m", "bench.lean", "tidemq", "--port", str(target.ports[0]), "--connections", "2",
                "--in-flight", "4", "--seconds", "0.3", "--warmup", "0.6", *extra]
        # warm-up past the 500 ms a master that just started with name servers holds its first
        # writes for (docs/failover.md: "Just restarted on its old epoch")
        return subprocess.run(argv, cwd=REPO, capture_output=True, timeout=60)

    async def check() -> None:
        bases: list = []
        async with peers.tidemq(tmp_path / "work", "ASYNC_FLUSH", "ASYNC_MASTER", bases=bases, secure=True) as target:
            assert "TLS + login" in target.system
            done = await trio.to_thread.run_sync(lambda: lean_run(target, *target.lean_args))
            assert done.returncode == 0, done.stderr.decode()
            r = json.loads(done.stdout)
            assert r["requests"] > 0 and r["failed"] == 0 and r["errors"] == {}, r
            wrong = tmp_path / "wrong.secret"
            wrong.write_text("not-the-secret\n")
            args = list(target.lean_args)
            args[args.index("--secret-file") + 1] = str(wrong)
            refused = await trio.to_thread.run_sync(lambda: lean_run(target, *args))
            assert refused.returncode == 1 and "login refused" in refused.stderr.decode()

    trio.run(check)
