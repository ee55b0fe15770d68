"""MessageStore.attach_replicator / add_append_listener: the one way the HA service hooks
into the store. A SYNC_MASTER put waits on the attached replicator only."""

from __future__ import annotations

import pytest

from store import BrokerRole, Message, PutMessageStatus, StoreConfig, open_store


class AckAll:
    """A replicator whose slave has acked everything: puts wait for it and get PUT_OK."""

    def __init__(self) -> None:
        self.waited: list[int] = []

    def is_slave_ok(self, master_put_where: int) -> bool:
        return True

    async def wait_for_slave(self, next_offset: int, timeout_s: float) -> bool:
        self.waited.append(next_offset)
        return True


async def test_attach_detach_and_append_listeners(tmp_path):
    config = StoreConfig(store_path_root_dir=str(tmp_path), broker_role=BrokerRole.SYNC_MASTER,
                         mapped_file_size_commit_log=64 * 1024)
    async with open_store(config) as store:
        r = await store.put_message(Message("T", b"x"))
        assert r.status is PutMessageStatus.SLAVE_NOT_AVAILABLE  # nothing attached
        replicator, other = AckAll(), AckAll()
        store.attach_replicator(replicator)
        store.attach_replicator(replicator)  # the same one again: fine
        with pytest.raises(RuntimeError, match="another replicator"):
            store.attach_replicator(other)
        appends: list[int] = []

        def listener() -> None:
            appends.append(store.get_max_phy_offset())

        store.add_append_listener(listener)
        r = await store.put_message(Message("T", b"y"))
        assert r.status is PutMessageStatus.PUT_OK
        assert replicator.waited == [r.append.end_offset] == appends
        store.remove_append_listener(listener)
        store.detach_replicator(other)  # not attached: no-op
        assert store.replicator is replicator
        store.detach_replicator(replicator)
        assert store.replicator is None
        r = await store.put_message(Message("T", b"z"))
        assert r.status is PutMessageStatus.SLAVE_NOT_AVAILABLE
        assert len(appends) == 1  # the removed listener heard nothing more
        with pytest.raises(AttributeError):
            store.replicator = other  # one owner: only attach_replicator sets it
