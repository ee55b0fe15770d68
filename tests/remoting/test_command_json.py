"""The remoting JSON header is written out by hand (wire/remoting/command.py) for speed:
it must be the bytes json.dumps(sort_keys=True, compact, ensure_ascii=False) gives, which
is what the C++ client and Java's fastjson read."""

from __future__ import annotations

import json

import pytest

from wire.remoting.command import CommandDecoder, RemotingCommand, SerializeType, encode_command


def _reference(cmd: RemotingCommand) -> bytes:
    header = {"code": cmd.code, "flag": cmd.flag, "language": cmd.language, "opaque": cmd.opaque,
              "serializeTypeCurrentRPC": cmd.serialize_type.name, "version": cmd.version}
    if cmd.ext_fields is not None:
        header["extFields"] = cmd.ext_fields
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    return json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@pytest.mark.parametrize("cmd", [
    RemotingCommand(0),
    RemotingCommand(10, -5, 3, 'é "quoted"\n\u2028\x01 \\', {"b": "1", "A": "ü\\", "a": "", "é": "q\t"},
                    language="CPP", version=63),
    RemotingCommand(1, 2**31 - 1, 1, "", {}),
    RemotingCommand(0, 7, 1, None, {"msgId": "7F00000100002A9F0000000000000000", "queueId": "1",
                                    "queueOffset": "42", "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}),
])
def test_the_written_out_header_is_json_dumps_sorted(cmd: RemotingCommand) -> None:
    frame = encode_command(cmd)
    header_len = int.from_bytes(frame[4:8], "big")
    assert frame[8:8 + header_len] == _reference(cmd)
    (back,) = CommandDecoder().feed(frame)
    assert back == cmd


def test_a_number_or_boolean_in_ext_fields_reads_as_its_text() -> None:
    header = json.dumps({"code": 10, "opaque": 1, "extFields": {"queueId": 3, "batch": True, "t": "x"}}).encode()
    frame = (4 + len(header)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header
    (cmd,) = CommandDecoder().feed(frame)
    assert cmd.ext_fields == {"queueId": "3", "batch": "true", "t": "x"}
    assert cmd.serialize_type is SerializeType.JSON
