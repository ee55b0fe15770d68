"""The client protocol's framing, sans-IO: a 4-byte big-endian unsigned length, then that
many bytes holding one CBOR map. `FrameDecoder` takes bytes in any chunking and returns
complete maps; `encode_frame` builds one. Requests and responses inside the maps are
`protocol.py`'s.

With the compiled send codec (wire/_send_codec.pyx, built beside store._accel; not with
TIDEMQ_PURE=1) the frames are split in C, and a decoder made with `plain_sends` returns a
plain `send` or `send_batch` request as its fields' tuple (wire/send_codec.py) instead of a
map.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Mapping
from typing import Any

import cbor2

from store.accel import forced_pure

__all__ = ["HEADER", "FrameDecoder", "FrameError", "encode_frame", "type_name"]

HEADER = struct.Struct(">I")


def _load_compiled() -> Any:
    if forced_pure():
        return None
    try:
        from . import _send_codec
    except ImportError:  # built without a C compiler: pure Python
        return None
    return _send_codec


COMPILED = _load_compiled()
"""wire._send_codec when it was built (and TIDEMQ_PURE is not set), else None."""


class FrameError(Exception):
    """The byte stream cannot be parsed any further; the connection must be closed.

    `reason` is the human-readable cause, suitable for the error frame sent before closing.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _oversized(header: bytes, size: int, limit: int) -> str:
    """Why a length prefix is refused; printable ASCII there ("HTTP" is 1213486160) means
    the peer speaks another protocol, which says more than the size."""
    if all(32 <= b < 127 for b in header):
        return (f"the peer does not speak the tidemq protocol: it sent {header.decode('ascii')!r} "
                f"where a frame length belongs (an HTTP or other text server?)")
    return f"frame of {size} bytes exceeds the limit {limit}"


class FrameDecoder:
    """Incremental frame decoder: feed bytes in any chunking, get complete maps out.

    An oversized length is refused as soon as the 4-byte header is seen, before any of the
    body is buffered, so a peer cannot make the node allocate more than `max_frame_size`.
    After a FrameError the decoder stays broken (every later feed raises it again): the
    stream has lost its framing and nothing after the bad frame can be trusted.
    """

    def __init__(self, max_frame_size: int, *, plain_sends: set[str] | None = None) -> None:
        if max_frame_size <= 0:
            raise ValueError(f"max_frame_size must be > 0, got {max_frame_size}")
        self.max_frame_size = max_frame_size
        self.plain_sends = plain_sends
        """The topics known valid (the request schema's cache): with the compiled codec, a
        plain send or batch to one of them comes out as its fields' tuple
        (send_codec.PlainSend, PlainBatch)."""
        self._buf = bytearray()
        self._need: int | None = None  # body length of the frame being read
        self._error: FrameError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as a frame (0 at a frame boundary)."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[dict]:
        """The frames `data` completes; FrameError when the stream broke (the frames before
        the bad one are lost: a server that answers them uses `feed_all`)."""
        frames, error = self.feed_all(data)
        if error is not None:
            raise error
        return frames

    def feed_all(self, data: bytes | bytearray | memoryview) -> tuple[list[dict], FrameError | None]:
        """The frames `data` completes, and the FrameError that ended the stream after them
        (None while the framing holds)."""
        if self._error is not None:
            return [], self._error
        if COMPILED is not None:
            return self._split_compiled(data)
        self._buf += data
        frames: list[dict] = []
        try:
            while True:
                if self._need is None:
                    if len(self._buf) < HEADER.size:
                        break
                    (size,) = HEADER.unpack_from(self._buf)
                    if size > self.max_frame_size:
                        raise FrameError(_oversized(bytes(self._buf[: HEADER.size]), size, self.max_frame_size))
                    del self._buf[: HEADER.size]
                    self._need = size
                if len(self._buf) < self._need:
                    break
                body = bytes(self._buf[: self._need])
                del self._buf[: self._need]
                self._need = None
                frames.append(_decode_body(body))
        except FrameError as e:
            self._error = e
            self._buf.clear()
            return frames, e
        return frames, None

    def _split_compiled(self, data: bytes | bytearray | memoryview) -> tuple[list[Any], FrameError | None]:
        """feed_all with the frames split (and plain sends decoded) in C."""
        if self._buf:
            self._buf += data
            data = self._buf
        items, used, oversized = COMPILED.split_frames(data, self.max_frame_size, self.plain_sends)
        header = bytes(data[used:used + HEADER.size]) if oversized >= 0 else b""
        if data is self._buf:
            del self._buf[:used]
        elif used < len(data):
            self._buf = bytearray(data[used:])
        frames: list[Any] = []
        try:
            for item in items:
                frames.append(_decode_body(item) if type(item) is bytes else item)
            if oversized >= 0:
                raise FrameError(_oversized(header, oversized, self.max_frame_size))
        except FrameError as e:
            self._error = e
            self._buf.clear()
            return frames, e
        return frames, None


def _decode_body(body: bytes) -> dict:
    if not body:
        raise FrameError("empty frame: expected one CBOR map")
    fp = io.BytesIO(body)
    try:
        value = cbor2.CBORDecoder(fp).decode()
    # untrusted bytes: cbor2 reports most problems as CBORDecodeError, but semantic tags
    # can surface as other ValueError/TypeError/OverflowError subclasses
    except (cbor2.CBORDecodeError, ValueError, TypeError, OverflowError, RecursionError) as e:
        raise FrameError(f"frame is not valid CBOR: {e}") from None
    if fp.tell() != len(body):
        raise FrameError(
            f"frame has {len(body) - fp.tell()} bytes after the CBOR value; expected exactly one map"
        )
    if not isinstance(value, dict):
        raise FrameError(f"frame holds a CBOR {type_name(value)}, expected a map")
    return value


def encode_frame(obj: Mapping[str, Any], *, max_frame_size: int | None = None) -> bytes:
    """One frame: length + CBOR map. With `max_frame_size`, a larger frame is a FrameError
    (the sender's own check, so it never emits what the peer would refuse)."""
    if type(obj) is not dict:  # (a dict, the common case, skips the ABC check and the copy)
        if not isinstance(obj, Mapping):
            raise TypeError(f"a frame holds a map, got {type(obj).__name__}")
        obj = dict(obj)
    body = cbor2.dumps(obj)
    limit = max_frame_size if max_frame_size is not None else 2**32 - 1
    if len(body) > limit:
        raise FrameError(f"frame of {len(body)} bytes exceeds the limit {limit}")
    return HEADER.pack(len(body)) + body


def type_name(value: Any) -> str:
    """A CBOR value's kind in the words errors use (\"text string\", \"map\")."""
    return {
        bool: "boolean",
        int: "integer",
        float: "float",
        str: "text string",
        bytes: "byte string",
        list: "array",
        dict: "map",
        type(None): "null",
    }.get(type(value), type(value).__name__)
