"""The class-data-sharing archive of local sessions (pipeline.spark_cds): which JVM options a
session gets, and that a JVM given an archive it cannot use starts anyway (the real `java`)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from pipeline import spark_cds


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(spark_cds.ENV, raising=False)
    return tmp_path


def test_an_archive_found_is_used(cache):
    path = spark_cds.archive_path()
    assert path.is_relative_to(cache / "tidemq" / "spark-cds")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    options = spark_cds.java_options()
    assert f"-XX:SharedArchiveFile={path}" in options and "-Xshare:auto" in options


def test_turned_off_it_adds_nothing_and_builds_nothing(cache, monkeypatch):
    monkeypatch.setenv(spark_cds.ENV, "0")
    assert spark_cds.java_options() == ""
    assert not (cache / "tidemq").exists()


def test_a_build_under_way_is_not_started_twice(cache, monkeypatch):
    """A live builder's lock (its pid) means no second build; none is started here."""
    import os

    path = spark_cds.archive_path()
    path.parent.mkdir(parents=True)
    path.with_suffix(".building").write_text(str(os.getpid()))
    started = []
    monkeypatch.setattr(spark_cds.subprocess, "run", lambda *a, **k: started.append(a))
    assert spark_cds.java_options() == "" and started == []


def test_a_builder_killed_mid_dump_leaves_nothing_behind(cache):
    """Its temporary archive (named for its pid) is removed by the next builder; a live
    builder's is kept."""
    import os

    from pipeline.spark_cds_build import remove_stale

    path = spark_cds.archive_path()
    path.parent.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale, live = path.with_name(f"{path.name}.{dead.pid}.tmp"), path.with_name(f"{path.name}.{os.getpid()}.tmp")
    stale.write_bytes(b"half")
    live.write_bytes(b"half")
    remove_stale(path)
    assert not stale.exists() and live.exists()


def test_only_the_newest_archives_are_kept(cache):
    """Each Java and PySpark installation gets its own archive (~180 MB): building one more
    removes the oldest beyond four."""
    import os

    from pipeline.spark_cds_build import remove_old

    path = spark_cds.archive_path()
    path.parent.mkdir(parents=True)
    made = []
    for i in range(6):
        p = path.parent / f"spark-4.0.0-{i:016x}.jsa"
        p.write_bytes(b"a")
        os.utime(p, (1_700_000_000 + i, 1_700_000_000 + i))
        made.append(p)
    remove_old(made[-1])
    assert [p.exists() for p in made] == [False, False, True, True, True, True]


@pytest.mark.slow  # a JVM
@pytest.mark.skipif(shutil.which("java") is None, reason="needs a JVM")
def test_a_jvm_ignores_an_archive_it_cannot_use(tmp_path):
    """Another Java's archive, or a damaged one: the JVM starts without it, silently."""
    bad = tmp_path / "bad.jsa"
    bad.write_bytes(b"\0" * 4096)
    out = subprocess.run(["java", *f"-XX:SharedArchiveFile={bad} -Xshare:auto {spark_cds.QUIET}".split(),
                          "-version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "cds" not in (out.stdout + out.stderr).lower()
