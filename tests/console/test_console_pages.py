"""The web console (issue 47) in a real browser against a real cluster: `tidemq cluster up
--console` of conf/1m-1s-dev (a name server, a SYNC_MASTER and its slave, and the console,
as processes; tests/console/conftest.py) and Debian's chromium driven by Playwright, one of
each for the module, shared by its tests, which run in file order. Every page loads with
the cluster's data and no browser-console error; each page's actions (the Cluster and
Topic pages' changes, the Topic filter, the Consumer page's reset and settings, the Message
page's searches and a message's detail, the DLQ's resend and export, the live Dashboard)
show up in the cluster as the CLI reports them; bad input is refused on the page and
changes nothing. Last, as it kills the master: the kill-master drill with the Cluster page
open, the slave promoted from the page shown as master in the new epoch within seconds.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
import trio

from cluster.client import Admin, Producer, PullConsumer
from cluster.launch import launcher
from tests.cluster.helpers import cli
from tests.console.browser import Page, topics_cli
from wire.protocol import ConsumerSendBack

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


def test_topic_filter_narrows_the_list(page, cluster):
    async def create() -> None:
        async with Admin(cluster["namesrv"]) as admin:
            for topic in ("FilterAlpha", "FilterBeta"):
                await admin.create_topic(topic)

    trio.run(create)
    page.goto("/topic")
    page.page.wait_for_selector("#topics tr[data-topic='FilterBeta']")
    page.page.fill("#filter", "alpha")
    page.page.wait_for_function("() => !document.querySelector(\"#topics tr[data-topic='FilterBeta']\")")
    assert page.page.locator("#topics tr[data-topic='FilterAlpha']").count() == 1


def _send_and_consume(ns: str, topic: str, group: str, count: int) -> tuple[int, list[str]]:
    """`count` messages sent (keys k0..), then all consumed and committed by `group`: the
    time before the sends (epoch ms) and the msgIds."""
    async def run() -> tuple[int, list[str]]:
        async with Admin(ns) as admin:
            await admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
        before = int(time.time() * 1000) - 1
        async with Producer(ns) as producer:
            ids = [(await producer.send(topic, json.dumps({"n": i}), keys=[f"k{i}"], properties={"origin": "test"})).msg_id
                   for i in range(count)]
        async with PullConsumer(ns, group=group, topic=topic) as consumer:
            seen = 0
            with trio.fail_after(20):
                while seen < count:
                    for q in await consumer.queues():
                        got = await consumer.pull(q, 32, timeout_ms=0)
                        seen += len(got.messages)
                        if got.messages:
                            await consumer.commit(q, got.next_begin_offset)
        return before, ids

    return trio.run(run)


def test_consumer_page_resets_offsets_and_changes_settings(page, cluster):
    ns = cluster["namesrv"]
    before, _ = _send_and_consume(ns, "ConsoleConsumed", "ConsoleGroup", 4)
    page.goto("/consumer")
    row = page.page.locator("#groups tr[data-group='ConsoleGroup']")
    assert row.locator("td.lag").inner_text() == "0"
    page.screenshot("consumer")

    page.goto("/consumer/ConsoleGroup")
    assert page.page.locator("#progress tr[data-queue^='ConsoleConsumed@']").count() == 2
    page.page.select_option("#reset-topic", "ConsoleConsumed")
    page.page.fill("#reset-when", time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(before / 1000 - 1)))
    page.page.click("#reset-button")
    page.page.wait_for_selector("#group-result .result.ok")
    page.page.wait_for_selector("#group-progress .hint:has-text('total lag 4')")  # the table refreshed itself
    progress = cli("admin", "consumerProgress", "-n", ns, "-g", "ConsoleGroup", "-t", "ConsoleConsumed", "--json")
    assert json.loads(progress.stdout.decode().splitlines()[-1])["total_lag"] == 4, progress

    page.page.select_option("#consume-enable", "false")
    page.page.fill("#retry-max-times", "3")
    page.page.click("#settings-button")
    page.page.wait_for_selector("#group-result .result.ok:has-text('retryMaxTimes 3')")
    page.screenshot("consumer-detail")
    # the settings as the masters store them (what `admin updateSubGroup` prints; the CLI
    # confirmed the reset above, one CLI process per test is enough)
    async def settings() -> dict:
        async with Admin(ns) as admin:
            return (await admin.sub_groups())["ConsoleGroup"]

    stored = trio.run(settings)
    assert stored["consume_enable"] is False and stored["retry_max_times"] == 3, stored


def test_message_page_finds_by_time_key_and_id_and_shows_the_body(page, cluster):
    ns = cluster["namesrv"]
    before, ids = _send_and_consume(ns, "ConsoleMessages", "ConsoleReader", 5)
    after = int(time.time() * 1000) + 1000
    fmt = "%Y-%m-%dT%H:%M:%S"
    page.goto("/message")
    page.page.fill("#time-topic", "ConsoleMessages")
    page.page.fill("#time-begin", time.strftime(fmt, time.localtime(before / 1000 - 1)))
    page.page.fill("#time-end", time.strftime(fmt, time.localtime(after / 1000 + 1)))
    page.page.fill("#by-time input[name=size]", "2")
    page.page.click("#time-search")
    page.page.wait_for_selector("#message-results .hint:has-text('5 message(s)')")
    assert page.page.locator("#messages tr[data-msgid]").count() == 2
    page.page.click("#next-page")
    page.page.wait_for_selector("#message-results .hint:has-text('page 2 of 3')")
    page.page.click("#next-page")
    page.page.wait_for_selector("#message-results .hint:has-text('page 3 of 3')")
    assert page.page.locator("#messages tr[data-msgid]").count() == 1
    page.screenshot("message")

    page.page.fill("#key-topic", "ConsoleMessages")
    page.page.fill("#key-key", "k3")
    page.page.click("#key-search")
    page.page.wait_for_selector(f"#messages tr[data-msgid='{ids[3]}']")
    assert page.page.locator("#messages tr[data-msgid]").count() == 1

    page.page.fill("#id-msgid", ids[2])
    page.page.click("#id-search")
    page.page.wait_for_url(f"**/message/{ids[2]}")
    assert '"n": 2' in page.page.inner_text("#body-json")
    assert "origin\ttest" in page.page.inner_text("#properties")
    assert "ConsoleReader" in page.page.inner_text("#consumed-by")  # its offset is past the message
    page.screenshot("message-detail")


def _dead_letters(ns: str, topic: str, group: str, count: int) -> list[str]:
    """`count` messages of `topic` sent back by `group` straight to its DLQ (the node's
    consumer_send_back with delay level -1, as a consumer gives up): their msgIds."""
    async def run() -> list[str]:
        async with Admin(ns) as admin:
            await admin.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
        async with Producer(ns) as producer:
            for i in range(count):
                await producer.send(topic, f"dead {i}", keys=[f"dead{i}"])
        dead = []
        async with PullConsumer(ns, group=group, topic=topic) as consumer:
            (queue,) = await consumer.queues()
            got = await consumer.pull(queue, 32, timeout_ms=0)
            await consumer.commit(queue, got.next_begin_offset)  # a group may send back what it consumes
            for m in got.messages:
                master = await consumer.master_address(queue.broker_name)
                assert master is not None
                answer = await consumer.pool.call(master, ConsumerSendBack(
                    group=group, commitlog_offset=m.commitlog_offset, delay_level=-1))
                assert answer.topic == f"%DLQ%{group}", answer
                dead.append(m.msg_id)
        return dead

    return trio.run(run)


def test_dlq_page_lists_resends_and_exports(page, cluster):
    ns = cluster["namesrv"]
    dead = _dead_letters(ns, "ConsoleDead", "ConsoleDeadGroup", 3)
    page.goto("/dlq")
    assert page.page.locator("#dlqs tr[data-group='ConsoleDeadGroup'] td.num").inner_text() == "3"
    page.goto("/dlq/ConsoleDeadGroup")
    rows = page.page.locator("#dlq-messages tr[data-msgid]")
    assert rows.count() == 3
    page.screenshot("dlq")
    dlq_ids = [rows.nth(i).get_attribute("data-msgid") for i in range(3)]

    # the answer stays, and the table refreshes in place (not into the answer's box, where
    # the form's hx-target would put it: the answer vanished as soon as the refresh came)
    page.page.evaluate("document.querySelector('#dlq-messages').dataset.before = '1'")
    rows.nth(0).locator("button.resend-one").click()
    try:
        page.page.wait_for_function("!document.querySelector('#dlq-table #dlq-messages').dataset.before")
    except Exception as e:
        shown = page.page.inner_html("#dlq-result")
        raise AssertionError(f"{e}; #dlq-result holds {shown!r}; {page.errors}; {page.requests[-12:]}") from None
    said = page.page.inner_text("#dlq-result")
    assert said.startswith("resent 1 message(s)"), said
    assert page.page.locator("#dlq-messages").count() == 1
    page.page.evaluate("document.querySelector('#dlq-result').innerHTML = ''")
    rows.nth(1).locator("input[type=checkbox]").check()
    rows.nth(2).locator("input[type=checkbox]").check()
    page.page.click("#resend-selected")
    said = page.page.wait_for_selector("#dlq-result .result").inner_text()
    assert said.startswith("resent 2 message(s)"), said
    # the CLI finds a resent copy on the original topic beside the first send; the client
    # library (what the CLI runs) the other two (one CLI process is enough: each costs ~1 s)
    found = cli("admin", "queryMsgByKey", "-n", ns, "-t", "ConsoleDead", "-k", "dead0", "--json")
    assert found.returncode == 0, found.stderr.decode()
    copies = [json.loads(line) for line in found.stdout.decode().splitlines()]
    assert len(copies) == 2, copies  # the first send and the resend

    async def by_key() -> dict[str, int]:
        async with Admin(ns) as admin:
            return {key: len(await admin.query_by_key("ConsoleDead", key)) for key in ("dead1", "dead2")}

    assert trio.run(by_key) == {"dead1": 2, "dead2": 2}

    with page.page.expect_download() as download:
        page.page.click("#export-all")
    lines = [json.loads(line) for line in Path(download.value.path()).read_text(encoding="utf-8").splitlines()]
    assert sorted(m["msg_id"] for m in lines) == sorted(dlq_ids)
    assert {m["body"] for m in lines} == {"dead 0", "dead 1", "dead 2"}
    assert all(m["properties"]["RETRY_TOPIC"] == "ConsoleDead" for m in lines)

    # the first message's life names its DLQ copy
    page.goto(f"/message/{dead[0]}")
    copies = page.page.inner_text("#copies")
    assert "DLQ of ConsoleDeadGroup" in copies and lines[0]["msg_id"] in {m["msg_id"] for m in lines}, copies
    assert any(m["msg_id"] in copies for m in lines), copies
    page.page.locator("#life").scroll_into_view_if_needed()
    page.screenshot("message-life")


def test_dashboard_draws_tps_per_broker_and_topic_live(page, cluster):
    async def send() -> None:
        async with Producer(cluster["namesrv"]) as producer:
            for i in range(20):
                await producer.send("ConsoleBusy", f"m{i}")

    trio.run(send)
    page.goto("/")  # the landing page, as rocketmq-dashboard's
    assert page.page.url.endswith("/dashboard")
    page.page.wait_for_selector("#now-topics td:text-is('ConsoleBusy')", timeout=15_000)
    page.page.wait_for_selector("#chart-put .u-legend :text('broker-a/0')")
    assert page.page.locator("#chart-put canvas").count() == 1
    assert page.page.locator("#chart-topics .u-legend :text('ConsoleBusy')").count() == 1
    first = page.page.inner_text("#dashboard-updated")
    page.page.wait_for_function(  # live: a new sample arrives without a reload
        "old => document.querySelector('#dashboard-updated').innerText !== old", arg=first, timeout=10_000)
    page.screenshot("dashboard")


def test_kill_master_then_promote_from_the_cluster_page(browser, cluster):
    """Last in the module: the master stays down."""
    async def send() -> None:  # epoch 1 holds records (an empty one is replaced)
        async with Producer(cluster["namesrv"]) as producer:
            for i in range(3):
                await producer.send("BeforeFailover", f"m{i}")

    trio.run(send)
    page = Page(browser, cluster["url"])
    page.goto("/cluster")
    assert page.page.locator("#brokers tr[data-role='SYNC_MASTER']").count() == 1
    launcher.kill(cluster["base"], "broker-a")  # `tidemq cluster kill broker-a`, without a process's start-up
    page.page.locator("#promote-panel summary").click()
    page.page.fill("#promote-group", "broker-a")
    page.page.fill("#promote-id", "1")
    page.page.once("dialog", lambda d: d.accept())
    t0 = time.monotonic()
    page.page.click("#promote-button")
    said = page.page.wait_for_selector("#cluster-result .result").inner_text()
    assert "is the master of broker-a in epoch 2" in said, said
    # the live table shows the slave serving as master, in the new epoch
    slave = cluster["slave"]
    page.page.wait_for_selector(f"#brokers tr[data-address='{slave}'][data-role='SYNC_MASTER']", timeout=10_000)
    shown_s = time.monotonic() - t0
    assert page.page.locator(f"#brokers tr[data-address='{slave}'] td").nth(4).inner_text() == "2"
    page.screenshot("cluster-after-failover")
    status = cli("cluster", "status", "--base-dir", cluster["base"], "--json")
    nodes = {n["name"]: n for n in json.loads(status.stdout)["nodes"]}
    assert nodes["broker-a-s"]["role"] == "SYNC_MASTER", nodes["broker-a-s"]
    page.goto("/failover")
    epochs = page.page.locator("section[data-group='broker-a'] table.epochs tbody tr")
    assert epochs.count() == 2 and "current" in epochs.nth(1).inner_text(), page.page.inner_text("#failover-groups")
    page.screenshot("failover")
    # the browser logged only the dead master's failed answers, if any; nothing else
    assert all("Failed to load resource" not in e for e in page.errors), page.errors
    page.close()
    assert shown_s < 15, shown_s
