"""A small etcd v3 client over etcd's JSON gateway (grpc-gateway), for the controller.

Only what leader election needs: leases (grant, keep-alive, revoke), range, put,
transactions and watches. The gateway speaks JSON with keys and values base64-encoded and 64-bit
integers as strings, and leaves out fields at their zero value (`succeeded: false`,
`TTL: 0`, an empty `kvs`). HTTP is httpx (its httpcore backend runs natively under
trio); each call tries the endpoints in order and gives up with `EtcdError` when none
answers within the timeout. A watch is one streamed POST whose answer is a JSON object per
line: first `{"result": {"created": true}}`, then one per batch of events (a PUT event has
no `type`, its zero value).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from store.address import AddressError, split_host_port

if TYPE_CHECKING:
    import httpx

__all__ = ["EtcdClient", "EtcdError", "KeyValue", "TxnResult", "WatchEvent", "parse_endpoints"]


class EtcdError(Exception):
    """No endpoint answered, or etcd refused the request."""


def parse_endpoints(value: str) -> list[str]:
    """`host:port[;host:port...]` (or `http://host:port`) → base URLs; ValueError when malformed."""
    urls = []
    for part in value.split(";"):
        part = part.strip()
        if not part:
            continue
        url = part if part.startswith(("http://", "https://")) else f"http://{part}"
        try:
            split_host_port(url.split("://", 1)[1].rstrip("/"))
        except AddressError:
            raise ValueError(f"expected host:port, got {part!r}") from None
        urls.append(url.rstrip("/"))
    if not urls:
        raise ValueError("no endpoint given")
    return urls


def _b64(value: str | bytes) -> str:
    raw = value.encode() if isinstance(value, str) else value
    return base64.b64encode(raw).decode("ascii")


def unb64(value: str | None) -> bytes:
    """A base64 field of the gateway's JSON as bytes (absent: empty)."""
    return base64.b64decode(value) if value else b""


@attrs.frozen
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int

    @classmethod
    def from_json(cls, kv: dict[str, Any]) -> KeyValue:
        return cls(unb64(kv.get("key")).decode(), unb64(kv.get("value")),
                   int(kv.get("create_revision", 0)), int(kv.get("mod_revision", 0)),
                   int(kv.get("lease", 0)))

    def json(self) -> Any:
        return json.loads(self.value)


@attrs.frozen
class WatchEvent:
    type: str
    """PUT or DELETE (a lease that ends deletes its keys: DELETE)."""
    kv: KeyValue
    prev: KeyValue | None
    """The key's value before the event (the watch asks for it)."""


@attrs.frozen
class TxnResult:
    succeeded: bool
    revision: int
    ranges: list[list[KeyValue]]
    """The kvs of each request_range in the branch that ran, in order."""


class EtcdClient:
    """Use as `async with EtcdClient(endpoints) as etcd:`; safe to share between tasks."""

    def __init__(self, endpoints: list[str], *, timeout_s: float = 1.0) -> None:
        self.endpoints = list(endpoints)
        self.timeout_s = timeout_s
        import httpx  # here, not at import: ~90 ms every node and CLI process paid without etcd

        self._http: httpx.AsyncClient = httpx.AsyncClient(timeout=timeout_s)
        self._preferred = 0

    async def __aenter__(self) -> EtcdClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        import httpx

        errors = []
        n = len(self.endpoints)
        for i in range(n):
            index = (self._preferred + i) % n
            url = self.endpoints[index] + path
            try:
                response = await self._http.post(url, json=body)
            except httpx.HTTPError as e:
                errors.append(f"{url}: {type(e).__name__} {e}".strip())
                continue
            try:
                answer: dict[str, Any] = response.json()
            except ValueError:
                answer = {}
            if response.status_code != 200:
                message = answer.get("message") or answer.get("error") or response.text[:200]
                raise EtcdError(f"{url}: HTTP {response.status_code}: {message}")
            self._preferred = index
            return answer
        raise EtcdError("no etcd endpoint answered: " + "; ".join(errors))

    # ---- leases ------------------------------------------------------------------------------
    async def grant(self, ttl_s: int) -> int:
        """A new lease of `ttl_s` seconds; its id."""
        answer = await self._call("/v3/lease/grant", {"TTL": str(ttl_s)})
        if answer.get("error"):
            raise EtcdError(f"lease grant refused: {answer['error']}")
        return int(answer["ID"])

    async def keepalive(self, lease: int) -> int:
        """Renew the lease once; its remaining TTL in seconds (0: it has expired)."""
        answer = await self._call("/v3/lease/keepalive", {"ID": str(lease)})
        return int(answer.get("result", {}).get("TTL", 0))

    async def revoke(self, lease: int) -> None:
        """End the lease now: every key under it is deleted."""
        await self._call("/v3/lease/revoke", {"ID": str(lease)})

    # ---- keys --------------------------------------------------------------------------------
    async def get(self, key: str) -> KeyValue | None:
        answer = await self._call("/v3/kv/range", {"key": _b64(key)})
        kvs = answer.get("kvs") or []
        return KeyValue.from_json(kvs[0]) if kvs else None

    async def put(self, key: str, value: str | bytes, *, lease: int = 0) -> int:
        """Set the key; the store revision after the put."""
        body: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
        if lease:
            body["lease"] = str(lease)
        answer = await self._call("/v3/kv/put", body)
        return int(answer.get("header", {}).get("revision", 0))

    # ---- watches -----------------------------------------------------------------------------
    async def watch(self, prefix: str, on_events: Callable[[list[WatchEvent]], None],
                    *, on_created: Callable[[], None] | None = None) -> None:
        """Stream every change of a key under `prefix` into `on_events` until cancelled.
        Returns when etcd ends the stream; raises EtcdError when no endpoint accepts the
        watch or the stream breaks. `on_created` runs once etcd confirmed the watch."""
        import httpx

        body = {"create_request": {**op_get_prefix(prefix)["request_range"], "prev_kv": True}}
        timeout = httpx.Timeout(self.timeout_s, read=None)  # quiet for as long as nothing changes
        errors = []
        for i in range(len(self.endpoints)):
            url = self.endpoints[(self._preferred + i) % len(self.endpoints)] + "/v3/watch"
            try:
                async with self._http.stream("POST", url, json=body, timeout=timeout) as response:
                    if response.status_code != 200:
                        raise EtcdError(f"{url}: HTTP {response.status_code}: {(await response.aread())[:200]!r}")
                    async for line in response.aiter_lines():
                        result = _watch_result(url, line)
                        if result.get("created") and on_created is not None:
                            on_created()
                        events = [_watch_event(e) for e in result.get("events") or ()]
                        if events:
                            on_events(events)
                return
            except httpx.HTTPError as e:
                errors.append(f"{url}: {type(e).__name__} {e}".strip())
        raise EtcdError("no etcd endpoint kept a watch: " + "; ".join(errors))

    async def txn(self, compare: list[dict[str, Any]], success: list[dict[str, Any]],
                  failure: list[dict[str, Any]]) -> TxnResult:
        """One etcd transaction; build its parts with `cmp_*`, `op_put` and `op_get`."""
        answer = await self._call("/v3/kv/txn", {"compare": compare, "success": success, "failure": failure})
        ranges = [[KeyValue.from_json(kv) for kv in r["response_range"].get("kvs") or []]
                  for r in answer.get("responses") or [] if "response_range" in r]
        return TxnResult(bool(answer.get("succeeded", False)),
                         int(answer.get("header", {}).get("revision", 0)), ranges)


def _watch_result(url: str, line: str) -> dict[str, Any]:
    try:
        answer = json.loads(line) if line.strip() else {}
    except ValueError:
        raise EtcdError(f"{url}: watch sent a line that is not JSON: {line[:200]!r}") from None
    if "error" in answer:
        raise EtcdError(f"{url}: watch failed: {answer['error']}")
    result = answer.get("result") or {}
    if result.get("canceled"):
        raise EtcdError(f"{url}: etcd cancelled the watch: {result.get('cancel_reason', 'no reason given')}")
    return result


def _watch_event(raw: dict[str, Any]) -> WatchEvent:
    prev = raw.get("prev_kv")
    return WatchEvent(raw.get("type", "PUT"), KeyValue.from_json(raw.get("kv") or {}),
                      KeyValue.from_json(prev) if prev else None)


def prefix_end(prefix: str) -> bytes:
    """etcd's range_end for "every key starting with prefix" (last byte + 1)."""
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return bytes(raw)


def cmp_absent(key: str) -> dict[str, Any]:
    """The key does not exist (its create revision is 0)."""
    return {"target": "CREATE", "key": _b64(key), "result": "EQUAL", "create_revision": "0"}


def cmp_mod_revision(key: str, revision: int) -> dict[str, Any]:
    """The key was last written at `revision` (0: it does not exist)."""
    return {"target": "MOD", "key": _b64(key), "result": "EQUAL", "mod_revision": str(revision)}


def cmp_lease(key: str, lease: int) -> dict[str, Any]:
    """The key is held under `lease`."""
    return {"target": "LEASE", "key": _b64(key), "result": "EQUAL", "lease": str(lease)}


def op_put(key: str, value: str | bytes, *, lease: int = 0) -> dict[str, Any]:
    put: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
    if lease:
        put["lease"] = str(lease)
    return {"request_put": put}


def op_get(key: str) -> dict[str, Any]:
    return {"request_range": {"key": _b64(key)}}


def op_get_prefix(prefix: str) -> dict[str, Any]:
    """Every key that starts with `prefix`."""
    return {"request_range": {"key": _b64(prefix), "range_end": _b64(prefix_end(prefix))}}
