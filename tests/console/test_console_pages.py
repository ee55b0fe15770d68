"""The web console (issue 47) in a real browser against a real cluster: `tidemq cluster up
--console` on a copy of conf/1m-1s-dev (a name server, a SYNC_MASTER and its slave, and the
console, as processes); Debian's chromium driven by Playwright. Each page loads with the
cluster's data and no browser-console error; each change shows up in the cluster as the
CLI reports it; bad input is refused on the page and changes nothing."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import trio

from cluster.client import Admin, Producer, PullConsumer
from cluster.launch import launcher
from cluster.launch.launcher_console import CONSOLE_STATE, console_url
from tests.cluster.helpers import REPO, cli
from tests.console.browser import Page, chromium
from wire.protocol import ConsumerSendBack

pytestmark = pytest.mark.slow  # starts a cluster, the console and a browser

REPO_CONF = REPO / "conf" / "1m-1s-dev"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """`cluster up --console`: the nodes' addresses and the console's URL, which `cluster
    status` prints too; `cluster down` stops the console with the nodes."""
    directory = tmp_path_factory.mktemp("console")
    conf, base = directory / "conf", directory / "data"
    launcher.copy_layout(REPO_CONF, conf)
    try:
        up = cli("cluster", "up", "--conf", str(conf), "--base-dir", str(base), "--console", "--json", timeout=120)
        assert up.returncode == 0, up.stderr.decode()
        doc = json.loads(up.stdout)
        roles = {n["config_role"]: n["address"] for n in doc["nodes"]}
        status = cli("cluster", "status", "--base-dir", str(base))
        assert f"console: {doc['console']}" in status.stdout.decode()
        yield {"namesrv": roles["NAMESRV"], "master": roles["SYNC_MASTER"], "slave": roles["SLAVE"],
               "url": doc["console"].rstrip("/")}
    finally:
        pid = json.loads((base / CONSOLE_STATE).read_text())["pid"] if (base / CONSOLE_STATE).exists() else None
        launcher.down(base, grace_s=5)
    assert console_url(base) is None and (pid is None or not psutil.pid_exists(pid) or
                                          psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


@pytest.fixture
def page(browser, cluster) -> Iterator[Page]:
    p = Page(browser, cluster["url"])
    yield p
    p.close()
    assert p.errors == [], p.errors


def topics_cli(ns: str) -> set[str]:
    done = cli("admin", "topicList", "-n", ns, "--json")
    assert done.returncode == 0, done.stderr.decode()
    return {json.loads(line)["topic"] for line in done.stdout.decode().splitlines()}


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


def test_bad_input_is_refused_on_the_page_and_changes_nothing(page, cluster):
    ns = cluster["namesrv"]
    before = topics_cli(ns)
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
    assert topics_cli(ns) == before

    # an unknown topic's page says so (a 404 the browser logs is expected here, not a fault)
    response = page.page.goto("/topic/NoSuchTopic")
    assert response.status == 404
    assert "does not exist" in page.page.inner_text("#page-error")
    page.errors.clear()


def test_a_change_without_the_csrf_token_is_refused(cluster):
    import httpx

    answer = httpx.post(cluster["url"] + "/topic", data={"topic": "CsrfProbe"}, timeout=10)
    assert answer.status_code == 403
    assert "CsrfProbe" not in topics_cli(cluster["namesrv"])


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
    # the CLI sets the same retry limit again and prints the settings as stored: consumption off
    stored = cli("admin", "updateSubGroup", "-n", ns, "-g", "ConsoleGroup", "-r", "3", "--json")
    assert stored.returncode == 0, stored.stderr.decode()
    assert '"consume_enable":false' in stored.stdout.decode().replace(" ", ""), stored.stdout


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
    _dead_letters(ns, "ConsoleDead", "ConsoleDeadGroup", 3)
    page.goto("/dlq")
    assert page.page.locator("#dlqs tr[data-group='ConsoleDeadGroup'] td.num").inner_text() == "3"
    page.goto("/dlq/ConsoleDeadGroup")
    rows = page.page.locator("#dlq-messages tr[data-msgid]")
    assert rows.count() == 3
    page.screenshot("dlq")
    dlq_ids = [rows.nth(i).get_attribute("data-msgid") for i in range(3)]

    rows.nth(0).locator("button.resend-one").click()
    try:
        said = page.page.wait_for_selector("#dlq-result .result").inner_text()
    except Exception:
        raise AssertionError(page.requests[-10:]) from None
    assert said.startswith("resent 1 message(s)"), said
    page.page.evaluate("document.querySelector('#dlq-result').innerHTML = ''")
    rows.nth(1).locator("input[type=checkbox]").check()
    rows.nth(2).locator("input[type=checkbox]").check()
    page.page.click("#resend-selected")
    said = page.page.wait_for_selector("#dlq-result .result").inner_text()
    assert said.startswith("resent 2 message(s)"), said
    # the CLI finds the resent copies on the original topic, each naming its first message
    for key in ("dead0", "dead1", "dead2"):
        found = cli("admin", "queryMsgByKey", "-n", ns, "-t", "ConsoleDead", "-k", key, "--json")
        assert found.returncode == 0, found.stderr.decode()
        copies = [json.loads(line) for line in found.stdout.decode().splitlines()]
        assert len(copies) == 2, copies  # the first send and the resend

    with page.page.expect_download() as download:
        page.page.click("#export-all")
    lines = [json.loads(line) for line in Path(download.value.path()).read_text(encoding="utf-8").splitlines()]
    assert sorted(m["msg_id"] for m in lines) == sorted(dlq_ids)
    assert {m["body"] for m in lines} == {"dead 0", "dead 1", "dead 2"}
    assert all(m["properties"]["RETRY_TOPIC"] == "ConsoleDead" for m in lines)


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
