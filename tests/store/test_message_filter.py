"""The store's `message_filter` hook on pulls (RocketMQ's isMatchedByCommitLog): asked after
the tags, a refused message is skipped, and the next offset still passes it."""

from __future__ import annotations

from store import GetMessageStatus, Message, open_store
from tests.store.test_read_api import make_config, put_all


async def test_message_filter_skips_refused_messages_and_moves_past_them(tmp_path):
    async with open_store(make_config(tmp_path)) as store:
        await put_all(store, [Message("T", f"m{i}".encode(), queue_id=0, tags="even" if i % 2 == 0 else "odd",
                                      properties={"n": str(i)}) for i in range(8)])
        asked = []

        def big(m) -> bool:
            asked.append(m.body)
            return int(m.properties["n"]) >= 4

        res = store.get_message("g", "T", 0, 0, 32, "even", big)
        assert res.status is GetMessageStatus.FOUND
        assert [m.body for m in res.messages] == [b"m4", b"m6"]
        assert asked == [b"m0", b"m2", b"m4", b"m6"], "only what the tags let through is asked"
        assert res.next_begin_offset == 8
        none = store.get_message("g", "T", 0, 0, 32, None, lambda m: False)
        assert (none.status, none.messages, none.next_begin_offset) == (GetMessageStatus.NO_MATCHED_MESSAGE, [], 8)
