"""One reader of a segment, one answer: each damaged-tail fixture (real files) is read by
recovery, `tidemq store verify` and the pipeline's store scan, and all three find the same
damage (offset and reason) and keep the same records. Then the walker's own rules: the bulk
path stops exactly where `step` must judge, and the zero check skips a sparse file's holes.
"""

from __future__ import annotations

import logging
import mmap
import os
import random
import re
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store import StoreConfig, open_store, segment_walker, tools
from store.mapped_file import MappedFile
from store.record_codec import MESSAGE_MAGIC_CODE, RecordKind, message_extent, py_decode_record
from store.recovery import scan_valid_end
from store.segment_walker import Blank, End, Record, first_nonzero, step, walk
from tests.examples import examples
from tests.store.test_accel import SETTINGS, segments
from tests.store.test_tools import SEG, Store, sample_messages, write_store

try:  # the pipeline needs the spark extra (pyarrow, numpy); recovery and verify do not
    from pipeline import store_scan
except ImportError:
    store_scan = None

SPARSE_SEG = 64 * 1024


@attrs.frozen
class Answer:
    """What a tool says of a store: the first damage (offset and reason; None when clean)
    and the message records it keeps as valid (those before the damage)."""

    damage: int | None
    reason: str | None
    kept: tuple[int, ...]


@attrs.frozen
class Fixture:
    store: Store
    damage: int | None = None
    reason_start: str | None = None

    def kept_before(self, end: int) -> tuple[int, ...]:
        return tuple(r.offset for r in self.store.records if r.offset + r.size <= end)

    @property
    def expected_kept(self) -> tuple[int, ...]:
        limit = self.damage if self.damage is not None else self.store.end
        return self.kept_before(limit)


# ---------------------------------------------------------------------------------------
# the fixtures: a store as a broker writes it (tests/store/test_tools.py), then damaged


def _store(root: Path) -> Store:
    s = write_store(root, sample_messages())
    assert len(s.blanks) == 1 and s.end > SEG  # a full first segment, a partly written second
    return s


def zero_tail(root: Path) -> Fixture:
    return Fixture(_store(root))


def torn_record_zeroed(root: Path) -> Fixture:
    """A crash kept the first 100 bytes of the last record and lost the rest."""
    s = _store(root)
    last = s.records[-1]
    s.write_at(last.offset + 100, bytes(2 * SEG - last.offset - 100))
    return Fixture(s, last.offset, "corrupt record: ")


def torn_record_header(root: Path) -> Fixture:
    """A record header at the end whose size runs past the segment end."""
    s = _store(root)
    left = 2 * SEG - s.end
    s.write_at(s.end, struct.pack(">iI", left + 50, MESSAGE_MAGIC_CODE) + b"\x01" * 30)
    return Fixture(s, s.end, f"torn record: size {left + 50} does not fit the {left} bytes left")


def bad_crc_mid_file(root: Path) -> Fixture:
    s = _store(root)
    r = s.records[3]
    body_at = r.offset + 88 + 17  # IPv4 hosts: the body starts at byte 88
    s.write_at(body_at, bytes([s.read_at(body_at, 1)[0] ^ 0x10]))
    return Fixture(s, r.offset, "body CRC mismatch: ")


def bad_magic_mid_file(root: Path) -> Fixture:
    s = _store(root)
    r = s.records[5]
    s.write_at(r.offset + 4, b"\xde\xad\xbe\xef")
    return Fixture(s, r.offset, "invalid record: illegal magic code 0xDEADBEEF")


def garbage_tail(root: Path) -> Fixture:
    s = _store(root)
    s.write_at(s.end, b"\xee" + random.Random(3).randbytes(200))
    return Fixture(s, s.end, "garbage after valid end: illegal magic code")


def blank_then_zeros(root: Path) -> Fixture:
    """The data ends with the first segment's BLANK filler; the next segment is
    pre-allocated (all zeros)."""
    s = _store(root)
    s.write_at(SEG, bytes(SEG))
    return Fixture(attrs.evolve(s, records=[r for r in s.records if r.offset < SEG], end=SEG))


def missing_blank(root: Path) -> Fixture:
    """Zeros where the first segment's BLANK filler should be, while the next holds data."""
    s = _store(root)
    blank = s.blanks[0][0]
    s.write_at(blank, bytes(8))
    return Fixture(s, blank, "segment ends without a BLANK filler")


def _sparse(root: Path, tail: bytes) -> Store:
    """One 64 KiB segment whose unwritten part is a hole, `tail` written at its very end."""
    s = write_store(root, sample_messages(), seg_size=SPARSE_SEG)
    path = s.segment(0)
    data = path.read_bytes()[: s.end]
    path.write_bytes(data)
    os.truncate(path, SPARSE_SEG)
    if tail:
        s.write_at(SPARSE_SEG - len(tail), tail)
    return s


def sparse_hole_tail(root: Path) -> Fixture:
    return Fixture(_sparse(root, b""))


def sparse_hole_then_garbage(root: Path) -> Fixture:
    s = _sparse(root, b"junk" * 8)
    return Fixture(s, s.end, f"garbage after valid end: non-zero data at offset {SPARSE_SEG - 32}")


FIXTURES: dict[str, Callable[[Path], Fixture]] = {
    f.__name__.replace("_", "-"): f
    for f in (zero_tail, torn_record_zeroed, torn_record_header, bad_crc_mid_file,
              bad_magic_mid_file, garbage_tail, blank_then_zeros, missing_blank,
              sparse_hole_tail, sparse_hole_then_garbage)
}


# ---------------------------------------------------------------------------------------
# each tool's answer


def scan_rows(root: Path | str) -> list[dict]:
    """The scan's rows (PERMISSIVE), as {commitlog_offset, _corrupt} (damaged timestamps
    would not convert to datetimes)."""
    assert store_scan is not None
    rows = []
    for b in store_scan.scan([str(root)], store_scan.ScanOptions(permissive=True)):
        rows.extend(zip(b.column("commitlog_offset").to_pylist(), b.column("_corrupt").to_pylist(),
                        strict=True))
    return [{"commitlog_offset": o, "_corrupt": c} for o, c in rows]


def corrupt(rows: list[dict]) -> list[tuple[int, str]]:
    """(offset, reason) of the `_corrupt` rows: the offset their text names (a row's
    commitlog_offset column is the record's own PHYSICALOFFSET field, maybe damaged)."""
    out = []
    for r in rows:
        if r["_corrupt"]:
            m = re.fullmatch(r".*?: at CommitLog offset (\d+) \(byte \d+ of the file\): (.*)", r["_corrupt"], re.S)
            assert m, r["_corrupt"]
            out.append((int(m[1]), m[2]))
    return out


def verify_answer(fx: Fixture) -> tuple[Answer, int]:
    """verify's answer, and where it says valid data ends."""
    v = tools.verify(fx.store.root)
    first = v["firstInvalidOffset"]
    reason = next((d["reason"] for d in v["damage"] if d["offset"] == first), None)
    end = first if first is not None else v["endOffset"] or 0
    return Answer(first, reason, fx.kept_before(end)), end


def pipeline_answer(fx: Fixture) -> Answer:
    """The store scan's answer (PERMISSIVE: damage becomes rows with `_corrupt`)."""
    rows = scan_rows(fx.store.root)
    bad = sorted(corrupt(rows))
    damage, reason = bad[0] if bad else (None, None)
    kept = tuple(r["commitlog_offset"] for r in rows
                 if not r["_corrupt"] and (damage is None or r["commitlog_offset"] < damage))
    return Answer(damage, reason, kept)


async def recovery_answer(fx: Fixture, caplog) -> tuple[Answer, int]:
    """Recovery's answer after a crash with no checkpoint (every segment validated), and
    where it cut the log; the damage is what it logged. A slave's: it cuts at the first
    record failing its CRC, where verify says valid data ends; a master keeps such a record
    when a good one follows it (store/damage.py, tests/store/test_corrupt.py)."""
    root = fx.store.root
    (root / "abort").touch()
    config = StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=fx.store.seg_size,
                         mapped_file_size_consume_queue=20 * 50, max_hash_slot_num=101, max_index_num=300,
                         broker_role="SLAVE")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tidemq.store"):
        async with open_store(config) as store:
            end = store.get_max_phy_offset()
    found = [re.search(r"invalid record at offset (\d+) \((.*)\); truncating", r.getMessage())
             for r in caplog.records if r.levelno >= logging.WARNING]
    found = [m for m in found if m]
    damage, reason = (int(found[0][1]), found[0][2]) if found else (None, None)
    return Answer(damage, reason, fx.kept_before(end)), end


@pytest.mark.parametrize("name", FIXTURES)
async def test_recovery_and_verify_give_one_answer(name, tmp_path, caplog):
    fx = FIXTURES[name](tmp_path / "store")
    by_verify, verify_end = verify_answer(fx)
    by_recovery, recovery_end = await recovery_answer(fx, caplog)
    assert by_verify == by_recovery
    assert verify_end == recovery_end
    assert (by_verify.damage, by_verify.kept) == (fx.damage, fx.expected_kept)
    if fx.reason_start is None:
        assert by_verify.reason is None
    else:
        assert by_verify.reason.startswith(fx.reason_start), by_verify.reason
    # after the cut the store reads clean, and reads the same
    after = tools.verify(fx.store.root)
    assert after["clean"], after["damage"]
    assert after["endOffset"] == recovery_end


@pytest.mark.skipif(store_scan is None, reason="the spark extra is not installed")
@pytest.mark.parametrize("name", FIXTURES)
def test_the_pipeline_gives_the_same_answer(name, tmp_path):
    fx = FIXTURES[name](tmp_path / "store")
    by_verify, _ = verify_answer(fx)
    assert pipeline_answer(fx) == by_verify


@settings(max_examples=examples(40), deadline=None)
@given(edits=st.lists(st.tuples(st.integers(0, 2 * SEG - 1), st.binary(min_size=1, max_size=64)),
                      min_size=1, max_size=4))
def test_random_damage_one_answer(edits: list[tuple[int, bytes]]):
    """Any damage: the pipeline reports what verify reports, and recovery cuts at verify's
    first damage that ends valid data (a PHYSICALOFFSET mismatch and a BLANK filler short
    of the segment end are damage all three name, but recovery keeps reading past them, as
    RocketMQ does)."""
    with tempfile.TemporaryDirectory() as d:
        s = write_store(Path(d), sample_messages())
        for offset, data in edits:
            s.write_at(offset, data[: SEG - offset % SEG])
        v = tools.verify(d)
        record_damage = [(x["offset"], x["reason"]) for x in v["damage"]]
        if store_scan is not None:  # one row per damaged record: its last problem
            bad = corrupt(scan_rows(d))
            assert {o for o, _ in bad} == {o for o, _ in record_damage}
            assert all(c in record_damage for c in bad)
        files = [MappedFile(str(Path(d) / "commitlog" / f"{n:020d}"), SEG, expect_existing=True) for n in (0, SEG)]
        try:
            cut = scan_valid_end(files, SEG, 0, check_crc=True)
        finally:
            for mf in files:
                mf.close()
        ending = [o for o, reason in record_damage
                  if not reason.startswith(("PHYSICALOFFSET", "BLANK filler of size"))]
        assert cut == (min(ending) if ending else v["endOffset"] or 0)


# ---------------------------------------------------------------------------------------
# the walker's own rules


@SETTINGS
@given(seg=segments(), check_crc=st.booleans())
def test_the_bulk_path_stops_where_step_must_judge(seg, check_crc):
    """skip_clean passes exactly the records `step` finds clean, and stops at the first one
    it does not (decode_record's rules, whichever codec runs)."""
    buf, start = seg
    stop = segment_walker.py_skip_clean(buf, 0, len(buf), start, check_crc)
    assert segment_walker.skip_clean(buf, 0, len(buf), start, check_crc) == stop
    pos = 0
    for ev in walk(buf, segment_start=start, check_crc=check_crc):
        if pos == stop:
            assert not (isinstance(ev, Record) and not ev.problems())
            break
        assert isinstance(ev, Record) and not ev.problems()
        pos += ev.size
    assert pos == stop


@SETTINGS
@given(seg=segments(), check_crc=st.booleans(), at=st.integers(0, 600))
def test_message_extent_is_decode_records_verdict(seg, check_crc, at):
    buf, _ = seg
    d = py_decode_record(buf, at, check_crc=check_crc, read_body=check_crc)
    got = message_extent(buf, at, check_crc=check_crc)
    if d.kind is RecordKind.MESSAGE:
        assert got == (d.size, d.message.commitlog_offset)
    else:
        assert got is None


def test_step_names_each_thing_at_a_position():
    s_buf = bytearray(4096)
    assert step(s_buf, 0) == End(0)  # zeros in the last segment: the normal end
    assert step(s_buf, 0, last=False).reason.startswith("segment ends without a BLANK filler")
    assert step(s_buf, 4096, segment_start=8192) == End(12288)  # the segment's very end
    s_buf[100:108] = struct.pack(">iI", 4096 - 100, 0xCBD43194)
    assert step(s_buf, 100) == Blank(100, 3996)
    s_buf[100:108] = struct.pack(">iI", 64, 0xCBD43194)
    assert step(s_buf, 100).reason == "BLANK filler of size 64 does not reach the segment end (3996 bytes left)"
    assert step(b"PK\x03\x04 zip" + bytes(100), 0).reason.startswith("not a CommitLog segment")


def test_the_zero_check_skips_holes_and_finds_data_after_them(tmp_path):
    path = tmp_path / "sparse"
    with open(path, "wb") as f:
        f.write(b"\x01" * 10)
        f.seek(8 << 20)
        f.write(b"\x02")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        assert first_nonzero(mm, 10, fd=f.fileno()) == 8 << 20  # the hole is skipped
        assert first_nonzero(mm, 10, fd=None) == 8 << 20  # or read
        assert first_nonzero(mm, 10, 8 << 20, fd=f.fileno()) is None
        assert first_nonzero(mm, 0, fd=f.fileno()) == 0
        assert first_nonzero(mm, (8 << 20) + 1, fd=f.fileno()) is None
