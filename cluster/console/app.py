"""The console's ASGI app: routes, templates, logins and CSRF (starlette-csrf's
double-submit cookie, its token signed with itsdangerous, sent back by htmx as the
x-csrftoken header on every change).

Every page is rendered whole on the server; its live parts (the Cluster table, a group's
progress, the Failover timeline, the lists a change refreshes) are htmx fragments of the
same templates. A change answers with a result fragment: what the cluster said, or why the
input was refused (nothing changed then).

Without `--login` every request uses the process's own clients (its login, if any); with
it, each user logs in (sessions.py) and every request uses that user's clients; the pages
that change the cluster or read every group are refused to non-admins here, on the server.
The session cookie is signed (Starlette's SessionMiddleware, itsdangerous) and carries the
login time: a session older than its lifetime (sessions.py) is refused and sent to the
login page, whatever the cookie's own expiry says.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

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
from . import acl, assets, brokers, consumers, dashboard, dlq, failover, inputs, messages, topics
from .inputs import InputError
from .sessions import Sessions

HERE = Path(__file__).parent
Handler = Callable[[Request], Awaitable[Response]]
PAGES = [("dashboard", "Dashboard"), ("cluster", "Cluster"), ("topic", "Topic"), ("consumer", "Consumer"),
         ("message", "Message"), ("dlq", "DLQ"), ("failover", "Failover"), ("acl", "ACL")]
"""The menu: path and rocketmq-dashboard's name of each page."""
COOKIE_GRACE_S = 3600
"""The session cookie outlives the session by this much: the server refuses it once the
login is older than the lifetime, and the login page can then say it expired."""


@attrs.define
class Console:
    """What the app's handlers share: the name server's address and either the process's
    own clients (`admin`, `producer`) or, with logins, each user's (`sessions`)."""

    namesrv: str
    admin: Admin | None = None
    producer: Producer | None = None
    sessions: Sessions | None = None
    history: dashboard.History = attrs.field(factory=dashboard.History)
    """The Dashboard's samples without logins (with them, each user's own)."""


def _fmt_int(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def _fmt_ts(ms: int | None) -> str:
    """Epoch milliseconds as local time, to the millisecond ("-" for none)."""
    if not ms:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f".{ms % 1000:03d}"


def _fmt_duration(seconds: float) -> str:
    """A session lifetime as people say it: 8 h, 30 min, 45 s."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)} min"
    return f"{seconds:g} s"


def build_app(console: Console, *, secret: str, https: bool = False) -> Starlette:
    """The app for one cluster; `secret` signs the CSRF tokens; `https`: its cookies are
    sent over HTTPS only (the Secure flag)."""
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.filters["n"] = _fmt_int
    templates.env.filters["perm"] = topics.perm_text
    templates.env.filters["ts"] = _fmt_ts
    templates.env.globals.update(pages=PAGES, namesrv=console.namesrv)

    def page(request: Request, name: str, context: dict[str, Any], *, status: int = 200) -> Response:
        context.setdefault("active", name.split(".")[0].split("_")[0])
        context.setdefault("user", getattr(request.state, "user", None))
        return templates.TemplateResponse(request, name, context, status_code=status)

    def result(request: Request, ok: bool, message: str, *, trigger: str | None = None) -> Response:
        """A change's answer: a message fragment (status 200 so htmx swaps it in; the
        fragment says whether it worked), and an event for the parts to refresh, fired
        after the fragment settled: a refresh that replaced the button first (a row's own
        Delete or Resend) would make htmx drop the answer."""
        response = templates.TemplateResponse(request, "result.html", {"ok": ok, "message": message})
        if ok and trigger:
            response.headers["HX-Trigger-After-Settle"] = trigger
        return response

    async def change(request: Request, act: Callable[[], Awaitable[str]], trigger: str | None = None) -> Response:
        try:
            return result(request, True, await act(), trigger=trigger)
        except InputError as e:
            return result(request, False, str(e))
        except TidemqError as e:
            return result(request, False, f"the cluster refused: {e}")

    def guarded(handler: Handler, *, admin_only: bool = False) -> Handler:
        """`handler` with the request's clients in `request.state`: the process's, or with
        logins the session's user's. Without a login: to the login page. `admin_only`:
        refused (403) on the server unless the account is an admin."""
        async def run(request: Request) -> Response:
            if console.sessions is None:
                request.state.admin, request.state.producer, request.state.user = console.admin, console.producer, None
                request.state.history = console.history
                return await handler(request)
            sid = request.session.get("sid")
            clients = console.sessions.get(sid)
            at = request.session.get("at")
            expired = console.sessions.expired(at if isinstance(at, int | float) else 0.0) or (
                clients is not None and console.sessions.expired(clients.logged_in_at))
            if sid is not None and expired:  # older than the lifetime, however busy: log in again
                console.sessions.logout(sid)
                request.session.clear()
                clients = None
            if clients is None:
                back = request.url.path if "text/html" in request.headers.get("accept", "") else "/"  # not a JSON poll
                if request.headers.get("HX-Request") == "true":  # a live part's poll: back to its page
                    back = urlsplit(request.headers.get("HX-Current-URL", "/")).path or "/"
                target = ("/login?expired=1&next=" if expired and sid is not None else "/login?next=") + quote(back)
                if request.headers.get("HX-Request") == "true":
                    return Response(headers={"HX-Redirect": target})
                return RedirectResponse(target, status_code=303)
            request.state.admin, request.state.producer, request.state.user = \
                clients.admin, clients.producer, clients.user
            request.state.history = clients.history  # a user's samples are what their account may read
            if admin_only and not clients.is_admin:
                said = f"{request.method} {request.url.path} needs an admin account; {clients.user} is not one"
                if request.method == "GET":
                    return page(request, "refused.html", {"message": said}, status=403)
                response = templates.TemplateResponse(request, "result.html", {"ok": False, "message": said},
                                                      status_code=403)
                return response
            return await handler(request)

        return run

    async def login_page(request: Request) -> Response:
        expired = request.query_params.get("expired") == "1" and console.sessions is not None
        lifetime = _fmt_duration(console.sessions.lifetime_s) if console.sessions is not None else ""
        return page(request, "login.html", {"next": request.query_params.get("next", "/"), "active": "login",
                                            "expired": expired, "lifetime": lifetime})

    async def login(request: Request) -> Response:
        assert console.sessions is not None
        form = await request.form()
        try:
            sid = await console.sessions.login(str(form.get("user", "")).strip(), str(form.get("secret", "")))
        except InputError as e:
            return result(request, False, str(e))
        console.sessions.logout(request.session.get("sid"))
        request.session["sid"] = sid
        request.session["at"] = console.sessions.get(sid).logged_in_at  # type: ignore[union-attr]  # just made
        target = str(form.get("next", "/"))
        return Response(headers={"HX-Redirect": target if target.startswith("/") and not target.startswith("//")
                                 else "/"})

    async def logout(request: Request) -> Response:
        if console.sessions is not None:
            console.sessions.logout(request.session.get("sid"))
        request.session.clear()
        return Response(headers={"HX-Redirect": "/login"})

    async def index(request: Request) -> Response:
        return RedirectResponse("/dashboard", status_code=302)

    async def cluster(request: Request) -> Response:
        fragment = request.query_params.get("fragment") == "1"
        try:
            rows, error = await brokers.cluster_rows(request.state.admin), None
        except TidemqError as e:
            rows, error = [], f"the name server at {console.namesrv} did not answer: {e}"
        context = {"rows": rows, "error": error, "now": time.strftime("%H:%M:%S")}
        return page(request, "cluster_table.html" if fragment else "cluster.html", context)

    async def cluster_promote(request: Request) -> Response:
        """Manual failover: make a slave its group's master (admin `promote`, new epoch)."""
        form = await request.form()

        async def act() -> str:
            group = inputs.checked_group(str(form.get("broker_name", "")))
            broker_id = inputs.checked_int(str(form.get("broker_id", "")), "brokerId", 1, 1 << 20)
            done = await request.state.admin.promote(group, broker_id, unclean=form.get("unclean") == "1", timeout=20.0)
            return (f"{group}/{broker_id} ({done['address']}) is the master of {group} in epoch {done['epoch']}, "
                    f"from offset {done['start_offset']}")

        return await change(request, act, "cluster-changed")

    async def topic_list(request: Request) -> Response:
        q = request.query_params
        kinds = q.getlist("kind") or ["NORMAL"]
        started = time.perf_counter()
        try:
            rows, error = await topics.topic_rows(request.state.admin, filter_text=q.get("filter", ""), kinds=kinds), None
        except TidemqError as e:
            rows, error = [], f"the name server at {console.namesrv} did not answer: {e}"
        context = {"rows": rows, "error": error, "filter": q.get("filter", ""), "kinds": kinds,
                   "all_kinds": ["NORMAL", "RETRY", "DLQ", "SYSTEM"],
                   "took_ms": (time.perf_counter() - started) * 1000}
        return page(request, "topic_table.html" if q.get("fragment") == "1" else "topic.html", context)

    async def topic_save(request: Request) -> Response:
        form = await request.form()

        async def act() -> str:
            topic = inputs.checked_topic(str(form.get("topic", "")))
            rq = inputs.checked_int(str(form.get("read_queue_nums", "4")), "read queues", 1, 1024)
            wq = inputs.checked_int(str(form.get("write_queue_nums", "4")), "write queues", 1, 1024)
            perm = inputs.checked_int(str(form.get("perm", "6")), "perm", 2, 6)
            if perm not in (2, 4, 6):
                raise InputError("perm must be 6 (read and write), 4 (read only) or 2 (write only)")
            named = [b for b in form.getlist("broker") if isinstance(b, str) and b]  # none: every master
            made = await request.state.admin.create_topic(topic, read_queue_nums=rq, write_queue_nums=wq, perm=perm,
                                                    broker_names=named or None)
            await topics.wait_routed(request.state.admin, topic, [m.broker_name for m in made])
            return (f"topic {topic} saved on {', '.join(m.broker_name for m in made)}: "
                    f"{rq} read / {wq} write queues, perm {topics.perm_text(perm)}")

        return await change(request, act, "topics-changed")

    async def topic_delete(request: Request) -> Response:
        name = request.path_params["topic"]

        async def act() -> str:
            topic = await inputs.known_topic(request.state.admin, name)
            deleted = await request.state.admin.delete_topic(topic)
            where = [b for b, had in deleted.items() if had]
            return f"topic {topic} deleted from {', '.join(where) or 'no broker group (none had it)'}"

        return await change(request, act, "topics-changed")

    async def topic_view(request: Request) -> Response:
        name = request.path_params["topic"]
        try:
            detail, error = await topics.topic_detail(request.state.admin, name), None
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
            topic = await inputs.known_topic(request.state.admin, name)
            body = str(form.get("body", ""))
            if not body:
                raise InputError("the message body is empty; an empty body is not sent")
            tags = str(form.get("tags", "")).strip() or None
            keys = [k for k in str(form.get("keys", "")).split() if k]
            sent = await request.state.producer.send(topic, body, tags=tags, keys=keys)
            if not sent.ok:
                raise InputError(f"the message was not stored: {sent.status.name}")
            return (f"sent: msgId {sent.msg_id} on {sent.broker_name} queue {sent.queue_id} "
                    f"offset {sent.queue_offset} ({sent.status.name})")

        return await change(request, act)

    async def consumer_list(request: Request) -> Response:
        q = request.query_params
        started = time.perf_counter()
        try:
            rows, error = await consumers.group_rows(request.state.admin, filter_text=q.get("filter", ""),
                                                     system=q.get("system") == "1"), None
        except TidemqError as e:
            rows, error = [], f"the cluster did not answer: {e}"
        context = {"rows": rows, "error": error, "filter": q.get("filter", ""), "system": q.get("system") == "1",
                   "took_ms": (time.perf_counter() - started) * 1000}
        return page(request, "consumer_table.html" if q.get("fragment") == "1" else "consumer.html", context)

    async def consumer_view(request: Request) -> Response:
        name = request.path_params["group"]
        try:
            detail, error = await consumers.group_detail(request.state.admin, name), None
        except InputError as e:
            detail, error = None, str(e)
        except TidemqError as e:
            detail, error = None, f"the cluster did not answer: {e}"
        fragment = request.query_params.get("fragment") == "1"
        return page(request, "consumer_progress.html" if fragment else "consumer_detail.html",
                    {"group": name, "detail": detail, "error": error, "active": "consumer"},
                    status=404 if detail is None and not fragment else 200)

    async def consumer_settings(request: Request) -> Response:
        name = request.path_params["group"]
        form = await request.form()

        async def act() -> str:
            group = inputs.checked_group(name)
            enable = str(form.get("consume_enable", ""))
            if enable not in ("true", "false"):
                raise InputError("consumeEnable must be true or false")
            retries = inputs.checked_int(str(form.get("retry_max_times", "")), "retryMaxTimes", 0, 1000)
            saved = await request.state.admin.update_sub_group(group, consume_enable=enable == "true",
                                                         retry_max_times=retries)
            return (f"settings of {group} saved on {', '.join(saved)}: consumeEnable {enable}, "
                    f"retryMaxTimes {retries}")

        return await change(request, act, "group-changed")

    async def consumer_reset(request: Request) -> Response:
        name = request.path_params["group"]
        form = await request.form()

        async def act() -> str:
            when = consumers.parse_when(str(form.get("when", "")))
            rows = await consumers.reset_offsets(request.state.admin, name, str(form.get("topic", "")), when,
                                                 force=form.get("force") == "1")
            moved = ", ".join(f"{r['broker_name']}:{r['queue_id']} {r['old_offset']}→{r['new_offset']}" for r in rows)
            return f"offsets of {name} on {form.get('topic')} reset to {_fmt_ts(when) if when else 'now'}: {moved}"

        return await change(request, act, "group-changed")

    async def message_search(request: Request) -> Response:
        """The Message page: by topic and time range (paged), by key, or by msgId; with
        `fragment=1` only the results (htmx)."""
        q = request.query_params
        mode = q.get("mode", "")
        context: dict[str, Any] = {"mode": mode or "time", "q": q, "rows": None, "error": None, "page": None}
        now = time.time()
        context["default_begin"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now - 3600))
        context["default_end"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now + 60))
        started = time.perf_counter()
        try:
            if mode == "time":
                result = await messages.by_time(
                    request.state.admin, console.namesrv, q.get("topic", ""),
                    messages.parse_time(q.get("begin", ""), "begin"), messages.parse_time(q.get("end", ""), "end"),
                    page=inputs.checked_int(q.get("page", "1"), "page", 1, 1 << 30),
                    size=inputs.checked_int(q.get("size", "50"), "page size", 1, messages.MAX_PAGE))
                context["rows"], context["page"] = messages.as_rows(result.messages), result
            elif mode == "key":
                context["rows"] = messages.as_rows(await messages.by_key(request.state.admin, q.get("topic", ""),
                                                                         q.get("key", "")))
            elif mode == "id":
                found = await messages.by_msg_id(request.state.admin, q.get("msg_id", ""))
                return RedirectResponse(f"/message/{found.msg_id}", status_code=303) \
                    if q.get("fragment") != "1" else Response(headers={"HX-Redirect": f"/message/{found.msg_id}"})
        except InputError as e:
            context["error"] = str(e)
        except TidemqError as e:
            context["error"] = f"the cluster refused: {e}"
        context["took_ms"] = (time.perf_counter() - started) * 1000
        return page(request, "message_results.html" if q.get("fragment") == "1" else "message.html", context)

    async def message_view(request: Request) -> Response:
        msg_id = request.path_params["msg_id"]
        context: dict[str, Any] = {"msg_id": msg_id, "m": None, "error": None, "active": "message"}
        try:
            m = await messages.by_msg_id(request.state.admin, msg_id)
            context.update(m=m, views=messages.body_views(m.body), life=await messages.life(request.state.admin, m))
        except InputError as e:
            context["error"] = str(e)
        except TidemqError as e:
            context["error"] = f"the cluster refused: {e}"
        return page(request, "message_detail.html", context, status=200 if context["m"] else 404)

    async def dlq_list(request: Request) -> Response:
        try:
            rows, error = await dlq.dlq_rows(request.state.admin), None
        except TidemqError as e:
            rows, error = [], f"the cluster did not answer: {e}"
        return page(request, "dlq.html", {"rows": rows, "error": error})

    async def dlq_view(request: Request) -> Response:
        group = request.path_params["group"]
        q = request.query_params
        context: dict[str, Any] = {"group": group, "rows": None, "error": None, "active": "dlq"}
        try:
            number = inputs.checked_int(q.get("page", "1"), "page", 1, 1 << 30)
            size = inputs.checked_int(q.get("size", "50"), "page size", 1, messages.MAX_PAGE)
            found, total = await dlq.dlq_messages(request.state.admin, console.namesrv, group, page=number, size=size)
            context.update(rows=messages.as_rows(found), total=total, page=number, size=size,
                           page_count=max(1, -(-total // size)))
        except InputError as e:
            context["error"] = str(e)
        except TidemqError as e:
            context["error"] = f"the cluster did not answer: {e}"
        fragment = q.get("fragment") == "1"
        return page(request, "dlq_table.html" if fragment else "dlq_detail.html", context,
                    status=404 if context["rows"] is None and not fragment else 200)

    async def dlq_resend(request: Request) -> Response:
        group = request.path_params["group"]
        form = await request.form()

        async def act() -> str:
            one = form.get("one")  # a row's own Resend button (inside the form, which sends its boxes too)
            ids = [one] if isinstance(one, str) and one else [
                i for i in form.getlist("msg_id") if isinstance(i, str) and i]
            rows = await dlq.resend(request.state.admin, request.state.producer, group, ids)
            return f"resent {len(rows)} message(s): " + ", ".join(
                f"{r['msg_id']} → {r['topic']} as {r['new_msg_id']}" for r in rows)

        return await change(request, act, "dlq-changed")

    async def dlq_export(request: Request) -> Response:
        group = request.path_params["group"]
        try:
            found, _ = await dlq.dlq_messages(request.state.admin, console.namesrv, group, page=1, size=messages.MAX_PAGE)
        except InputError as e:
            return Response(str(e) + "\n", status_code=404, media_type="text/plain")
        wanted = set(request.query_params.getlist("msg_id"))
        if wanted:
            found = [m for m in found if m.msg_id in wanted]
        filename = f"dlq-{group}.jsonl".replace('"', "")
        return Response(dlq.export_lines(found), media_type="application/x-ndjson",
                        headers={"Content-Disposition": f'attachment; filename="{filename}"'})

    async def dashboard_page(request: Request) -> Response:
        return page(request, "dashboard.html", {})

    async def dashboard_data(request: Request) -> Response:
        try:
            await request.state.history.sample(request.state.admin)
        except TidemqError as e:
            return Response(json.dumps({"error": str(e), **request.state.history.series()}), media_type="application/json")
        return Response(json.dumps(request.state.history.series()), media_type="application/json")

    async def failover_page(request: Request) -> Response:
        try:
            groups, error = await failover.cluster_timelines(request.state.admin), None
        except TidemqError as e:
            groups, error = [], f"the cluster did not answer: {e}"
        fragment = request.query_params.get("fragment") == "1"
        return page(request, "failover_groups.html" if fragment else "failover.html",
                    {"groups": groups, "error": error, "active": "failover"})

    async def acl_page(request: Request) -> Response:
        """The ACL's accounts and their permissions (admin-only on the nodes and here)."""
        try:
            answer, error = await request.state.admin.acl_accounts(), None
        except TidemqError as e:
            answer, error = None, f"the cluster refused: {e}"
        fragment = request.query_params.get("fragment") == "1"
        return page(request, "acl_table.html" if fragment else "acl.html", {"acl": answer, "error": error})

    async def acl_save(request: Request) -> Response:
        """Add an account or change its permissions on every broker (admin-only here and on
        the nodes); a blank secret keeps the account's."""
        form = await request.form()

        async def act() -> str:
            fields = {k: v for k, v in form.items() if isinstance(v, str)}
            return await acl.save_account(request.state.admin, acl.account_form(fields), user=request.state.user)

        return await change(request, act, "acl-changed")

    async def acl_remove(request: Request) -> Response:
        name = request.path_params["account"]

        async def act() -> str:
            return await acl.remove_account(request.state.admin, name, user=request.state.user)

        return await change(request, act, "acl-changed")

    async def health(request: Request) -> Response:
        return Response(json.dumps({"ok": True, "namesrv": console.namesrv}), media_type="application/json")

    routes = [
        Route("/", index),
        Route("/health", health),
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/cluster", guarded(cluster)),
        Route("/cluster/promote", guarded(cluster_promote, admin_only=True), methods=["POST"]),
        Route("/dashboard", guarded(dashboard_page)),
        Route("/dashboard/data", guarded(dashboard_data)),
        Route("/failover", guarded(failover_page)),
        Route("/acl", guarded(acl_page, admin_only=True), methods=["GET"]),
        Route("/acl", guarded(acl_save, admin_only=True), methods=["POST"]),
        Route("/acl/{account}/delete", guarded(acl_remove, admin_only=True), methods=["POST"]),
        Route("/topic", guarded(topic_list), methods=["GET"]),
        Route("/topic", guarded(topic_save, admin_only=True), methods=["POST"]),
        Route("/topic/{topic}", guarded(topic_view), methods=["GET"]),
        Route("/topic/{topic}/delete", guarded(topic_delete, admin_only=True), methods=["POST"]),
        Route("/topic/{topic}/send", guarded(topic_send), methods=["POST"]),
        # the group list reads every group's offsets and settings (admin-only ops on the nodes)
        Route("/consumer", guarded(consumer_list, admin_only=True), methods=["GET"]),
        Route("/consumer/{group}", guarded(consumer_view), methods=["GET"]),
        Route("/consumer/{group}/settings", guarded(consumer_settings, admin_only=True), methods=["POST"]),
        Route("/consumer/{group}/reset", guarded(consumer_reset, admin_only=True), methods=["POST"]),
        Route("/message", guarded(message_search), methods=["GET"]),
        Route("/message/{msg_id}", guarded(message_view), methods=["GET"]),
        Route("/dlq", guarded(dlq_list), methods=["GET"]),
        Route("/dlq/{group}", guarded(dlq_view), methods=["GET"]),
        Route("/dlq/{group}/resend", guarded(dlq_resend), methods=["POST"]),
        Route("/dlq/{group}/export", guarded(dlq_export), methods=["GET"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        Mount("/vendor", StaticFiles(directory=str(assets.VENDOR_DIR), check_dir=False), name="vendor"),
    ]
    middleware = [Middleware(CSRFMiddleware, secret=secret, cookie_samesite="strict", cookie_secure=https)]
    if console.sessions is not None:  # logins: a signed cookie names the session (never the secret)
        middleware.append(Middleware(SessionMiddleware, secret_key=secret, session_cookie="tidemq_console",
                                     same_site="strict", max_age=int(console.sessions.lifetime_s) + COOKIE_GRACE_S,
                                     https_only=https))
    return Starlette(routes=routes, middleware=middleware)
