"""A role change's cut of the log (a rejoining node dropping its divergent tail) that the
disk fails (fdatasync raises EIO, through the store's `runtime.fdatasync` seam, once): the
node stops with the reason, never believing the cut durable, and `tidemq node start` exits 1
saying so; the store then opens, recovers, and the cut is made again. Real files."""

from __future__ import annotations

import errno
import os

import attrs
import pytest

from node.config import BrokerConfig
from node.failover.truncation import CutFailed, cut_log
from store import Message, open_store, runtime
from store.config import BrokerRole
from store.epoch_file import EpochFileCache
from store.message_store import MessageStore

TOPIC = "CutTopic"


async def _put(store: MessageStore, i: int) -> int:
    result = await store.put_message(Message(topic=TOPIC, body=b"m%d" % i))
    assert result.ok and result.append is not None
    return result.append.wrote_offset


async def test_a_cut_the_disk_fails_stops_the_node_and_is_made_again_at_the_restart(tmp_path, monkeypatch):
    cfg = BrokerConfig.from_mapping({"brokerName": "broker-c", "brokerId": 1, "brokerRole": "SLAVE", "haMasterAddress": "127.0.0.2:10912",
                                     "storePathRootDir": str(tmp_path), "mappedFileSizeCommitLog": 64 * 1024})
    async with open_store(attrs.evolve(cfg.store, broker_role=BrokerRole.ASYNC_MASTER)) as store:  # its old term
        offsets = [await _put(store, i)
                   for i in range(20)]
    cut_at = offsets[10]
    real = runtime.fdatasync
    failed: list[str] = []

    def fdatasync(fd: int, path: str) -> None:
        if not failed and f"{os.sep}commitlog{os.sep}" in path:
            failed.append(path)
            raise OSError(errno.EIO, os.strerror(errno.EIO), path)
        real(fd, path)

    monkeypatch.setattr(runtime, "fdatasync", fdatasync)
    cache = EpochFileCache.load(str(tmp_path / "epoch"))
    with pytest.raises(CutFailed, match=rf"cannot cut the CommitLog back to offset {cut_at} to rejoin "
                                        r"\(\[Errno 5\].*the node stops; restart it"):
        cut_log(cfg, cache, cut_at, "test")
    assert failed
    monkeypatch.setattr(runtime, "fdatasync", real)
    report = cut_log(cfg, cache, cut_at, "test")  # the restart finds the divergence and cuts again
    async with open_store(cfg.store) as store:
        assert store.get_max_phy_offset() == cut_at
        assert store.get_max_offset_in_queue(TOPIC, 0) + store.get_max_offset_in_queue(TOPIC, 1) \
            + store.get_max_offset_in_queue(TOPIC, 2) + store.get_max_offset_in_queue(TOPIC, 3) == 10
    assert report is None or report["to_offset"] >= cut_at
