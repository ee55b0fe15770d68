"""The `tidemq` entry: the layers' commands assembled, unknown names named with the nearest
valid one, the same exit code for the same kind of mistake, no upward imports."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tidemq import cli
from tidemq.cli import build_parser, main

REPO = Path(__file__).resolve().parents[2]
LAYERS = ["store", "ha", "node", "cluster", "chaos"]


def _groups(parser):
    return list(parser._subparsers._group_actions[0].choices)  # type: ignore[union-attr]


def test_every_layer_registers_its_own_groups():
    groups = _groups(build_parser())
    assert {"store", "node", "namesrv", "send", "consume", "query", "status", "cluster", "admin"} <= set(groups)
    assert groups == [name for _, names in cli.LAYERS for name in names], "tidemq.cli.LAYERS names each layer's groups"


@pytest.mark.parametrize(("layer", "group"), [(names, name) for _, names in cli.LAYERS for name in names])
def test_a_named_group_builds_only_its_own_layers_parsers_and_parses_alike(layer, group):
    """The lazy path (one layer's parsers, at most) parses what the whole parser parses."""
    built = _groups(build_parser([group, "x"]))
    assert group in built and set(built) <= set(layer), built
    whole, alone = build_parser(), build_parser([group])
    for parser in (whole, alone):
        with pytest.raises(SystemExit) as e:
            parser.parse_args([group, "--help"])
        assert e.value.code == 0
    assert whole._subparsers._group_actions[0].choices[group].format_help() == (  # type: ignore[union-attr]
        alone._subparsers._group_actions[0].choices[group].format_help())  # type: ignore[union-attr]


def test_a_node_start_imports_no_cluster_chaos_or_pipeline_command_module():
    code = ("import sys; from tidemq.cli import build_parser; build_parser(['node', 'start']);"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('cluster', 'chaos', 'pipeline')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]", out.stdout


OPTIONAL_LIBRARIES = ("prometheus_client", "httpx", "scramp", "lark", "rich")
"""What a default node, name server or client command never needs: the metrics exporter
(metricsExporterType DISABLE), etcd's HTTP client (manual mode), SCRAM (no aclEnable), the SQL92
parser (no filter yet) and the tables' renderer. Each costs 30-90 ms of start-up, which every
process the launcher, the drills and the tests start would pay."""


def test_default_processes_import_no_optional_library():
    code = ("import sys; import node.broker, cluster.namesrv.server, cluster.cli.client, tidemq.cli;"
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {OPTIONAL_LIBRARIES!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize(
    ("argv", "named", "suggested"),
    [
        (["send", "--topik", "Orders", "hi"], "--topik", "--topic"),
        (["consume", "--namesrv", "x:1", "--grup", "g", "--topic", "T"], "--grup", "--group"),
        (["store", "verify", "--limt", "3", "."], "--limt", None),
        (["sendd", "hi"], "sendd", "send"),
        (["admin", "topicLst"], "topicLst", "topicList"),
        (["cluster", "stauts"], "stauts", "status"),
    ],
)
def test_unknown_names_are_named_with_the_nearest(argv, named, suggested, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"unknown {'option' if named.startswith('-') else 'command'} {named}" in err, err
    if suggested:
        assert f"did you mean {suggested}?" in err, err
    assert "required" not in err, "the unknown name is reported, not a missing option"


def test_values_that_look_like_options_are_not_taken_for_names(capsys):
    # --from's value and a body after `--` are values, whatever they look like
    assert main(["store", "dump", "/nonexistent/x", "--from", "0x10"]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["query", "--namesrv", "127.0.0.1:1", "--msg-id", "ZZZ"],
        ["query", "--namesrv", "127.0.0.1:1"],
        ["send", "--topic", "T", "x"],
        ["store", "verify", "/nonexistent/tidemq"],
        ["cluster", "status", "--base-dir", "/nonexistent/tidemq"],
        ["node", "start", "-c", "/nonexistent/broker.toml"],
        ["admin"],
        [],
    ],
)
def test_usage_errors_exit_2_with_one_line(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "tidemq: error:" in err and "Traceback" not in err, err


@pytest.mark.slow  # a CLI process
def test_python_dash_m_tidemq_runs_the_entry():
    p = subprocess.run([sys.executable, "-m", "tidemq", "--help"], cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and "admin" in p.stdout and "cluster" in p.stdout, p.stderr


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("layer", LAYERS)
def test_no_layer_imports_one_above_it_or_the_entry(layer):
    above = set(LAYERS[LAYERS.index(layer) + 1:]) | {"tidemq", "pipeline"}
    for path in sorted((REPO / layer).glob("*.py")):
        wrong = _imports(path) & above
        assert not wrong, f"{path.relative_to(REPO)} imports {sorted(wrong)}"


def _module_level(body: list[ast.stmt]):
    """The statements run at import: the body, and inside its if/try blocks."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If | ast.Try):
            for block in (stmt.body, stmt.orelse, *(h.body for h in getattr(stmt, "handlers", []))):
                yield from _module_level(block)


@pytest.mark.parametrize("package", ["store", "ha", "node", "cluster", "chaos", "pipeline"])
def test_no_import_cycle_inside_a_package(package):
    """Module-level imports count, TYPE_CHECKING ones included (a cycle there is still a loop
    to read); an import inside a function (a deliberate late registration) does not."""
    graph: dict[str, set[str]] = {}
    for path in sorted((REPO / package).glob("*.py")):
        deps = set()
        for node in _module_level(ast.parse(path.read_text(encoding="utf-8")).body):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1 and node.module:
                    deps.add(node.module.split(".")[0])
                elif node.level == 1:
                    deps.update(a.name for a in node.names)
                elif node.level == 0 and node.module and node.module.startswith(f"{package}."):
                    deps.add(node.module.split(".")[1])
        graph[path.stem] = deps - {path.stem}

    def cycle_from(start: str) -> list[str] | None:
        stack = [(start, [start])]
        while stack:
            name, trail = stack.pop()
            for dep in graph.get(name, ()):
                if dep == start:
                    return [*trail, dep]
                if dep not in trail and dep != "__init__":
                    stack.append((dep, [*trail, dep]))
        return None

    cycles = [c for name in graph if name != "__init__" and (c := cycle_from(name))]
    assert not cycles, f"{package}: import cycle {' -> '.join(cycles[0])}"
