"""Toxiproxy 2.x's HTTP API over the proxies of chaos.proxy.link, served with h11.

h11 is the sans-IO HTTP/1.1 state machine of trio's own ecosystem (the same style as
ha/protocol): it does the parsing and keep-alive bookkeeping, this module only routes.
Routes, status codes and error bodies are Toxiproxy's (see docs/chaos.md): GET/POST
/proxies (201, 409 when it exists), GET/POST/PATCH/DELETE /proxies/{p}, GET/POST
/proxies/{p}/toxics (200), GET/POST/PATCH/DELETE /proxies/{p}/toxics/{t} (DELETE 204),
POST /reset (204), GET /version; errors are {"error", "status"} with 400/403/404/409/500.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import h11
import trio

from .link import Proxy, split_host_port
from .toxics import ToxicError, parse_toxic

log = logging.getLogger("tidemq.chaos.proxy")

VERSION = "2.12.0-tidemq"
MAX_BODY = 1024 * 1024


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ToxiproxyServer:
    """The proxies and the API handlers; `serve(port)` runs both until cancelled."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        self.proxies: dict[str, Proxy] = {}

    # ---- HTTP

    async def serve(self, port: int, host: str = "127.0.0.1", *,
                    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen for API clients; task_status gets the bound port."""
        listeners = await trio.open_tcp_listeners(port, host=host)
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(self._http_connection, listeners)

    async def _http_connection(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_BODY)
        try:
            while True:
                request, body = await _read_request(conn, stream)
                if request is None:
                    return
                status, payload = await self._dispatch(request, body)
                await _respond(conn, stream, status, payload)
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except h11.RemoteProtocolError as e:
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                await _respond(conn, stream, 400, {"error": f"bad HTTP request: {e}", "status": 400})
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            await stream.aclose()

    async def _dispatch(self, request: h11.Request, body: bytes) -> tuple[int, Any]:
        method = request.method.decode("ascii")
        path = request.target.decode("ascii", "replace").split("?", 1)[0].rstrip("/")
        agent = dict(request.headers).get(b"user-agent", b"")
        try:
            if agent.startswith(b"Mozilla/"):
                raise ApiError(403, "User agent not allowed")
            return await self._route(method, [p for p in path.split("/") if p], body)
        except ApiError as e:
            return e.status, {"error": str(e), "status": e.status}
        except Exception as e:  # a bug here must not take the proxies down
            log.exception("toxiproxy API %s %s failed", method, path)
            return 500, {"error": f"internal error: {e!r}", "status": 500}

    # ---- routes

    async def _route(self, method: str, parts: list[str], body: bytes) -> tuple[int, Any]:
        match parts, method:
            case ["version"], "GET":
                return 200, {"version": VERSION}
            case ["reset"], "POST":
                for proxy in self.proxies.values():
                    proxy.remove_all_toxics()
                    await self._enable(proxy)
                return 204, None
            case ["proxies"], "GET":
                return 200, {name: p.to_json() for name, p in self.proxies.items()}
            case ["proxies"], "POST":
                return 201, (await self._create(_json(body))).to_json()
            case ["proxies", name], "GET":
                return 200, self._proxy(name).to_json()
            case ["proxies", name], "POST" | "PATCH":
                return 200, (await self._update(self._proxy(name), _json(body))).to_json()
            case ["proxies", name], "DELETE":
                await self._proxy(name).disable()
                del self.proxies[name]
                return 204, None
            case ["proxies", name, "toxics"], "GET":
                return 200, [t.to_json() for t in self._proxy(name).toxics.values()]
            case ["proxies", name, "toxics"], "POST":
                proxy = self._proxy(name)
                toxic = _toxic(_json(body))
                if toxic.name in proxy.toxics:
                    raise ApiError(409, "toxic already exists")
                proxy.set_toxic(toxic)
                return 200, toxic.to_json()
            case ["proxies", name, "toxics", toxic_name], _:
                return self._toxic_route(method, self._proxy(name), toxic_name, body)
        if parts and parts[0] in ("proxies", "reset", "version"):
            raise ApiError(405, f"method {method} not allowed on /{'/'.join(parts)}")
        raise ApiError(404, f"no such endpoint: /{'/'.join(parts)}")

    def _toxic_route(self, method: str, proxy: Proxy, name: str, body: bytes) -> tuple[int, Any]:
        toxic = proxy.toxics.get(name)
        if toxic is None:
            raise ApiError(404, "toxic not found")
        if method == "GET":
            return 200, toxic.to_json()
        if method in ("POST", "PATCH"):
            try:
                updated = toxic.updated(_json(body))
            except ToxicError as e:
                raise ApiError(400, str(e)) from None
            proxy.set_toxic(updated)
            return 200, updated.to_json()
        if method == "DELETE":
            proxy.remove_toxic(name)
            return 204, None
        raise ApiError(405, f"method {method} not allowed on a toxic")

    def _proxy(self, name: str) -> Proxy:
        proxy = self.proxies.get(name)
        if proxy is None:
            raise ApiError(404, "proxy not found")
        return proxy

    async def _create(self, body: Any) -> Proxy:
        if not isinstance(body, dict) or not isinstance(body.get("name"), str) or not body["name"]:
            raise ApiError(400, "missing required field: name")
        if not isinstance(body.get("upstream"), str):
            raise ApiError(400, "missing required field: upstream")
        name = body["name"]
        if name in self.proxies:
            raise ApiError(409, "proxy already exists")
        listen = body.get("listen") or "127.0.0.1:0"
        try:
            proxy = Proxy(name, str(listen), body["upstream"], self.nursery)
        except ValueError as e:
            raise ApiError(400, str(e)) from None
        if body.get("enabled", True):
            await self._enable(proxy)
        self.proxies[name] = proxy
        return proxy

    async def _update(self, proxy: Proxy, body: Any) -> Proxy:
        if not isinstance(body, dict):
            raise ApiError(400, "bad request body: a JSON object is expected")
        moved = False
        for key in ("listen", "upstream"):
            if key in body and body[key] != getattr(proxy, key):
                try:
                    split_host_port(str(body[key]))
                except ValueError as e:
                    raise ApiError(400, str(e)) from None
                setattr(proxy, key, str(body[key]))
                moved = True
        enabled = body.get("enabled", proxy.enabled)
        if moved or not enabled:
            await proxy.disable()
        if enabled:
            await self._enable(proxy)
        return proxy

    @staticmethod
    async def _enable(proxy: Proxy) -> None:
        try:
            await proxy.enable()
        except OSError as e:
            raise ApiError(500, f"listen tcp {proxy.listen}: {e.strerror or e}") from None


def _json(body: bytes) -> Any:
    if not body.strip():
        return {}
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, f"bad request body: {e}") from None


def _toxic(body: Any) -> Any:
    try:
        return parse_toxic(body)
    except ToxicError as e:
        raise ApiError(400, str(e)) from None


async def _read_request(conn: h11.Connection, stream: trio.SocketStream) -> tuple[h11.Request | None, bytes]:
    """The next request and its body, or (None, b"") when the client closed."""
    request: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some(65536)
            conn.receive_data(data)
            continue
        if isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY:
                raise h11.RemoteProtocolError("request body too large")
        elif isinstance(event, h11.EndOfMessage):
            return request, bytes(body)
        elif isinstance(event, h11.ConnectionClosed):
            return None, b""


async def _respond(conn: h11.Connection, stream: trio.SocketStream, status: int, payload: Any) -> None:
    body = b"" if payload is None else json.dumps(payload).encode()
    headers = [("Content-Length", str(len(body)))]
    if payload is not None:
        headers.append(("Content-Type", "application/json"))
    reason = {200: b"OK", 201: b"Created", 204: b"No Content"}.get(status, b"Error")
    await stream.send_all(conn.send(h11.Response(status_code=status, headers=headers, reason=reason)))
    if body:
        await stream.send_all(conn.send(h11.Data(data=body)))
    await stream.send_all(conn.send(h11.EndOfMessage()))


async def run_server(port: int, host: str = "127.0.0.1", *,
                     task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Run a Toxiproxy-compatible server until cancelled; task_status gets the API port."""
    async with trio.open_nursery() as nursery:
        server = ToxiproxyServer(nursery)
        bound = await nursery.start(server.serve, port, host)
        task_status.started(bound)
