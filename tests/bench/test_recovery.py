"""`scripts/bench recovery` runs end to end on a small store (the figures themselves are the
benchmark's; no timing is asserted): a killed store recovers abnormally with every record,
verify walks it clean, and the segments cost their data, not their size."""

from __future__ import annotations

import json

import pytest

from bench.recovery import parse_size
from scripts import bench_recovery


def test_sizes_parse_in_binary_units():
    assert parse_size("3KiB") == parse_size("3KB") == 3072
    assert parse_size("64MiB") == 64 << 20 and parse_size("1GiB") == 1 << 30
    assert parse_size("4096") == 4096
    with pytest.raises(ValueError):
        parse_size("lots")


@pytest.mark.slow  # writer and reader processes
def test_the_benchmark_prints_one_row_per_store(capsys, tmp_path):
    assert bench_recovery.main(["--data", "3KiB,300KiB", "--segment", "16MiB", "--dir", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["benchmark"] == "recovery"
    rows = out["rows"]
    assert [(r["data_bytes"], r["segments_allocated_before_kill"]) for r in rows] == [
        (3072, False), (3072, True), (300 * 1024, False)]
    for r in rows:
        assert r["recovery"] == "abnormal" and r["recovered_all"] and r["verify_clean"]
        assert r["commitlog_bytes"] >= r["data_bytes"]
        assert r["verify_messages"] == r["messages"]
        assert r["recovery_cold_seconds"] > 0 and r["verify_cold_seconds"] > 0
        # the killed store kept the allocator's pre-created segment; recovery cut it
        assert r["after_kill"]["commitlog_segments"] == 2
        assert r["after_recovery"]["commitlog_segments"] == 1
    sparse, allocated = rows[0], rows[1]
    assert max(sparse["after_kill"]["commitlog_segment_disk_bytes"]) < (16 << 20) // 8
    assert min(allocated["after_kill"]["commitlog_segment_disk_bytes"]) >= 16 << 20
    assert max(allocated["after_recovery"]["commitlog_segment_disk_bytes"]) < (16 << 20) // 8
    assert "met" in out["aim"]
