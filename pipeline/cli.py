"""`tidemq pipeline export | stats | audit`: Spark jobs over store directories or a live
cluster, each showing its progress on stderr (stage and task counts while it runs).

Exit codes: 0 done (audit: clean), 1 the job ran and found a problem (audit: a bad CRC,
damage or divergence; export/stats: the data could not be read to the end), 2 usage or
unusable input (not a store, bad option), 143 / 130 stopped by SIGTERM / Ctrl-C (the
running Spark jobs are cancelled and the local JVM stopped; an export's output may be
partial). Errors are one message on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import logging
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

import psutil

from store.layout import StoreToolError


def add_commands(subparsers: Any) -> None:
    """Register the `pipeline` command group."""
    group = subparsers.add_parser("pipeline", help="Spark jobs: export, stats, audit",
                                  description="Spark jobs over store directories or a live cluster.")
    sub = group.add_subparsers(dest="pipeline_command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
        p.add_argument("--quiet", action="store_true", help="no progress lines")

    ex = sub.add_parser("export", help="write a topic's messages to parquet or json")
    ex.add_argument("source", metavar="STORE_OR_NAMESRV",
                    help="store directory (glob, comma-separated list) or name server host:port")
    ex.add_argument("--topic", help="the topic (required for a name server; default: all topics of a store)")
    ex.add_argument("--to", required=True, help="output path (a directory of parquet or json files)")
    ex.add_argument("--format", choices=("parquet", "json"), help="default: from --to's extension, else parquet")
    ex.add_argument("--start-time", help="store time from (ms since the epoch or ISO-8601)")
    ex.add_argument("--end-time", help="store time until (inclusive)")
    ex.add_argument("--overwrite", action="store_true", help="replace --to if it exists")
    common(ex)
    ex.set_defaults(handler=_needs_spark(_export))

    st = sub.add_parser("stats", help="per topic: counts, bytes, store-time histogram, top keys")
    st.add_argument("source", metavar="STORE_OR_NAMESRV")
    st.add_argument("--topic", help="one topic (required for a name server)")
    st.add_argument("--png", help="write a chart of messages by store time to this PNG file")
    st.add_argument("--bins", type=int, default=24, help="histogram buckets (default 24)")
    st.add_argument("--top", type=int, default=5, help="top keys per topic (default 5)")
    st.add_argument("--json", action="store_true", help="print JSON instead of a table")
    common(st)
    st.set_defaults(handler=_needs_spark(_stats))

    au = sub.add_parser("audit", help="CRC of every record; divergence between the nodes of a group")
    au.add_argument("stores", nargs="+", metavar="STORE",
                    help="store directories (one per node of a group to compare them)")
    au.add_argument("--json", action="store_true", help="print JSON instead of a summary")
    common(au)
    au.set_defaults(handler=_needs_spark(_audit))


def _needs_spark(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """The action, or exit 2 naming the extra when PySpark or pyarrow is not installed (a
    plain `pip install tidemq` has neither), before any job module imports them."""

    def run(args: argparse.Namespace) -> int:
        missing = [m for m in ("pyspark", "pyarrow") if importlib.util.find_spec(m) is None]
        if missing:
            print(f"tidemq pipeline needs {' and '.join(missing)}: pip install 'tidemq[spark]'",
                  file=sys.stderr)
            return 2
        return handler(args)

    return run


def _session(args: argparse.Namespace) -> Any:
    from pipeline import local_session

    return local_session(f"tidemq-pipeline-{args.pipeline_command}", master=args.master,
                         **{"spark.ui.showConsoleProgress": "false"})


class _Stopped(Exception):
    """SIGTERM or SIGINT arrived while the job ran."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop_children() -> None:
    """The local JVM (and its helpers) this process started: stopped when the session could
    not stop them (a signal during start-up leaves a gateway no one talks to)."""
    children = psutil.Process().children(recursive=True)
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.terminate()
    _, alive = psutil.wait_procs(children, timeout=5)
    for child in alive:
        with contextlib.suppress(psutil.Error):
            child.kill()


def _silence_jvm_stderr(spark: Any) -> None:
    """Point the JVM's System.err at nothing: while a cancelled job stops, Spark's thread
    pools may reject a task and print the stack trace straight to it (no logger to turn off)."""
    jvm = spark.sparkContext._jvm
    jvm.java.lang.System.setErr(jvm.java.io.PrintStream(jvm.java.io.OutputStream.nullOutputStream()))


class _JobRun:
    """One job on a worker thread, so the main thread stays free for signals: a Py4J call
    must not be interrupted mid-answer (its connection would be left out of step), so a
    signal cancels the Spark jobs through a connection of the main thread's own, and the
    job's thread ends with the cancellation."""

    def __init__(self, args: argparse.Namespace, job: Any, borrowed: bool) -> None:
        self.args, self.job, self.borrowed = args, job, borrowed
        self.spark: Any = None
        self.code = 1
        self.error: BaseException | None = None
        self.stopping = threading.Event()

    def work(self) -> None:
        try:
            if not self.args.quiet and not self.borrowed:
                print(f"tidemq pipeline {self.args.pipeline_command}: starting Spark ({self.args.master})",
                      file=sys.stderr, flush=True)
            self.spark = _session(self.args)
            if not self.stopping.is_set():
                self.code = _job(self.args, self.job, self.spark, self.stopping)
        except BaseException as e:  # handed to the main thread (unless it is stopping anyway)
            self.error = e

    def stop(self, signum: int) -> int:
        """Cancel, stop the session and the JVM, say so in one line: 128 + the signal."""
        self.stopping.set()
        logging.getLogger("py4j").setLevel(logging.CRITICAL + 1)  # the job's calls fail as the JVM goes
        logging.getLogger().setLevel(logging.CRITICAL + 1)  # and some of py4j's log on the root logger
        previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            if self.spark is not None:
                with contextlib.suppress(Exception):
                    self.spark.sparkContext.setLogLevel("OFF")  # cancelled tasks log stack traces
                with contextlib.suppress(Exception):  # and a pool shut down under a task prints one
                    _silence_jvm_stderr(self.spark)
                with contextlib.suppress(Exception):
                    self.spark.sparkContext.cancelAllJobs()
            if not self.borrowed:
                if self.spark is not None:
                    with contextlib.suppress(Exception):
                        self.spark.stop()
                _stop_children()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        command = self.args.pipeline_command
        print(f"tidemq pipeline {command}: stopped by {signal.Signals(signum).name}"
              + ("; the output under --to may be partial" if command == "export" else ""),
              file=sys.stderr, flush=True)
        return 128 + signum


def _run(args: argparse.Namespace, job: Any) -> int:
    """Run `job(spark)` with progress shown; map failures to exit codes and one message;
    SIGTERM / Ctrl-C cancel the Spark jobs, stop the session and exit 143 / 130."""
    from pyspark.sql import SparkSession

    borrowed = SparkSession.getActiveSession() is not None  # e.g. called from a notebook
    run = _JobRun(args, job, borrowed)
    worker = threading.Thread(target=run.work, name="tidemq-pipeline-job", daemon=True)

    def on_signal(signum: int, frame: Any) -> None:
        raise _Stopped(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        worker.start()
        worker.join()  # interrupted by a signal's _Stopped
    except _Stopped as e:
        return run.stop(e.signum)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if not run.stopping.is_set() and run.spark is not None and not borrowed:
            run.spark.stop()
    if run.error is not None:
        raise run.error
    return run.code


def _job(args: argparse.Namespace, job: Any, spark: Any, stopping: threading.Event) -> int:
    from pipeline.jobs import Progress

    try:
        if args.quiet:
            return job(spark)
        with Progress(spark, args.pipeline_command, sys.stderr):
            return job(spark)
    except (StoreToolError, ValueError) as e:
        if not stopping.is_set():
            print(f"tidemq pipeline {args.pipeline_command}: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # a Spark job failed: its first meaningful line (not when cancelled by a stop)
        if not stopping.is_set():
            print(f"tidemq pipeline {args.pipeline_command}: {_reason(e)}", file=sys.stderr)
        return 2 if "does not exist" in str(e) or "is not a store" in str(e) else 1


def _reason(e: BaseException) -> str:
    """The Python error inside a Spark exception (its last `SomeError: message` line)."""
    text = str(e)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ("Error:" in ln or "Exception:" in ln) and not ln.startswith("at "):
            return ln
    return lines[0] if lines else type(e).__name__


def _time_options(args: argparse.Namespace) -> dict[str, str]:
    out = {}
    if getattr(args, "start_time", None):
        out["startTime"] = args.start_time
    if getattr(args, "end_time", None):
        out["endTime"] = args.end_time
    return out


def _export(args: argparse.Namespace) -> int:
    from pipeline import jobs

    def job(spark: Any) -> int:
        result = jobs.export(spark, args.source, args.topic, args.to, fmt=args.format,
                             options=_time_options(args), overwrite=args.overwrite)
        print(json.dumps(result))
        return 0

    return _run(args, job)


def _stats(args: argparse.Namespace) -> int:
    from pipeline import jobs

    if args.bins < 1 or args.top < 0:
        print("tidemq pipeline stats: --bins must be >= 1 and --top >= 0", file=sys.stderr)
        return 2

    def job(spark: Any) -> int:
        result = jobs.stats(spark, args.source, args.topic, bins=args.bins, top=args.top)
        if args.png:
            jobs.stats_chart(result, args.png)
            result["png"] = args.png
        print(json.dumps(result) if args.json else _stats_table(result))
        return 0

    return _run(args, job)


def _stats_table(result: dict[str, Any]) -> str:
    import datetime as dt

    def when(ms: int) -> str:
        return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")

    lines = [f"{'topic':<24} {'messages':>10} {'bytes':>14} {'first stored':>20} {'last stored':>20}  top keys"]
    for name, t in sorted(result["topics"].items()):
        keys = ", ".join(f"{k} ({n})" for k, n in t["top_keys"])
        lines.append(f"{name:<24} {t['messages']:>10} {t['bytes']:>14} {when(t['first_store_timestamp']):>20} "
                     f"{when(t['last_store_timestamp']):>20}  {keys}")
    if not result["topics"]:
        lines.append("(no messages)")
    if result.get("png"):
        lines.append(f"chart: {result['png']}")
    return "\n".join(lines)


def _audit(args: argparse.Namespace) -> int:
    from pipeline import jobs

    def job(spark: Any) -> int:
        result = jobs.audit(spark, args.stores)
        print(json.dumps(result) if args.json else _audit_summary(result))
        return 0 if result["clean"] else 1

    return _run(args, job)


def _audit_summary(result: dict[str, Any]) -> str:
    lines = []
    for store, s in result["stores"].items():
        lines.append(f"{store}: {s['records']} records, {s['bad_crc']} bad CRC, {s['problems']} problems, "
                     f"end offset {s['end_offset']}")
    for p in result["problems"]:
        lines.append(f"  problem: {p['problem']}")
    d = result["divergence"]
    if d["compared"]:
        if d["records"]:
            lines.append(f"DIVERGED: {d['records']} record(s) differ in the common range {d['common_range']}; "
                         f"first at offset {d['first_offset']}")
            for ex in d["examples"]:
                lines.append(f"  offset {ex['offset']}: {ex['records']}")
        else:
            lines.append(f"no divergence in the common range {d['common_range']}")
    lines.append("clean" if result["clean"] else "NOT CLEAN")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tidemq")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
