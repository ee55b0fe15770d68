"""The check service's rounds on the node's ops over a real store (tests/node/test_ops.py's
wiring), a round at a time: at most CHECKS_PER_ROUND half messages a round, oldest first;
CHECK_IMMUNITY_TIME_IN_SECONDS holds the first check back without counting; a check whose
transaction ended in the mailbox is not handed out; the counts and a discard are rebuilt from
the log after a restart. The producer side over real processes: tests/cluster/test_transaction_checks.py."""

from __future__ import annotations

import time

import pytest

from node.ops import transaction_checks
from node.ops.dispatch import handle_request
from node.ops.transaction_checks import check_round
from tests.node.test_ops import serving_ops
from tests.node.test_transactions import GROUP, conf_of, create_topic, end, prepare
from tests.waiting import wait_until
from wire.protocol import Request, TransactionCheckWatch, TransactionList, TransactionResume


def all_due(services) -> bool:
    """Every open half message is past transactionTimeOut (1 ms here)."""
    now = int(time.time() * 1000)
    return all(now - h.last_touch >= 2 for h in services.transactions.open.values())


async def test_a_round_is_bounded_oldest_first_and_counts_in_the_log(tmp_path, monkeypatch):
    monkeypatch.setattr(transaction_checks, "CHECKS_PER_ROUND", 2)
    conf = conf_of(tmp_path, transactionTimeOut=1, transactionCheckMax=2)
    async with serving_ops(conf) as (services, conn):
        await create_topic(conn)
        halves = [await prepare(conn, f"order {i}".encode()) for i in range(3)]
        immune = await prepare(conn, b"order immune", CHECK_IMMUNITY_TIME_IN_SECONDS="3600")
        services.producers.heartbeat(GROUP, "c1", 30_000, "127.0.0.1:1")
        await wait_until(lambda: all_due(services), what="every half message due")

        assert await check_round(services) == 2
        checked = {h.offset: h.check_times for h in services.transactions.open.values()}
        assert checked == {halves[0].commitlog_offset: 1, halves[1].commitlog_offset: 1,
                           halves[2].commitlog_offset: 0, immune.commitlog_offset: 0}, "the two oldest"
        await wait_until(lambda: all_due(services), what="the copies due")
        assert await check_round(services) == 2  # order 2 (never checked, oldest), then order 0
        await end(conn, halves[1], "COMMIT")  # ended with its check in the mailbox
        answer = await conn.call(TransactionCheckWatch(group=GROUP, client_id="c1", timeout_ms=0, max_checks=100))
        assert sorted((c["body"], c["check_times"]) for c in answer.checks) == [
            (b"order 0", 1), (b"order 0", 2), (b"order 2", 1)], "the ended one's check is not handed out"
        assert all(c["origin_offset"] != immune.commitlog_offset for c in answer.checks), "immune for an hour"

        listed = await conn.call(TransactionList())
        assert (listed.open, listed.discarded) == (3, 0)
        assert [(t["offset"], t["topic"], t["queue_id"], t["producer_group"], t["check_times"])
                for t in listed.transactions] == [
            (halves[0].commitlog_offset, "Orders", 1, GROUP, 2), (halves[2].commitlog_offset, "Orders", 1, GROUP, 1),
            (immune.commitlog_offset, "Orders", 1, GROUP, 0)], "oldest first, with their counts"
        assert listed.transactions[2]["next_check_in_ms"] > 3_000_000  # immune for an hour
        assert (await conn.call(TransactionList(topic="Other"))).transactions == []
        assert len((await conn.call(TransactionList(limit=1))).transactions) == 1
        await wait_until(lambda: all_due(services), what="the copies due")
        await check_round(services)  # order 0 (2 checks: discarded), order 2 (second check)
        state = services.transactions.status()
        assert (state["open"], state["discarded"], state["checks"]) == (2, 1, 2)

    async with serving_ops(conf) as (services, conn):  # a restart: the table from the log
        state = services.transactions
        state.ensure_loaded(services.store)
        assert {h.offset: h.check_times for h in state.open.values()} == {
            halves[2].commitlog_offset: 2, immune.commitlog_offset: 0}
        assert list(state.discarded) == [halves[0].commitlog_offset]
        resumed = await conn.call(TransactionResume(offsets=[halves[0].commitlog_offset, 5]))
        assert (resumed.resumed, resumed.not_resumed) == ([halves[0].commitlog_offset], [5])
        assert state.open[halves[0].commitlog_offset].check_times == 0 and not state.discarded
        reply = await end(conn, halves[0], "ROLLBACK")  # the original's offsets still end it
        assert reply.outcome == "ROLLBACK" and halves[0].commitlog_offset not in state.open


@pytest.mark.parametrize("live", [False, True])
async def test_without_a_live_producer_a_check_still_counts(tmp_path, live):
    """As RocketMQ: a group gone for good ends on TRANS_CHECK_MAX_TIME_TOPIC rather than being
    checked for ever."""
    async with serving_ops(conf_of(tmp_path, transactionTimeOut=1)) as (services, conn):
        await create_topic(conn)
        await prepare(conn)
        if live:
            services.producers.heartbeat(GROUP, "c1", 30_000, "127.0.0.1:1")
        await wait_until(lambda: all_due(services), what="the half message due")
        assert await check_round(services) == (1 if live else 0)
        assert services.transactions.status()["checks"] == 1
        assert services.checks.no_producer == (0 if live else 1)


async def test_a_check_goes_only_to_a_watcher_whose_account_may_publish_to_its_topic(tmp_path):
    """A check carries the half message's body: with aclEnable (Request.publisher) a watch
    gets only checks of topics its account may publish to, and the others are counted."""
    async with serving_ops(conf_of(tmp_path, transactionTimeOut=1)) as (services, conn):
        await create_topic(conn)
        await prepare(conn)
        services.producers.heartbeat(GROUP, "c1", 30_000, "127.0.0.1:1")
        await wait_until(lambda: all_due(services), what="the half message due")
        assert await check_round(services) == 1
        watch = TransactionCheckWatch(group=GROUP, client_id="c1", timeout_ms=0, max_checks=100)
        denied = await handle_request(services, Request(op="transaction_check_watch", id=1, fields=watch,
                                                        publisher=lambda t: f"lacks PUB on topic {t!r}"), None)
        assert isinstance(denied, dict) and denied["checks"] == [] and services.checks.refused == 1
        await wait_until(lambda: all_due(services), what="the copy due")
        assert await check_round(services) == 1  # a later round checks it again
        allowed = await handle_request(services, Request(op="transaction_check_watch", id=2, fields=watch,
                                                         publisher=lambda _t: None), None)
        assert isinstance(allowed, dict) and [c["body"] for c in allowed["checks"]] == [b"order 1"]
