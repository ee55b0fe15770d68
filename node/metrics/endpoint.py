"""The /metrics endpoint: a trio task answering HTTP/1.1 GETs with prometheus_client's text.

Served on the node's own trio loop rather than prometheus_client's server thread: the
collectors read the node's tables, HA connections and counters, which only the loop may touch
(a thread would race them). A scrape reads that state on the loop, a snapshot of metric
families, and writes the text from the snapshot in a worker thread: the loop pauses once per
scrape for the reading only, instead of paying per message (docs/metrics.md measures it). One request
per connection (`Connection: close`): Prometheus reconnects each scrape, which costs less
than keeping HTTP state. With TLS (`tls`: the client port's context and tlsMode) the same
rules as the client port apply (wire/tls.py); with a bearer token a scrape without
`Authorization: Bearer <token>` gets 401.
"""

from __future__ import annotations

import hmac
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Protocol, cast, runtime_checkable

import trio
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from wire.tls import accept_tls

from . import MetricsError

log = logging.getLogger("tidemq.metrics")

__all__ = ["Checkpoint", "MetricsEndpoint", "MetricsError", "SlicedCollector", "read_bearer_token", "token_from"]

MAX_REQUEST_HEAD = 16 * 1024
"""A request head longer than this is refused (a scrape sends a few hundred bytes)."""
READ_TIMEOUT_S = 10.0


def read_bearer_token(path: str) -> str:
    """The token in `path` (surrounding whitespace dropped); MetricsError when unreadable or empty."""
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise MetricsError(f"{path}: cannot read the metrics bearer token: {e}") from None
    if not token:
        raise MetricsError(f"{path}: the metrics bearer token file is empty")
    return token


Checkpoint = Callable[[], Awaitable[None]]


@runtime_checkable
class SlicedCollector(Protocol):
    """A collector that reads in slices: between two it awaits `checkpoint`, so the loop
    serves requests meanwhile (a node with thousands of topics and groups)."""

    async def collect_sliced(self, checkpoint: Checkpoint) -> list[Metric]: ...


class MetricsEndpoint:
    """Serves `collectors` on http(s)://host:port/metrics (port 0 picks one; `port` holds it
    after start). `scrapes`, `scrape_seconds` and `last_scrape_seconds` count what the reading
    held the loop (the cost docs/metrics.md reports)."""

    def __init__(self, collectors: Sequence[Collector | SlicedCollector], *, host: str, port: int,
                 tls: tuple[ssl.SSLContext, str] | None = None, bearer_token: str | None = None) -> None:
        self.collectors: list[Collector | SlicedCollector] = [*collectors, _Cost(self)]
        self.host = host
        self.port = port
        self.tls = tls
        self.bearer_token = bearer_token
        self.scrapes = 0
        self.scrape_seconds = 0.0
        self.last_scrape_seconds = 0.0
        self.refused = 0  # requests answered 401 (no or a wrong token)
        self.longest_slice_seconds = 0.0

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None and self.tls[1] == "enforcing" else "http"

    async def run(self, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(self.port, host=self.host)
        self.port = listeners[0].socket.getsockname()[1]
        log.info("metrics on %s://%s:%d/metrics", self.scheme, self.host, self.port)
        await trio.serve_listeners(self._handle, listeners, task_status=_started(task_status, self.port))

    async def _handle(self, raw: trio.SocketStream) -> None:
        stream: trio.abc.Stream = raw
        try:
            if self.tls is not None:
                secured, why = await accept_tls(raw, *self.tls)
                if secured is None:
                    log.info("metrics: refused a connection: %s", why)
                    return
                stream = secured
            with trio.move_on_after(READ_TIMEOUT_S):
                head = await _read_head(stream)
                if head is None:
                    return
                await stream.send_all(await self._answer(head))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the scraper went away
        except Exception:  # a bug costs one scrape, never the node
            log.exception("metrics: scrape failed")
        finally:
            await trio.aclose_forcefully(stream)

    async def _answer(self, head: bytes) -> bytes:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return _response(400, b"bad request line\n")
        method, target = parts[0], parts[1].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return _response(405, b"only GET\n", extra="Allow: GET, HEAD\r\n")
        if target != "/metrics":
            return _response(404, b"metrics are at /metrics\n")
        if self.bearer_token is not None and not self._authorized(lines[1:]):
            self.refused += 1
            return _response(401, b"a bearer token is required\n", extra='WWW-Authenticate: Bearer realm="metrics"\r\n')
        # the collectors read the node's state on the loop (nothing changes under them); the
        # text is written from that snapshot in a thread, so the loop pays only for the reading
        families = await self._collect()
        self.scrapes += 1
        body = await trio.to_thread.run_sync(generate_latest, _Snapshot(families))
        return _response(200, b"" if method == "HEAD" else body, content_type=CONTENT_TYPE_LATEST,
                         length=len(body))

    async def _collect(self) -> list[Metric]:
        """Every collector's families; the time they held the loop (slices apart) is counted."""
        held = 0.0
        started = time.perf_counter()

        async def checkpoint() -> None:
            nonlocal held, started
            now = time.perf_counter()
            held += now - started
            self.longest_slice_seconds = max(self.longest_slice_seconds, now - started)
            await trio.lowlevel.checkpoint()
            started = time.perf_counter()

        families: list[Metric] = []
        for collector in self.collectors:
            if isinstance(collector, SlicedCollector):
                families += await collector.collect_sliced(checkpoint)
            else:
                families += collector.collect()
        await checkpoint()
        self.last_scrape_seconds = held
        self.scrape_seconds += held
        return families

    def _authorized(self, headers: list[str]) -> bool:
        assert self.bearer_token is not None
        for line in headers:
            name, _, value = line.partition(":")
            if name.strip().lower() == "authorization":
                scheme, _, token = value.strip().partition(" ")
                if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self.bearer_token.encode()):
                    return True
        return False


class _Snapshot(CollectorRegistry):
    """Families already collected: generate_latest formats them without calling a collector."""

    def __init__(self, families: list[Metric]) -> None:
        super().__init__(auto_describe=False)
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


class _Cost(Collector):
    """What scrapes cost the node's loop: how long rendering took (the loop runs nothing else
    meanwhile), so an operator sees the price of a short scrape interval."""

    def __init__(self, endpoint: MetricsEndpoint) -> None:
        self.endpoint = endpoint

    def collect(self) -> Iterator[Metric]:
        e = self.endpoint
        yield CounterMetricFamily("rocketmq_metrics_scrapes_total", "Scrapes served", value=e.scrapes)
        yield CounterMetricFamily("rocketmq_metrics_scrape_seconds_total",
                                  "Seconds the event loop spent reading the node's state for scrapes "
                                "(the text is written in a thread)", value=e.scrape_seconds)
        yield GaugeMetricFamily("rocketmq_metrics_last_scrape_seconds",
                                "Seconds the previous scrape held the event loop, its slices together",
                                value=e.last_scrape_seconds)
        yield GaugeMetricFamily("rocketmq_metrics_longest_slice_seconds",
                                "The longest the event loop was held by one slice of a scrape's reading",
                                value=e.longest_slice_seconds)
        yield CounterMetricFamily("rocketmq_metrics_unauthorized_total",
                                  "Scrapes refused for a missing or wrong bearer token", value=e.refused)


async def _read_head(stream: trio.abc.Stream) -> bytes | None:
    """The request line and headers (up to the blank line); None when the peer sent too much or nothing."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_REQUEST_HEAD:
            await stream.send_all(_response(431, b"request head too large\n"))
            return None
        chunk = await stream.receive_some(4096)
        if not chunk:
            return None
        data += chunk
    return data.split(b"\r\n\r\n", 1)[0]


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large"}


def _response(status: int, body: bytes, *, content_type: str = "text/plain; charset=utf-8",
              extra: str = "", length: int | None = None) -> bytes:
    head = (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body) if length is None else length}\r\nConnection: close\r\n{extra}\r\n")
    return head.encode("latin-1") + body


def _started(task_status: trio.TaskStatus[int], port: int) -> trio.TaskStatus[object]:
    """serve_listeners reports its listeners; the caller wants the port."""

    class _Port:
        def started(self, _value: object = None) -> None:
            task_status.started(port)

    return cast("trio.TaskStatus[object]", _Port())


def token_from(path: str | None) -> str | None:
    """`read_bearer_token(path)` when a path is set, else None."""
    return read_bearer_token(path) if path else None

