"""A stored send's answer frame written from a template: the bytes `encode_command` gives
for the broker's SendMessageResponseHeader answer in JSON (tests/remoting/test_fast_send.py
checks it), without building the RemotingCommand and its header map per send."""

from __future__ import annotations

import json
import struct
from typing import Any

from .command import SERVER_VERSION

__all__ = ["send_reply_frame"]

_UINT32 = struct.Struct(">I")
_quote: Any = json.encoder.encode_basestring


def send_reply_frame(code: int, opaque: int, msg_id: str, queue_id: int, queue_offset: int, region: str) -> bytes:
    """`encode_command(request.response(code, ext_fields={"msgId", "queueId",
    "queueOffset", "MSG_REGION", "TRACE_ON": "true"}))` of a JSON request: the extFields
    sorted, as `json.dumps(sort_keys=True)` writes them."""
    header = (f'{{"code":{int(code)},"extFields":{{"MSG_REGION":{_quote(region)},"TRACE_ON":"true",'
              f'"msgId":{_quote(msg_id)},"queueId":"{queue_id}","queueOffset":"{queue_offset}"}},"flag":1,'
              f'"language":"JAVA","opaque":{opaque},"serializeTypeCurrentRPC":"JSON","version":{SERVER_VERSION}}}'
              ).encode()
    n = len(header)
    return _UINT32.pack(4 + n) + _UINT32.pack(n) + header
