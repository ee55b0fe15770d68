"""Fuzz a live node's client port and HA port with hypothesis-generated frames.

Client frames: random bytes, length prefixes around the cap, valid CBOR with random ops
and field values, and mutated valid requests. The node must answer each frame with a
response (a CBOR map with a status; a remoting response when the bytes start as a
RocketMQ remoting frame, whose byte 4 is 0 or 1: the port speaks both) or close that
connection; a control connection
opened beforehand must keep answering `status`. HA frames: random bytes and 8-byte
offsets sent to the master's HA port as a slave's reports; the real slave must keep
replicating (the runner checks it catches up). Runs in a thread (hypothesis is
synchronous) for a bounded number of examples or time.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import cbor2
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from store.address import split_host_port
from wire.remoting.command import (
    RemotingCommand,
    RemotingFrameError,
    decode_payload,
    looks_like_remoting,
)

OPS = ["send", "send_batch", "pull", "query_by_key", "get_by_msg_id", "offset_by_time", "min_offset",
       "max_offset", "commit_offset", "fetch_offset", "offset_list", "topic_list", "status", "nope", ""]
FIELDS = ["topic", "body", "queue_id", "offset", "max_msgs", "keys", "tags", "properties", "wait",
          "timeout_ms", "group", "messages", "msg_id", "key", "timestamp", "v", "id"]
SAFE_TOPIC = "FuzzTopic"  # fuzzed writes never touch the workload's topic

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**64), max_value=2**64),
                    st.floats(allow_nan=True), st.text(max_size=40), st.binary(max_size=200))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                       st.dictionaries(st.text(max_size=10), inner, max_size=5)),
                      max_leaves=12)


@st.composite
def requests(draw: Any) -> dict[str, Any]:
    req: dict[Any, Any] = {"v": draw(st.sampled_from([1, 1, 1, 2, 0, "1", None])),
                           "op": draw(st.sampled_from(OPS) | st.text(max_size=12)),
                           "id": draw(st.integers(min_value=-5, max_value=2**40) | values)}
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=6, unique=True)):
        req[name] = draw(values)
    if "topic" in req:
        req["topic"] = SAFE_TOPIC
    for name in draw(st.lists(st.sampled_from(["v", "op", "id"]), max_size=2, unique=True)):
        del req[name]
    return req


def _frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


client_frames = st.one_of(
    st.binary(min_size=1, max_size=300),
    requests().map(lambda r: _frame(cbor2.dumps(r))),
    st.binary(max_size=100).map(_frame),
    st.integers(min_value=2**24, max_value=2**32 - 1).map(lambda n: struct.pack(">I", n) + b"\x00" * 8),
    st.tuples(requests(), st.integers(min_value=0, max_value=40), st.binary(min_size=1, max_size=4)).map(
        lambda t: _mutate(_frame(cbor2.dumps(t[0])), t[1], t[2])),
    st.tuples(st.sampled_from([0, 1]), st.binary(max_size=200)).map(  # remoting frames with random headers
        lambda t: _frame(struct.pack(">I", t[0] << 24 | len(t[1])) + t[1])),
)
ha_frames = st.one_of(st.binary(min_size=1, max_size=64),
                      st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), min_size=1, max_size=4).map(
                          lambda xs: b"".join(struct.pack(">q", x) for x in xs)))


def _mutate(data: bytes, at: int, patch: bytes) -> bytes:
    at = min(at, len(data) - 1)
    return data[:at] + patch + data[at + len(patch):]


def _addr(address: str) -> tuple[str, int]:
    return split_host_port(address)


def _read_response(sock: socket.socket, remoting: bool = False) -> dict[str, Any] | None:
    """The node's answer to one frame; None when it closed the connection. `remoting`: the
    frame started as a remoting one, so the answer is a remoting response."""
    head = b""
    while len(head) < 4:
        data = sock.recv(4 - len(head))
        if not data:
            return None
        head += data
    (size,) = struct.unpack(">I", head)
    body = b""
    while len(body) < size:
        data = sock.recv(size - len(body))
        if not data:
            return None
        body += data
    if remoting:
        try:
            command = decode_payload(body)
        except RemotingFrameError as e:
            raise AssertionError(f"the node answered a remoting frame with a broken one: {e}") from None
        if not isinstance(command, RemotingCommand) or not command.is_response:
            raise AssertionError(f"the node answered a remoting frame with something that is not a response: "
                                 f"{command!r}")
        return {"status": "REMOTING", "code": command.code}
    answer = cbor2.loads(body)
    if not isinstance(answer, dict) or "status" not in answer:
        raise AssertionError(f"the node answered with something that is not a response: {answer!r}")
    return answer


def _status_ok(control: socket.socket) -> None:
    control.sendall(_frame(cbor2.dumps({"v": 1, "op": "status", "id": 1})))
    answer = _read_response(control)
    if answer is None or answer.get("status") != "OK":
        raise AssertionError(f"the control connection stopped answering status: {answer!r}")


def fuzz_node(client_address: str, ha_address: str | None, *, seconds: float, max_examples: int = 400,
              seed: int = 0, reply_timeout: float = 5.0) -> dict[str, Any]:
    """Fuzz for at most `seconds`; returns counts, raises AssertionError on a broken promise."""
    start = time.monotonic()
    deadline = start + seconds * (0.7 if ha_address else 1.0)  # the rest is the HA port's
    counts = {"client_frames": 0, "answered": 0, "closed": 0, "ha_frames": 0}
    control = socket.create_connection(_addr(client_address), timeout=reply_timeout)
    fuzz_settings = settings(max_examples=max_examples, deadline=None, database=None, derandomize=False,
                             suppress_health_check=list(HealthCheck), phases=[Phase.generate])

    @fuzz_settings
    @given(frame=client_frames)
    def client_case(frame: bytes) -> None:
        if time.monotonic() > deadline:
            return
        counts["client_frames"] += 1
        with socket.create_connection(_addr(client_address), timeout=reply_timeout) as s:
            s.sendall(frame)
            s.shutdown(socket.SHUT_WR)  # a frame cut short is then answered or closed, never awaited
            try:
                answer = _read_response(s, looks_like_remoting(frame))
            except (ConnectionResetError, BrokenPipeError):
                answer = None
            except TimeoutError:
                raise AssertionError(f"no answer and no close within {reply_timeout} s to {frame[:60]!r}") from None
            counts["answered" if answer is not None else "closed"] += 1

    @fuzz_settings
    @given(frame=ha_frames)
    def ha_case(frame: bytes) -> None:
        if ha_address is None or time.monotonic() > start + seconds:
            return
        counts["ha_frames"] += 1
        with socket.create_connection(_addr(ha_address), timeout=0.3) as s:
            try:
                s.sendall(frame)
                s.recv(64)  # a heartbeat / data, or the close
            except (ConnectionResetError, BrokenPipeError, TimeoutError):
                pass

    try:
        with control:
            hypothesis_seed(seed)(client_case)()
            _status_ok(control)
            hypothesis_seed(seed)(ha_case)()
            _status_ok(control)
    except OSError as e:
        raise AssertionError(f"the node stopped serving: {e}") from None
    return counts
