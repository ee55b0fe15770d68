"""The compiled send path (wire/_send_codec.pyx, ops.prepare_plain_sends,
store.message.prepare_plain) for sends and batches against the reference path (cbor2, the request schema,
`handle_now`, the Message encoder):

- the C decoder takes a send only as `parse_with` reads it, and every other frame goes to
  the reference decoder as its bytes;
- a send answer's frame is its reply class's encoding (SendReply, SendBatchReply), byte for byte;
- end to end, the same request streams through a server with the compiled path and one
  without give the same answer bytes and the same store files, byte for byte.
"""

from __future__ import annotations

import importlib
import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import cbor2
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.launch.layout import free_port
from node.config import load_config
from node.ops.dispatch import (
    BATCHED_OPS,
    append_requests,
    finish_requests,
    handle_now,
    handle_plain_sends,
)
from node.ops.services import NodeServices
from node.server import ClientServer
from node.tables.offsets import ConsumerOffsetManager
from node.tables.topics import TopicConfigManager
from store.accel import forced_pure
from store.message import topic_error
from store.message_store import open_store
from store.status import PutMessageStatus
from tests.examples import examples
from tests.node.nodeproc import master_conf
from tests.waiting import wait_until
from wire import send_codec
from wire.framing import COMPILED, HEADER, FrameDecoder, encode_frame
from wire.protocol import (
    NODE_REQUESTS,
    InvalidRequest,
    SendBatchReply,
    SendReply,
    Status,
    parse_with,
)
from wire.send_codec import PlainBatch, PlainSend, send_batch_reply_frame, send_reply_frame

needs_compiled = pytest.mark.skipif(COMPILED is None, reason="wire._send_codec not loaded (TIDEMQ_PURE=1 or not built)")
SETTINGS = settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
MAX_FRAME = 1 << 20

int64 = st.integers(-(2**63), 2**63 - 1)
any_int = st.one_of(int64, st.integers(-(2**70), 2**70), st.sampled_from([0, 1, -1, 2**31 - 1, 2**31, -(2**31) - 1]))
texts = st.one_of(st.text(max_size=12), st.sampled_from(["", "a\x01b", "x\x02", "T", "Orders", "bad topic", "é"]))
odd_values = st.one_of(st.none(), st.booleans(), any_int, texts, st.binary(max_size=8), st.lists(st.text(max_size=3),
                       max_size=2), st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2))

plain_sends = st.fixed_dictionaries(
    {"v": st.just(1), "op": st.just("send"), "id": int64, "topic": st.sampled_from(["T", "Orders", "a-b_c%d|e"]),
     "body": st.binary(min_size=1, max_size=300)},
    optional={"tags": st.text(min_size=1, max_size=10).filter(lambda t: "\x01" not in t and "\x02" not in t),
              "queue_id": st.integers(0, 2**31 - 1), "wait": st.booleans(),
              "born_timestamp": st.integers(0, 2**63 - 1), "flag": st.integers(-(2**31), 2**31 - 1)},
)


plain_messages = st.fixed_dictionaries(
    {"body": st.binary(min_size=1, max_size=100)},
    optional={"tags": st.text(min_size=1, max_size=10).filter(lambda t: "\x01" not in t and "\x02" not in t)})
plain_batches = st.fixed_dictionaries(
    {"v": st.just(1), "op": st.just("send_batch"), "id": int64, "topic": st.sampled_from(["T", "Orders"]),
     "messages": st.lists(plain_messages, min_size=1, max_size=5)},
    optional={"queue_id": st.integers(0, 2**31 - 1), "wait": st.booleans()},
)
PLAIN_KEYS = {"send": {"v", "op", "id", "topic", "body", "tags", "queue_id", "wait", "born_timestamp", "flag"},
              "send_batch": {"v", "op", "id", "topic", "messages", "queue_id", "wait"}}


@st.composite
def odd_batches(draw) -> dict[str, Any]:
    """A plain batch with one field or one message's field changed, removed or added."""
    frame = dict(draw(plain_batches))
    messages = [dict(m) for m in frame["messages"]]
    if draw(st.booleans()):
        m = messages[draw(st.integers(0, len(messages) - 1))]
        field = draw(st.sampled_from(["body", "tags", "keys", "flag", "properties"]))
        if draw(st.booleans()) and field in m:
            del m[field]
        else:
            m[field] = draw(odd_values)
        frame["messages"] = messages
    else:
        field = draw(st.sampled_from(["v", "op", "id", "topic", "messages", "queue_id", "wait", "body"]))
        if draw(st.booleans()) and field in frame:
            del frame[field]
        else:
            frame[field] = draw(st.one_of(odd_values, st.just([]), st.just([{"body": b"x"}, 5])))
    return frame


@st.composite
def odd_sends(draw) -> dict[str, Any]:
    """A plain send with one field changed, removed or added: what a client might get wrong."""
    frame = dict(draw(plain_sends))
    field = draw(st.sampled_from(["v", "op", "id", "topic", "body", "tags", "queue_id", "wait", "born_timestamp",
                                  "flag", "keys", "properties", "queueId", "messages"]))
    if draw(st.booleans()) and field in frame:
        del frame[field]
    else:
        frame[field] = draw(odd_values)
    return frame


def reference_item(body: bytes) -> Any:
    """What the reference makes of a frame's bytes: the Request, or the InvalidRequest."""
    try:
        return parse_with(cbor2.loads(body), NODE_REQUESTS)
    except InvalidRequest as e:
        return e


def known_topics(*frames: dict[str, Any]) -> set[str]:
    return {f["topic"] for f in frames if type(f.get("topic")) is str and topic_error(f["topic"]) is None}


def test_the_send_codec_is_built():
    """`pip install` builds wire._send_codec beside store._accel on a machine with a C
    compiler (this one): a build that fell back to pure Python would lose the send path."""
    built = importlib.import_module("wire._send_codec")  # ImportError: it was not built
    assert COMPILED is (None if forced_pure() else built)
    assert send_codec.COMPILED is COMPILED


@needs_compiled
@SETTINGS
@given(frame=st.one_of(plain_sends, odd_sends(), plain_batches, odd_batches()))
def test_a_send_is_decoded_in_c_only_as_the_request_schema_reads_it(frame):
    data = encode_frame(frame)
    items, used, oversized = COMPILED.split_frames(data, MAX_FRAME, known_topics(frame))
    assert (used, oversized) == (len(data), -1)
    [item] = items
    want = reference_item(data[HEADER.size:])
    if type(item) is bytes:
        assert item == data[HEADER.size:]  # the reference decodes and checks it
        op, messages = frame.get("op"), frame.get("messages")
        plain_shape = type(op) is str and frame.keys() <= PLAIN_KEYS.get(op, set()) and all(
            type(m) is dict and m.keys() <= {"body", "tags"} for m in (messages if type(messages) is list else []))
        if plain_shape:
            assert isinstance(want, InvalidRequest) or frame["topic"] not in known_topics(frame), \
                f"a valid plain request was left to the reference: {frame}"
        return
    assert not isinstance(want, InvalidRequest), (frame, want)
    f = want.fields
    assert want.id == item.id
    if type(item) is PlainBatch:
        assert want.op == "send_batch"
        assert (f.topic, f.queue_id, f.wait) == (item.topic, item.queue_id, item.wait)
        assert [(m.body, m.tags, m.keys, m.properties, m.flag) for m in f.messages] == [
            (body, tags, [], {}, 0) for body, tags in item.messages]
        return
    assert type(item) is PlainSend and want.op == "send"
    assert (f.topic, f.body, f.tags, f.queue_id, f.wait, f.born_timestamp, f.flag, f.keys, f.properties) == (
        item.topic, item.body, item.tags, item.queue_id, item.wait, item.born_timestamp, item.flag, [], {})


@needs_compiled
@SETTINGS
@given(frames=st.lists(st.one_of(plain_sends, odd_sends(), plain_batches, odd_batches()), min_size=1, max_size=6),
       cuts=st.lists(st.integers(0, 4000), max_size=4))
def test_frames_split_in_c_come_out_as_the_reference_reads_them_in_any_chunking(frames, cuts):
    """Frames fed in any chunking give the same requests as the pure decoder: plain sends
    as their fields, the rest as maps."""
    data = b"".join(encode_frame(f) for f in frames)
    decoder = FrameDecoder(MAX_FRAME, plain_sends=known_topics(*frames))
    got: list[Any] = []
    start = 0
    for cut in sorted(c % (len(data) + 1) for c in cuts) + [len(data)]:
        out, error = decoder.feed_all(data[start:cut])
        assert error is None
        got += out
        start = max(start, cut)
    assert decoder.buffered == 0 and len(got) == len(frames)
    for item, frame in zip(got, frames, strict=True):
        if type(item) is PlainSend:
            assert item.id == frame["id"] and item.body == frame["body"]
        elif type(item) is PlainBatch:
            assert item.id == frame["id"] and [b for b, _ in item.messages] == [m["body"] for m in frame["messages"]]
        else:
            assert item == cbor2.loads(encode_frame(frame)[HEADER.size:])


@needs_compiled
def test_an_oversized_or_broken_frame_after_good_ones_ends_the_stream_as_the_reference_does():
    good = encode_frame({"v": 1, "op": "send", "id": 1, "topic": "T", "body": b"x"})
    for tail, reason in ((HEADER.pack(MAX_FRAME + 1) + b"..", f"frame of {MAX_FRAME + 1} bytes exceeds"),
                         (b"GET / HTTP/1.1\r\n", "does not speak the tidemq protocol"),
                         (HEADER.pack(2) + b"\xff\xff", "not valid CBOR")):
        decoder = FrameDecoder(MAX_FRAME, plain_sends={"T"})
        frames, error = decoder.feed_all(good + good + tail)
        assert [type(f) for f in frames] == [PlainSend, PlainSend]
        assert error is not None and reason in error.reason
        assert decoder.feed_all(good) == ([], error)  # broken for good


STORED_STATUSES = st.sampled_from([s.value for s in Status if s.name in PutMessageStatus.__members__
                                   and PutMessageStatus[s.name].stored])


@SETTINGS
@given(request_id=int64, status=STORED_STATUSES,
       msg_id=st.one_of(st.text(max_size=80), st.just("7F00000100002A9F0000000000000000")),
       queue_id=any_int, queue_offset=any_int, commitlog_offset=any_int)
def test_a_send_answer_is_the_reply_class_encoding(request_id, status, msg_id, queue_id, queue_offset,
                                                   commitlog_offset):
    """The reply class spells the answer; the compiled encoder gives its bytes (or leaves
    a value out of its range to it)."""
    want = encode_frame(SendReply(status=Status(status), msg_id=msg_id, queue_id=queue_id, queue_offset=queue_offset,
                                  commitlog_offset=commitlog_offset).to_wire(request_id))
    args = (request_id, status, msg_id, queue_id, queue_offset, commitlog_offset)
    assert send_codec.reference_reply_frame(*args) == want
    assert send_reply_frame(*args) == want
    if COMPILED is not None:
        assert COMPILED.send_reply_frame(*args) in (want, None)
        if all(-(2**63) <= v < 2**63 for v in (request_id, queue_id, queue_offset, commitlog_offset)):
            assert COMPILED.send_reply_frame(*args) == want, "the common case is encoded in C"


@SETTINGS
@given(request_id=int64, status=STORED_STATUSES,
       msg_ids=st.lists(st.one_of(st.text(max_size=40).filter(lambda t: "," not in t),
                                  st.just("7F00000100002A9F0000000000000000")), min_size=1, max_size=70),
       queue_id=any_int, queue_offset=any_int, commitlog_offset=any_int)
def test_a_send_batch_answer_is_the_reply_class_encoding(request_id, status, msg_ids, queue_id, queue_offset,
                                                         commitlog_offset):
    want = encode_frame(SendBatchReply(status=Status(status), msg_ids=msg_ids, queue_id=queue_id,
                                       queue_offset=queue_offset, commitlog_offset=commitlog_offset
                                       ).to_wire(request_id))
    args = (request_id, status, ",".join(msg_ids), queue_id, queue_offset, commitlog_offset)
    assert send_codec.reference_batch_reply_frame(*args) == want
    assert send_batch_reply_frame(*args) == want
    if COMPILED is not None:
        assert COMPILED.send_batch_reply_frame(*args) in (want, None)
        if all(-(2**63) <= v < 2**63 for v in (request_id, queue_id, queue_offset, commitlog_offset)):
            assert COMPILED.send_batch_reply_frame(*args) == want, "the common case is encoded in C"


# ---------------------------------------------------------------- end to end, both paths

NOW_S = 1_764_000_000.123


@asynccontextmanager
async def serving(conf: Path, taken: list[PlainSend | PlainBatch] | None) -> AsyncIterator[tuple[ClientServer, NodeServices]]:
    """A node's send path behind a ClientServer, as node/broker.py wires it, with the
    compiled send path (the plain sends it serves are added to `taken`) or without (None:
    the reference); the store's clock fixed."""
    cfg = load_config(str(conf))
    root = cfg.store.store_path_root_dir
    topics = TopicConfigManager(root, auto_create=True, default_queue_nums=2)
    topics.load()
    offsets = ConsumerOffsetManager(root)
    offsets.load()
    async with open_store(cfg.store, clock=lambda: NOW_S) as store, trio.open_nursery() as nursery:
        services = NodeServices(cfg=cfg, store=store, topics=topics, offsets=offsets)
        await topics.create("Narrow", 1, 1)

        async def plain(sends: list[PlainSend | PlainBatch], peer: str | None) -> list[Any]:
            assert taken is not None
            taken.extend(sends)
            return await handle_plain_sends(services, sends, peer)

        server = ClientServer(partial(handle_now, services), host="127.0.0.1", port=0,
                              max_frame_size=cfg.max_frame_size, batched_ops=BATCHED_OPS,
                              commit=partial(append_requests, services), finish=partial(finish_requests, services),
                              plain_sends=plain if taken is not None else None)
        await nursery.start(server.run)
        yield server, services
        nursery.cancel_scope.cancel()


async def answers_to(port: int, chunks: list[bytes], expected: int, client_port: int) -> dict[Any, bytes]:
    """Send the chunks (one write each) from `client_port` (the born host of the messages)
    and read `expected` answer frames: id → bytes."""
    got: dict[Any, bytes] = {}
    buf = b""
    sock = trio.socket.socket()
    sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_REUSEADDR, 1)
    await sock.bind(("127.0.0.1", client_port))
    await sock.connect(("127.0.0.1", port))
    async with trio.SocketStream(sock) as stream:
        for chunk in chunks:
            await stream.send_all(chunk)
        with trio.fail_after(20):
            while len(got) < expected:
                data = await stream.receive_some(1 << 16)
                assert data, f"closed after {len(got)} of {expected} answers"
                buf += data
                while len(buf) >= 4 and len(buf) >= 4 + HEADER.unpack_from(buf)[0]:
                    size = HEADER.unpack_from(buf)[0]
                    frame, buf = buf[:4 + size], buf[4 + size:]
                    got[cbor2.loads(frame[4:]).get("id")] = frame
    return got


def store_files(root: Path) -> dict[str, bytes]:
    """Every file the put path writes (CommitLog, ConsumeQueues, index): path → bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.parts[len(root.parts)] in ("commitlog", "consumequeue", "index")}


def request_stream(draw_requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**r, "id": i} for i, r in enumerate(draw_requests)]


sends_of_all_kinds = st.one_of(
    plain_sends.map(lambda f: {**f, "topic": "T", "queue_id": f.get("queue_id", 0) % 3} if "queue_id" in f
                    else {**f, "topic": "T"}),
    plain_sends.map(lambda f: {**f, "topic": "Narrow"}),  # one queue: a queue_id above 0 is refused
    plain_sends.map(lambda f: {**f, "topic": "Auto"}),  # auto-created on its first send
    plain_sends.map(lambda f: {**f, "keys": ["k1", "k2"], "properties": {"p": "v"}}),  # the reference's own
    plain_batches.map(lambda f: {**f, "topic": "T", "queue_id": f.get("queue_id", 0) % 3}),
    plain_batches.map(lambda f: {**f, "topic": "Narrow"}),
    st.builds(lambda body: {"v": 1, "op": "send_batch", "topic": "T", "queue_id": 1,  # over maxMessageSize
                            "messages": [{"body": body}] * 40}, st.binary(min_size=2000, max_size=2000)),
    odd_sends(),
    odd_batches(),
    st.just({"v": 1, "op": "fetch_offset", "group": "g", "topic": "T", "queue_id": 0}),  # run as a task
    st.just({"v": 1, "op": "no_such_op"}),
)


@needs_compiled
@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(requests=st.lists(sends_of_all_kinds, min_size=1, max_size=40), cuts=st.lists(st.integers(0, 20000),
                                                                                     max_size=3),
       broken=st.sampled_from([b"", HEADER.pack(3) + b"\xff\xff\xff", HEADER.pack(MAX_FRAME * 64)]))
async def test_both_paths_give_the_same_answer_bytes_and_the_same_store_files(tmp_path_factory, monkeypatch,
                                                                              requests, cuts, broken):
    """The same request streams, in any chunking and possibly ending in a bad frame (the
    frames before it are answered, then the error frame), through a server with the
    compiled send path and one without: the same answer bytes and store files."""
    monkeypatch.setattr(time, "time", lambda: NOW_S)  # born timestamps of sends without one
    base = tmp_path_factory.mktemp("paths")
    stream = [encode_frame(r) for r in request_stream(requests)]
    data = b"".join(stream) + broken
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    chunks = [data[a:b] for a, b in itertools.pairwise(bounds)]
    seen: dict[bool, tuple[dict[Any, bytes], dict[str, bytes], int]] = {}
    port, client_port = 10911, free_port()
    taken: list[PlainSend | PlainBatch] = []
    learned: set[str] = set()
    checked = {"T", "Narrow", "Auto"}  # as the first send to each, checked by the schema, makes them
    for compiled in (True, False):
        (base / str(compiled)).mkdir()
        conf = master_conf(base / str(compiled), role="ASYNC_MASTER", listenPort=port)  # same store host
        async with serving(conf, taken if compiled else None) as (server, services):
            server.checked_topics.update(checked)
            answers = await answers_to(server.port, chunks, len(stream) + bool(broken), client_port)
            await wait_until(lambda s=services: s.store.dispatch_behind_bytes() == 0, what="dispatch caught up")
            plain = services.stats.send_requests
            if compiled:
                learned = set(server.checked_topics)
        seen[compiled] = answers, store_files(Path(load_config(str(conf)).store.store_path_root_dir)), plain
    assert seen[True][0] == seen[False][0]
    assert seen[True][1].keys() == seen[False][1].keys()
    for name in seen[True][1]:
        assert seen[True][1][name] == seen[False][1][name], f"{name} differs"
    assert seen[True][2] == seen[False][2]  # the same sends reached the turn
    def plain_sends(known: set[str]) -> int:
        return sum(type(i) in (PlainSend, PlainBatch) for i in COMPILED.split_frames(data, MAX_FRAME, set(known))[0])

    assert (None in seen[True][0]) == bool(broken)  # the error frame (id null) after a bad one
    # the compiled path served every plain send to a topic known at the start, and more as the
    # server learned topics from sends the schema checked (its own set: at most those at the end)
    assert plain_sends(checked) <= len(taken) <= plain_sends(learned)
