"""Issue 38: a slave that follows a newly elected master (node/failover/controller.py
`_follow`) takes that master's epoch history only while its HA connection is to it.

Found by the simulation (seed 9100300): slave b, replicating from master c in epoch 3, held
c's record at 63502 that a lacked; a was elected with epoch 4 starting at 63502. b's
controller re-pointed its HA client to a and, seeing `connected` (the cancelled connection
to c had not unwound yet), adopted a's history; its admission then found epoch 4 in both
histories and kept c's record: b diverged byte for byte from its master. Real stores and a
real HA connection here; the new master's `epoch` answer is fed in (no node processes)."""

from __future__ import annotations

from types import SimpleNamespace

import trio

from node.config import load_config
from node.failover.controller import EtcdController
from node.failover.epochs import Cut, admission
from node.failover.promotion import Failover
from store.epoch_file import EpochEntry
from tests.ha.test_replication import caught_up, put_workload, running_master, running_slave
from tests.node.nodeproc import master_conf, slave_conf
from tests.waiting import wait_until
from wire.protocol import EpochReply

NEW_MASTER, NEW_MASTER_HA = "127.0.0.1:1", "127.0.0.1:2"  # the elected node: only its epoch answer is used


def _reply(entries: list[tuple[int, int]], max_offset: int, seg: int) -> EpochReply:
    return EpochReply.from_wire({"epoch": entries[-1][0], "entries": [list(e) for e in entries],
                                 "max_offset": max_offset, "broker_id": 0, "role": "SYNC_MASTER", "fenced": None,
                                 "mapped_file_size_commit_log": seg})


async def test_a_slave_following_a_new_master_keeps_its_history_while_the_old_connection_unwinds(
        tmp_path, monkeypatch) -> None:
    m = master_conf(tmp_path, name="c")
    cfg = load_config(str(slave_conf(tmp_path, m, name="b", controllerMode="etcd", etcdEndpoints="127.0.0.1:3")))
    failover = Failover(cfg)
    controller = EtcdController(cfg, failover, etcd=lambda endpoints, timeout: None)
    async with running_master(tmp_path / "c") as (old_master, ha):
        await put_workload(old_master, 0, 10)
        async with running_slave(tmp_path / "s", ha.port) as (store, client):
            await wait_until(caught_up(old_master, store))
            tail_end = store.get_max_phy_offset()
            failover.term.services = SimpleNamespace(store=store, ha_client=client)
            failover.term.cache.replace([EpochEntry(3, 0)])  # c's history: epoch 3 from 0
            seg = cfg.store.mapped_file_size_commit_log
            new_start = tail_end - 1000  # the elected node lacks c's last bytes
            answer = _reply([(3, 0), (4, new_start)], tail_end + 5000, seg)

            async def ask(address, request):
                return answer

            monkeypatch.setattr(failover, "asker", SimpleNamespace(ask=ask))
            await controller._follow({"epoch": 4, "address": NEW_MASTER, "ha_address": NEW_MASTER_HA,
                                      "role": "SYNC_MASTER"})
            assert client.master_address == NEW_MASTER_HA
            # c's tail is still in the log: the history stays c's, so admission cuts it
            assert failover.term.cache.entries == [EpochEntry(3, 0)]
            decision = admission(answer, address=NEW_MASTER, own=failover.term.cache, newest_seen=4,
                                 max_offset=store.get_max_phy_offset(), segment_size=seg)
            assert decision == Cut(new_start, decision.reason)

            # while the live connection is to the master that started the new epoch (re-elected),
            # its history is taken: the log is that master's
            old = f"127.0.0.1:{ha.port}"
            client.update_master_address(old)
            await wait_until(lambda: client.replicating_from() is not None)
            answer = _reply([(3, 0), (4, tail_end)], tail_end, seg)
            with trio.fail_after(5):
                await controller._follow({"epoch": 4, "address": "127.0.0.1:9", "ha_address": old,
                                          "role": "SYNC_MASTER"})
            assert failover.term.cache.entries == [EpochEntry(3, 0), EpochEntry(4, tail_end)]
