"""ha/slave.contiguous_runs: a backlog's frames are appended one run per write; a run only
ever holds frames that continue each other within one segment, in stream order."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from ha.protocol import Transfer
from ha.slave import contiguous_runs

SEG = 100


@st.composite
def frame_streams(draw) -> list[Transfer]:
    """Frames as a master ships them: contiguous bodies that never cross a segment end,
    with heartbeats and (after a reconnect) jumps in between."""
    offset, frames = draw(st.integers(0, 3)) * SEG, []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["data", "data", "data", "heartbeat", "jump"]))
        if kind == "heartbeat":
            frames.append(Transfer(offset, b""))
            continue
        if kind == "jump":
            offset += draw(st.integers(1, 50))
        size = draw(st.integers(1, SEG - offset % SEG))
        frames.append(Transfer(offset, bytes(size)))
        offset += size
    return frames


@given(frame_streams())
def test_runs_keep_every_frame_in_order_and_each_run_is_one_write(frames) -> None:
    runs = contiguous_runs(frames, SEG)
    assert [f for run in runs for f in run] == frames
    for run in runs:
        for before, after in itertools.pairwise(run):
            assert after.offset == before.end and after.offset // SEG == before.offset // SEG
            assert not after.is_heartbeat


def test_a_backlog_of_one_segment_is_one_run_and_a_segment_end_splits_it() -> None:
    frames = [Transfer(0, bytes(40)), Transfer(40, bytes(40)), Transfer(80, bytes(20)), Transfer(100, bytes(5))]
    assert [len(r) for r in contiguous_runs(frames, SEG)] == [3, 1]
