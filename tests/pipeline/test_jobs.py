"""`tidemq pipeline export | stats | audit` end to end over real store directories, through
the CLI group's handlers (in this process, on the shared Spark session)."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from pipeline.cli import main
from store.message import Message
from tests.store.test_tools import write_store


def msgs(n: int, prefix: str = "m") -> list[Message]:
    return [Message("Orders" if i % 4 else "Audit", f"{prefix}{i}".encode() * 10, queue_id=i % 2,
                    keys=[f"cust-{i % 3}"] if i % 4 else [], tags="t") for i in range(n)]


@pytest.fixture
def store(tmp_path):
    return write_store(tmp_path / "node-a", msgs(40))


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["pipeline", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_export_to_parquet_and_json(spark, store, tmp_path, capsys):
    code, out, err = run(capsys, "export", str(store.root), "--topic", "Orders", "--to", str(tmp_path / "o.parquet"))
    assert code == 0, err
    assert json.loads(out)["rows"] == 30
    assert re.search(r"\[export\] stage \d+: (\d+)/\1 tasks", err), f"each stage's last count is shown: {err!r}"
    back = spark.read.parquet(str(tmp_path / "o.parquet"))
    assert {r["topic"] for r in back.select("topic").collect()} == {"Orders"}
    assert sorted(r["queue_offset"] for r in back.where("queue_id = 1").collect()) == list(range(20))
    code, out, err = run(capsys, "export", str(store.root), "--to", str(tmp_path / "o.json"), "--quiet")
    assert code == 0 and json.loads(out)["rows"] == 40 and err == ""
    code, _, err = run(capsys, "export", str(store.root), "--to", str(tmp_path / "o.parquet"), "--quiet")
    assert code == 1 and "already exists" in err
    code, _, err = run(capsys, "export", str(tmp_path / "missing"), "--to", str(tmp_path / "x"), "--quiet")
    assert code == 2 and "does not exist" in err and "Traceback" not in err


def test_stats_table_json_and_png(spark, store, tmp_path, capsys):
    png = tmp_path / "chart.png"
    code, out, err = run(capsys, "stats", str(store.root), "--json", "--png", str(png), "--bins", "4")
    assert code == 0, err
    result = json.loads(out)
    orders, audit = result["topics"]["Orders"], result["topics"]["Audit"]
    assert (orders["messages"], audit["messages"]) == (30, 10)
    assert orders["bytes"] == sum(r.size for r in store.records if r.msg.topic == "Orders")
    assert sum(orders["histogram"]) == 30 and len(orders["histogram"]) == 4
    assert orders["top_keys"] == [["cust-0", 10], ["cust-1", 10], ["cust-2", 10]]  # ties: by key
    assert audit["top_keys"] == []
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, out, _ = run(capsys, "stats", str(store.root), "--topic", "Audit", "--quiet")
    assert code == 0 and out.splitlines()[1].split()[:2] == ["Audit", "10"]


def test_audit_clean_behind_crc_and_divergence(spark, store, tmp_path, capsys):
    slave = tmp_path / "node-b"
    shutil.copytree(store.root, slave)
    code, out, err = run(capsys, "audit", str(store.root), str(slave), "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["clean"] and result["divergence"]["records"] == 0
    assert all(s["records"] == 40 for s in result["stores"].values())

    behind = write_store(tmp_path / "node-c", msgs(25))  # the same first 25 records only
    code, out, _ = run(capsys, "audit", str(store.root), str(behind.root), "--json", "--quiet")
    assert code == 0, "a slave that is behind has not diverged"

    forked = write_store(tmp_path / "node-d", msgs(20) + msgs(20, prefix="other"))
    code, out, _ = run(capsys, "audit", str(store.root), str(forked.root), "--quiet")
    assert code == 1 and "DIVERGED" in out
    assert f"first at offset {store.records[20].offset}" in out

    victim = store.records[5]
    store.write_at(victim.offset + 95, b"\xee")  # a body byte: the stored CRC no longer matches
    code, out, _ = run(capsys, "audit", str(store.root), "--json", "--quiet")
    result = json.loads(out)
    assert code == 1 and not result["clean"]
    assert result["stores"][str(store.root)]["bad_crc"] == 1
    assert result["problems"][0]["offset"] == victim.offset and "CRC" in result["problems"][0]["problem"]


def test_usage_errors_exit_2(capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        main(["pipeline", "export", str(tmp_path)])  # no --to
    assert e.value.code == 2
    code, _, err = run(capsys, "stats", str(tmp_path), "--bins", "0")
    assert code == 2 and "--bins" in err
