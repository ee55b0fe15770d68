"""SYSFLAG bits of a CommitLog record (RocketMQ 4.x MessageSysFlag): compression, multiple
tags, the transaction state, and which hosts are IPv6 (their fields are then 20 bytes, not 8,
so every reader of a record's fixed part needs them). The record codec, puts, dispatch and the
transaction checks read them.
"""

from __future__ import annotations

import enum


class SysFlag(enum.IntFlag):
    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_PREPARED = 0x4
    TRANSACTION_COMMIT = 0x8
    TRANSACTION_ROLLBACK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20


TRANSACTION_MASK = 0xC
# plain ints for the hot paths (IntFlag arithmetic costs microseconds per record)
BORNHOST_V6_FLAG = 0x10
STOREHOST_V6_FLAG = 0x20
TRANSACTION_NOT = 0x0


def transaction_type(sys_flag: int) -> int:
    return sys_flag & TRANSACTION_MASK
