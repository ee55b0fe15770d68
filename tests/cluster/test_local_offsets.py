"""A broadcasting member's offsets file (cluster/client/local_offsets.py) on real files:
round trip, the backup after a crash between the renames, corrupt files named, one
process per client id and group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.client.local_offsets import LocalOffsetStore, OffsetFileError
from cluster.client.routing import MessageQueue

Q0 = MessageQueue("Prices", "broker-a", 0)
Q1 = MessageQueue("Prices", "broker-b", 3)


def test_offsets_survive_a_reopen_in_rocketmqs_layout(tmp_path: Path):
    store = LocalOffsetStore("10.0.0.1@web-1", "cache", tmp_path)
    store.open()
    assert store.get(Q0) is None and store.path == tmp_path / "10.0.0.1@web-1" / "cache" / "offsets.json"
    store.update(Q0, 12)
    store.update(Q1, 7)
    assert store.save() is True and store.save() is False  # nothing changed since
    store.update(Q0, 13)
    store.close()
    table = json.loads(store.path.read_text())["offsetTable"]
    assert {"topic": "Prices", "brokerName": "broker-a", "queueId": 0, "offset": 13} in table
    assert json.loads(store.backup.read_text())["offsetTable"][0]["offset"] == 12  # the previous save
    again = LocalOffsetStore("10.0.0.1@web-1", "cache", tmp_path)
    again.open()
    assert again.offsets == {Q0: 13, Q1: 7}
    again.close()
    other = LocalOffsetStore("10.0.0.1@web-2", "cache", tmp_path)  # another client id: its own file
    other.open()
    assert other.offsets == {}
    other.close()


def test_only_the_backup_after_a_crash_between_the_renames(tmp_path: Path):
    store = LocalOffsetStore("c1", "g", tmp_path)
    store.open()
    store.update(Q0, 5)
    store.save()
    store.update(Q0, 9)
    store.close()
    os.replace(store.path, store.backup)  # what a crash after the first rename leaves
    again = LocalOffsetStore("c1", "g", tmp_path)
    again.open()
    assert again.get(Q0) == 9
    again.close()


@pytest.mark.parametrize("content", [b"{not json", b'{"offsetTable": 3}', b'{"offsetTable": [{"topic": "T"}]}',
                                     b'{"offsetTable": [{"topic": "T", "brokerName": "b", "queueId": 0, '
                                     b'"offset": -1}]}'])
def test_a_corrupt_file_is_an_error_naming_it_and_its_backup(tmp_path: Path, content: bytes):
    store = LocalOffsetStore("c1", "g", tmp_path)
    store.open()
    store.update(Q0, 5)
    store.save()
    store.update(Q0, 6)
    store.close()  # offsets.json says 6, offsets.json.bak 5
    store.path.write_bytes(content)
    again = LocalOffsetStore("c1", "g", tmp_path)
    with pytest.raises(OffsetFileError) as e:
        again.open()
    assert str(store.path) in str(e.value) and str(store.backup) in str(e.value)
    assert store.path.read_bytes() == content, "the bad file is left for the operator"
    store.backup.replace(store.path)  # the operator's fix the message points to
    again.open()  # the lock was let go after the failure
    assert again.get(Q0) == 5
    again.close()


def test_a_second_process_with_the_same_client_id_is_refused(tmp_path: Path):
    store = LocalOffsetStore("c1", "g", tmp_path)
    store.open()
    script = ("import sys; from cluster.client.local_offsets import LocalOffsetStore, OffsetFileError\n"
              "try:\n    LocalOffsetStore('c1', 'g', sys.argv[1]).open()\n"
              "except OffsetFileError as e:\n    print(e); sys.exit(3)\n")
    other = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert other.returncode == 3, other.stderr
    assert "in use by another process" in other.stdout and str(store.path) in other.stdout
    store.close()


def test_odd_client_ids_stay_one_directory(tmp_path: Path):
    store = LocalOffsetStore("../../etc/x", "a/b", tmp_path)
    assert store.directory.parent.parent == tmp_path
    with pytest.raises(ValueError, match="client id is empty"):
        LocalOffsetStore("", "g", tmp_path)
