"""Types of the compiled twin of wire/framing.py's splitter and wire/send_codec.py's reply
frames (wire/_send_codec.pyx), for mypy: the extension has no annotations of its own."""

from typing import Any

def bind(plain_send_class: type, plain_batch_class: type) -> None: ...
def split_frames(
    data: bytes | bytearray | memoryview, max_frame_size: int, good_topics: set[str] | None
) -> tuple[list[Any], int, int]: ...
def send_reply_frame(
    request_id: int, status: str, msg_id: str, queue_id: int, queue_offset: int, commitlog_offset: int
) -> bytes | None: ...
def send_batch_reply_frame(
    request_id: int, status: str, msg_ids: str, queue_id: int, queue_offset: int, commitlog_offset: int
) -> bytes | None: ...
