"""`tidemq node start`'s terminal side: the recovery progress bar."""

from __future__ import annotations


def test_recovery_progress_bar_draws_on_a_terminal_only(tmp_path):
    import os
    import pty

    from node.cli import recovery_progress_bar

    with open(tmp_path / "log", "w") as log, recovery_progress_bar(log) as progress:
        assert progress is None, "a log file gets no bar"
    master, slave = pty.openpty()
    try:
        with os.fdopen(slave, "w") as tty, recovery_progress_bar(tty) as progress:
            assert progress is not None
            for done in (0, 1 << 20, 3 << 20, 4 << 20):
                progress(done, 4 << 20)
        shown = os.read(master, 1 << 16)
    finally:
        os.close(master)
    assert b"recovering the CommitLog" in shown, shown
