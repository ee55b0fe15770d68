"""store/layout.py: which names are segments and queue directories."""

import os

from store.layout import list_queue_dirs, list_segments, segment_name, segment_names


def test_segment_names_are_20_digit_offsets_in_offset_order():
    assert segment_name(0) == "0" * 20
    assert segment_name(1 << 30) == "00000000001073741824"
    names = [segment_name(2048), segment_name(0), "0" * 19, "0" * 21, segment_name(1024) + ".creating",
             "١" * 20, segment_name(1024)]
    assert segment_names(names) == [segment_name(0), segment_name(1024), segment_name(2048)]


def test_list_segments_skips_stray_files_and_directories(tmp_path):
    for name in (segment_name(100), segment_name(0), segment_name(200) + ".creating", "backup"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / segment_name(300)).mkdir()
    assert list_segments(str(tmp_path)) == [(0, str(tmp_path / segment_name(0))),
                                           (100, str(tmp_path / segment_name(100)))]


def test_list_queue_dirs_takes_int32_queue_ids_only(tmp_path):
    for rel in ("T/0", "T/12", "T/-1", "T/007", "T/x", f"T/{2**31}", "U/3"):
        os.makedirs(tmp_path / rel)
    (tmp_path / "stray").write_bytes(b"")
    assert list_queue_dirs(str(tmp_path)) == [
        ("T", -1, str(tmp_path / "T" / "-1")), ("T", 0, str(tmp_path / "T" / "0")),
        ("T", 12, str(tmp_path / "T" / "12")), ("U", 3, str(tmp_path / "U" / "3")),
    ]
    assert list_queue_dirs(str(tmp_path / "absent")) == []
