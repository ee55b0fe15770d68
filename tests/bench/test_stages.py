"""bench.stages: py-spy's raw samples placed by stage, idle ones and worker threads apart."""

from __future__ import annotations

from bench.stages import WORKERS, stage_of, stages_us

RAW = [
    "run (trio/_core/_run.py:2532);ClientServer._read_loop (node/server.py:337);_decode_body (wire/framing.py:106) 30",
    "ClientServer._committer (node/server.py:415);ClientServer._deliver (node/server.py:479) 40",
    "run (trio/_core/_run.py:2532);EpollIOManager.get_events (trio/_core/_io_epoll.py:243) 500",
    "ClientServer._run (node/server.py:374);_send (node/ops/puts.py:136) 20",
    "ReputMessageService.run (store/reput.py:120);ReputMessageService._reput_segment (store/reput.py:169) 10",
    "Thread._bootstrap (threading.py:1002);MappedFile.flush (store/mapped_file.py:298) 900",
]


def test_each_sample_goes_to_its_stage_and_idle_ones_to_none():
    assert stage_of(RAW[0].rsplit(" ", 1)[0]) == "frames (CBOR decode / encode)"
    assert stage_of(RAW[1].rsplit(" ", 1)[0]) == "socket reads and writes (syscalls)"
    assert stage_of(RAW[2].rsplit(" ", 1)[0]) is None
    assert stage_of(RAW[3].rsplit(" ", 1)[0]) == "send handling (checks, message, failover)"
    assert stage_of(RAW[4].rsplit(" ", 1)[0]) == "dispatch (ConsumeQueue, index)"
    assert stage_of("x (store/commit_log.py:203)") == "store append (encode, CommitLog write)"
    assert stage_of("__init__ (<attrs generated methods wire.protocol.requests.Send>:3)") == \
        "request parsing and replies"
    counting = "counting (node/stats.py, node/metrics/: status and /metrics)"
    assert stage_of("_send (node/ops/puts.py:270);BrokerStats.add_put (node/stats.py:72);"
                    "MinuteCounter.add (node/stats.py:35)") == counting  # any frame of it, not only the leaf
    assert stage_of("GroupHistogram.observe (/work/main/node/metrics/histogram.py:40);bisect_left (<built-in>:0)") \
        == counting


def test_the_main_threads_cpu_is_shared_by_its_busy_samples_and_workers_count_by_cpu():
    out = stages_us(RAW, main_us=100.0, workers_us=12.0)
    # 100 busy samples of the main thread (the idle 500 and the worker's 900 are left out)
    assert out == {"socket reads and writes (syscalls)": 40.0, "frames (CBOR decode / encode)": 30.0,
                   "send handling (checks, message, failover)": 20.0, "dispatch (ConsumeQueue, index)": 10.0,
                   WORKERS: 12.0}
