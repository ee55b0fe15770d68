"""`register(spark)` checks that Spark's Python workers can load the data source (issue 27:
a session whose workers run another Python failed at the first read with `No module named
'pipeline'` inside a JVM traceback)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipeline import WorkerPythonError, check_worker_python, register, worker_python


@pytest.mark.slow  # a venv and its Python
def test_a_worker_python_without_the_data_source_is_named_with_the_fix(tmp_path) -> None:
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    python = str(bare / "bin" / "python")
    with pytest.raises(WorkerPythonError) as e:
        check_worker_python(python)
    text = str(e.value)
    assert f"Spark runs this session's Python data sources with {python!r}" in text
    assert "No module named 'pyarrow'" in text and f"set PYSPARK_PYTHON={sys.executable}" in text
    with pytest.raises(WorkerPythonError, match="No such file"):
        check_worker_python(str(tmp_path / "no-python"))
    check_worker_python(sys.executable)  # this interpreter has both: no probe, no error


def test_the_local_session_runs_its_workers_on_this_python(spark) -> None:
    assert worker_python(spark) == sys.executable
    register(spark)  # again: the check passes (it raised for a bare venv above)


def test_a_local_session_whose_python_lacks_tidemq_reads_through_this_one(spark, tmp_path) -> None:
    """The usual venv case: the session's pythonExec is a Python without tidemq (here a
    bare venv; `spark.pyspark.python` would not change it). register() gives the data
    source this interpreter, a read works, and the session's own pythonExec is untouched."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    sc = spark.sparkContext
    before = sc.pythonExec
    sc.pythonExec = str(bare / "bin" / "python")
    try:
        register(spark)
        assert sc.pythonExec == str(bare / "bin" / "python")
        store = tmp_path / "store"
        (store / "commitlog").mkdir(parents=True)
        assert spark.read.format("tidemq").load(str(store)).count() == 0  # planned and read by this Python
    finally:
        sc.pythonExec = before
        register(spark)
