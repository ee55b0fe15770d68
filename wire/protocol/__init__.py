"""The client protocol, sans-IO: bytes in, typed requests out; replies out as maps.

`codec.py` holds the rules every op shares (envelope, field types, statuses, the parser),
`requests.py` the node's ops and `namesrv.py` the name server's, one attrs class each,
`replies.py` the typed replies clients read. No sockets or trio here (same style as
h11/wsproto), so the codec is tested without I/O and reused by the client library and
tools. docs/protocol.md is the reference for ops and fields.
"""

from .codec import *  # noqa: F403
from .codec import (
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    MAX_GROUP_LENGTH,
    MAX_QUEUE_NUMS,
)
from .codec import __all__ as _codec_all
from .replies import *  # noqa: F403
from .replies import __all__ as _replies_all
from .requests import *  # noqa: F403
from .requests import __all__ as _requests_all

__all__ = [*_codec_all, *_requests_all, *_replies_all, "INT32_MAX", "INT64_MAX", "INT64_MIN", "MAX_GROUP_LENGTH", "MAX_QUEUE_NUMS"]
