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
    return subprocess.run([sys.executable, "-m", "tidemq", "store", *args], capture_output=True, text=True, timeout=60)


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


async def _write(root, slots: int, entries: int, topic: str = "Q", n: int = 12) -> str:
    config = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=4096,
                         mapped_file_size_consume_queue=8 * 20, max_hash_slot_num=slots, max_index_num=entries)
    async with open_store(config) as store:
        for i in range(n):
            assert (await store.put_message(Message(topic, f"{root.name}-{i}".encode(), queue_id=0,
                                                    keys=[f"k{i}"]))).ok
    return str(root)


async def test_query_works_out_the_index_geometry_from_the_file(tmp_path):
    root = await _write(tmp_path / "ratio", 25, 100)  # RocketMQ's 1:4 slots to entries
    out = cli("query", root, "--topic", "Q", "--key", "k7")
    assert out.returncode == 0, out.stderr
    assert [json.loads(line)["keys"] for line in out.stdout.splitlines()] == [["k7"]]


async def test_query_takes_the_geometry_from_broker_properties_beside_the_store(store_dir, tmp_path):
    config_dir = tmp_path / "s" / "config"
    config_dir.mkdir(exist_ok=True)
    (config_dir / "broker.properties").write_text("# by the node\nmaxHashSlotNum=31\nmaxIndexNum=50\n")
    out = cli("query", store_dir, "--topic", "Q", "--key", "key17")
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == 1


async def test_a_cluster_base_dir_walks_every_node_store(tmp_path, capsys):
    from tidemq.cli import main

    def run(*args: str) -> tuple[int, list[dict], str]:
        code = main(["store", *args])
        out = capsys.readouterr()
        return code, [json.loads(line) for line in out.out.splitlines()], out.err

    base = tmp_path / "data"
    await _write(base / "store" / "broker-a", 25, 100, n=5)
    await _write(base / "store" / "broker-b", 25, 100, n=7)
    code, summaries, err = run("verify", str(base))
    assert code == 0, err
    assert {s["store"]: s["messages"] for s in summaries} == {"broker-a": 5, "broker-b": 7}
    _, dump, _ = run("dump", str(base), "--limit", "2")
    assert [d["store"] for d in dump] == ["broker-a", "broker-a", "broker-b", "broker-b"]
    _, found, _ = run("query", str(base), "--topic", "Q", "--key", "k6")
    assert [(f["store"], base64.b64decode(f["body"])) for f in found] == [("broker-b", b"broker-b-6")]
    assert run("verify", str(base / "store"))[0] == 0  # a directory of stores works too

    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run("verify", str(empty))
    assert code == 2 and "<base-dir>/store/<node>" in err and "data/store/broker-a" in err


async def test_verify_and_dump_report_progress_per_segment(tmp_path):
    from store import tools

    root = await _write(tmp_path / "p", 25, 100, n=60)  # 4 KiB segments: several
    calls: list[tuple[int, int]] = []
    tools.verify(root, progress=lambda done, total: calls.append((done, total)))
    total = calls[-1][1]
    assert total >= 2 and calls[-1] == (total, total) and [c[0] for c in calls] == list(range(total + 1))
    seen: list[tuple[int, int]] = []
    assert len(list(tools.dump(root, progress=lambda d, t: seen.append((d, t))))) > 60
    assert seen[-1] == (total, total)


async def test_verify_on_a_terminal_shows_a_progress_bar_and_keeps_stdout_clean(tmp_path):
    import os
    import pty

    root = await _write(tmp_path / "tty", 25, 100, n=60)
    master, slave = pty.openpty()
    try:
        p = subprocess.run([sys.executable, "-m", "tidemq", "store", "verify", root], stdout=subprocess.PIPE,
                           stderr=slave, text=True, timeout=60, env={**os.environ, "COLUMNS": "100"})
        os.close(slave)
        shown = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the writer side is closed and drained
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(master)
    assert p.returncode == 0 and json.loads(p.stdout)["clean"] is True
    assert b"verify tty" in shown and b"segments" in shown, shown[-500:]
    assert "\x1b" not in p.stdout, "the bar goes to the terminal on stderr, never into the JSON"
