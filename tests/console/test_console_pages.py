"""The web console (issue 47) in a real browser against a real cluster: `tidemq cluster up
--console` of conf/1m-1s-dev (a name server, a SYNC_MASTER and its slave, and the console,
as processes; tests/console/conftest.py) and Debian's chromium driven by Playwright. Every
page loads with the cluster's data and no browser-console error; the Cluster and Topic
pages' changes show up in the cluster as the CLI reports them; bad input is refused on the
page and changes nothing. The other pages' actions are test_console_actions.py (slow tier)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.cluster.helpers import cli
from tests.console.browser import topics_cli

pytestmark = pytest.mark.slow  # starts a cluster, the console and a browser

PAGES = {
    "/dashboard": "#chart-put", "/cluster": "#brokers", "/topic": "#topics", "/consumer": "#groups",
    "/message": "#by-time", "/dlq": "#dlqs", "/failover": "#failover-groups", "/acl": "#acl-off",
}


def test_every_page_loads_without_a_browser_error(page, cluster):
    for path, part in PAGES.items():
        response = page.goto(path)
        assert response.status == 200, path
        assert page.page.locator(part).count() == 1, path
        assert page.page.locator(f"header nav a[href='{path}'].active").count() == 1, path
    # what the pages fetch comes from the console itself, never a CDN
    assert all(src.startswith(("/vendor/", "/static/"))
               for src in page.page.eval_on_selector_all("script[src]", "els => els.map(e => e.getAttribute('src'))"))


def test_cluster_page_shows_each_broker_as_it_serves(page, cluster):
    response = page.goto("/cluster")
    assert response.status == 200
    master = page.page.locator(f"#brokers tr[data-address='{cluster['master']}']")
    slave = page.page.locator(f"#brokers tr[data-address='{cluster['slave']}']")
    assert master.locator("td.role").inner_text() == "SYNC_MASTER"
    assert slave.locator("td.role").inner_text() == "SLAVE"
    # the master's in-sync set names its slave; the slave knows it is in it
    assert cluster["slave"] in master.inner_text()
    assert "in the set" in slave.inner_text()
    # the live part refreshes itself (htmx, every 2 s)
    first = page.page.locator("#cluster-table .hint").inner_text()
    page.page.wait_for_function(
        "old => document.querySelector('#cluster-table .hint').innerText !== old", arg=first, timeout=10_000)
    page.screenshot("cluster")


def test_topic_create_send_and_delete_change_the_cluster(page, cluster):
    ns = cluster["namesrv"]
    page.goto("/topic")
    page.page.locator("#add-topic summary").click()
    page.page.fill("#new-topic", "ConsoleOrders")
    page.page.fill("input[name=read_queue_nums]", "2")
    page.page.fill("input[name=write_queue_nums]", "2")
    page.page.click("#save-topic")
    page.page.wait_for_selector("#topic-result .result.ok")
    assert "ConsoleOrders saved on broker-a" in page.page.inner_text("#topic-result")
    page.page.wait_for_selector("#topics tr[data-topic='ConsoleOrders']")  # the list refreshed itself
    assert "ConsoleOrders" in topics_cli(ns)
    page.screenshot("topic")

    page.goto("/topic/ConsoleOrders")
    assert page.page.locator("#route tbody tr").count() == 1
    assert page.page.locator("#queues tbody tr").count() == 2
    page.page.fill("#send-tags", "TagA")
    page.page.fill("#send-keys", "console-key-1")
    page.page.fill("#send-body", "hello from the console")
    page.page.click("#send-button")
    page.page.wait_for_selector("#send-result .result.ok")
    said = page.page.inner_text("#send-result")
    msg_id = said.split("msgId ", 1)[1].split()[0]
    found = cli("admin", "queryMsgById", "-n", ns, "-i", msg_id, "--json")
    assert found.returncode == 0, found.stderr.decode()
    message = json.loads(found.stdout.decode().splitlines()[0])
    assert message["topic"] == "ConsoleOrders" and message["keys"] == ["console-key-1"], message
    page.goto("/topic/ConsoleOrders")
    page.screenshot("topic-detail")

    page.goto("/topic")
    page.page.once("dialog", lambda d: d.accept())
    page.page.click("#topics tr[data-topic='ConsoleOrders'] button.danger")
    page.page.wait_for_selector("#topic-result .result.ok")
    assert "deleted from broker-a" in page.page.inner_text("#topic-result")
    assert "ConsoleOrders" not in topics_cli(ns)


def test_bad_input_and_a_change_without_csrf_are_refused_and_change_nothing(page, cluster):
    ns = cluster["namesrv"]
    page.goto("/topic")
    page.page.locator("#add-topic summary").click()
    page.page.fill("#new-topic", "bad topic!")
    page.page.click("#save-topic")
    page.page.wait_for_selector("#topic-result .result.error")
    assert "topic" in page.page.inner_text("#topic-result")
    page.page.fill("#new-topic", "GoodName")
    page.page.fill("input[name=read_queue_nums]", "zero")
    page.page.click("#save-topic")
    page.page.wait_for_selector("#topic-result .result.error:has-text('read queues must be a whole number')")
    # a POST without the CSRF token (another site's form) is refused before it is read
    answer = httpx.post(cluster["url"] + "/topic", data={"topic": "CsrfProbe"}, timeout=10)
    assert answer.status_code == 403
    assert not {"bad topic!", "GoodName", "CsrfProbe"} & topics_cli(ns)  # one CLI run for the three

    # an unknown topic's page says so (a 404 the browser logs is expected here, not a fault)
    response = page.page.goto("/topic/NoSuchTopic")
    assert response.status == 404
    assert "does not exist" in page.page.inner_text("#page-error")
    page.errors.clear()


def test_message_page_refuses_bad_input_with_a_clear_message(page, cluster):
    page.goto("/message")
    page.page.fill("#id-msgid", "not-a-msg-id")
    page.page.click("#id-search")
    page.page.wait_for_selector("#search-error:has-text('malformed msgId')")
    page.page.fill("#time-topic", "NoSuchTopicHere")
    page.page.click("#time-search")
    page.page.wait_for_selector("#search-error:has-text('does not exist')")
    page.page.fill("#time-topic", "ConsoleMessages")
    page.page.fill("#time-begin", "2026-11-24T10:30:00")
    page.page.fill("#time-end", "2026-11-24T10:00:00")
    page.page.click("#time-search")
    page.page.wait_for_selector("#search-error:has-text('backwards')")


