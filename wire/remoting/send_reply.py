"""A stored send's answer frame written from a template: the bytes `encode_command` gives
for the broker's SendMessageResponseHeader answer in JSON (tests/remoting/test_fast_send.py
checks it), without building the RemotingCommand and its header map per send; in C when
the compiled codec is built (wire/_remoting_codec.pyx), else `reference_send_reply_frame`."""

from __future__ import annotations

import json
import struct
from typing import Any

from .command import SERVER_VERSION
from .plain_send import COMPILED

__all__ = ["reference_send_reply_frame", "send_reply_frame"]

_UINT32 = struct.Struct(">I")
_quote: Any = json.encoder.encode_basestring


def send_reply_frame(code: int, opaque: int, msg_id: str, queue_id: int, queue_offset: int, region: str) -> bytes:
    """The templated answer: the compiled one when built and the ids need no escape."""
    if COMPILED is not None:
        frame: bytes | None = COMPILED.send_reply_frame(int(code), opaque, msg_id, queue_id, queue_offset, region,
                                                        SERVER_VERSION)
        if frame is not None:
            return frame
    return reference_send_reply_frame(code, opaque, msg_id, queue_id, queue_offset, region)


def reference_send_reply_frame(code: int, opaque: int, msg_id: str, queue_id: int, queue_offset: int,
                               region: str) -> bytes:
    """`encode_command(request.response(code, ext_fields={"msgId", "queueId",
    "queueOffset", "MSG_REGION", "TRACE_ON": "true"}))` of a JSON request: the extFields
    sorted, as `json.dumps(sort_keys=True)` writes them."""
    header = (f'{{"code":{int(code)},"extFields":{{"MSG_REGION":{_quote(region)},"TRACE_ON":"true",'
              f'"msgId":{_quote(msg_id)},"queueId":"{queue_id}","queueOffset":"{queue_offset}"}},"flag":1,'
              f'"language":"JAVA","opaque":{opaque},"serializeTypeCurrentRPC":"JSON","version":{SERVER_VERSION}}}'
              ).encode()
    n = len(header)
    return _UINT32.pack(4 + n) + _UINT32.pack(n) + header
