"""The console's ASGI app: routes, templates, signed sessions and CSRF (Starlette's
SessionMiddleware, itsdangerous-signed; starlette-csrf's double-submit cookie, sent back by
htmx as the x-csrftoken header on every change).

Every page is rendered whole on the server; its live parts (the Cluster table, the Topic
list) are htmx fragments of the same templates. A change answers with a result fragment:
what the cluster said, or why the input was refused (nothing changed then).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette_csrf import CSRFMiddleware

from wire.client import TidemqError

from ..client import Admin, Producer
from . import assets, views
from .views import InputError

HERE = Path(__file__).parent
PAGES = [("cluster", "Cluster"), ("topic", "Topic")]


@attrs.define
class Console:
    """What the app's handlers share: the cluster clients and the name server's address."""

    admin: Admin
    producer: Producer
    namesrv: str


def _fmt_int(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def _fmt_ts(ms: int | None) -> str:
    """Epoch milliseconds as local time, to the millisecond ("-" for none)."""
    if not ms:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f".{ms % 1000:03d}"


def build_app(console: Console, *, secret: str) -> Starlette:
    """The app for one cluster; `secret` signs sessions and CSRF tokens."""
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.filters["n"] = _fmt_int
    templates.env.filters["perm"] = views.perm_text
    templates.env.filters["ts"] = _fmt_ts
    templates.env.globals.update(pages=PAGES, namesrv=console.namesrv)

    def page(request: Request, name: str, context: dict[str, Any], *, status: int = 200) -> Response:
        context.setdefault("active", name.split(".")[0].split("_")[0])
        return templates.TemplateResponse(request, name, context, status_code=status)

    def result(request: Request, ok: bool, message: str, *, trigger: str | None = None) -> Response:
        """A change's answer: a message fragment (status 200 so htmx swaps it in; the
        fragment says whether it worked), and an event for the parts to refresh."""
        response = templates.TemplateResponse(request, "result.html", {"ok": ok, "message": message})
        if ok and trigger:
            response.headers["HX-Trigger"] = trigger
        return response

    async def change(request: Request, act: Callable[[], Awaitable[str]], trigger: str | None = None) -> Response:
        try:
            return result(request, True, await act(), trigger=trigger)
        except InputError as e:
            return result(request, False, str(e))
        except TidemqError as e:
            return result(request, False, f"the cluster refused: {e}")

    async def index(request: Request) -> Response:
        return RedirectResponse("/cluster", status_code=302)

    async def cluster(request: Request) -> Response:
        fragment = request.query_params.get("fragment") == "1"
        try:
            rows, error = await views.cluster_rows(console.admin), None
        except TidemqError as e:
            rows, error = [], f"the name server at {console.namesrv} did not answer: {e}"
        context = {"rows": rows, "error": error, "now": time.strftime("%H:%M:%S")}
        return page(request, "cluster_table.html" if fragment else "cluster.html", context)

    async def topics(request: Request) -> Response:
        q = request.query_params
        kinds = q.getlist("kind") or ["NORMAL"]
        started = time.perf_counter()
        try:
            rows, error = await views.topic_rows(console.admin, filter_text=q.get("filter", ""), kinds=kinds), None
        except TidemqError as e:
            rows, error = [], f"the name server at {console.namesrv} did not answer: {e}"
        context = {"rows": rows, "error": error, "filter": q.get("filter", ""), "kinds": kinds,
                   "all_kinds": ["NORMAL", "RETRY", "DLQ", "SYSTEM"],
                   "took_ms": (time.perf_counter() - started) * 1000}
        return page(request, "topic_table.html" if q.get("fragment") == "1" else "topic.html", context)

    async def topic_save(request: Request) -> Response:
        form = await request.form()

        async def act() -> str:
            topic = views.checked_topic(str(form.get("topic", "")))
            rq = views.checked_int(str(form.get("read_queue_nums", "4")), "read queues", 1, 1024)
            wq = views.checked_int(str(form.get("write_queue_nums", "4")), "write queues", 1, 1024)
            perm = views.checked_int(str(form.get("perm", "6")), "perm", 2, 6)
            if perm not in (2, 4, 6):
                raise InputError("perm must be 6 (read and write), 4 (read only) or 2 (write only)")
            brokers = [b for b in form.getlist("broker") if isinstance(b, str) and b]
            made = await console.admin.create_topic(topic, read_queue_nums=rq, write_queue_nums=wq, perm=perm,
                                                    broker_names=brokers or None)
            await views.wait_routed(console.admin, topic, [m.broker_name for m in made])
            return (f"topic {topic} saved on {', '.join(m.broker_name for m in made)}: "
                    f"{rq} read / {wq} write queues, perm {views.perm_text(perm)}")

        return await change(request, act, "topics-changed")

    async def topic_delete(request: Request) -> Response:
        name = request.path_params["topic"]

        async def act() -> str:
            topic = await views.known_topic(console.admin, name)
            deleted = await console.admin.delete_topic(topic)
            where = [b for b, had in deleted.items() if had]
            return f"topic {topic} deleted from {', '.join(where) or 'no broker group (none had it)'}"

        return await change(request, act, "topics-changed")

    async def topic_view(request: Request) -> Response:
        name = request.path_params["topic"]
        try:
            detail, error = await views.topic_detail(console.admin, name), None
        except InputError as e:
            detail, error = None, str(e)
        except TidemqError as e:
            detail, error = None, f"the cluster did not answer: {e}"
        status = 404 if detail is None else 200
        return page(request, "topic_detail.html", {"topic": name, "detail": detail, "error": error,
                                                   "active": "topic"}, status=status)

    async def topic_send(request: Request) -> Response:
        name = request.path_params["topic"]
        form = await request.form()

        async def act() -> str:
            topic = await views.known_topic(console.admin, name)
            body = str(form.get("body", ""))
            if not body:
                raise InputError("the message body is empty; an empty body is not sent")
            tags = str(form.get("tags", "")).strip() or None
            keys = [k for k in str(form.get("keys", "")).split() if k]
            sent = await console.producer.send(topic, body, tags=tags, keys=keys)
            if not sent.ok:
                raise InputError(f"the message was not stored: {sent.status.name}")
            return (f"sent: msgId {sent.msg_id} on {sent.broker_name} queue {sent.queue_id} "
                    f"offset {sent.queue_offset} ({sent.status.name})")

        return await change(request, act, "topic-changed")

    async def health(request: Request) -> Response:
        return Response(json.dumps({"ok": True, "namesrv": console.namesrv}), media_type="application/json")

    routes = [
        Route("/", index),
        Route("/health", health),
        Route("/cluster", cluster),
        Route("/topic", topics, methods=["GET"]),
        Route("/topic", topic_save, methods=["POST"]),
        Route("/topic/{topic}", topic_view, methods=["GET"]),
        Route("/topic/{topic}/delete", topic_delete, methods=["POST"]),
        Route("/topic/{topic}/send", topic_send, methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        Mount("/vendor", StaticFiles(directory=str(assets.VENDOR_DIR), check_dir=False), name="vendor"),
    ]
    middleware = [
        Middleware(SessionMiddleware, secret_key=secret, session_cookie="tidemq_console", same_site="strict"),
        Middleware(CSRFMiddleware, secret=secret, cookie_samesite="strict"),
    ]
    return Starlette(routes=routes, middleware=middleware)
