"""The /metrics endpoint in-process, over real sockets: TLS as the client port serves it
(enforcing: HTTPS only), the bearer token, bad requests, and the scrape-cost series."""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import httpx
import pytest
import trio
import trustme
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from node.metrics.endpoint import MetricsEndpoint, MetricsError, read_bearer_token
from tests.waiting import wait_until
from wire.tls import handshake_failures


class _One:
    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("tidemq_test_gauge", "a gauge", value=7)


async def _get(url: str, **kw: object) -> httpx.Response:
    def get() -> httpx.Response:
        return httpx.get(url, timeout=5, **kw)  # type: ignore[arg-type]
    return await trio.to_thread.run_sync(get)


async def test_tls_enforcing_serves_https_only_and_counts_failed_handshakes(tmp_path):
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    trusting = ssl.create_default_context(cafile=str(ca_file))
    endpoint = MetricsEndpoint([_One()], host="127.0.0.1", port=0, tls=(server, "enforcing"), bearer_token="t0k")
    async with trio.open_nursery() as nursery:
        port = await nursery.start(endpoint.run)
        assert endpoint.scheme == "https"
        ok = await _get(f"https://127.0.0.1:{port}/metrics", verify=trusting,
                        headers={"Authorization": "Bearer t0k"})
        assert ok.status_code == 200 and "tidemq_test_gauge 7.0" in ok.text
        assert "rocketmq_metrics_scrapes_total 0.0" in ok.text and endpoint.scrapes == 1  # counted once written
        assert (await _get(f"https://127.0.0.1:{port}/metrics", verify=trusting)).status_code == 401
        with pytest.raises(httpx.HTTPError):  # plaintext on an enforcing port: closed
            await _get(f"http://127.0.0.1:{port}/metrics")
        before = handshake_failures()
        with pytest.raises(httpx.HTTPError):  # a client that does not trust the server's CA
            await _get(f"https://127.0.0.1:{port}/metrics")
        # the server side notes the failed handshake once the client gave up
        await wait_until(lambda: handshake_failures() > before, timeout=5, what="the failed handshake counted")
        assert endpoint.refused == 1
        nursery.cancel_scope.cancel()


async def test_only_get_on_metrics():
    endpoint = MetricsEndpoint([_One()], host="127.0.0.1", port=0)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(endpoint.run)
        base = f"http://127.0.0.1:{port}"
        assert (await _get(f"{base}/")).status_code == 404
        post = await trio.to_thread.run_sync(lambda: httpx.post(f"{base}/metrics", timeout=5))
        assert post.status_code == 405
        text = (await _get(f"{base}/metrics")).text
        assert "tidemq_test_gauge 7.0" in text and "rocketmq_metrics_last_scrape_seconds" in text
        nursery.cancel_scope.cancel()


def test_bearer_token_file_errors_name_the_file(tmp_path):
    empty = tmp_path / "empty.token"
    empty.write_text("\n")
    with pytest.raises(MetricsError, match="empty.token: the metrics bearer token file is empty"):
        read_bearer_token(str(empty))
    with pytest.raises(MetricsError, match="missing.token: cannot read"):
        read_bearer_token(str(tmp_path / "missing.token"))
    (tmp_path / "ok.token").write_text("  abc \n")
    assert read_bearer_token(str(tmp_path / "ok.token")) == "abc"
