"""chaos.proxy against Toxiproxy's documented API and toxic semantics, driven only through
the real toxiproxy-python client (raw HTTP only where the client hides the status code).

The proxy runs as its own process (chaos.network); the upstream is a threaded TCP server
in this process. Delays are checked as lower bounds the documentation promises."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest
import requests
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

from chaos.network import api_address, toxiproxy

pytestmark = pytest.mark.slow


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            if data.startswith(b"BYE"):
                self.request.sendall(b"bye")
                return  # the server closes: slow_close delays this close
            self.request.sendall(data)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture(scope="module")
def echo() -> Iterator[str]:
    server = _Server(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def client():
    with toxiproxy() as c:
        yield c


@pytest.fixture
def proxy(client, echo):
    client.destroy_all()
    p = client.create(upstream=echo, name="echo")
    yield p
    client.destroy_all()


def connect(p, timeout: float = 5.0) -> socket.socket:
    host, port = p.listen.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=timeout)
    return s


def recv_exactly(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        data = s.recv(n - len(out))
        if not data:
            break
        out += data
    return out


def url(path: str) -> str:
    return f"http://{api_address()}{path}"


def test_create_list_get_and_conflicts(client, proxy, echo):
    assert proxy.listen.startswith("127.0.0.1:") and not proxy.listen.endswith(":0")
    assert client.proxies()["echo"].upstream == echo
    with pytest.raises(ProxyExists):
        client.create(upstream=echo, name="echo")
    r = requests.post(url("/proxies"), json={"name": "echo", "upstream": echo})
    assert r.status_code == 409 and r.json() == {"error": "proxy already exists", "status": 409}
    r = requests.post(url("/proxies"), json={"name": "other", "upstream": echo, "listen": "127.0.0.1:0"})
    assert r.status_code == 201 and r.json()["enabled"] is True and r.json()["toxics"] == []
    assert requests.get(url("/version")).json()["version"].startswith("2.")
    assert client.version()


def test_errors_have_toxiproxys_shape(client, proxy):
    r = requests.get(url("/proxies/nope"))
    assert (r.status_code, r.json()) == (404, {"error": "proxy not found", "status": 404})
    with pytest.raises(NotFound):
        client.proxies()["echo"].destroy_toxic("nope")
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="earthquake")
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="latency", stream="sideways")
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="latency", toxicity=1.5)
    r = requests.post(url("/proxies"), data=b"{not json")
    assert r.status_code == 400 and r.json()["status"] == 400
    r = requests.post(url("/proxies"), json={"name": "x"})
    assert r.status_code == 400 and "upstream" in r.json()["error"]
    r = requests.get(url("/proxies"), headers={"User-Agent": "Mozilla/5.0"})
    assert r.status_code == 403
    # a bad request changed nothing
    assert list(client.proxies()) == ["echo"] and proxy.toxics() == {}


def test_toxic_crud_defaults_and_reset(client, proxy):
    proxy.add_toxic(type="latency", attributes={"latency": 50})
    r = requests.post(url("/proxies/echo/toxics"), json={"type": "slicer", "stream": "upstream",
                                                          "attributes": {"average_size": 5}})
    assert r.status_code == 200
    assert r.json() == {"name": "slicer_upstream", "type": "slicer", "stream": "upstream", "toxicity": 1.0,
                        "attributes": {"average_size": 5, "size_variation": 0, "delay": 0}}
    toxics = proxy.toxics()
    assert set(toxics) == {"latency_downstream", "slicer_upstream"}
    assert toxics["latency_downstream"].attributes == {"latency": 50, "jitter": 0}
    r = requests.post(url("/proxies/echo/toxics"), json={"type": "latency"})
    assert r.status_code == 409
    r = requests.post(url("/proxies/echo/toxics/latency_downstream"), json={"attributes": {"jitter": 5}})
    assert r.json()["attributes"] == {"latency": 50, "jitter": 5}
    r = requests.delete(url("/proxies/echo/toxics/slicer_upstream"))
    assert r.status_code == 204 and r.content == b""
    proxy.disable()
    r = requests.post(url("/reset"))
    assert r.status_code == 204
    after = client.proxies()["echo"]
    assert after.enabled is True and after.toxics() == {}


def test_pass_through_and_latency_per_chunk(proxy):
    with connect(proxy) as s:
        s.sendall(b"ping")
        assert recv_exactly(s, 4) == b"ping"
        proxy.add_toxic(type="latency", stream="upstream", attributes={"latency": 300})
        t0 = time.monotonic()
        s.sendall(b"slow")  # an existing connection gets the new toxic
        assert recv_exactly(s, 4) == b"slow"
        assert time.monotonic() - t0 >= 0.29
        t0 = time.monotonic()
        for i in range(5):  # chunks are delayed each by the latency, not one after another
            s.sendall(b"%d" % i)
            time.sleep(0.02)  # poll: separate chunks on the wire
        assert recv_exactly(s, 5) == b"01234"
        assert 0.29 <= time.monotonic() - t0 < 5 * 0.3


def test_timeout_zero_holds_data_until_removed(proxy):
    with connect(proxy) as s:
        proxy.add_toxic(type="timeout", name="hold", stream="downstream", attributes={"timeout": 0})
        s.sendall(b"held")
        s.settimeout(0.5)
        with pytest.raises(TimeoutError):
            s.recv(4)
        proxy.destroy_toxic("hold")
        s.settimeout(5)
        assert recv_exactly(s, 4) == b"held"


def test_timeout_closes_after_its_time_and_drops_data(proxy):
    with connect(proxy) as s:
        proxy.add_toxic(type="timeout", attributes={"timeout": 300})
        t0 = time.monotonic()
        s.sendall(b"lost")
        assert s.recv(4) == b""  # dropped, then closed
        assert time.monotonic() - t0 >= 0.29


def test_disable_closes_connections_and_enable_listens_again(proxy):
    s = connect(proxy)
    s.sendall(b"a")
    assert recv_exactly(s, 1) == b"a"
    with proxy.down():
        with contextlib.suppress(ConnectionResetError):  # closed: EOF or RST
            assert s.recv(1) == b""
        with pytest.raises(ConnectionRefusedError):
            connect(proxy)
    s.close()
    with connect(proxy) as again:
        again.sendall(b"b")
        assert recv_exactly(again, 1) == b"b"


def test_slicer_delivers_small_pieces_intact(proxy):
    proxy.add_toxic(type="slicer", attributes={"average_size": 10, "size_variation": 3, "delay": 20000})
    payload = bytes(range(200))
    with connect(proxy) as s:
        s.sendall(payload)
        pieces = []
        while sum(map(len, pieces)) < len(payload):
            pieces.append(s.recv(65536))
            assert pieces[-1]
        assert b"".join(pieces) == payload and len(pieces) >= 5


def test_limit_data_closes_after_the_limit(proxy):
    proxy.add_toxic(type="limit_data", attributes={"bytes": 10})
    with connect(proxy) as s:
        s.sendall(b"0123456789abcdef")
        assert recv_exactly(s, 16) == b"0123456789"


def test_reset_peer_resets(proxy):
    proxy.add_toxic(type="reset_peer", attributes={"timeout": 100})
    with connect(proxy) as s, pytest.raises(ConnectionResetError):
        s.sendall(b"x")
        while s.recv(10):
            pass


def test_bandwidth_limits_rate(proxy):
    proxy.add_toxic(type="bandwidth", attributes={"rate": 10})  # 10 KB/s
    with connect(proxy) as s:
        t0 = time.monotonic()
        s.sendall(b"z" * 5000)
        assert recv_exactly(s, 5000) == b"z" * 5000
        assert time.monotonic() - t0 >= 0.45


def test_slow_close_delays_the_close(proxy):
    proxy.add_toxic(type="slow_close", attributes={"delay": 400})
    with connect(proxy) as s:
        s.sendall(b"BYE")
        assert recv_exactly(s, 3) == b"bye"
        t0 = time.monotonic()
        assert s.recv(1) == b""
        assert time.monotonic() - t0 >= 0.3


def test_toxicity_zero_never_applies(proxy):
    proxy.add_toxic(type="timeout", toxicity=0.0, attributes={"timeout": 0})
    with connect(proxy) as s:
        s.sendall(b"free")
        assert recv_exactly(s, 4) == b"free"
