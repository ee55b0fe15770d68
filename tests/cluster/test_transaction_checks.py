"""The transaction check service and the client TransactionProducer against real node
processes (issue 43): an UNKNOWN resolved by a check (COMMIT delivered, ROLLBACK never), no
check after the END, a producer killed between prepare and END whose group's other member
answers, and a half message checked transactionCheckMax times going to
TRANS_CHECK_MAX_TIME_TOPIC, staying there across a restart, and resumed by
`tidemq admin resume-half`. Small intervals keep each test a few seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import attrs
import pytest
import trio

from cluster.client import Admin, TransactionCheck, TransactionProducer
from store.transaction import CHECK_MAX_TIME_TOPIC, HALF_TOPIC
from tests.cluster.helpers import (
    broker_conf,
    cli,
    slave_of,
    start_namesrv,
    wait_for,
    wait_slave_connected,
)
from tests.node.nodeproc import master_conf
from tests.waiting import wait_until
from wire.client import connect
from wire.protocol import GetStatus, ProducerList, Pull

pytestmark = pytest.mark.slow  # starts node processes

REPO = Path(__file__).resolve().parents[2]
FAST = {"transactionCheckInterval": 200, "transactionTimeOut": 300}
"""A round every 0.2 s; a half message is due 0.3 s after its last half record."""
GROUP = "PG-tx"


async def transactions_of(address: str) -> dict:
    async with connect(address) as conn:
        return (await conn.call(GetStatus())).transactions


async def bodies(address: str, topic: str) -> list[bytes]:
    async with connect(address) as conn:
        reply = await conn.call(Pull(topic=topic, queue_id=0, offset=0, max_msgs=32))
        return [m.body for m in reply.messages]


def producer(address: str, checker, **kw) -> TransactionProducer:
    return TransactionProducer(brokers=[address], group=GROUP, checker=checker, check_poll_s=2.0,
                               masters_recheck_s=0.3, **kw)


async def test_unknown_is_resolved_by_checks_and_nothing_is_checked_after_its_end(tmp_path, nodes):
    addr = nodes.start(master_conf(tmp_path, role="ASYNC_MASTER", **FAST)).address
    answers = {b"paid": "COMMIT", b"cancelled": "ROLLBACK", b"pending": "UNKNOWN"}
    checked: Counter[bytes] = Counter()

    async def checker(check: TransactionCheck) -> str:  # async checkers work too
        checked[check.body] += 1
        assert (check.producer_group, check.topic, check.check_times >= 1) == (GROUP, "TxOrders", True)
        return answers[check.body]

    async with producer(addr, checker) as p:
        ended = await p.send_in_transaction("TxOrders", b"ended at once", lambda prepared: "COMMIT", queue_id=0)
        assert (ended.outcome, ended.end.outcome, ended.end_error) == ("COMMIT", "COMMIT", None)
        for body in (b"paid", b"cancelled", b"pending"):
            result = await p.send_in_transaction("TxOrders", body, lambda prepared: "UNKNOWN", queue_id=0)
            assert (result.outcome, result.end.outcome) == ("UNKNOWN", "UNKNOWN")

        async def resolved() -> bool:
            t = await transactions_of(addr)
            return (t["committed"], t["rolled_back"], t["open"]) == (2, 1, 1)

        await wait_until(resolved, what="the checks' COMMIT and ROLLBACK", timeout=10)
        resolved_by = (checked[b"paid"], checked[b"cancelled"])
        assert min(resolved_by) >= 1  # (a second check may go out if an answer is slower than a round)
        assert await bodies(addr, "TxOrders") == [b"ended at once", b"paid"], "the rolled-back one never shows"
        # the still-open one is checked again and again; the ended ones never are
        before = checked[b"pending"]
        await wait_until(lambda: checked[b"pending"] >= before + 2, what="two more checks of the open one")
        assert checked[b"ended at once"] == 0 and (checked[b"paid"], checked[b"cancelled"]) == resolved_by
        t = await transactions_of(addr)
        assert t["checks"] >= before + 2, "the count is on the half records"
        assert t["checks_posted"] >= t["checks"] and t["producers_watching"] == 1  # the mailboxes' counts


_DOOMED = """
import sys, trio
from cluster.client import TransactionProducer

async def main():
    async def checker(check):  # a check that reaches it is never answered: it dies first
        await trio.sleep_forever()

    async with TransactionProducer(brokers=[sys.argv[1]], group=sys.argv[2], checker=checker,
                                   check_poll_s=2.0, masters_recheck_s=0.3) as p:
        async def local_transaction(prepared):
            print(prepared.commitlog_offset, flush=True)
            await trio.sleep_forever()  # killed here, between the prepare and the END
        await p.send_in_transaction("TxCrash", b"survives its producer", local_transaction, queue_id=0)

trio.run(main)
"""


async def test_a_producer_killed_between_prepare_and_end_is_answered_for_by_its_group(tmp_path, nodes):
    addr = nodes.start(master_conf(tmp_path, role="ASYNC_MASTER", **FAST)).address
    doomed = subprocess.Popen([sys.executable, "-c", _DOOMED, addr, GROUP], stdout=subprocess.PIPE, cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        line = await trio.to_thread.run_sync(doomed.stdout.readline)
        assert line.strip().isdigit(), line
        asked: list[TransactionCheck] = []

        def checker(check: TransactionCheck) -> str:
            asked.append(check)
            return "COMMIT"

        async with producer(addr, checker):
            async def both_live() -> bool:
                async with connect(addr) as conn:
                    return len((await conn.call(ProducerList(group=GROUP))).producers) == 2

            await wait_until(both_live, what="both producers of the group registered")
            doomed.kill()
            await trio.to_thread.run_sync(doomed.wait)
            await wait_until(lambda: bodies(addr, "TxCrash"), what="the survivor's COMMIT delivered", timeout=10)
        assert await bodies(addr, "TxCrash") == [b"survives its producer"]
        assert asked and asked[0].origin_offset == int(line), "the survivor was asked about the dead one's half"
    finally:
        doomed.kill()
        doomed.wait()


async def test_check_max_discards_and_the_admin_action_resumes(tmp_path, nodes):
    conf = master_conf(tmp_path, role="ASYNC_MASTER", transactionCheckMax=2, **FAST)
    addr = nodes.start(conf).address
    async with producer(addr, lambda check: "UNKNOWN") as p:
        result = await p.send_in_transaction("TxMax", b"undecided", lambda prepared: "UNKNOWN", queue_id=0)
        origin = result.prepared.commitlog_offset

        async def discarded() -> bool:
            t = await transactions_of(addr)
            return (t["discarded"], t["open"]) == (1, 0)

        await wait_until(discarded, what="the half message discarded after 2 checks", timeout=10)
        await wait_until(lambda: p.checks_answered >= 2, what="both checks answered")
        assert p.checks_answered == 2, "exactly transactionCheckMax checks went out"
    async with connect(addr) as conn:
        [gone] = (await conn.call(Pull(topic=CHECK_MAX_TIME_TOPIC, queue_id=0, offset=0))).messages
    assert (gone.body, gone.properties["TRANSACTION_CHECK_TIMES"], gone.properties["TRAN_HALF_OFFSET"]) == (
        b"undecided", "2", str(origin))
    assert await bodies(addr, HALF_TOPIC) == [b"undecided"] * 3, "the original and one copy per check"

    nodes.started[-1].stop()
    addr = nodes.start(conf).address
    t = await transactions_of(addr)
    assert (t["discarded"], t["open"]) == (1, 0), "the discard is rebuilt from the log"

    listed = await trio.to_thread.run_sync(lambda: cli("admin", "transactions", "--broker", addr))
    assert listed.returncode == 0 and "0 open, 1 discarded" in listed.stdout.decode(), listed.stderr.decode()
    other = await trio.to_thread.run_sync(lambda: cli("admin", "transactions", "--broker", addr, "-t", "Other",
                                                      "--json"))  # (the listing's rows: tests/node/)
    assert other.returncode == 0 and other.stdout.decode() == ""
    bad = await trio.to_thread.run_sync(lambda: cli("admin", "resume-half", "--broker", addr))
    assert bad.returncode == 2 and "--offset" in bad.stderr.decode()
    none = await trio.to_thread.run_sync(lambda: cli("admin", "resume-half", "--broker", addr, "--offset", "7"))
    assert none.returncode == 1, none.stderr.decode()
    # the producer that commits is there before the resume: a round that found none would count
    # its checks towards transactionCheckMax and discard the half message again
    async with producer(addr, lambda check: "COMMIT"):
        done = await trio.to_thread.run_sync(
            lambda: cli("admin", "resume-half", "--broker", addr, "--offset", str(origin), "--json"))
        assert done.returncode == 0, done.stderr.decode()
        [row] = [json.loads(line) for line in done.stdout.decode().splitlines()]
        assert (row["resumed"], row["not_resumed"]) == ([origin], [])
        t = await transactions_of(addr)
        # open again with its count back at 0, or already past the round that committed it
        assert t["discarded"] == 0 and (t["open"], t["checks"]) in ((1, 0), (1, 1), (0, 0)), t
        await wait_until(lambda: bodies(addr, "TxMax"), what="the resumed transaction committed by a check")
    assert await bodies(addr, "TxMax") == [b"undecided"]
    assert (await transactions_of(addr))["committed"] == 1


async def test_the_check_count_survives_a_promotion_and_ends_go_to_the_current_master(tmp_path, nodes):
    """SYNC_MASTER + slave + name server. Check counts are half records, so the promoted slave
    goes on counting; an END refused by a slave, or sent to a master that died, is retried
    on the group's current master; a check on the new master resolves the rest."""
    ns = start_namesrv(nodes, tmp_path)
    fast = {**FAST, "registerNameServerPeriod": 1000, "haHousekeepingInterval": 2000}
    m_conf = broker_conf(tmp_path, "m", "broker-tx", ns.address, role="SYNC_MASTER", **fast)
    m = nodes.start(m_conf)
    s = nodes.start(slave_of(tmp_path, m_conf, "s", ns.address, **fast))
    await wait_slave_connected(m.address)
    answer = {"now": "UNKNOWN"}
    seen: list[tuple[bytes, int, str]] = []

    def checker(check: TransactionCheck) -> str:
        seen.append((check.body, check.check_times, check.address))
        return answer["now"]

    async with TransactionProducer(namesrv=ns.address, group=GROUP, checker=checker, check_poll_s=2.0,
                                   masters_recheck_s=0.3, retries=6) as p:
        await p.send_in_transaction("TxFail", b"checked", lambda prepared: "UNKNOWN", queue_id=0)
        by_slave = await p.send_prepared("TxFail", b"ended via a slave", GROUP, queue_id=0)
        after_death = await p.send_prepared("TxFail", b"ended after the promotion", GROUP, queue_id=0)
        reply, error = await p.end_prepared(attrs.evolve(by_slave, address=s.address), "COMMIT")
        assert (reply.outcome, error) == ("COMMIT", None), "refused by the slave, taken by the master"
        await wait_until(lambda: [b for b, _, _ in seen].count(b"checked") >= 2, what="two checks on the master")

        counted_on_master = (await transactions_of(m.address))["checks"]
        m.kill()
        async with Admin(namesrv=ns.address) as admin:
            await admin.promote("broker-tx", 1)
        counted = (await transactions_of(s.address))["checks"]
        assert counted >= counted_on_master >= 2, "the counts are replicated half records"
        reply, error = await p.end_prepared(after_death, "ROLLBACK")
        assert (reply.outcome, error) == ("ROLLBACK", None), "sent to the dead master, taken by the promoted one"
        answer["now"] = "COMMIT"
        async def both_committed() -> bool:
            return len(await bodies(s.address, "TxFail")) == 2

        await wait_for(both_committed, what="the check's COMMIT on the promoted master")
    assert await bodies(s.address, "TxFail") == [b"ended via a slave", b"checked"]
    checked = [(times, address) for body, times, address in seen if body == b"checked"]
    times = [t for t, _ in checked]
    assert times[0] == 1 and times == sorted(set(times)), f"one count across both terms: {checked}"
    assert checked[0][1] == m.address and checked[-1][1] == s.address, checked
    t = await transactions_of(s.address)
    assert (t["open"], t["committed"], t["rolled_back"]) == (0, 2, 1)


def test_docs_client_transaction_example_runs_as_written(tmp_path, nodes):
    """docs/client.md's TransactionProducer example, run as a script against a node on the
    port it names rewritten to a free one."""
    text = (REPO / "docs" / "client.md").read_text(encoding="utf-8")
    section = text.split("### Transactions", 1)[1].split("\n## ", 1)[0]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    addr = nodes.start(master_conf(tmp_path, role="ASYNC_MASTER", **FAST)).address
    script = textwrap.dedent(block).replace("127.0.0.1:30911", addr)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr.decode()
    assert "COMMIT" in done.stdout.decode()
