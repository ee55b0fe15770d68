"""The remoting send fast path: the common SEND_MESSAGE / SEND_MESSAGE_V2 (one message, not
compressed, not transactional, no DELAY, a JSON header, to a topic this server's schema
already found valid) read straight into a record with its properties
(store.record_codec.prepare_plain, compiled), and answered from a template
(wire/remoting/send_reply.py): no SendHeader, no CBOR op map, no schema parse, no Message,
no RemotingCommand for the answer.

Two readers feed it (wire/remoting/plain_send.py): with the compiled codec built, the
server's decoder reads such a frame's JSON header straight to a RemotingSend and hands a
receive's run of them to NodeRemoting.plain_sends (one write check for the run, as the CBOR path's
plain sends); without it, `fast_send` reads each decoded command's extFields with the
reference `plain_send`. Either takes only what the reference path (sends.py through the
CBOR send's schema and handler) would store the same way; anything else (a topic not yet
checked, a queue out of range, a refusal) takes the reference path, which answers it word
for word. tests/remoting/test_fast_send.py sends the same frames both ways and compares
the stored records and the answers byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from wire.remoting.command import RemotingCommand, SerializeType
from wire.remoting.plain_send import RemotingSend, plain_send
from wire.remoting.send_reply import send_reply_frame

from ..ops.puts import prepare_remoting_sends
from .answers import response_code
from .channel import GroupedSend, ProcessorContext, RemotingChannel

__all__ = ["REGION_ID", "fast_send", "reply_frame"]

REGION_ID = "DefaultRegion"

def reply_frame(opaque: int, status: str, msg_id: str, queue_id: int, queue_offset: int) -> bytes:
    """A stored send's answer frame, from the template."""
    return send_reply_frame(response_code(status), opaque, msg_id, queue_id, queue_offset, REGION_ID)


async def fast_send(proc: ProcessorContext, cmd: RemotingCommand, channel: RemotingChannel,
                    answer: Callable[[dict[str, Any] | bytes], RemotingCommand | bytes]) -> GroupedSend | None:
    """One decoded send checked and encoded for the server's turn, or None for the
    reference path (the reader when the compiled codec is not built)."""
    if cmd.serialize_type is not SerializeType.JSON:
        return None
    fields = plain_send(cmd.code, cmd.ext_fields, cmd.body, proc.checked_topics)
    if fields is None:
        return None
    send = RemotingSend(cmd.code, cmd.opaque, cmd.is_oneway, *fields, cmd.body, b"")  # (no header: `cmd` is it)
    (pending,) = await prepare_remoting_sends(proc.services, [send], channel.peer, reply_frame)
    return None if pending is None else GroupedSend(pending, answer, proc.services)
