"""Recovery after damage: each case comes back to the last valid record, says so in the log,
loses nothing before it, and leaves a store that `verify` calls clean."""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path

import attrs
import pytest

from store import GetMessageStatus, Message, StoreConfig, open_store, runtime
from store.mapped_file import SegmentSizeError
from store.tools import verify

SEGMENT = 8192
TOPIC = "RecoverTopic"


def make_config(root) -> StoreConfig:
    return StoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=SEGMENT,
        mapped_file_size_consume_queue=20 * 50,
        max_hash_slot_num=101,
        max_index_num=300,
    )


def body(i: int) -> bytes:
    return random.Random(i).randbytes(60 + i % 80)


async def write_messages(config: StoreConfig, count: int) -> list[tuple[int, int, str]]:
    """Put `count` messages round-robin over 2 queues; (commitlog_offset, size, msg_id) each."""
    placed = []
    async with open_store(config) as store:
        for i in range(count):
            r = await store.put_message(Message(TOPIC, body(i), queue_id=i % 2, keys=[f"key-{i}"]))
            assert r.ok, r.error
            size = store.look_message_by_offset(r.commitlog_offset).size
            placed.append((r.commitlog_offset, size, r.msg_id))
    return placed


def segment_path(config: StoreConfig, offset: int) -> str:
    start = offset - offset % SEGMENT
    return os.path.join(config.store_path_root_dir, "commitlog", f"{start:020d}")


def patch_file(path: str, pos: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def mark_crashed(config: StoreConfig) -> None:
    open(os.path.join(config.store_path_root_dir, "abort"), "wb").close()


async def check_survivors(config: StoreConfig, placed, survivors: int, end_offset: int) -> None:
    """The first `survivors` messages are intact by queue, key and msgId; nothing after."""
    async with open_store(config) as store:
        assert store.get_max_phy_offset() == end_offset
        for qid in (0, 1):
            expected = [i for i in range(survivors) if i % 2 == qid]
            assert store.get_max_offset_in_queue(TOPIC, qid) == len(expected)
            got = []
            offset = 0
            while offset < len(expected):
                res = store.get_message("g", TOPIC, qid, offset, 32)
                assert res.status is GetMessageStatus.FOUND
                got.extend(res.messages)
                offset = res.next_begin_offset
            assert [m.body for m in got] == [body(i) for i in expected]
            assert [m.queue_offset for m in got] == list(range(len(expected)))
        for i in range(survivors):
            by_key = store.query_message(TOPIC, f"key-{i}", 4)
            assert [m.body for m in by_key] == [body(i)], f"key-{i}"
            assert store.look_message_by_msg_id(placed[i][2]).body == body(i)
        for i in range(survivors, len(placed)):
            assert store.query_message(TOPIC, f"key-{i}", 4) == []
        # writing goes on right after the valid end, queue offsets continue
        r = await store.put_message(Message(TOPIC, b"after", queue_id=survivors % 2, keys=["after"]))
        assert r.ok and r.commitlog_offset == end_offset
        assert r.queue_offset == len([i for i in range(survivors) if i % 2 == survivors % 2])
        assert await store.wait_for_message(TOPIC, survivors % 2, r.queue_offset, timeout=5)
        assert [m.body for m in store.query_message(TOPIC, "after")] == [b"after"]
    summary = verify(config.store_path_root_dir)
    assert summary["clean"], summary["damage"]


@pytest.fixture
def config(tmp_path) -> StoreConfig:
    return make_config(tmp_path / "store")


@pytest.mark.parametrize("crashed", [False, True], ids=["clean-exit", "crash"])
async def test_torn_tail_mid_record(config, caplog, crashed):
    placed = await write_messages(config, 150)
    victim = len(placed) - 5
    offset, size, _ = placed[victim]
    path = segment_path(config, offset)
    pos = offset % SEGMENT
    patch_file(path, pos + size // 2, bytes(SEGMENT - pos - size // 2))  # torn write: tail zeroed
    if crashed:
        mark_crashed(config)
    caplog.set_level(logging.INFO, logger="tidemq.store")
    await check_survivors(config, placed, victim, offset)
    assert f"invalid record at offset {offset}" in caplog.text


async def test_a_recovery_cut_of_bytes_the_log_held_is_made_durable(config, monkeypatch):
    """What a power loss left on the disk (a torn record) is durable already: the zeroed
    tail must be too, or a later power loss brings the torn bytes back over what the next
    term writes there (storage seeds 2756, 7968)."""
    placed = await write_messages(config, 40)
    offset, size, _ = placed[-3]
    path = segment_path(config, offset)
    patch_file(path, offset % SEGMENT + size // 2, bytes(size // 2))  # torn mid-record, data after it
    mark_crashed(config)
    synced: list[str] = []
    real = runtime.fdatasync

    def fdatasync(fd: int, p: str) -> None:
        synced.append(p)
        real(fd, p)

    monkeypatch.setattr(runtime, "fdatasync", fdatasync)
    async with open_store(config) as store:
        assert store.get_max_phy_offset() == offset and store.recovery_dropped
        assert path in synced, synced


@pytest.mark.parametrize("crashed", [False, True], ids=["clean-exit", "crash"])
async def test_tail_torn_inside_the_properties_is_cut(config, caplog, crashed):
    """Every length still adds up and the body CRC passes (it covers only the body): only the
    zeroed last bytes (found by the chaos suite's torn-tail soak, seed 49) show the tear."""
    placed = await write_messages(config, 150)
    offset, size, _ = placed[-1]
    patch_file(segment_path(config, offset), offset % SEGMENT + size - 5, bytes(5))  # in KEYS
    if crashed:
        mark_crashed(config)
    caplog.set_level(logging.INFO, logger="tidemq.store")
    await check_survivors(config, placed, len(placed) - 1, offset)
    assert "zeroed bytes (a torn write)" in caplog.text


async def test_tail_torn_inside_the_topic_of_a_record_without_properties(config, caplog):
    async with open_store(config) as store:
        first = await store.put_message(Message(TOPIC, b"one", keys=["key-0"]))
        last = await store.put_message(Message(TOPIC, b"two"))
        size = store.look_message_by_offset(last.commitlog_offset).size
    assert last.ok and store.look_message_by_offset is not None
    # the topic's last byte and the 2-byte zero properties length
    patch_file(segment_path(config, last.commitlog_offset), last.commitlog_offset % SEGMENT + size - 3,
               bytes(1))
    mark_crashed(config)
    caplog.set_level(logging.INFO, logger="tidemq.store")
    async with open_store(config) as store:
        assert store.get_max_phy_offset() == last.commitlog_offset
        assert store.look_message_by_msg_id(first.msg_id).body == b"one"
    assert "zeroed bytes (a torn write)" in caplog.text


async def test_a_nul_in_a_property_is_refused_so_no_valid_record_looks_torn(config):
    async with open_store(config) as store:
        r = await store.put_message(Message(TOPIC, b"x", properties={"k": "v\x00"}))
        assert r.status.name == "MESSAGE_ILLEGAL" and "NUL" in r.error
        assert store.get_max_phy_offset() == 0


async def test_garbage_after_the_valid_end(config, caplog):
    placed = await write_messages(config, 120)
    last_offset, last_size, _ = placed[-1]
    end = last_offset + last_size
    async with open_store(config) as whole:
        assert not whole.recovery_dropped  # a clean exit at the end of the data
    patch_file(segment_path(config, end), end % SEGMENT, random.Random(7).randbytes(300))
    mark_crashed(config)
    caplog.set_level(logging.INFO, logger="tidemq.store")
    await check_survivors(config, placed, len(placed), end)
    assert f"invalid record at offset {end}" in caplog.text


async def test_zeroed_page_in_the_last_segment(config, caplog):
    placed = await write_messages(config, 150)
    last_start = placed[-1][0] - placed[-1][0] % SEGMENT
    page = last_start + 4096
    assert placed[-1][0] > page, "the last segment must reach past its first page"
    victim = next(i for i, (off, size, _) in enumerate(placed) if off + size > page)
    patch_file(segment_path(config, page), 4096, bytes(4096))
    mark_crashed(config)
    caplog.set_level(logging.INFO, logger="tidemq.store")
    await check_survivors(config, placed, victim, placed[victim][0])
    assert f"invalid record at offset {placed[victim][0]}" in caplog.text


async def test_bit_flip_in_a_body_is_caught_by_the_crc_and_a_slave_cuts_there(config, caplog):
    """A slave refetches from its master what it cuts; a master keeps such a record as damage
    (tests/store/test_corrupt.py)."""
    placed = await write_messages(config, 150)
    victim = len(placed) - 10
    offset, size, _ = placed[victim]
    path = segment_path(config, offset)
    body_pos = offset % SEGMENT + 88 + 3  # inside the body (IPv4 hosts: the body starts at 88)
    with open(path, "r+b") as f:
        f.seek(body_pos)
        byte = f.read(1)[0]
        f.seek(body_pos)
        f.write(bytes([byte ^ 0x10]))
    caplog.set_level(logging.INFO, logger="tidemq.store")
    async with open_store(attrs.evolve(config, broker_role="SLAVE")) as slave:
        assert slave.get_max_phy_offset() == offset  # cut at the damaged record
        assert slave.last_exit_ok and slave.recovery_dropped  # a clean exit, yet the log lost records
        # the damaged record and the good ones after it are named: a rejoin's report and a
        # slave's `last_truncation` say which offsets it must fetch again (storage seed 352)
        cut = slave.recovery_cut
        assert cut is not None and cut.end == offset
        assert cut.dropped_msg_ids == tuple(m for _o, _s, m in placed[victim:])
        assert cut.dropped_to == placed[-1][0] + placed[-1][1]
        # what it refetches may be stored earlier than what it cut: its checkpoint claims
        # nothing until the next flushes, on disk at once (storage seed 1641)
        with open(os.path.join(config.store_path_root_dir, "checkpoint"), "rb") as f:
            assert f.read(24) == bytes(24)
    await check_survivors(config, placed, victim, offset)
    assert "body CRC mismatch" in caplog.text
    async with open_store(attrs.evolve(config, broker_role="SLAVE")) as again:
        assert not again.recovery_dropped  # the cut is made: nothing past the end now


async def test_deleted_checkpoint_loses_nothing(config):
    placed = await write_messages(config, 150)
    os.unlink(os.path.join(config.store_path_root_dir, "checkpoint"))
    mark_crashed(config)
    end = placed[-1][0] + placed[-1][1]
    await check_survivors(config, placed, len(placed), end)


async def test_store_with_only_commitlog_rebuilds_queues_and_index(config):
    placed = await write_messages(config, 130)
    root = config.store_path_root_dir
    for sub in ("consumequeue", "index"):
        for dirpath, _dirs, files in os.walk(os.path.join(root, sub), topdown=False):
            for name in files:
                os.unlink(os.path.join(dirpath, name))
    os.unlink(os.path.join(root, "checkpoint"))
    end = placed[-1][0] + placed[-1][1]
    await check_survivors(config, placed, len(placed), end)


async def test_recovery_is_idempotent(config):
    placed = await write_messages(config, 140)
    offset, size, _ = placed[-3]
    patch_file(segment_path(config, offset), offset % SEGMENT + size // 3, b"\xff" * 50)
    mark_crashed(config)

    def snapshot() -> dict[str, bytes]:
        files = {}
        for sub in ("commitlog", "consumequeue"):
            for dirpath, _dirs, names in os.walk(os.path.join(config.store_path_root_dir, sub)):
                for name in names:
                    path = os.path.join(dirpath, name)
                    files[os.path.relpath(path, config.store_path_root_dir)] = Path(path).read_bytes()
        return files

    async with open_store(config):
        pass
    first = snapshot()
    mark_crashed(config)
    async with open_store(config):
        pass
    assert snapshot() == first


async def test_no_valid_segment_gives_an_empty_store(config):
    await write_messages(config, 10)
    patch_file(segment_path(config, 0), 0, bytes(SEGMENT))
    mark_crashed(config)
    async with open_store(config) as store:
        assert store.get_max_phy_offset() == 0
        assert store.get_max_offset_in_queue(TOPIC, 0) == 0
        res = store.get_message("g", TOPIC, 0, 0, 32)
        assert res.status in (GetMessageStatus.NO_MESSAGE_IN_QUEUE, GetMessageStatus.NO_MATCHED_LOGIC_QUEUE)
        r = await store.put_message(Message(TOPIC, b"fresh"))
        assert r.ok and r.commitlog_offset == 0 and r.queue_offset == 0


async def test_wrong_segment_size_is_an_error_naming_file_and_sizes(config):
    placed = await write_messages(config, 60)
    path = segment_path(config, placed[0][0])
    os.truncate(path, SEGMENT - 100)
    with pytest.raises(SegmentSizeError) as info:
        async with open_store(config):
            pass
    text = str(info.value)
    assert path in text and str(SEGMENT - 100) in text and str(SEGMENT) in text


async def test_a_queue_that_lost_its_files_is_rebuilt_when_the_commit_log_is_cut_too(tmp_path):
    """A power loss can take one ConsumeQueue's files whole and the CommitLog's tail at once
    (chaos/sim seed 12 --storage, after an fsync error): the cut set the empty queue's
    max_physic_offset to the cut point, the dispatch again from the start then skipped every
    record of it, and its queue offsets started over at 0 (each acknowledged twice)."""
    config = StoreConfig(store_path_root_dir=str(tmp_path))
    async with open_store(config) as store:
        ends = []
        for i in range(12):
            r = await store.put_message(Message("T", body(i), queue_id=i % 4))
            ends.append(r.commitlog_offset)
    for name in os.listdir(tmp_path / "consumequeue" / "T" / "0"):
        os.unlink(tmp_path / "consumequeue" / "T" / "0" / name)
    os.unlink(tmp_path / "checkpoint")
    (tmp_path / "abort").touch()
    with open(tmp_path / "commitlog" / "00000000000000000000", "r+b") as f:  # the last record is torn
        f.seek(ends[-1] + 4)
        f.write(b"\0" * 8)
    async with open_store(config) as store:
        assert store.get_max_phy_offset() == ends[-1]
        assert store.get_max_offset_in_queue("T", 0) == 3  # offsets 0, 1, 2 rebuilt
        assert store.get_max_offset_in_queue("T", 3) == 2  # its third record was cut
        r = await store.put_message(Message("T", body(99), queue_id=0))
        assert r.queue_offset == 3


async def test_a_replicated_store_that_lost_its_confirm_offset_shows_only_what_its_queues_indexed(tmp_path):
    """A power loss can take a node's checkpoint, and the confirm offset in it, whole
    (chaos/sim seed 251 --storage): its recovery then dispatched the whole log, an unconfirmed
    tail a consumer read before a slave without it was elected. A node's store (`replicated`)
    now takes what its surviving ConsumeQueues index as the confirm offset known; a lone
    store still dispatches everything it recovers."""
    config = make_config(tmp_path / "store")
    placed = await write_messages(config, 40)
    root = config.store_path_root_dir
    queue1 = os.path.join(root, "consumequeue", TOPIC, "1")
    for name in os.listdir(queue1):
        os.unlink(os.path.join(queue1, name))
    os.unlink(os.path.join(root, "checkpoint"))
    mark_crashed(config)
    indexed = placed[38][0] + placed[38][1]  # queue 0's last record ends there; queue 1's last is past it
    async with open_store(config, replicated=True) as store:
        assert store.replica_log.known_confirm == indexed
        assert store.get_max_offset_in_queue(TOPIC, 0) == 20
        assert store.get_max_offset_in_queue(TOPIC, 1) == 19  # its last record waits for a confirm
        store.replica_log.release_hold()
        store.reput.do_reput()
        assert store.get_max_offset_in_queue(TOPIC, 1) == 20
    os.unlink(os.path.join(root, "checkpoint"))
    mark_crashed(config)
    async with open_store(config) as store:  # a lone store: no confirm offset to keep
        assert store.replica_log.known_confirm is None
        assert store.get_max_offset_in_queue(TOPIC, 1) == 20


async def test_the_confirm_offset_known_is_never_below_what_the_queues_index(tmp_path):
    """A power loss can leave a checkpoint older than the ConsumeQueue pages that survived it,
    and queues that lost theirs: a hold at the old confirm offset left those unbuilt past it,
    and the next start dispatched from the furthest queue's end on, skipping their records
    for good (chaos/sim seed 264 --storage: contiguity breaks). What the queues index was
    visible before: the confirm offset known is raised to it, and every queue is rebuilt."""
    config = make_config(tmp_path / "store")
    placed = await write_messages(config, 40)
    async with open_store(config) as store:
        store.replica_log.note_confirm(placed[10][0])  # an old confirm offset
    root = config.store_path_root_dir
    queue1 = os.path.join(root, "consumequeue", TOPIC, "1")
    for name in os.listdir(queue1):
        os.unlink(os.path.join(queue1, name))
    mark_crashed(config)
    indexed = placed[38][0] + placed[38][1]
    async with open_store(config) as store:
        assert store.replica_log.known_confirm == indexed
        assert store.get_max_offset_in_queue(TOPIC, 0) == 20
        assert store.get_max_offset_in_queue(TOPIC, 1) == 19  # not 5: rebuilt up to what queue 0 indexed


async def test_a_key_query_after_a_crash_names_each_message_once(tmp_path):
    """A crash's recovery indexes again the record at the newest index file's end offset
    (one whose keys straddled two files looks half indexed): the query still returns each
    message once (it returned one of 40 twice)."""
    config = StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=SEGMENT,
                         max_hash_slot_num=16, max_index_num=8)  # a file fills every 4 messages
    async with open_store(config) as store:
        for i in range(40):
            await store.put_message(Message(TOPIC, body(i), keys=[f"k{i}"]))
        store.abandon()  # a SIGKILL: the abort file stays
    async with open_store(config) as store:
        assert [len(store.query_message(TOPIC, f"k{i}")) for i in range(40)] == [1] * 40


async def test_a_store_that_stored_nothing_is_a_store_after_its_directories_were_lost(config):
    """A power loss before the first sync takes the directories' entries; a store opened again
    that stores nothing is still a store to the tools (storage seed 90), as RocketMQ's
    DefaultMessageStore makes its directories when it is built."""
    root = Path(config.store_path_root_dir)
    async with open_store(config):
        pass
    for name in ("commitlog", "consumequeue"):
        os.rmdir(root / name)
    async with open_store(config):
        assert (root / "commitlog").is_dir() and (root / "consumequeue").is_dir()
    report = verify(root)
    assert report["clean"] and report["messages"] == 0
