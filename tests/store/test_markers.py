"""store/markers.py: the lock excludes a second opener (also in this process) until
released, and the abort file tells a crash from a clean exit."""

from __future__ import annotations

import subprocess
import sys

import pytest

from store.markers import AbortFile, StoreLock, StoreLockedError


def test_lock_excludes_a_second_opener_until_released(tmp_path):
    first = StoreLock(str(tmp_path))
    first.acquire()
    try:
        assert (tmp_path / "lock").read_bytes() == b"lock"
        with pytest.raises(StoreLockedError, match="already open in this process"):
            StoreLock(str(tmp_path)).acquire()
        probe = (
            "import sys; from store.markers import StoreLock, StoreLockedError\n"
            "try:\n    StoreLock(sys.argv[1]).acquire()\nexcept StoreLockedError as e:\n"
            "    print(e); sys.exit(3)\n"
        )
        other = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True)
        assert other.returncode == 3, other.stderr
        assert "locked by another process" in other.stdout
    finally:
        first.release()
    again = StoreLock(str(tmp_path))
    again.acquire()  # released: the root can be opened again
    again.release()


def test_abort_file_marks_an_unclean_exit(tmp_path):
    abort = AbortFile(str(tmp_path / "abort"))
    assert not abort.exists()
    abort.create()
    assert abort.exists() and (tmp_path / "abort").read_bytes() == b""
    abort.remove()
    assert not abort.exists()
    abort.remove()  # removing twice is not an error (a second shutdown)
