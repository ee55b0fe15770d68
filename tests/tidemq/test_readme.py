"""Every command block of README.md runs, as written, on a fresh cluster of real processes.

The README's convention (stated at its top): every ```sh block runs top to bottom from the
repository root once `scripts/run` has started the default cluster (conf/1m-1s-dev under
./data), unless the line before it is `<!-- readme-test: skip (why) -->`; every ```python
block runs the same way with the venv's python; other blocks (```text, ```toml) are output
or configuration and never run.

So the README cannot drift: a renamed flag, a port no default node has, a path where no store
lives, a msgId no node produced, fails here. The test runs the README in a scratch directory
whose conf/1m-1s-dev is the real one with free ports (so it never meets a cluster already on
the default ports); the default ports in the commands, also inside msgIds, are rewritten to
the copy's. `scripts/` is the real one (symlinked), `data/` the scratch cluster's.

The same run is `scripts/run`'s end-to-end test (one run of it in the suite, not two): what
it prints, that a second run reuses the running cluster, and that `scripts/run --stop`
stops every node it started, gracefully.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from cluster.launch import launcher
from cluster.launch.layout import copy_layout, free_ports, layout_ports
from store.message import decode_msg_id, encode_msg_id

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
_BLOCK = re.compile(r"^(?P<before>[^\n]*)\n```(?P<lang>\w*)\n(?P<body>.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_SKIP = "<!-- readme-test: skip"
_MSG_ID = re.compile(r"\b[0-9A-F]{32}\b")
TIMEOUT_S = 180


def readme_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every block the convention runs, in order."""
    out = []
    for m in _BLOCK.finditer(text):
        if m.group("lang") in ("sh", "python") and not m.group("before").strip().startswith(_SKIP):
            out.append((m.group("lang"), m.group("body")))
    return out


def test_the_convention_is_stated_where_it_is_kept():
    text = README.read_text(encoding="utf-8")
    first_section = text.split("\n## ", 1)[0]
    assert "readme-test" in first_section and "```sh" in first_section, "the convention heads the README"
    setup = text.split("\n## ", 2)[1]
    assert re.search(r"```\w*\nscripts/run\b.*\nscripts/test\b", setup), "set-up starts with the two commands"
    langs = [m.group("lang") for m in _BLOCK.finditer(text)]
    assert set(langs) <= {"sh", "python", "text", "toml"}, f"a block of another kind: {set(langs)}"
    assert len(readme_blocks(text)) >= 5


def _rewrite(body: str, ports: dict[int, int]) -> str:
    def msg_id(m: re.Match[str]) -> str:
        host, offset = decode_msg_id(m.group(0))
        ip, port = host.rsplit(":", 1)
        return encode_msg_id(f"{ip}:{ports.get(int(port), int(port))}", offset)

    body = _MSG_ID.sub(msg_id, body)
    pattern = re.compile(r"(?<!\d)(" + "|".join(map(str, ports)) + r")(?!\d)")
    return pattern.sub(lambda m: str(ports[int(m.group(1))]), body)


DOCS_RUN = [REPO / "docs" / "security.md", REPO / "docs" / "consumer-groups.md", REPO / "docs" / "trace.md"]
"""Pages whose blocks run after the README's, by the same convention."""
DOC_PORT_OFFSET = 1000
"""docs/security.md copies the layout with `--port-offset 1000`: its commands name those ports."""


def _ports_with_offset_twins(defaults: list[int]) -> dict[int, int]:
    """Free ports for the copy of the default layout whose +DOC_PORT_OFFSET twins are free too."""
    for _ in range(50):
        chosen = free_ports(len(defaults))
        twins = [p + DOC_PORT_OFFSET for p in chosen]
        try:
            for t in twins:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", t))
        except OSError:
            continue
        return dict(zip(defaults, chosen, strict=True))
    raise AssertionError("no free ports with free twins")


@pytest.mark.slow
def test_every_readme_block_runs_as_written(tmp_path: Path):
    work = tmp_path / "checkout"
    (work / "conf").mkdir(parents=True)
    layout = REPO / "conf" / "1m-1s-dev"
    defaults = sorted({p for f in layout.iterdir() if f.suffix in (".toml", ".properties")
                       for p in layout_ports(f.read_text(encoding="utf-8"))})
    ports = copy_layout(layout, work / "conf" / "1m-1s-dev", ports=_ports_with_offset_twins(defaults))
    ports.update({p + DOC_PORT_OFFSET: q + DOC_PORT_OFFSET for p, q in list(ports.items())})
    (work / "scripts").symlink_to(REPO / "scripts")
    (work / "conf" / "prometheus").symlink_to(REPO / "conf" / "prometheus")  # the metrics section's rules
    env = {**os.environ, "TIDEMQ_BASE_DIR": str(work / "data"), "TIDEMQ_CONF": str(work / "conf" / "1m-1s-dev")}
    env.pop("PYTHONPATH", None)
    scripts_run = [str(REPO / "scripts" / "run")]
    run = subprocess.run(scripts_run, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
    stopped = False
    try:
        assert run.returncode == 0, run.stdout + run.stderr
        assert ". .venv/bin/activate" in run.stdout and "scripts/tidemq" in run.stdout
        _check_scripts_run_output(run.stdout, work / "data")
        pids = _recorded_pids(work / "data")
        second = subprocess.run(scripts_run, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
        assert second.returncode == 0, second.stdout + second.stderr
        assert _recorded_pids(work / "data") == pids, "a second scripts/run reuses the running cluster"
        for page in (README, *DOCS_RUN):
            for i, (lang, body) in enumerate(readme_blocks(page.read_text(encoding="utf-8"))):
                script = _rewrite(body, ports)
                argv = ["bash", "-euo", "pipefail", "-c", script] if lang == "sh" else [sys.executable, "-c", script]
                done = subprocess.run(argv, cwd=work, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
                assert done.returncode == 0, (
                    f"{page.name} block {i + 1} ({lang}) exited {done.returncode}:\n{script}\n"
                    f"--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
                )
        pids = _recorded_pids(work / "data")  # the README restarts a node on the way
        stop = subprocess.run([*scripts_run, "--stop"], capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
        stopped = True
        assert stop.returncode == 0, stop.stdout + stop.stderr
        assert pids and all(_gone(pid) for pid in pids.values()), pids
        assert not list((work / "data").glob("store/*/abort")), "scripts/run --stop stops every node gracefully"
    finally:
        for base in work.glob("data-*"):  # a page's own cluster, if a block failed before its `down`
            if (base / "cluster.json").exists():
                subprocess.run([str(REPO / "scripts" / "tidemq"), "cluster", "down", "--base-dir", str(base)],
                               capture_output=True, env=env, timeout=TIMEOUT_S)
        if not stopped:
            subprocess.run([*scripts_run, "--stop"], capture_output=True, env=env, timeout=TIMEOUT_S)


def _check_scripts_run_output(out: str, base: Path) -> None:
    """What `scripts/run` promises to show: the sends' msgIds, each consumed, a query, and
    `cluster status` with every column and the registered name server; how to stop it."""
    sent = re.findall(r'"msg_id":\s*"([0-9A-F]+)"', out.split("$ tidemq consume")[0])
    assert len(sent) >= 3, out
    consumed = out.split("$ tidemq consume")[1].split("$ tidemq query")[0]
    assert all(msg_id in consumed for msg_id in sent), out
    assert "$ tidemq query" in out and "$ tidemq cluster status" in out
    assert re.search(r"broker-a-s .* running", out), out
    table = out.split("$ tidemq cluster status")[1]
    for column in ("node", "pid", "state", "epoch", "max offset", "lag s", "put/s", "get/s", "catch-up"):
        assert column in table, (column, table)
    assert re.search(r"namesrv .* running .* \d broker\(s\) registered", table), table
    assert f"Stop it with: TIDEMQ_BASE_DIR={base} scripts/run --stop" in out  # the base dir it ran with


def _recorded_pids(base: Path) -> dict[str, int]:
    state = launcher.load_state(base)
    assert state is not None
    return {name: r.pid for name, r in state.nodes.items() if r.pid is not None}


def _gone(pid: int) -> bool:
    """Exited (a zombie waiting for a reaper counts as exited)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
