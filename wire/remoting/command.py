"""The remoting frame (RocketMQ's RemotingCommand encode/decode), sans-IO.

A frame is `[int32 length][int32 serializeType<<24 | headerLength][header][body]`, the
length excluding itself. The header is JSON (type 0, what the C++ client and a default Java
client send) or RocketMQ's binary form (type 1). A response reuses its request's serialize
type, as the Java broker does; the C++ client reads only JSON with a plain length, so a
request in JSON always gets JSON back.

`CommandDecoder` takes bytes in any chunking. A frame whose length cannot be trusted (over
the limit, or a header longer than the frame) breaks the stream: `RemotingFrameError`, and
the connection must close. A well-framed frame whose header cannot be read is a
`BadCommand` in the output (with the opaque when it could be read), so the server answers
it and the connection goes on.
"""

from __future__ import annotations

import enum
import json
import struct
from collections.abc import Callable
from typing import Any

import attrs

from .codes import language_code, language_name

__all__ = ["BadCommand", "CommandDecoder", "Splitter", "RPC_ONEWAY", "RPC_RESPONSE", "RemotingCommand", "RemotingFrameError",
           "SerializeType", "decode_payload", "encode_command", "looks_like_remoting"]

RPC_RESPONSE = 1
"""flag bit 0: the command is a response."""
RPC_ONEWAY = 2
"""flag bit 1: the request wants no response."""
SERVER_VERSION = 409
"""MQVersion V4_9_8's ordinal: the version the node and the name server answer with."""
MAX_FRAME_SIZE = 16 * 1024 * 1024
"""NettyDecoder's default frame limit (com.rocketmq.remoting.frameMaxLength)."""

_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")


class SerializeType(enum.IntEnum):
    JSON = 0
    ROCKETMQ = 1


class RemotingFrameError(Exception):
    """The byte stream lost its framing: answer once if possible, then close."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@attrs.frozen
class BadCommand:
    """A whole frame whose header cannot be read: `opaque` when it could be found."""

    reason: str
    opaque: int = 0
    serialize_type: SerializeType = SerializeType.JSON


@attrs.define
class RemotingCommand:
    """One request or response. `ext_fields` maps strings to strings (the custom header);
    numbers and booleans a client sends there arrive as their text, as Java reads them."""

    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] | None = None
    body: bytes = b""
    language: str = "JAVA"
    version: int = SERVER_VERSION
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RPC_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & RPC_ONEWAY)

    def field(self, name: str) -> str | None:
        return None if self.ext_fields is None else self.ext_fields.get(name)

    def response(self, code: int, remark: str | None = None, ext_fields: dict[str, str] | None = None,
                 body: bytes = b"") -> RemotingCommand:
        """The answer to this request: its opaque, the response bit, its serialize type."""
        return RemotingCommand(code=code, opaque=self.opaque, flag=RPC_RESPONSE, remark=remark, ext_fields=ext_fields,
                               body=body, serialize_type=self.serialize_type)


def looks_like_remoting(first: bytes | bytearray) -> bool:
    """Whether a connection's first bytes (at least 5) start a remoting frame: byte 4 is the
    serialize type, 0 or 1. tidemq's own frames put a CBOR map's first byte there (0xa0 and
    up), so the two protocols share a port."""
    return len(first) >= 5 and first[4] in (SerializeType.JSON, SerializeType.ROCKETMQ)


# ---------------------------------------------------------------- encoding


def _json_header(cmd: RemotingCommand) -> bytes:
    """`json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`,
    written out: the same bytes at a fraction of the cost (every answer pays it)."""
    ext = cmd.ext_fields
    parts = ['{"code":', str(int(cmd.code))]
    if ext is not None:
        parts.append(',"extFields":{')
        parts.append(",".join(_quote(k) + ":" + _quote(v) for k, v in sorted(ext.items())))
        parts.append("}")
    parts += [',"flag":', str(int(cmd.flag)), ',"language":', _quote(cmd.language), ',"opaque":', str(int(cmd.opaque))]
    if cmd.remark is not None:
        parts += [',"remark":', _quote(cmd.remark)]
    parts += [',"serializeTypeCurrentRPC":"', cmd.serialize_type.name, '","version":', str(int(cmd.version)), "}"]
    return "".join(parts).encode()


_quote: Any = json.encoder.encode_basestring
"""A JSON string literal as json.dumps(ensure_ascii=False) writes it."""


def _binary_string(value: str | None, width: struct.Struct) -> bytes:
    raw = b"" if value is None else value.encode()
    return width.pack(len(raw)) + raw


def _binary_header(cmd: RemotingCommand) -> bytes:
    ext = b"".join(_binary_string(k, _U16) + _binary_string(v, _UINT32) for k, v in (cmd.ext_fields or {}).items())
    return b"".join((_FIXED.pack(cmd.code, language_code(cmd.language), cmd.version, cmd.opaque, cmd.flag),
                     _binary_string(cmd.remark, _UINT32), _UINT32.pack(len(ext)), ext))


def encode_command(cmd: RemotingCommand) -> bytes:
    """The whole frame, length prefix included."""
    header = _binary_header(cmd) if cmd.serialize_type is SerializeType.ROCKETMQ else _json_header(cmd)
    return b"".join((_UINT32.pack(4 + len(header) + len(cmd.body)),
                     _UINT32.pack(cmd.serialize_type << 24 | len(header)), header, cmd.body))


# ---------------------------------------------------------------- decoding


def _int32(value: Any, name: str) -> int:
    if type(value) is not int or not -2**31 <= value < 2**31:
        raise ValueError(f"header field {name!r} must be a 32-bit integer, got {value!r}")
    return value


def _ext_value(key: str, value: Any) -> str:
    if type(value) is str:
        return value
    if type(value) is bool:
        return "true" if value else "false"
    if type(value) in (int, float):
        return str(value)
    raise ValueError(f"extFields[{key!r}] must be a string, number or boolean, got {type(value).__name__}")


def _from_json(header: bytes) -> RemotingCommand:
    try:
        raw = json.loads(header)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"the JSON header cannot be parsed: {e}") from None
    except RecursionError:  # nesting deeper than the parser goes: a fuzzed or hostile header
        raise ValueError("the JSON header nests too deeply") from None
    if type(raw) is not dict:
        raise ValueError("the JSON header must be an object")
    ext = raw.get("extFields")
    if ext is not None and type(ext) is not dict:
        raise ValueError("header field 'extFields' must be an object")
    remark = raw.get("remark")
    if remark is not None and type(remark) is not str:
        raise ValueError("header field 'remark' must be a string")
    language = raw.get("language", "OTHER")
    return RemotingCommand(
        code=_int32(raw.get("code"), "code"), opaque=_int32(raw.get("opaque", 0), "opaque"),
        flag=_int32(raw.get("flag", 0), "flag"), remark=remark,
        ext_fields=None if ext is None else {k: v if type(v) is str else _ext_value(k, v) for k, v in ext.items()},
        language=language if type(language) is str else "OTHER", version=_int32(raw.get("version", 0), "version"),
        serialize_type=SerializeType.JSON)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"the binary header ends early (wants {n} bytes at {self.pos} of {len(self.data)})")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: struct.Struct) -> Any:
        return fmt.unpack(self.take(fmt.size))

    def string(self, width: struct.Struct) -> str | None:
        (n,) = self.unpack(width)
        if n == 0:
            return None
        try:
            return self.take(n).decode()
        except UnicodeDecodeError:
            raise ValueError("a binary header string is not UTF-8") from None


def _from_binary(header: bytes) -> RemotingCommand:
    r = _Reader(header)
    code, language, version, opaque, flag = r.unpack(_FIXED)
    remark = r.string(_UINT32)
    (ext_len,) = r.unpack(_UINT32)
    ext_reader = _Reader(r.take(ext_len))
    ext: dict[str, str] = {}
    while ext_reader.pos < ext_len:
        key = ext_reader.string(_U16)
        value = ext_reader.string(_UINT32)
        if key is not None:
            ext[key] = value or ""
    return RemotingCommand(code=code, opaque=opaque, flag=flag, remark=remark, ext_fields=ext if ext_len else None,
                           language=language_name(language), version=version, serialize_type=SerializeType.ROCKETMQ)


def _opaque_of(header: bytes, serialize_type: int) -> int:
    """The opaque of a header that failed to decode, when it can be found (for the answer)."""
    try:
        if serialize_type == SerializeType.ROCKETMQ:
            return int(_INT32.unpack_from(header, 5)[0])
        raw = json.loads(header)
        return _int32(raw.get("opaque"), "opaque") if type(raw) is dict else 0
    except (ValueError, struct.error, UnicodeDecodeError, RecursionError):
        return 0


def decode_payload(payload: bytes) -> RemotingCommand | BadCommand:
    """One frame without its length prefix. Raises RemotingFrameError when the header
    length is wrong (the framing is lost)."""
    if len(payload) < 4:
        raise RemotingFrameError(f"a remoting frame of {len(payload)} bytes is shorter than its header length field")
    (type_and_len,) = _UINT32.unpack_from(payload)
    serialize_type, header_len = type_and_len >> 24, type_and_len & 0xFFFFFF
    if header_len > len(payload) - 4:
        raise RemotingFrameError(f"header length {header_len} exceeds the frame ({len(payload) - 4} bytes after it)")
    header = bytes(payload[4:4 + header_len])
    try:
        if serialize_type == SerializeType.JSON:
            cmd = _from_json(header)
        elif serialize_type == SerializeType.ROCKETMQ:
            cmd = _from_binary(header)
        else:
            raise ValueError(f"unknown serialize type {serialize_type}")
    except (ValueError, struct.error) as e:
        st = SerializeType.ROCKETMQ if serialize_type == SerializeType.ROCKETMQ else SerializeType.JSON
        return BadCommand(str(e), _opaque_of(header, serialize_type), st)
    cmd.body = bytes(payload[4 + header_len:])
    return cmd


Splitter = Callable[[bytes | bytearray, int], "tuple[list[Any], int, int]"]
"""A compiled splitter (wire/remoting/plain_send.py's `plain_splitter`): (data, max frame
size) → (items, bytes used, an oversized frame's length or -1); an item is what it read
of a frame (a send's fields), or the frame's bytes without its length prefix."""


class CommandDecoder:
    """Incremental: feed bytes in any chunking, get whole commands (or BadCommands) out.
    A length over `max_frame_size` is refused before its body is buffered. With `split`,
    frames are split in C and the ones it reads come out as what it made of them."""

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE, split: Splitter | None = None) -> None:
        self.max_frame_size = max_frame_size
        self.split = split
        self._buf = bytearray()
        self._broken: RemotingFrameError | None = None

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand | BadCommand | tuple[Any, ...]]:
        if self._broken is not None:
            raise self._broken
        if self.split is not None:
            return self._split(data)
        self._buf += data
        out: list[RemotingCommand | BadCommand | tuple[Any, ...]] = []
        pos = 0
        buf = self._buf
        try:
            while len(buf) - pos >= 4:
                (length,) = _UINT32.unpack_from(buf, pos)
                if length > self.max_frame_size:
                    raise self._oversized(length)
                if len(buf) - pos - 4 < length:
                    break
                out.append(decode_payload(bytes(buf[pos + 4:pos + 4 + length])))
                pos += 4 + length
        except RemotingFrameError as e:
            self._broken = e
            raise
        finally:
            del buf[:pos]
        return out

    def _oversized(self, length: int) -> RemotingFrameError:
        return RemotingFrameError(f"frame of {length} bytes exceeds the limit {self.max_frame_size}")

    def _split(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand | BadCommand | tuple[Any, ...]]:
        """feed with the frames split (and the sends it reads read) in C."""
        assert self.split is not None
        chunk: bytes | bytearray
        if self._buf:
            self._buf += data
            chunk = self._buf
        else:
            chunk = data if isinstance(data, bytes | bytearray) else bytes(data)
        items, used, oversized = self.split(chunk, self.max_frame_size)
        if chunk is self._buf:
            del self._buf[:used]
        elif used < len(chunk):
            self._buf = bytearray(chunk[used:])
        out: list[RemotingCommand | BadCommand | tuple[Any, ...]] = []
        try:
            for item in items:
                out.append(decode_payload(item) if type(item) is bytes else item)
        except RemotingFrameError as e:
            self._broken = e
            raise
        if oversized >= 0:
            self._broken = self._oversized(oversized)
            raise self._broken
        return out
