"""Reading a request's custom header (its extFields) as RocketMQ's CommandCustomHeader
classes do: required fields, integers, longs and booleans from their text.

`HeaderError` is what Java answers a missing @CFNotNull field or an unparsable number with
(SYSTEM_ERROR, with the field named). Booleans are true for "true" (any case), as Java's
`Boolean.parseBoolean` reads them, and also for "1": the C++ client 1.2.3 sends its booleans
as "0"/"1", and Java reading "1" as false is what stores a C++ batch as one message
(rocketmq-client-cpp#189, #363).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import attrs

from .codes import RequestCode

__all__ = ["V2_NAMES", "HeaderError", "SendHeader", "ext_bool", "ext_int", "ext_str", "send_header", "v1_names"]


class HeaderError(ValueError):
    """A request header field is missing or malformed."""


_JAVA_INT = re.compile(r"[+-]?[0-9]+")
"""What Java's Integer/Long.parseLong take: ASCII digits and a sign. Python's int() also
takes spaces, underscores and other scripts' digits ("1_0", " 5", "٥"), which a Java
broker refuses."""


def ext_str(ext: Mapping[str, str] | None, name: str, default: str | None = None) -> str:
    value = None if ext is None else ext.get(name)
    if value is None:
        if default is None:
            raise HeaderError(f"the custom header field {name!r} is null")
        return default
    return value


def ext_int(ext: Mapping[str, str] | None, name: str, default: int | None = None) -> int:
    value = None if ext is None else ext.get(name)
    if value is None or value == "":
        if default is None:
            raise HeaderError(f"the custom header field {name!r} is null")
        return default
    if _JAVA_INT.fullmatch(value) is None or len(value) > 20:
        raise HeaderError(f"the custom header field {name!r} is not an integer: {value!r}")
    return int(value)


def ext_bool(ext: Mapping[str, str] | None, name: str) -> bool:
    value = None if ext is None else ext.get(name)
    return value is not None and (value.lower() == "true" or value == "1")


V2_NAMES = {"a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums", "e": "queueId",
             "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes",
             "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch", "n": "bname"}
"""SendMessageRequestHeaderV2's one-letter keys (codes 310 and 320) and the V1 names."""


def v1_names(ext: Mapping[str, str]) -> dict[str, str]:
    """A V2 send header's extFields under their V1 names."""
    return {V2_NAMES.get(k, k): v for k, v in ext.items()}


@attrs.frozen
class SendHeader:
    """SendMessageRequestHeader, from either form."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str
    reconsume_times: int
    batch: bool
    max_reconsume_times: int | None


def send_header(code: int, ext: Mapping[str, str] | None) -> SendHeader:
    """The send header of a SEND_MESSAGE (long names) or SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE
    (one-letter names) request. A V2 batch is a batch whatever its `m` says."""
    if code != RequestCode.SEND_MESSAGE and ext is not None:
        ext = v1_names(ext)
    max_reconsume = None if ext is None or not ext.get("maxReconsumeTimes") else ext_int(ext, "maxReconsumeTimes")
    return SendHeader(
        producer_group=ext_str(ext, "producerGroup"), topic=ext_str(ext, "topic"),
        default_topic=ext_str(ext, "defaultTopic", ""), default_topic_queue_nums=ext_int(ext, "defaultTopicQueueNums", 4),
        queue_id=ext_int(ext, "queueId"), sys_flag=ext_int(ext, "sysFlag", 0),
        born_timestamp=ext_int(ext, "bornTimestamp", 0), flag=ext_int(ext, "flag", 0),
        properties=ext_str(ext, "properties", ""), reconsume_times=ext_int(ext, "reconsumeTimes", 0),
        batch=code == RequestCode.SEND_BATCH_MESSAGE or ext_bool(ext, "batch"),
        max_reconsume_times=max_reconsume)
