"""The launcher's web console: `tidemq cluster up --console` starts `tidemq console` beside
the cluster (cluster/console/), `down` stops it, `status` prints its URL.

It runs detached (its own session) with its log in `<base-dir>/logs/console.out`;
`<base-dir>/console.json` records pid, start time and URL, so a later `up` finds it running
and `down` stops it. It listens on 127.0.0.1, on --console-port or a free port.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from .layout import free_port
from .processes import terminate
from .state import LauncherError

__all__ = ["CONSOLE_STATE", "console_url", "start_console", "stop_console"]

CONSOLE_STATE = "console.json"
_READY = "console: "


def _running(base: Path) -> tuple[psutil.Process, str] | None:
    """The recorded console's process and URL while that process lives."""
    try:
        state = json.loads((base / CONSOLE_STATE).read_text())
        proc = psutil.Process(state["pid"])
        if abs(proc.create_time() - state["create_time"]) > 1 or proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc, str(state["url"])
    except (OSError, ValueError, KeyError, psutil.Error):
        return None


def console_url(base: str | os.PathLike[str]) -> str | None:
    """The running console's URL, or None."""
    running = _running(Path(base).resolve())
    return running[1] if running else None


def start_console(base: Path, namesrv: str, *, port: int = 0, timeout_s: float = 30.0,
                  env: dict[str, str] | None = None, login: bool = False) -> str:
    """Start the console for the name server `namesrv` unless it runs; a sentence saying
    which, with its URL. `env` adds to its environment (a secure layout's CA); `login`:
    its users log in with their own accounts. LauncherError (with its log's tail) when it
    does not come up."""
    running = _running(base)
    if running is not None:
        return f"console        running  {running[1]} pid {running[0].pid}"
    logs = base / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / "console.out"
    argv = [sys.executable, "-m", "tidemq", "console", "--namesrv", namesrv, "--port", str(port or free_port()),
            *(["--login"] if login else [])]
    with open(log_path, "ab") as out:
        offset = out.tell()
        proc = subprocess.Popen(argv, cwd=base, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                env={**os.environ, **(env or {})},
                                start_new_session=True)  # own session: outlives the launcher
    deadline = time.monotonic() + timeout_s
    url = None
    while url is None:
        with open(log_path, "rb") as f:
            f.seek(offset)
            text = f.read().decode("utf-8", errors="replace")
        url = next((line[len(_READY):].strip() for line in text.splitlines() if line.startswith(_READY)), None)
        if url is not None:
            break
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            tail = "\n".join(text.strip().splitlines()[-5:]) or "(no output)"
            raise LauncherError(f"the console did not start (log {log_path}):\n{tail}")
        time.sleep(0.1)  # poll: the console writes its URL line once it listens
    (base / CONSOLE_STATE).write_text(json.dumps({"pid": proc.pid, "url": url,
                                                   "create_time": psutil.Process(proc.pid).create_time()}))
    return f"console        started  {url} pid {proc.pid}"


def stop_console(base: Path, grace_s: float = 10.0) -> str | None:
    """Stop the recorded console (SIGTERM, then SIGKILL after `grace_s`); None if none runs."""
    running = _running(base)
    if running is None:
        return None
    proc = running[0]
    how = terminate(proc, grace_s)
    os.remove(base / CONSOLE_STATE)
    return f"console        pid {proc.pid} {how}"
