"""Process-level behaviour: the lock file against a second store (same process and another
process), the abort file, and SYNC_FLUSH durability across a real SIGKILL."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import textwrap

import pytest
import trio

from store import FlushDiskType, Message, StoreConfig, StoreLockedError, open_store
from store.mapped_file import SegmentSizeError
from store.running_flags import RunningFlags
from tests.store.crash_writer import SEGMENT, TOPICS, body_for, store_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def config(root, **kw) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=4096, **kw)


def abort_file(root) -> str:
    return os.path.join(str(root), "abort")


# ---- lock file ---------------------------------------------------------------------------


async def test_second_open_in_the_same_process_fails_naming_the_root(tmp_path):
    root = os.path.realpath(str(tmp_path))
    async with open_store(config(tmp_path)) as store:
        assert (await store.put_message(Message("T", b"x"))).ok
        with pytest.raises(StoreLockedError, match=re.escape(root)) as excinfo:
            async with open_store(config(tmp_path)):
                pass  # pragma: no cover
        assert "already open" in str(excinfo.value)
        # the failed attempt did not disturb the holder
        assert (await store.put_message(Message("T", b"y"))).ok
        assert os.path.exists(abort_file(tmp_path))
    # released by the clean exit: a new open works
    async with open_store(config(tmp_path)) as store:
        assert store.get_max_phy_offset() > 0


_OPENER = textwrap.dedent(
    """
    import sys, trio
    from store import StoreConfig, StoreLockedError, open_store

    async def main(root):
        try:
            async with open_store(StoreConfig(store_path_root_dir=root,
                                              mapped_file_size_commit_log=4096)) as store:
                print("OPENED", store.get_max_phy_offset(), flush=True)
        except StoreLockedError as e:
            print("LOCKED", e, flush=True)
            sys.exit(3)

    trio.run(main, sys.argv[1])
    """
)


async def _run_opener(root) -> subprocess.CompletedProcess:
    with trio.fail_after(60):
        return await trio.run_process(
            [sys.executable, "-c", _OPENER, str(root)],
            cwd=ROOT, capture_stdout=True, capture_stderr=True, check=False,
        )


@pytest.mark.slow
async def test_second_process_fails_at_once_naming_the_root(tmp_path):
    root = os.path.realpath(str(tmp_path))
    async with open_store(config(tmp_path)) as store:
        assert (await store.put_message(Message("T", b"held"))).ok
        t0 = trio.current_time()
        proc = await _run_opener(tmp_path)
        elapsed = trio.current_time() - t0
        out = proc.stdout.decode()
        assert proc.returncode == 3, (out, proc.stderr.decode())
        assert out.startswith("LOCKED") and root in out and "another process" in out
        assert elapsed < 30  # no waiting for the lock: only interpreter start-up
        end = store.get_max_phy_offset()
    proc = await _run_opener(tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().split() == ["OPENED", str(end)]


@pytest.mark.slow
async def test_reading_the_lock_file_in_the_holding_process_keeps_the_lock(tmp_path):
    """POSIX fcntl locks drop when the process closes any fd of the file: reading <root>/lock
    (as a tool or status page in the node's process might) must not let another process in."""
    root = os.path.realpath(str(tmp_path))
    async with open_store(config(tmp_path)) as store:
        assert (await store.put_message(Message("T", b"held"))).ok
        with open(os.path.join(root, "lock"), "rb") as f:
            assert f.read(4) == b"lock"
        proc = await _run_opener(tmp_path)
        assert proc.returncode == 3, (proc.stdout.decode(), proc.stderr.decode())
        assert root in proc.stdout.decode()
        # the other process touched nothing: our next segment is still here
        r = await store.put_message(Message("T", b"x" * 3995))
        assert r.ok and r.commitlog_offset == 4096
        assert store.look_message_by_offset(4096).body == b"x" * 3995


async def test_abort_file_exists_while_open_and_is_removed_on_clean_exit(tmp_path):
    assert not os.path.exists(abort_file(tmp_path))
    async with open_store(config(tmp_path)) as store:
        assert os.path.exists(abort_file(tmp_path))
        assert store.last_exit_ok
        assert (await store.put_message(Message("T", b"x"))).ok
    assert not os.path.exists(abort_file(tmp_path))
    async with open_store(config(tmp_path)) as store:
        assert store.last_exit_ok


async def test_abort_file_is_kept_when_the_store_is_not_writeable_at_exit(tmp_path):
    async with open_store(config(tmp_path)) as store:
        assert (await store.put_message(Message("T", b"x"))).ok
        store.flags.set(RunningFlags.DISK_FULL)
    assert os.path.exists(abort_file(tmp_path))
    async with open_store(config(tmp_path)) as store:
        assert not store.last_exit_ok  # abnormal recovery
        assert store.look_message_by_offset(0).body == b"x"
    assert not os.path.exists(abort_file(tmp_path))


async def test_lock_is_released_when_the_open_fails(tmp_path):
    """A store that fails to load (a segment of the wrong size) does not keep the lock."""
    async with open_store(config(tmp_path)) as store:
        assert (await store.put_message(Message("T", b"x"))).ok
    bad = StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=8192)
    with pytest.raises(SegmentSizeError, match="4096"):
        async with open_store(bad):
            pass  # pragma: no cover
    async with open_store(config(tmp_path)) as store:
        assert store.look_message_by_offset(0).body == b"x"


# ---- SYNC_FLUSH durability across SIGKILL -----------------------------------------------


async def _crash_writer(root: str, seed: int, stop_after: int) -> list[tuple[int, int, int]]:
    """Run the writer, read acknowledged lines until `stop_after`, SIGKILL it. Its stderr
    goes to a file (a pipe nobody drains would block a chatty writer and hang the test)."""
    err_path = f"{root}.stderr"
    with open(err_path, "wb") as err:
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "tests.store.crash_writer", root, str(seed), "4"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=err,
        )
    acked: list[tuple[int, int, int]] = []
    buf = b""
    try:
        with trio.fail_after(120):
            while len(acked) < stop_after:
                chunk = await proc.stdout.receive_some(65536)
                if not chunk:
                    raise AssertionError(f"writer exited early:\n{_tail(err_path)}")
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    off, size, seq = map(int, line.split())
                    acked.append((off, size, seq))
    finally:
        proc.kill()  # SIGKILL, in the middle of whatever it is doing
        with trio.move_on_after(30):
            await proc.wait()
        await proc.stdout.aclose()
    assert proc.returncode == -9
    assert "failed" not in _tail(err_path, limit=1 << 20), _tail(err_path)
    return acked  # lines past stop_after that were already read count as acknowledged too


def _tail(path: str, limit: int = 4000) -> str:
    with open(path, "rb") as f:
        return f.read()[-limit:].decode(errors="replace")


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
async def test_sync_flush_survives_sigkill(tmp_path, seed):
    root = str(tmp_path / "store")
    stop_after = random.Random(seed).randint(50, 400)
    acked = await _crash_writer(root, seed, stop_after)
    assert len(acked) >= stop_after
    assert os.path.exists(abort_file(root))  # killed: no clean exit
    acked_end = max(off + size for off, size, _ in acked)
    assert acked_end > SEGMENT  # several segments rolled

    # (a) the offline verifier, on the directory exactly as the crash left it
    proc = await trio.run_process(
        [sys.executable, "-m", "tidemq", "store", "verify", root],
        cwd=ROOT, capture_stdout=True, capture_stderr=True, check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr.decode()
    verify_summary = json.loads(proc.stdout)
    assert verify_summary["badCrcs"] == 0
    assert verify_summary["messages"] >= len(acked)
    assert verify_summary["endOffset"] >= acked_end
    # a record torn by the kill can only lie past everything acknowledged
    for d in verify_summary["damage"]:
        assert d["offset"] >= acked_end, d
    assert (proc.returncode == 0) == verify_summary["clean"]

    # (b) recovery keeps every acknowledged message intact
    cfg = store_config(root)
    async with open_store(cfg) as store:
        assert not store.last_exit_ok
        assert store.get_max_phy_offset() >= acked_end
        for off, size, seq in acked:
            m = store.look_message_by_offset(off)
            assert m is not None, f"acknowledged message {seq} at {off} is gone"
            assert m.size == size
            assert m.body == body_for(seed, seq), f"message {seq} at {off} differs"
            assert (m.topic, m.queue_id, m.keys) == (TOPICS[seq % 2], seq % 3, (f"k{seq}",))
            assert m.crc_ok
        # the store keeps going where recovery put its end
        end = store.get_max_phy_offset()
        r = await store.put_message(Message("After", b"after the crash"))
        assert r.ok and r.commitlog_offset in (end, (end // SEGMENT + 1) * SEGMENT)
    async with open_store(cfg) as store:
        assert store.last_exit_ok
        assert store.look_message_by_offset(r.commitlog_offset).body == b"after the crash"


async def test_crash_writer_bodies_are_deterministic():
    assert body_for(3, 17) == body_for(3, 17)
    assert body_for(3, 17) != body_for(4, 17)
    assert store_config("/x").flush_disk_type is FlushDiskType.SYNC_FLUSH
