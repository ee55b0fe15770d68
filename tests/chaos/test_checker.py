"""The checker finds what it must: stores written in-process with the real store, and
histories that claim more than the store holds."""

from __future__ import annotations

import random

import pytest

from chaos import disk
from chaos.expectations import Expectation, expectation, violations
from chaos.scenarios import SCENARIOS
from cluster.judge.checker import check
from cluster.judge.history import FAIL, INFO, OK, History, key_of
from store import Message, StoreConfig, open_store
from wire.protocol import WireTruncation

TOPIC = "ChaosTopic"


async def write_store(root: str, keys: list[str]) -> list[tuple[str, int, int, int]]:
    """Store one message per key (queue = index % 2); (key, queue, queue offset, offset)."""
    cfg = StoreConfig(store_path_root_dir=root, mapped_file_size_commit_log=64 * 1024,
                      mapped_file_size_consume_queue=20 * 200, max_hash_slot_num=100, max_index_num=400)
    out = []
    async with open_store(cfg) as store:
        for i, key in enumerate(keys):
            r = await store.put_message(Message(TOPIC, key.encode() * 4, queue_id=i % 2, keys=[key]))
            assert r.ok and r.append is not None
            out.append((key, i % 2, r.append.queue_offset, r.append.wrote_offset))
    return out


def history_of(stored: list[tuple[str, int, int, int]]) -> History:
    h = History()
    for key, queue, q_off, offset in stored:
        process, seq = int(key.split("-")[1][1:]), int(key.rsplit("-", 1)[1])
        op = h.invoke(process, seq, key)
        h.complete(op, OK, status="PUT_OK", msg_id="x", queue_id=queue, queue_offset=q_off, commitlog_offset=offset)
    return h


LOSSLESS = Expectation("SYNC_MASTER+SYNC_FLUSH", lossless=True, window_start=None, window="none")


async def test_clean_run_has_no_findings(tmp_path):
    keys = [key_of("r1", 0, s) for s in range(20)]
    stored = await write_store(str(tmp_path / "m"), keys)
    h = history_of(stored)
    report = check(h, {"broker-a": str(tmp_path / "m")}, master="broker-a", topic=TOPIC, queues=2)
    assert report.acked == 20 and report.losses == 0
    assert violations(report, LOSSLESS, caught_up=True, recovered=True) == []


async def test_acknowledged_but_missing_and_failed_but_stored(tmp_path):
    keys = [key_of("r1", 0, s) for s in range(10)]
    stored = await write_store(str(tmp_path / "m"), keys)
    h = history_of(stored[:-1])  # the last one is stored but the client was told it failed
    op = h.invoke(0, 9, keys[-1])
    h.complete(op, FAIL, status="SERVICE_NOT_AVAILABLE")
    ghost = h.invoke(0, 10, key_of("r1", 0, 10))  # acknowledged, never stored
    h.complete(ghost, OK, status="PUT_OK", queue_id=0, queue_offset=5, commitlog_offset=10_000)
    maybe = h.invoke(1, 0, key_of("r1", 1, 0))
    h.complete(maybe, INFO, error="timed out")
    report = check(h, {"broker-a": str(tmp_path / "m")}, master="broker-a", topic=TOPIC, queues=2)
    assert report.acked_missing == [ghost.key]
    assert report.failed_but_stored == [f"{keys[-1]} (SERVICE_NOT_AVAILABLE)"]
    assert (report.indeterminate, report.indeterminate_landed) == (1, 0)
    problems = violations(report, LOSSLESS, caught_up=True, recovered=True)
    assert any("missing on the master" in p for p in problems)
    assert any("stored anyway" in p for p in problems)
    # an async mode may lose what lies in its window, and only that
    window = Expectation("ASYNC_MASTER+ASYNC_FLUSH", lossless=False, window_start=9_000, window="w")
    assert not any("missing" in p for p in violations(report, window, caught_up=True, recovered=True))
    narrow = Expectation("ASYNC_MASTER+ASYNC_FLUSH", lossless=False, window_start=20_000, window="w")
    assert any("missing" in p for p in violations(report, narrow, caught_up=True, recovered=True))


async def test_after_a_promotion_only_what_the_old_master_dropped_may_be_missing(tmp_path):
    root = str(tmp_path / "new-master")
    h = history_of(await write_store(root, [key_of("r1", 0, s) for s in range(4)]))
    dropped_id, other_id = "7F000001000027100000000000001388", "7F000001000027100000000000001770"
    dropped = h.invoke(0, 4, key_of("r1", 0, 4))  # acknowledged by the old master, cut when it rejoined
    h.complete(dropped, OK, status="PUT_OK", msg_id=dropped_id, queue_id=0, queue_offset=2, commitlog_offset=5000)
    other = h.invoke(0, 5, key_of("r1", 0, 5))  # acknowledged, gone, and not in the report
    h.complete(other, OK, status="PUT_OK", msg_id=other_id, queue_id=1, queue_offset=2, commitlog_offset=6000)
    report = check(h, {"broker-a-s": root}, master="broker-a-s", topic=TOPIC, queues=2,
                   consumed={dropped.key: 5000, other.key: 6000})
    assert report.acked_missing == [dropped.key, other.key]
    truncation = WireTruncation(from_offset=5000, to_offset=5419, dropped_bytes=419, message_count=1,
                                msg_ids=[dropped_id])
    promotion = SCENARIOS["promote-under-load"]

    async_exp = expectation(promotion, "ASYNC_MASTER+ASYNC_FLUSH", None, truncation)
    assert dropped_id in async_exp.window and "[5000, 5419)" in async_exp.window
    problems = violations(report, async_exp, master="broker-a-s", caught_up=True, recovered=True)
    missing = [p for p in problems if "missing on the master" in p]
    assert len(missing) == 1 and other.key in missing[0] and dropped.key not in missing[0]
    consumed = [p for p in problems if "consumed" in p]
    assert len(consumed) == 1 and other.key in consumed[0] and dropped.key not in consumed[0]

    sync_exp = expectation(promotion, "SYNC_MASTER+ASYNC_FLUSH", None, truncation)  # a PUT_OK is never lost
    assert any("2 acknowledged message(s) missing" in p
               for p in violations(report, sync_exp, master="broker-a-s", caught_up=True, recovered=True))
    dropped.status = "FLUSH_SLAVE_TIMEOUT"  # stored on the old master only: may be cut, if reported
    report = check(h, {"broker-a-s": root}, master="broker-a-s", topic=TOPIC, queues=2)
    missing = [p for p in violations(report, sync_exp, master="broker-a-s", caught_up=True, recovered=True)
               if "missing on the master" in p]
    assert len(missing) == 1 and "1 acknowledged" in missing[0] and dropped.key not in missing[0]
    nothing_dropped = expectation(promotion, "ASYNC_MASTER+SYNC_FLUSH", None, None)
    assert any("2 acknowledged message(s) missing" in p
               for p in violations(report, nothing_dropped, master="broker-a-s", caught_up=True, recovered=True))


async def test_duplicates_order_and_divergence(tmp_path):
    keys = [key_of("r1", 0, s) for s in (0, 2, 1, 3)] + [key_of("r1", 0, 3)]  # out of order + a duplicate
    stored = await write_store(str(tmp_path / "m"), keys)
    await write_store(str(tmp_path / "s"), [key_of("r1", 0, s) for s in (0, 2, 9)])  # differs at the 3rd
    h = history_of(stored)
    report = check(h, {"broker-a": str(tmp_path / "m"), "broker-a-s": str(tmp_path / "s")},
                   master="broker-a", topic=TOPIC, queues=2)
    assert report.duplicates == [f"broker-a: {key_of('r1', 0, 3)}"]
    assert report.order_breaks == []  # per queue the seqs still rise: q0 0, 1, 3 and q1 2, 3
    assert report.divergence and "broker-a-s" in report.divergence[0]
    assert report.nodes["broker-a-s"].acked_missing  # the slave lacks what the master has


async def test_order_break_within_a_queue(tmp_path):
    keys = [key_of("r1", 0, s) for s in (0, 1, 4, 3, 2, 5)]  # queue 0 gets seqs 0, 4, 2: a break
    stored = await write_store(str(tmp_path / "m"), keys)
    report = check(history_of(stored), {"broker-a": str(tmp_path / "m")}, master="broker-a", topic=TOPIC, queues=2)
    assert report.order_breaks and "seq 2 after 4" in report.order_breaks[0]


async def test_a_retried_send_may_be_stored_as_often_as_its_client_said(tmp_path):
    """A send that succeeded after attempts of unknown outcome (`Op.copies`) may be stored
    that many times, in any order against its producer's other sends; one stored more often
    than that, or a send with no retry stored twice, is a duplicate."""
    retried, plain = key_of("r1", 0, 1), key_of("r1", 0, 2)
    keys = [key_of("r1", 0, 0), retried, plain, retried, retried, plain]  # q0: 0 p p; q1: r r r ... reorder
    stored = await write_store(str(tmp_path / "m"), [keys[i] for i in (0, 2, 1, 3, 5, 4)])
    h = history_of([next(s for s in stored if s[0] == k) for k in dict.fromkeys(keys)])
    h.ops[1].copies = 3
    report = check(h, {"broker-a": str(tmp_path / "m")}, master="broker-a", topic=TOPIC, queues=2)
    assert report.duplicates == [f"broker-a: {plain}"]  # the retried key's three copies are allowed
    assert report.order_breaks == []  # its late copies break no order
    h.ops[1].copies = 2
    report = check(h, {"broker-a": str(tmp_path / "m")}, master="broker-a", topic=TOPIC, queues=2)
    assert sorted(report.duplicates) == sorted([f"broker-a: {plain}", f"broker-a: {retried}"])


async def test_crc_damage_is_reported(tmp_path):
    root = str(tmp_path / "m")
    stored = await write_store(root, [key_of("r1", 0, s) for s in range(6)])
    disk.tear_tail(root, random.Random(1))  # the last record cut short, nothing recovered it
    report = check(history_of(stored), {"broker-a": root}, master="broker-a", topic=TOPIC, queues=2)
    assert report.damage or report.crc_failures or report.contiguity_breaks
    assert violations(report, LOSSLESS, caught_up=True, recovered=True)


@pytest.mark.parametrize("seed", [1, 2])
def test_a_seed_replays_its_schedule(seed):
    from chaos.runner import make_schedule

    a = make_schedule(random.Random(f"kill-master:{seed}"), 10.0)
    b = make_schedule(random.Random(f"kill-master:{seed}"), 10.0)
    assert a == b and 2.0 <= a["fault_at"] <= 3.5
