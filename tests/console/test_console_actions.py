"""The console's other pages in a real browser against a real cluster (as
test_console_pages.py): the Topic filter, the Consumer page's reset and settings, the
Message page's searches and a message's detail, the DLQ's resend and export, the live
Dashboard. Each action is confirmed by the CLI where one shows it. In the slow tier (~50 s
on two shared cores): the default tier keeps test_console_pages.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import trio

from cluster.client import Admin, Producer, PullConsumer
from tests.cluster.helpers import cli
from wire.protocol import ConsumerSendBack

pytestmark = [pytest.mark.slow, pytest.mark.sweep]


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

    # the first message's life names its DLQ copy
    page.goto(f"/message/{dead[0]}")
    copies = page.page.inner_text("#copies")
    assert "DLQ of ConsoleDeadGroup" in copies and lines[0]["msg_id"] in {m["msg_id"] for m in lines}, copies
    assert any(m["msg_id"] in copies for m in lines), copies


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
