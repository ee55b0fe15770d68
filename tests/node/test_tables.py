"""node.tables.jsonfile / node.tables.topics / node.tables.offsets: atomic files, backups, validation."""

from __future__ import annotations

import json

import pytest

from node.tables.jsonfile import ConfigFileError, read_json, write_json_atomic
from node.tables.offsets import ConsumerOffsetManager, OffsetEntry
from node.tables.topics import TopicConfig, TopicConfigManager


def test_atomic_write_keeps_a_backup_and_reads_fall_back_to_it(tmp_path):
    path = str(tmp_path / "config" / "t.json")
    assert read_json(path) is None
    write_json_atomic(path, {"n": 1})
    write_json_atomic(path, {"n": 2})
    assert read_json(path) == {"n": 2}
    assert json.loads((tmp_path / "config" / "t.json.bak").read_text()) == {"n": 1}
    assert not (tmp_path / "config" / "t.json.tmp").exists()
    (tmp_path / "config" / "t.json").write_text('{"n": ')  # torn
    assert read_json(path) == {"n": 1}
    (tmp_path / "config" / "t.json").unlink()
    assert read_json(path) == {"n": 1}
    (tmp_path / "config" / "t.json.bak").write_text("garbage")
    with pytest.raises(ConfigFileError, match=r"t\.json\.bak"):
        read_json(path)


async def test_topics_persist_and_reload(tmp_path):
    topics = TopicConfigManager(str(tmp_path), auto_create=True, default_queue_nums=3)
    assert await topics.for_send("Auto") == TopicConfig("Auto", 3, 3, 6)
    await topics.create("Made", 2, 1, 4)
    again = TopicConfigManager(str(tmp_path), auto_create=False, default_queue_nums=3)
    again.load()
    assert again.list() == topics.list()
    assert await again.for_send("Unknown") is None
    assert [again.select_queue(again.get("Auto")) for _ in range(4)] == [0, 1, 2, 0]


def test_damaged_topic_entries_name_the_file_and_topic(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "topics.json").write_text('{"T": {"read_queue_nums": 0, "write_queue_nums": 1, "perm": 6}}')
    with pytest.raises(ConfigFileError, match=r"topics\.json: topic 'T': read_queue_nums"):
        TopicConfigManager(str(tmp_path), auto_create=True, default_queue_nums=4).load()


async def test_offsets_persist_only_when_changed(tmp_path):
    offsets = ConsumerOffsetManager(str(tmp_path))
    await offsets.persist()
    assert not (tmp_path / "config" / "consumerOffset.json").exists()  # nothing to write
    offsets.commit("G", "T", 1, 5)
    offsets.commit("G", "T", 0, 7)
    await offsets.persist()
    assert json.loads((tmp_path / "config" / "consumerOffset.json").read_text()) == {
        "offsetTable": {"T@G": {"0": 7, "1": 5}}
    }
    assert not offsets.dirty
    offsets.commit("G", "T", 1, 5)  # same value: not a change
    assert not offsets.dirty
    again = ConsumerOffsetManager(str(tmp_path))
    again.load()
    assert again.entries() == [OffsetEntry("G", "T", 0, 7), OffsetEntry("G", "T", 1, 5)]
    assert again.fetch("G", "T", 1) == 5 and again.fetch("G", "T", 2) is None
    assert again.replace_all([OffsetEntry("H", "T", 0, 1)]) and again.dirty
