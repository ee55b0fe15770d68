"""A Spark standalone cluster on this machine: a master and workers started as processes
with the pyspark distribution's `spark-class` (org.apache.spark.deploy.master.Master and
...worker.Worker), on 127.0.0.1. What `tidemq pipeline ... --master spark://...` and
`local_session(master=...)` run on when local[2] is outgrown; the tests use it to run
the data source, the sink and the jobs on two workers.

    with StandaloneCluster(workdir, workers=2) as url:
        spark = local_session(master=url)

On several machines, start the same two classes there (docs/pipeline.md says what the
executors then need: the store path on each worker, or live reads through the name server).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
import urllib.request
from pathlib import Path
from types import TracebackType

import psutil

from cluster.launch.layout import free_port as _free_port


def spark_class() -> str:
    """The `spark-class` launcher of the installed pyspark."""
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")


class StandaloneCluster:
    """A master and `workers` workers (`cores` and `memory` each) until the block ends;
    `java_options` are added to their JVMs' options (SPARK_DAEMON_JAVA_OPTS)."""

    def __init__(self, workdir: str | Path, *, workers: int = 2, cores: int = 1, memory: str = "1g",
                 timeout: float = 90.0, java_options: str = "") -> None:
        self.workdir = Path(workdir)
        self.workers, self.cores, self.memory, self.timeout = workers, cores, memory, timeout
        self.java_options = java_options
        self.port, self.ui_port = _free_port(), _free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []  # (main class, process)

    def __enter__(self) -> str:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self.url

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def worker_dirs(self) -> list[Path]:
        return [self.workdir / f"worker-{i}" for i in range(self.workers)]

    def start(self) -> None:
        from pipeline import spark_cds

        self.workdir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SPARK_LOG_DIR": str(self.workdir / "logs"), "SPARK_NO_DAEMONIZE": "1",
               "SPARK_LOCAL_IP": "127.0.0.1"}
        # the master's and workers' JVMs map Spark's classes from the local session's archive
        # (pipeline.spark_cds; this machine's Java and jars): each starts seconds sooner
        options = f"{env.get('SPARK_DAEMON_JAVA_OPTS', '')} {self.java_options} {spark_cds.java_options()}".strip()
        if options:
            env["SPARK_DAEMON_JAVA_OPTS"] = " ".join(options.split())
        self._spawn("master", [spark_class(), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(self.port), "--webui-port", str(self.ui_port)], env)
        self._wait(lambda state: state.get("status") == "ALIVE", "the master")
        for i, wdir in enumerate(self.worker_dirs()):
            wdir.mkdir(parents=True, exist_ok=True)
            self._spawn(f"worker-{i}", [
                spark_class(), "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                "--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(wdir),
                "--webui-port", str(_free_port())], env)
        self._wait(lambda state: sum(w.get("state") == "ALIVE" for w in state.get("workers", ())) >= self.workers,
                   f"{self.workers} workers")

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str]) -> None:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 (the process keeps it)
        self.procs.append((cmd[1], subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                    stdin=subprocess.DEVNULL, env=env, start_new_session=True)))
        log.close()

    def state(self) -> dict:
        """The master's JSON view (workers, applications). The port picked for its web UI
        can be taken by another process before the master binds it (Spark then moves to the
        next port, and another Spark UI answers here with HTML): the port the master logs
        it bound wins, and an answer that is not JSON is "not up yet" (ValueError)."""
        log = self.workdir / "master.log"
        bound, ui_bound = _logged_port(log, b"sparkMaster"), _logged_port(log, b"MasterUI")
        if bound is not None and bound != self.port:  # the same race for the master's own port
            self.port, self.url = bound, f"spark://127.0.0.1:{bound}"
        if ui_bound is not None:
            self.ui_port = ui_bound
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            return json.loads(r.read())

    def _wait(self, ready, what: str) -> None:  # noqa: ANN001
        deadline = time.monotonic() + self.timeout
        while True:
            for main_class, p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"Spark standalone: a process exited ({main_class}, code {p.returncode}); "
                                       f"see {self.workdir}/*.log")
            try:
                if ready(self.state()):
                    return
            except OSError:
                pass  # not listening yet
            except ValueError:
                pass  # another server on the port we picked: the master's log names its own
            if time.monotonic() > deadline:
                raise TimeoutError(f"Spark standalone: {what} not up within {self.timeout:.0f} s; see {self.workdir}/*.log")
            time.sleep(0.2)  # poll

    def stop(self) -> None:
        """Stop the processes (and the executors the workers started)."""
        for _, p in reversed(self.procs):
            try:
                family = [psutil.Process(p.pid), *psutil.Process(p.pid).children(recursive=True)]
            except psutil.Error:
                continue
            for proc in family:
                with contextlib.suppress(psutil.Error):
                    proc.terminate()
            psutil.wait_procs(family, timeout=10)
            for proc in family:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
        self.procs.clear()


def _logged_port(log: Path, service: bytes) -> int | None:
    """The port the standalone master says it bound `service` to (None before it says so)."""
    try:
        found = re.search(rb"Successfully started service '" + service + rb"' on port (\d+)", log.read_bytes())
    except OSError:
        return None
    return int(found.group(1)) if found else None
