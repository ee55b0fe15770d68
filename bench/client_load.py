"""The client libraries as their users meet them: one sequential send after another.

`scripts/bench compare`'s lean client (bench/lean.py) costs a few µs per request, so it
measures the servers. This load measures the other end: tidemq's own `Producer.send`
(cluster/client/producer.py, with its route choice, retries and typed answer) in a loop,
against redis-py's `XADD` in a loop, the same 1 KiB body and one request in flight. The
difference between the two is mostly client CPU per send, which is reported too
(`client_us_per_msg`: this process's CPU seconds over the messages it sent).

Run as `python -m bench.client_load {tidemq,redis} ...`: prints one JSON object, the
shape bench/lean.py prints. `--profile FILE` writes a cProfile of the measured part, timed in
this process's CPU seconds: on a loaded machine a loopback `send()` wakes the server, which
may preempt the client inside the call, so wall time would charge the server's work to it.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from .lean import BODY_BYTES, TOPIC, percentile

__all__ = ["main"]

ROUTE_TIMEOUT_S = 30.0
STREAM_MAXLEN = 100_000
"""The Redis stream is capped (`MAXLEN ~`) as bench/lean.py's RespCodec caps it, so a run does not fill the memory."""


class CannotDrive(Exception):
    """The server could not be reached or prepared before the clock started."""


def _result(latencies: list[float], seconds: float, failed: int, errors: collections.Counter[str],
            cpu_s: float) -> dict[str, Any]:
    sent = len(latencies)
    latencies.sort()
    return {
        "sent": sent,
        "msgs_per_s": round(sent / seconds, 1) if seconds else 0.0,
        "p50_ms": round(percentile(latencies, 0.5) * 1e3, 3) if latencies else None,
        "p99_ms": round(percentile(latencies, 0.99) * 1e3, 3) if latencies else None,
        "failed": failed,
        "errors": dict(errors),
        "client_cpu_cores": round(cpu_s / seconds, 2) if seconds else None,
        "client_us_per_msg": round(cpu_s * 1e6 / sent, 1) if sent else None,
    }


class _Clock:
    """The measured window after a warm-up: latencies, failures, wall and CPU seconds."""

    def __init__(self, seconds: float, warmup: float, profile: str | None) -> None:
        self.seconds, self.warmup = seconds, warmup
        self.latencies: list[float] = []
        self.failed = 0
        self.errors: collections.Counter[str] = collections.Counter()
        self._profiler = cProfile.Profile(time.process_time) if profile else None  # CPU, not wall: see the docstring
        self._profile = profile
        now = time.perf_counter()
        self._start = now + warmup
        self._end = self._start + seconds
        self._measuring = False
        self._cpu0 = 0.0

    def tick(self, began: float, error: BaseException | None) -> bool:
        """Count one send that began at `began`; False once the window is over."""
        now = time.perf_counter()
        if not self._measuring:
            if now < self._start:
                return True
            self._measuring = True
            self._start, self._end = now, now + self.seconds
            self._cpu0 = time.process_time()
            if self._profiler is not None:
                self._profiler.enable()
            return True
        if error is None:
            self.latencies.append(now - began)
        else:
            self.failed += 1
            self.errors[f"{type(error).__name__}: {error}"[:200]] += 1
        return now < self._end

    def result(self) -> dict[str, Any]:
        cpu = time.process_time() - self._cpu0
        if self._profiler is not None:
            self._profiler.disable()
            self._profiler.dump_stats(str(self._profile))
        wall = time.perf_counter() - self._start
        return _result(self.latencies, wall, self.failed, self.errors, cpu)


def _redis(args: argparse.Namespace, clock: _Clock) -> None:
    import redis  # the bench's peer client (the `bench` extra): imported only for its row

    client = redis.Redis(host="127.0.0.1", port=args.port, socket_connect_timeout=5.0)
    body = b"x" * args.body
    try:
        try:
            client.ping()
        except redis.RedisError as e:
            raise CannotDrive(f"redis at 127.0.0.1:{args.port}: {e}") from None
        while True:
            began, error = time.perf_counter(), None
            try:
                client.xadd(args.stream, {"body": body}, maxlen=STREAM_MAXLEN, approximate=True)
            except redis.RedisError as e:
                error = e
            if not clock.tick(began, error):
                break
    finally:
        client.close()


def _tidemq(args: argparse.Namespace, clock: _Clock) -> None:
    import trio

    from cluster.client import Admin, Producer
    from wire.client import NotFound, TidemqError

    body = b"x" * args.body

    async def ready(producer: Producer) -> None:
        """The topic created on every master and routed, so the loop measures the steady
        path (a topic no route knows yet is sent round robin to every master instead)."""
        async with Admin(namesrv=args.namesrv) as admin:
            await admin.create_topic(args.topic)
        with trio.fail_after(ROUTE_TIMEOUT_S):
            while True:
                try:
                    await producer.route(args.topic, refresh=True)
                    return
                except NotFound:
                    await trio.sleep(0.2)  # poll: the name server learns the topic at the master's next registration

    async def run() -> None:
        async with Producer(namesrv=args.namesrv) as producer:
            try:
                await ready(producer)
            except (TidemqError, trio.TooSlowError) as e:
                raise CannotDrive(f"topic {args.topic!r} via name server {args.namesrv}: "
                                  f"{e or 'no route within ' + str(ROUTE_TIMEOUT_S) + ' s'}") from None
            while True:
                began, error = time.perf_counter(), None
                try:
                    await producer.send(args.topic, body, tags="bench")
                except TidemqError as e:
                    error = e
                if not clock.tick(began, error):
                    break

    trio.run(run)


LOADS: dict[str, Callable[[argparse.Namespace, _Clock], None]] = {"tidemq": _tidemq, "redis": _redis}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.client_load", description=__doc__)
    parser.add_argument("kind", choices=sorted(LOADS))
    parser.add_argument("--namesrv", help="tidemq: the name server's address")
    parser.add_argument("--port", type=int, help="redis: the server's port")
    parser.add_argument("--topic", default=TOPIC, help="tidemq: the topic (created first)")
    parser.add_argument("--stream", default="bench", help="redis: the stream's key")
    parser.add_argument("--body", type=int, default=BODY_BYTES, help="body bytes (default 1 KiB)")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--profile", help="write a cProfile of the measured window to this file")
    args = parser.parse_args(argv)
    if args.kind == "tidemq" and not args.namesrv:
        parser.error("tidemq needs --namesrv")
    if args.kind == "redis" and not args.port:
        parser.error("redis needs --port")
    if args.seconds <= 0 or args.warmup < 0 or args.body < 1:
        parser.error("--seconds must be > 0, --warmup >= 0, --body >= 1")
    clock = _Clock(args.seconds, args.warmup, args.profile)
    try:
        LOADS[args.kind](args, clock)
    except CannotDrive as e:
        print(f"cannot drive {args.kind}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(clock.result()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
