"""Records as row tuples, for bulk readers (the pipeline's store scan): one tuple of a
record's fields per message, without a StoredMessage or Decoded object in between.

`scan_rows` here is the reference; store._accel has a compiled twin (chosen by
store.accel, like the record codec's) that tests/store/test_accel.py holds to it.
"""

from __future__ import annotations

from collections.abc import Collection

from .accel import COMPILED
from .msg_id import msg_id_prefix
from .properties import PROPERTY_KEYS, PROPERTY_TAGS
from .record_codec import Buffer, masked_crc32
from .record_codec import py_decode_record as decode_record

ROW_FIELDS = (
    "topic", "queue_id", "queue_offset", "commitlog_offset", "size", "body", "body_crc",
    "crc_ok", "flag", "sysflag", "born_timestamp", "born_host", "store_timestamp",
    "store_host", "reconsume_times", "tags", "keys", "properties", "msg_id",
)
"""What each row tuple holds, in order (then the caller's `extra` values)."""


def scan_rows(
    buf: Buffer, pos: int, end: int, segment_start: int, rows: list[tuple[object, ...]], max_rows: int, *,
    verify_crc: bool, include_body: bool, topics: Collection[str] | None,
    start_time: int | None, end_time: int | None, extra: tuple[object, ...],
) -> int:
    """Append a row (ROW_FIELDS + extra) to `rows` for each clean message record from byte
    `pos` of the segment `buf`, skipping the records outside `topics` and the store-time
    range; returns the position it stopped at.

    It stops before `end`, once `rows` holds `max_rows`, and at the first record that is
    not a clean message: not one at all (a BLANK filler, zeros, damage), a body CRC that
    does not match (when `verify_crc`), or a PHYSICALOFFSET other than its position
    (`segment_start` + byte). The caller decides what that record means. crc_ok is True
    when `verify_crc`, else None; body is None unless `include_body`.
    """
    need_body = include_body or verify_crc
    while pos < end and len(rows) < max_rows:
        d = decode_record(buf, pos, check_crc=False, read_body=need_body)
        m = d.message
        if m is None:  # not a MESSAGE record
            break
        if topics is not None and m.topic not in topics:
            pos += d.size
            continue
        ts = m.store_timestamp
        if (start_time is not None and ts < start_time) or (end_time is not None and ts > end_time):
            pos += d.size
            continue
        if m.commitlog_offset != segment_start + pos:
            break
        crc_ok = None
        if verify_crc:
            if masked_crc32(m.body) != m.body_crc:
                break
            crc_ok = True
        props = m.properties
        raw_keys = props.get(PROPERTY_KEYS)
        rows.append((
            m.topic, m.queue_id, m.queue_offset, m.commitlog_offset, m.size,
            m.body if include_body else None, m.body_crc, crc_ok, m.flag, m.sys_flag,
            m.born_timestamp, m.born_host, m.store_timestamp, m.store_host, m.reconsume_times,
            props.get(PROPERTY_TAGS), [k for k in raw_keys.split(" ") if k] if raw_keys else [],
            props, msg_id_prefix(m.store_host) + f"{m.commitlog_offset:016X}", *extra,
        ))
        pos += d.size
    return pos


py_scan_rows = scan_rows
if COMPILED is not None:
    COMPILED.bind_rows(py_scan_rows)
    scan_rows = COMPILED.scan_rows  # noqa: F811
