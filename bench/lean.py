"""The lean load client: one asyncio process, N connections × M requests in flight.

Every request is encoded once, before the clock starts (one pre-encoded request per
in-flight slot); when a response completes a slot, the same bytes go out again, written
with one `transport.write` per received chunk. No coroutine or future per request, so the
client costs a few µs per request and the server under test is what is measured. The same
design drives every system of `scripts/bench compare` through a codec:

- `TidemqCodec`: the node's frames (4-byte length + CBOR map), `send` or `send_batch`,
  responses paired with their slot by id (a node may answer out of order); the trio floor
  speaks the same frames.
- `RemotingCodec`: RocketMQ remoting SEND_MESSAGE frames as the C++ client writes them,
  to a tidemq node's client port (the same port: the node tells the protocols apart);
  the message the `TidemqCodec` sends (a body, TAGS, WAIT), or with `--uniq-key` also the
  UNIQ_KEY the C++ client puts on every message (which the node indexes).
- `RespCodec`: Redis `XADD` (optionally followed by `WAIT n 0` in the same request), replies
  in order.
- `NatsCodec`: NATS `PUB subject reply` to a JetStream stream; the ack arrives on the
  slot's own reply inbox.

Run as `python -m bench.lean {tidemq,remoting,redis,nats} --port P ...`: prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import socket
import ssl
import struct
import sys
import time
from collections.abc import Callable
from typing import Any

import cbor2
from scramp import ScramClient

__all__ = ["NatsCodec", "RemotingCodec", "RespCodec", "TidemqCodec", "drive", "main", "percentile"]

HEADER = struct.Struct(">I")
BODY_BYTES = 1024
TOPIC = "BenchCompare"
DRAIN_TIMEOUT_S = 10.0
WAIT_TIMEOUT_MS = 5000
LOGIN_START, LOGIN_FINISH = -1, -2  # request ids of the login (sends use ids >= 0)  # Redis WAIT: a reply with fewer replicas is counted as failed


def _frame(request: dict[str, Any]) -> bytes:
    body = cbor2.dumps(request)
    return HEADER.pack(len(body)) + body


class TidemqCodec:
    """`send` (or `send_batch` of `batch` messages) to one topic; slot = id - id_base. With
    `login` (account, secret) the connection first logs in (SCRAM-SHA-256, the two auth ops
    with ids LOGIN_START and LOGIN_FINISH), as a client of a node with aclEnable does."""

    def __init__(self, *, body: bytes, batch: int = 1, topic: str = TOPIC, id_base: int = 0,
                 login: tuple[str, str] | None = None) -> None:
        self.body, self.batch, self.topic, self.id_base = body, batch, topic, id_base
        self.msgs_per_request = batch
        self.ready = login is None
        self.outgoing = b""
        self.errors: collections.Counter[str] = collections.Counter()
        self._buf = bytearray()
        self._scram = ScramClient(["SCRAM-SHA-256"], *login) if login else None

    def handshake(self) -> bytes:
        if self._scram is None:
            return b""
        return _frame({"v": 1, "op": "auth_start", "id": LOGIN_START, "message": self._scram.get_client_first()})

    def _login_step(self, response: dict[str, Any]) -> None:
        if response.get("status") != "OK":
            raise ConnectionError(f"login refused: {response.get('error')}")
        assert self._scram is not None
        if response["id"] == LOGIN_START:
            self._scram.set_server_first(response["message"])
            self.outgoing += _frame({"v": 1, "op": "auth_finish", "id": LOGIN_FINISH,
                                     "message": self._scram.get_client_final()})
        else:
            self._scram.set_server_final(response["message"])
            self.ready = True

    def request(self, slot: int) -> bytes:
        req: dict[str, Any] = {"v": 1, "op": "send", "id": self.id_base + slot, "topic": self.topic}
        if self.batch == 1:
            req |= {"body": self.body, "tags": "bench"}
        else:
            req |= {"op": "send_batch", "messages": [{"body": self.body, "tags": "bench"}] * self.batch}
        return _frame(req)

    def feed(self, data: bytes) -> list[tuple[int, bool]]:
        buf = self._buf
        buf += data
        done = []
        pos = 0
        while len(buf) - pos >= 4:
            (size,) = HEADER.unpack_from(buf, pos)
            if len(buf) - pos - 4 < size:
                break
            response = cbor2.loads(bytes(buf[pos + 4:pos + 4 + size]))
            pos += 4 + size
            if not self.ready and response.get("id") in (LOGIN_START, LOGIN_FINISH):
                self._login_step(response)
                continue
            status = response.get("status")
            ok = status == "PUT_OK"
            if not ok:
                self.errors[f"{status}: {response.get('error', '')}"[:200]] += 1
            rid = response.get("id")
            if type(rid) is int:
                done.append((rid - self.id_base, ok))
        del buf[:pos]
        return done


class RemotingCodec:
    """RocketMQ remoting SEND_MESSAGE (code 10) as the C++ client 1.2.3 writes it: a JSON
    header (keys sorted, a trailing newline, every extField the client sets, numbers where
    it writes numbers), the message's properties (WAIT, TAGS; with `uniq_key` the client's
    UNIQ_KEY first), a raw body; each slot its own opaque and a queue of its own (round
    robin over `queues`)."""

    def __init__(self, *, body: bytes, topic: str = TOPIC, id_base: int = 0, queues: int = 4,
                 uniq_key: bool = False) -> None:
        self.body, self.topic, self.id_base, self.queues = body, topic, id_base, queues
        self.uniq_key = uniq_key
        self.msgs_per_request = 1
        self.ready = True
        self.outgoing = b""
        self.errors: collections.Counter[str] = collections.Counter()
        self._buf = bytearray()

    def handshake(self) -> bytes:
        return b""

    def request(self, slot: int) -> bytes:
        opaque = self.id_base + slot
        props = (f"UNIQ_KEY\x01{opaque:032X}\x02" if self.uniq_key else "") + "WAIT\x01true\x02TAGS\x01bench\x02"
        header = {"code": 10, "flag": 0, "language": "CPP", "opaque": opaque, "remark": "", "version": 63,
                  "extFields": {"AccessKey": "", "OnsChannel": "", "Signature": "", "batch": "0",
                                "bornTimestamp": str(int(time.time() * 1000)), "defaultTopic": "TBW102",
                                "defaultTopicQueueNums": 4, "flag": 0, "producerGroup": "bench-producer",
                                "properties": props, "queueId": slot % self.queues, "reconsumeTimes": "0",
                                "sysFlag": 0, "topic": self.topic, "unitMode": "0"}}
        raw = (json.dumps(header, sort_keys=True, separators=(",", ":")) + "\n").encode()
        return HEADER.pack(4 + len(raw) + len(self.body)) + HEADER.pack(len(raw)) + raw + self.body

    def feed(self, data: bytes) -> list[tuple[int, bool]]:
        buf = self._buf
        buf += data
        done = []
        pos = 0
        while len(buf) - pos >= 8:
            (size,) = HEADER.unpack_from(buf, pos)
            if len(buf) - pos - 4 < size:
                break
            (header_len,) = HEADER.unpack_from(buf, pos + 4)
            header = json.loads(bytes(buf[pos + 8:pos + 8 + (header_len & 0xFFFFFF)]))
            pos += 4 + size
            ok = header.get("code") == 0
            if not ok:
                self.errors[f"{header.get('code')}: {header.get('remark', '')}"[:200]] += 1
            done.append((header.get("opaque", -1) - self.id_base, ok))
        del buf[:pos]
        return done


class RespCodec:
    """Redis `XADD key MAXLEN ~ cap * body <body>`, then `WAIT replicas 5000` when
    `replicas`: one request, one or two replies, answered in order. The stream is capped
    (approximately, which trims whole nodes cheaply) so a run does not fill the memory."""

    def __init__(self, *, body: bytes, key: str = "bench", replicas: int = 0, maxlen: int = 100_000) -> None:
        self.body, self.key, self.replicas, self.maxlen = body, key, replicas, maxlen
        self.msgs_per_request = 1
        self.ready = True
        self.outgoing = b""
        self.errors: collections.Counter[str] = collections.Counter()
        self._buf = bytearray()
        self._slots: collections.deque[int] = collections.deque()
        self._replies_per_request = 2 if replicas else 1
        self._partial: list[bool] = []  # the replies of the request at the head so far

    @staticmethod
    def command(*args: bytes | str) -> bytes:
        parts = [f"*{len(args)}\r\n".encode()]
        for a in args:
            b = a.encode() if isinstance(a, str) else a
            parts += [f"${len(b)}\r\n".encode(), b, b"\r\n"]
        return b"".join(parts)

    def handshake(self) -> bytes:
        return b""

    def request(self, slot: int) -> bytes:
        req = self.command("XADD", self.key, "MAXLEN", "~", str(self.maxlen), "*", "body", self.body)
        if self.replicas:
            req += self.command("WAIT", str(self.replicas), str(WAIT_TIMEOUT_MS))
        return req

    def sent(self, slot: int) -> None:
        self._slots.append(slot)

    def _reply(self, buf: bytearray, pos: int) -> tuple[int, bool, str] | None:
        """(next position, ok, text) of the reply at `pos`, or None when incomplete."""
        end = buf.find(b"\r\n", pos)
        if end < 0:
            return None
        kind, line = buf[pos:pos + 1], bytes(buf[pos + 1:end])
        if kind == b"$":
            n = int(line)
            if n < 0:
                return end + 2, False, "nil"
            if len(buf) < end + 2 + n + 2:
                return None
            return end + 2 + n + 2, True, ""
        if kind == b":":
            return end + 2, int(line) >= self.replicas, f"WAIT reached {int(line)} replicas"
        return end + 2, kind == b"+", line.decode(errors="replace")

    def feed(self, data: bytes) -> list[tuple[int, bool]]:
        buf = self._buf
        buf += data
        done = []
        pos = 0
        while pos < len(buf):
            parsed = self._reply(buf, pos)
            if parsed is None:
                break
            pos, ok, text = parsed
            if not ok:
                self.errors[text[:200]] += 1
            self._partial.append(ok)
            if len(self._partial) == self._replies_per_request:
                done.append((self._slots.popleft(), all(self._partial)))
                self._partial = []
        del buf[:pos]
        return done


class NatsCodec:
    """NATS `PUB subject inbox.slot` to a JetStream stream; its ack (`{"stream":..,"seq":..}`)
    comes back as a MSG on the slot's inbox. Ready once the server answered the first PING."""

    def __init__(self, *, body: bytes, subject: str = "bench", inbox: str = "_INBOX.bench") -> None:
        self.body, self.subject, self.inbox = body, subject, f"{inbox}.{os.getpid()}.{id(self)}"
        self.msgs_per_request = 1
        self.ready = False
        self.outgoing = b""
        self.errors: collections.Counter[str] = collections.Counter()
        self._buf = bytearray()

    def handshake(self) -> bytes:
        connect = json.dumps({"verbose": False, "pedantic": False, "headers": False, "name": "bench.lean"})
        return f"CONNECT {connect}\r\nSUB {self.inbox}.* 1\r\nPING\r\n".encode()

    def request(self, slot: int) -> bytes:
        return f"PUB {self.subject} {self.inbox}.{slot} {len(self.body)}\r\n".encode() + self.body + b"\r\n"

    def feed(self, data: bytes) -> list[tuple[int, bool]]:
        buf = self._buf
        buf += data
        done = []
        pos = 0
        while True:
            end = buf.find(b"\r\n", pos)
            if end < 0:
                break
            line = bytes(buf[pos:end])
            if line.startswith(b"MSG "):
                parts = line.split()  # MSG subject sid [reply] size
                size = int(parts[-1])
                if len(buf) < end + 2 + size + 2:
                    break
                payload = bytes(buf[end + 2:end + 2 + size])
                pos = end + 2 + size + 2
                ok = b'"error"' not in payload
                if not ok:
                    self.errors[payload.decode(errors="replace")[:200]] += 1
                done.append((int(parts[1].rsplit(b".", 1)[1]), ok))
                continue
            pos = end + 2
            if line == b"PING":
                self.outgoing += b"PONG\r\n"
            elif line == b"PONG":
                self.ready = True
            elif line.startswith(b"-ERR"):
                self.errors[line.decode(errors="replace")[:200]] += 1
        del buf[:pos]
        return done


class _Run:
    """Shared clock and tallies of one load run."""

    def __init__(self, seconds: float, warmup: float) -> None:
        self.seconds, self.warmup = seconds, warmup
        self.sending = False
        self.window = (0.0, 0.0)
        self.completed = 0
        self.failed = 0
        self.latencies: list[float] = []
        self.in_flight = 0
        self.drained = asyncio.Event()

    def start(self) -> None:
        now = time.perf_counter()
        self.window = (now + self.warmup, now + self.warmup + self.seconds)
        self.sending = True


class _Connection(asyncio.Protocol):
    def __init__(self, codec: Any, run: _Run, in_flight: int) -> None:
        self.codec, self.run, self.slots = codec, run, in_flight
        self.requests = [codec.request(s) for s in range(in_flight)]
        self.sent_at = [0.0] * in_flight
        self.transport: asyncio.Transport | None = None
        self.ready = asyncio.get_running_loop().create_future()
        self.lost = asyncio.get_running_loop().create_future()
        self._track = getattr(codec, "sent", None)  # RespCodec pairs replies in send order
        self._outstanding = 0  # this connection's requests in flight

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
        if hs := self.codec.handshake():
            transport.write(hs)
        if self.codec.ready:
            self.ready.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(f"connection closed before it was ready: {exc}"))
        if not self.lost.done():
            self.lost.set_result(exc)
        run = self.run
        if run.sending:
            run.failed += 1
        run.in_flight -= self._outstanding
        self._outstanding = 0
        if run.in_flight <= 0:
            run.drained.set()

    def fire(self) -> None:
        """Put every slot in flight (the start of the run)."""
        self._send(range(self.slots))

    def _send(self, slots: Any) -> None:
        now = time.perf_counter()
        out = []
        for s in slots:
            self.sent_at[s] = now
            if self._track is not None:
                self._track(s)
            out.append(self.requests[s])
        if out:
            assert self.transport is not None  # slots are sent once connection_made has run
            self._outstanding += len(out)
            self.run.in_flight += len(out)
            self.transport.write(b"".join(out))

    def data_received(self, data: bytes) -> None:
        codec, run = self.codec, self.run
        done = codec.feed(data)
        if codec.outgoing:
            assert self.transport is not None  # asyncio calls data_received after connection_made
            self.transport.write(codec.outgoing)
            codec.outgoing = b""
        if not self.ready.done() and codec.ready:
            self.ready.set_result(None)
        if not done:
            return
        now = time.perf_counter()
        lo, hi = run.window
        again = []
        for slot, ok in done:
            if not 0 <= slot < self.slots:
                continue
            self._outstanding -= 1
            run.in_flight -= 1
            if lo <= now <= hi:
                if ok:
                    run.completed += 1
                    run.latencies.append(now - self.sent_at[slot])
                else:
                    run.failed += 1
            if run.sending and now < hi:
                again.append(slot)
        if again:
            self._send(again)
        elif run.in_flight <= 0 and not run.sending:
            run.drained.set()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def drive(
    host: str, port: int | list[int], codec_factory: Callable[[int], Any], *,
    connections: int, in_flight: int, seconds: float, warmup: float = 0.5, tls: ssl.SSLContext | None = None,
) -> dict[str, Any]:
    """Open `connections` (round robin over `port` when it is a list), keep `in_flight`
    requests outstanding on each for `warmup` + `seconds`, count what completes in the
    last `seconds`. `codec_factory(connection_index)` makes each connection's codec."""
    loop = asyncio.get_running_loop()
    ports = port if isinstance(port, list) else [port]
    run = _Run(seconds, warmup)
    conns: list[_Connection] = []
    try:
        for i in range(connections):
            codec = codec_factory(i)
            _, conn = await loop.create_connection(
                lambda c=codec: _Connection(c, run, in_flight), host, ports[i % len(ports)],
                ssl=tls, server_hostname=host if tls is not None else None)
            conns.append(conn)
        await asyncio.wait_for(asyncio.gather(*(c.ready for c in conns)), 10.0)
        cpu0 = time.process_time()
        run.start()
        for c in conns:
            c.fire()
        await asyncio.sleep(warmup + seconds)
        run.sending = False
        cpu = time.process_time() - cpu0
        if run.in_flight > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(run.drained.wait(), DRAIN_TIMEOUT_S)
    finally:
        for c in conns:
            if c.transport is not None:
                c.transport.close()
    errors: collections.Counter[str] = collections.Counter()
    for c in conns:
        errors.update(c.codec.errors)
    per_request = conns[0].codec.msgs_per_request if conns else 1
    return {
        "connections": connections, "in_flight": in_flight, "msgs_per_request": per_request,
        "seconds": seconds, "requests": run.completed, "failed": run.failed,
        "msgs_per_s": round(run.completed * per_request / seconds),
        "p50_ms": round(percentile(run.latencies, 0.50) * 1000, 3),
        "p99_ms": round(percentile(run.latencies, 0.99) * 1000, 3),
        "client_cpu_cores": round(cpu / (warmup + seconds), 2),
        "errors": dict(errors.most_common(5)),
    }


def codec_factory(kind: str, *, batch: int = 1, replicas: int = 0,
                  login: tuple[str, str] | None = None, uniq_key: bool = False) -> Callable[[int], Any]:
    """The codec maker for `kind` (tidemq, redis, nats), 1 KiB bodies."""
    body = os.urandom(BODY_BYTES)
    if kind == "tidemq":
        return lambda i: TidemqCodec(body=body, batch=batch, id_base=i << 20, login=login)
    if kind == "remoting":
        return lambda i: RemotingCodec(body=body, id_base=i << 20, uniq_key=uniq_key)
    if kind == "redis":
        return lambda i: RespCodec(body=body, replicas=replicas)
    if kind == "nats":
        return lambda i: NatsCodec(body=body)
    raise ValueError(f"unknown client kind {kind!r}; use tidemq, redis or nats")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lean", description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=["tidemq", "remoting", "redis", "nats"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", required=True, help="port, or comma-separated ports (round robin)")
    parser.add_argument("--connections", type=int, default=1)
    parser.add_argument("--in-flight", type=int, default=1, help="requests outstanding per connection")
    parser.add_argument("--batch", type=int, default=1, help="tidemq: messages per send_batch (1 = send)")
    parser.add_argument("--replicas", type=int, default=0, help="redis: WAIT for this many replicas")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--user", help="tidemq: log in as this account (aclEnable)")
    parser.add_argument("--secret-file", help="tidemq: the account's secret")
    parser.add_argument("--tls-ca", help="connect with TLS, checking the server with this CA")
    parser.add_argument("--uniq-key", action="store_true",
                        help="remoting: put a UNIQ_KEY on every message, as the C++ client does")
    args = parser.parse_args(argv)
    if args.connections < 1 or args.in_flight < 1 or args.batch < 1 or args.seconds <= 0:
        parser.error("--connections, --in-flight, --batch must be >= 1 and --seconds > 0")
    try:
        ports = [int(p) for p in args.port.split(",")]
    except ValueError:
        parser.error(f"--port must be a port or comma-separated ports, got {args.port!r}")
    login = None
    if args.user:
        with open(args.secret_file or "", encoding="utf-8") as f:
            login = (args.user, f.readline().strip())
    tls = ssl.create_default_context(cafile=args.tls_ca) if args.tls_ca else None
    factory = codec_factory(args.kind, batch=args.batch, replicas=args.replicas, login=login,
                            uniq_key=args.uniq_key)
    try:
        result = asyncio.run(drive(args.host, ports, factory, connections=args.connections,
                                   in_flight=args.in_flight, seconds=args.seconds, warmup=args.warmup, tls=tls))
    except (OSError, TimeoutError) as e:
        print(f"bench.lean: cannot drive {args.kind} at {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"kind": args.kind, "batch": args.batch, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
