"""A slave restarted over a record a flipped bit damaged cuts its log there at recovery and
fetches the rest again from its master; `status` names what the cut dropped
(`last_truncation`), so when the master no longer holds it the operator learns which
offsets are gone (issue 45; storage seed 1521). Real node processes and files."""

from __future__ import annotations

import pytest

from store.msg_id import decode_msg_id
from tests.node.nodeproc import master_conf, slave_conf, store_root
from tests.node.wire import call
from tests.waiting import wait_until

pytestmark = pytest.mark.slow  # starts node processes

TOPIC = "CutReport"
BODY_AT = 88  # IPv4 hosts: a record's body starts 88 bytes into it


async def test_a_slave_names_the_records_its_recovery_cut_and_fetches_them_again(tmp_path, nodes):
    master = nodes.start(master_conf(tmp_path, role="SYNC_MASTER", autoCreateTopicEnable=True))
    slave_path = slave_conf(tmp_path, master.conf)
    slave = nodes.start(slave_path)
    sent = []
    for i in range(8):
        r = await call(master.address, "send", topic=TOPIC, body=b"body %d" % i, queue_id=0)
        assert r["status"] == "PUT_OK", r
        sent.append(r["msg_id"])
    end = (await call(master.address, "status"))["max_phy_offset"]

    async def slave_at_end() -> bool:
        return (await call(slave.address, "status"))["max_phy_offset"] == end

    await wait_until(slave_at_end, timeout=15, what="the slave caught up")
    assert slave.stop() == 0
    damaged = decode_msg_id(sent[5])[1]
    segment = store_root(slave_path) / "commitlog" / f"{0:020d}"
    with open(segment, "r+b") as f:
        f.seek(damaged + BODY_AT + 2)
        byte = f.read(1)[0]
        f.seek(damaged + BODY_AT + 2)
        f.write(bytes([byte ^ 0x20]))

    slave = nodes.start(slave_path)
    status = await call(slave.address, "status")
    cut = status["last_truncation"]
    assert cut is not None, status
    assert (cut["from_offset"], cut["to_offset"]) == (damaged, end)
    assert cut["msg_ids"] == sent[5:] and cut["message_count"] == 3
    assert "recovery cut the log at a damaged or torn record" in cut["reason"]
    await wait_until(slave_at_end, timeout=15, what="the slave fetched the cut records again")
    for msg_id in sent[5:]:
        got = await call(slave.address, "get_by_msg_id", msg_id=msg_id)
        assert got["status"] == "OK", got
