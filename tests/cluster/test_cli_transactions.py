"""`tidemq send --transaction commit|rollback|unknown` against a real node process: what it
prints, what a consumer of the topic then reads, and the node's transaction state in
`tidemq status --json`, also after the node restarts."""

from __future__ import annotations

import json

import pytest
import trio

from store.transaction import HALF_TOPIC, OP_HALF_TOPIC
from tests.cluster.helpers import cli
from tests.node.nodeproc import master_conf, slave_conf, store_root
from tests.waiting import wait_until
from wire.client import connect
from wire.protocol import GetStatus, Pull

pytestmark = pytest.mark.slow  # starts a node and `tidemq` processes


def lines(result) -> list[dict]:
    assert result.returncode == 0, result.stderr.decode()
    return [json.loads(line) for line in result.stdout.decode().splitlines()]


def transactions_of(address: str) -> dict:
    [broker] = lines(cli("status", "--broker", address, "--json"))[0]["brokers"]
    return broker["status"]["transactions"]


def test_send_transaction_commit_rollback_unknown_by_hand(tmp_path, nodes):
    conf = master_conf(tmp_path, role="ASYNC_MASTER")
    addr = nodes.start(conf).address
    send = ("send", "--broker", addr, "--topic", "TxCli", "--queue-id", "0", "--group", "PG-cli")
    [committed] = lines(cli(*send, "--transaction", "commit", "paid order"))
    assert committed["status"] == "PUT_OK" and committed["queue_id"] == 0
    tx = committed["transaction"]
    assert (tx["status"], tx["outcome"], tx["duplicate"], tx["topic"], tx["queue_id"], tx["queue_offset"]) == (
        "PUT_OK", "COMMIT", False, "TxCli", 0, 0)
    [rolled] = lines(cli(*send, "--transaction", "rollback", "cancelled order"))
    assert rolled["transaction"]["outcome"] == "ROLLBACK" and rolled["transaction"]["msg_id"] is None
    [unknown] = lines(cli(*send, "--transaction", "unknown", "--count", "1", "pending order"))
    assert unknown["transaction"]["outcome"] == "UNKNOWN"

    seen = lines(cli("consume", "--broker", addr, "--topic", "TxCli", "--group", "G", "--timeout-ms", "500"))
    assert [m["body"] for m in seen] == ["paid order"]
    assert seen[0]["msg_id"] == tx["msg_id"]
    state = transactions_of(addr)
    assert (state["open"], state["open_by_topic"], state["committed"], state["rolled_back"]) == (
        1, {"TxCli": 1}, 1, 1)

    assert "--transaction and --delay-level do not go together" in cli(
        *send, "--transaction", "commit", "--delay-level", "2", "x").stderr.decode()
    forged = cli("send", "--broker", addr, "--topic", "RMQ_SYS_TRANS_HALF_TOPIC", "forged")
    assert forged.returncode == 1 and "is forbidden: only the broker writes it" in forged.stderr.decode()

    nodes.started[-1].stop()
    addr = nodes.start(conf).address
    after = transactions_of(addr)
    assert (after["open"], after["committed"], after["rolled_back"]) == (1, 1, 1), "rebuilt from the log"
    seen = lines(cli("consume", "--broker", addr, "--topic", "TxCli", "--group", "G2", "--timeout-ms", "500"))
    assert [m["body"] for m in seen] == ["paid order"]
    nodes.started[-1].stop()
    [verified] = lines(cli("store", "verify", str(store_root(conf))))
    assert verified["clean"], verified  # the half and op topics are ordinary records on disk



async def test_a_sync_master_commit_is_on_the_slave_when_it_answers_put_ok(tmp_path, nodes):
    """The half, committed and op records replicate like any record: in SYNC_MASTER the END's
    PUT_OK comes after the slave acknowledged them, and the slave serves the committed message
    (and only it) on the real topic."""
    mconf = master_conf(tmp_path, role="SYNC_MASTER")
    master = nodes.start(mconf).address
    slave = nodes.start(slave_conf(tmp_path, mconf)).address
    async with connect(master) as to_master, connect(slave) as to_slave:
        async def slave_acked() -> bool:
            ha = (await to_master.call(GetStatus())).ha
            return bool(ha.slaves) and ha.slaves[0].ack_offset >= 0

        await wait_until(slave_acked, what="the slave's first ack")
        send = ("send", "--broker", master, "--topic", "TxSync", "--queue-id", "0", "--group", "PG-sync")
        [committed] = lines(await trio.to_thread.run_sync(lambda: cli(*send, "--transaction", "commit", "replicated")))
        assert (committed["status"], committed["transaction"]["status"]) == ("PUT_OK", "PUT_OK")
        [rolled] = lines(await trio.to_thread.run_sync(lambda: cli(*send, "--transaction", "rollback", "never")))
        assert rolled["transaction"]["outcome"] == "ROLLBACK"

        async def on_slave(topic: str) -> list[bytes]:
            reply = await to_slave.call(Pull(topic=topic, queue_id=0, offset=0, max_msgs=10))
            return [m.body for m in reply.messages]

        async def slave_holds(topic: str, bodies: list[bytes]) -> bool:
            return await on_slave(topic) == bodies

        await wait_until(lambda: slave_holds("TxSync", [b"replicated"]), what="the committed message on the slave")
        await wait_until(lambda: slave_holds(OP_HALF_TOPIC, [b"0", b"1"]), what="both op records on the slave")
        assert await on_slave(HALF_TOPIC) == [b"replicated", b"never"]
        assert await on_slave("TxSync") == [b"replicated"], "the rolled-back one never shows"
