"""`tidemq cluster up --proxy-url`: every broker's client and HA link through a proxy on a
real Toxiproxy-compatible server (chaos.proxy as its own process), driven by the real
toxiproxy-python client, with real node processes on a copy of conf/1m-1s-dev."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio
from toxiproxy import Toxiproxy

from chaos.network import start_proxy_process
from cluster.client.admin import Admin
from cluster.client.consumer import PullConsumer
from cluster.launch import launcher, proxies
from cluster.launch.state import LauncherError, LayoutError
from node.config import load_config
from store.message import decode_msg_id
from tests.cluster.test_launcher import copy_dev_layout, status_json, tidemq
from tests.waiting import wait_until
from wire.client import TidemqError, connect
from wire.protocol import GetStatus, Send, StatusReply, TopicCreate

pytestmark = pytest.mark.slow

NODES = ("broker-a", "broker-a-s")


@pytest.fixture(scope="module")
def proxy_url():
    with start_proxy_process() as (host, port):
        yield f"http://{host}:{port}"


@pytest.fixture
def client(proxy_url):
    return proxies.connect(proxy_url)


@pytest.fixture
def dirs(tmp_path: Path):
    conf, base = copy_dev_layout(tmp_path), tmp_path / "data"
    yield conf, base
    launcher.down(base, grace_s=5)


async def _status(address: str) -> StatusReply:
    async with connect(address, connect_timeout=2.0, request_timeout=3.0) as conn:
        return await conn.call(GetStatus())


@pytest.mark.sweep  # ~20 s; the chaos scenarios (tests/chaos/test_scenarios.py) run every cluster through its proxies
def test_every_link_goes_through_its_proxy(dirs, proxy_url: str, client: Toxiproxy) -> None:
    conf, base = dirs
    cwd = base.parent
    tidemq("cluster", "up", "--conf", str(conf), "--base-dir", str(base), "--proxy-url", proxy_url, cwd=cwd)
    state = launcher.load_state(base)
    assert state is not None and state.proxy_url == proxy_url
    byname = {p.name: p for p in state.proxies.values()}
    assert set(byname) == {f"{n}-{link}" for n in NODES for link in ("client", "ha")}
    live = client.proxies()
    for p in byname.values():  # on the server, in front of the node's bound port
        assert live[p.name].listen == p.listen and live[p.name].upstream == p.upstream
    master = load_config(str(conf / "broker-a.toml"))
    assert byname["broker-a-client"].upstream == master.bind_address
    assert byname["broker-a-ha"].upstream == master.ha_bind_address

    code, doc = status_json(base, cwd)
    assert code == 0, doc
    listed = json.loads(tidemq("cluster", "status", "--base-dir", str(base), "--json", cwd=cwd).stdout)["proxies"]
    assert {(r["name"], r["listen"], r["enabled"]) for r in listed} == {(p.name, p.listen, True) for p in byname.values()}
    assert "proxy broker-a-ha" in tidemq("cluster", "status", "--base-dir", str(base), cwd=cwd).stdout

    namesrv = state.nodes["namesrv"].address
    direct = {n: state.nodes[n].address for n in NODES}

    async def routes() -> None:
        # the name server hands out the proxies: consumers and slaves connect through them
        async with Admin(namesrv) as admin:
            infos = {b.broker_id: b for b in await admin.cluster_info()}
        assert infos[0].address == byname["broker-a-client"].listen
        assert infos[1].address == byname["broker-a-s-client"].listen
        slave = await _status(direct["broker-a-s"])
        assert slave.address == byname["broker-a-s-client"].listen
        assert slave.bind_address == direct["broker-a-s"]
        assert slave.ha.client.master_address == byname["broker-a-ha"].listen
        assert slave.sync is not None and slave.sync["master_addr"] == byname["broker-a-client"].listen

        # a message sent through the master's proxy keeps the bound address in its msgId
        async with connect(byname["broker-a-client"].listen) as conn:
            await conn.call(TopicCreate(topic="Px", read_queue_nums=1, write_queue_nums=1))
            sent = await conn.call(Send(topic="Px", body=b"through the proxy", queue_id=0))
        assert decode_msg_id(sent.msg_id)[0] == master.bind_address

        # cut the HA proxy: the slave loses its master; restore it: it reconnects
        ha = live["broker-a-ha"]
        await trio.to_thread.run_sync(ha.disable)

        async def ha_connected() -> bool:
            return bool((await _status(direct["broker-a-s"])).ha.connected)

        await wait_until(lambda: _not(ha_connected), timeout=20, what="the slave losing its HA link")
        code, doc = await trio.to_thread.run_sync(status_json, base, cwd)
        assert code == 1  # a disabled proxy: a link is cut
        await trio.to_thread.run_sync(ha.enable)
        await wait_until(ha_connected, timeout=20, what="the slave reconnecting through the HA proxy")

        # cut both client proxies: a consumer routed by the name server cannot pull; restored, it reads it
        clients = [live["broker-a-client"], live["broker-a-s-client"]]
        for p in clients:
            await trio.to_thread.run_sync(p.disable)
        async with PullConsumer(namesrv, group="px", topic="Px", request_timeout=2.0) as consumer:
            (queue,) = await consumer.queues()
            with pytest.raises(TidemqError):
                await consumer.pull(queue, 8, timeout_ms=0)
            for p in clients:
                await trio.to_thread.run_sync(p.enable)
            got = await wait_until(lambda: consumer.pull(queue, 8, timeout_ms=0), timeout=20,
                                   what="a pull after restoring", retry_on=(TidemqError,))
            assert [m.body for m in got.messages] == [b"through the proxy"]
            assert got.address in {p.listen for p in clients}  # it read through a proxy

    trio.run(routes)

    # down deletes the proxies; up (the recorded layout and URL) makes them again, on fresh ports
    tidemq("cluster", "down", "--base-dir", str(base), cwd=cwd)
    assert not set(byname) & set(client.proxies())
    tidemq("cluster", "up", "--base-dir", str(base), cwd=cwd)
    assert set(byname) <= set(client.proxies())
    assert status_json(base, cwd)[0] == 0
    # a killed and restarted node keeps advertising the same, still existing, proxies
    tidemq("cluster", "kill", "broker-a-s", "--base-dir", str(base), cwd=cwd)
    before = launcher.load_state(base).proxies
    tidemq("cluster", "start", "broker-a-s", "--base-dir", str(base), cwd=cwd)
    assert launcher.load_state(base).proxies == before


async def _not(check) -> bool:
    return not await check()


def test_bad_proxy_urls_and_layouts_are_refused(dirs, proxy_url: str, client: Toxiproxy) -> None:
    conf, base = dirs
    cwd = base.parent
    bad = tidemq("cluster", "up", "--conf", str(conf), "--base-dir", str(base), "--proxy-url", "ftp://x:1",
                 cwd=cwd, check=False)
    assert bad.returncode == 2 and "--proxy-url must be http://host:port" in bad.stderr, bad.stderr
    nobody = tidemq("cluster", "up", "--conf", str(conf), "--base-dir", str(base),
                    "--proxy-url", "http://127.0.0.1:1", cwd=cwd, check=False)
    assert nobody.returncode == 1 and "no Toxiproxy server answers at http://127.0.0.1:1" in nobody.stderr
    assert "tidemq chaos proxy" in nobody.stderr
    assert launcher.load_state(base) is None  # nothing was started

    # a static master address that names no broker of the layout cannot be proxied
    slave = conf / "broker-a-s.toml"
    text = slave.read_text()
    slave.write_text(text.replace("masterAddr = ", 'masterAddr = "10.9.9.9:1" # was '))
    with pytest.raises(LayoutError, match=r"broker-a-s.toml: masterAddr 10.9.9.9:1 names no broker"):
        launcher.up(conf, base, proxy_url=proxy_url, proxy_prefix="t-")
    assert not any(name.startswith("t-") for name in client.proxies())  # refused before creating any
    slave.write_text(text)

    # a proxy of that name in front of something else is not taken over
    client.create(upstream="127.0.0.1:9", name="t2-broker-a-client")
    try:
        with pytest.raises(LauncherError, match="proxy t2-broker-a-client exists with upstream 127.0.0.1:9"):
            launcher.up(conf, base, proxy_url=proxy_url, proxy_prefix="t2-")
    finally:
        client.get_proxy("t2-broker-a-client").destroy()


def test_a_missing_client_library_is_named(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "toxiproxy", None)  # what `import toxiproxy` sees when not installed
    with pytest.raises(LayoutError, match=r"toxiproxy-python client of the `chaos` extra, which is not installed: "
                       r"\.venv/bin/pip install -e '\.\[chaos\]'"):
        proxies.connect("http://127.0.0.1:8474")


def test_describe_says_what_the_server_says_of_each_proxy(monkeypatch) -> None:
    """`cluster status`'s proxy rows without a server: enabled and toxics from the client,
    an error for a proxy the server lacks or cannot list, each rendered as one line."""
    from requests import ConnectionError as RequestsConnectionError

    from cluster.cli.cluster import _proxy_line
    from cluster.launch.state import ProxyRecord

    class FakeProxy:
        def __init__(self, enabled: bool, toxics: dict | None) -> None:
            self.enabled, self._toxics = enabled, toxics

        def toxics(self) -> dict:
            if self._toxics is None:
                raise RequestsConnectionError("reset")
            return self._toxics

    class FakeClient:
        def proxies(self) -> dict:
            return {"a-client": FakeProxy(True, {"slow": object(), "cut": object()}),
                    "a-ha": FakeProxy(False, {}), "b-client": FakeProxy(True, None)}

    monkeypatch.setattr(proxies, "connect", lambda url: FakeClient())
    records = [ProxyRecord(name=n, node=n.split("-")[0], link=n.split("-")[1], upstream="127.0.0.1:1",
                           listen="127.0.0.1:2") for n in ("a-client", "a-ha", "b-client", "b-ha")]
    rows = proxies.describe("http://127.0.0.1:8474", records)
    assert [{k: v for k, v in r.items() if k in ("enabled", "toxics", "error")} for r in rows] == [
        {"enabled": True, "toxics": ["cut", "slow"]},
        {"enabled": False, "toxics": []},
        {"enabled": True, "error": "ConnectionError reset"},
        {"error": "missing on the proxy server"},
    ]
    assert rows[0]["name"] == "a-client" and rows[0]["upstream"] == "127.0.0.1:1"
    lines = [_proxy_line(r) for r in rows]
    assert lines[0].endswith(f"-> {'127.0.0.1:1':<22} enabled, toxics: cut, slow"), lines[0]
    assert lines[1].endswith("DISABLED (link cut)") and lines[2].endswith("ERROR: ConnectionError reset")
    assert lines[3] == f"proxy {'b-ha':<22} {'127.0.0.1:2':<22} -> {'127.0.0.1:1':<22} ERROR: missing on the proxy server"

    def refused(url: str) -> None:
        raise LauncherError("no Toxiproxy server answers at http://127.0.0.1:8474")

    monkeypatch.setattr(proxies, "connect", refused)
    assert [r.get("error") for r in proxies.describe("http://127.0.0.1:8474", records[:1])] == [
        "no Toxiproxy server answers at http://127.0.0.1:8474"]
