"""`tidemq store dump --topic/--queue` (through the ConsumeQueue) and `tidemq store query`
(through the index), run as a user runs them, against a store written by the engine."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import pytest

from store import Message, StoreConfig, open_store

pytestmark = pytest.mark.slow  # every test here runs the store CLI as a subprocess

GEOMETRY = ["--max-hash-slot-num", "31", "--max-index-num", "50"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "node.cli", "store", *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
async def store_dir(tmp_path):
    config = StoreConfig(store_path_root_dir=str(tmp_path / "s"), mapped_file_size_commit_log=4096,
                         mapped_file_size_consume_queue=8 * 20, max_hash_slot_num=31, max_index_num=50)
    async with open_store(config) as store:
        for i in range(60):
            key = ["Aa", "BB"][i % 2] if i >= 50 else f"key{i}"  # "Aa" and "BB" collide
            r = await store.put_message(Message("Q", f"body{i}".encode(), queue_id=i % 3, keys=[key]))
            assert r.ok
    return str(tmp_path / "s")


async def test_dump_one_queue_in_queue_order(store_dir):
    out = cli("dump", store_dir, "--topic", "Q", "--queue", "1")
    assert out.returncode == 0, out.stderr
    records = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["queueOffset"] for r in records] == list(range(20))
    assert [r["queueId"] for r in records] == [1] * 20
    assert [base64.b64decode(r["body"]) for r in records] == [f"body{i}".encode() for i in range(1, 60, 3)]
    limited = cli("dump", store_dir, "--topic", "Q", "--queue", "1", "--limit", "3")
    assert len(limited.stdout.splitlines()) == 3
    missing = cli("dump", store_dir, "--topic", "Nope", "--queue", "0")
    assert missing.returncode == 2 and "no ConsumeQueue" in missing.stderr


async def test_query_by_key_through_the_index(store_dir):
    out = cli("query", store_dir, "--topic", "Q", "--key", "key17", *GEOMETRY)
    assert out.returncode == 0, out.stderr
    [record] = [json.loads(line) for line in out.stdout.splitlines()]
    assert record["keys"] == ["key17"] and record["queueId"] == 17 % 3
    both = cli("query", store_dir, "--topic", "Q", "--key", "Aa", *GEOMETRY)
    assert {tuple(json.loads(line)["keys"]) for line in both.stdout.splitlines()} == {("Aa",)}
    assert len(both.stdout.splitlines()) == 5  # the colliding "BB" records are filtered out
    none = cli("query", store_dir, "--topic", "Q", "--key", "absent", *GEOMETRY)
    assert none.returncode == 1 and none.stdout == ""
    wrong = cli("query", store_dir, "--topic", "Q", "--key", "key1")  # default geometry
    assert wrong.returncode == 2 and "--max-hash-slot-num" in wrong.stderr
