"""Issue 40, "first use as a RocketMQ operator": the client commands as an mqadmin user types
them, against a name server and a master with aclEnable (an admin account logs in by
default; `carol` may not consume as group `audit`): one-line errors with the README's exit
codes, a disabled group said once, `-n`/NAMESRV_ADDR and `-t -g -k -i`, one-shot sends
spread over the queues, a clean signal stop, and the offline and chaos options."""

from __future__ import annotations

import functools
import json
import os
import random
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import trio

from cluster.cli.common import run_async
from cluster.client import Producer
from cluster.client.routing import BrokerRoute, GroupRoute, QueueData, TopicRoute
from tests.cluster.helpers import REPO, broker_conf
from tests.node.nodeproc import Nodes, write_conf
from tests.waiting import wait_until
from wire.client import NotFound

ENV = {**os.environ, "PYTHONPATH": str(REPO)}
ENV.pop("NAMESRV_ADDR", None)


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """`tidemq ARGS...` as a user types it (logged in as the admin unless `env` says otherwise)."""
    return subprocess.run([sys.executable, "-m", "tidemq", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env if env is not None else ADMIN_ENV)


ADMIN_ENV: dict[str, str] = {}


def one_line_error(result: subprocess.CompletedProcess[str], code: int = 1) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    err = result.stderr.strip()
    assert err.startswith("tidemq: error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def json_lines(result: subprocess.CompletedProcess[str]) -> list[dict]:
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def _add_user(acl: Path, name: str, *flags: str) -> Path:
    secret = acl.parent / f"{name}.secret"
    result = run("acl", "add-user", name, "-f", str(acl), "--generate", "--secret-file", str(secret), *flags,
                 env=ENV)
    assert result.returncode == 0, result.stderr
    return secret


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("frictions")
    acl = tmp / "acl.toml"
    root = _add_user(acl, "broker", "--admin")
    carol = _add_user(acl, "carol", "--default-topic-perm", "PUB|SUB", "--default-group-perm", "SUB",
                      "--group-perm", "audit=DENY")
    nodes = Nodes()
    try:
        ns_conf = write_conf(tmp, "namesrv", {"listenPort": 0, "aclEnable": True})
        ns = nodes.start(ns_conf, ["namesrv", "start", "-c", str(ns_conf)])
        nodes.start(broker_conf(tmp, "m", "broker-a", ns.address, aclEnable=True, accessKey="broker",
                                secretKeyFile="broker.secret"))
        ADMIN_ENV.update(ENV, TIDEMQ_USER="broker", TIDEMQ_SECRET_FILE=str(root))
        yield {"namesrv": ns.address, "tmp": tmp, "acl": acl,
               "carol": {**ENV, "TIDEMQ_USER": "carol", "TIDEMQ_SECRET_FILE": str(carol)}}
    finally:
        nodes.cleanup()


# ---------------------------------------------------------------- items 1 and 2: one line, right code


@pytest.mark.slow
def test_consume_errors_are_one_line_with_or_without_commit(cluster):
    ns = cluster["namesrv"]
    json_lines(run("send", "-n", ns, "-t", "Audit", "a"))
    for commit in ((), ("--commit",)):
        err = one_line_error(run("consume", "-n", ns, "-t", "NoSuch", "-g", "G", *commit))
        assert "no broker serves topic 'NoSuch'" in err
        err = one_line_error(run("consume", "-n", ns, "-t", "Audit", "-g", "audit", *commit, env=cluster["carol"]))
        assert "lacks SUB on group 'audit'" in err


@pytest.mark.slow
def test_a_disabled_group_is_said_once_and_exits_1(cluster):
    ns = cluster["namesrv"]
    json_lines(run("send", "-n", ns, "-t", "Off", "-k", "off", "x"))
    assert run("admin", "updateSubGroup", "-n", ns, "-g", "OffG", "--consumeEnable", "false").returncode == 0
    for commit in (("--commit",), ()):
        result = run("consume", "-n", ns, "-t", "Off", "-g", "OffG", *commit)
        err = one_line_error(result)
        assert "consumption is disabled" in err and result.stdout == ""
    assert run("admin", "updateSubGroup", "-n", ns, "-g", "OffG", "--consumeEnable", "true").returncode == 0
    assert [m["body"] for m in json_lines(run("consume", "-n", ns, "-t", "Off", "-g", "OffG", "--commit"))] == ["x"]


def test_an_exception_group_of_client_errors_is_one_line(capsys):
    """What a nursery raises (a member's task failing) is told as its one error."""

    async def main() -> int:
        async with trio.open_nursery() as nursery:
            async def fail() -> None:
                raise NotFound("NOT_FOUND", "no broker serves topic 'NoSuch'", address="127.0.0.1:1")

            nursery.start_soon(fail)
        return 0

    from argparse import Namespace

    assert run_async(Namespace(verbose=False), main) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("tidemq: error: ") and "\n" not in err and "no broker serves topic 'NoSuch'" in err


# ---------------------------------------------------------------- item 4: mqadmin's habits


@pytest.mark.slow
def test_n_namesrv_addr_and_short_flags(cluster):
    ns = cluster["namesrv"]
    with_env = {**ADMIN_ENV, "NAMESRV_ADDR": ns}
    [sent] = json_lines(run("send", "-t", "Short", "-k", "s1,s2", "short", env=with_env))
    assert sent["status"] == "PUT_OK"
    [by_key] = json_lines(run("query", "-t", "Short", "-k", "s2", env=with_env))
    [by_id] = json_lines(run("query", "-n", ns, "-i", sent["msg_id"]))
    assert by_key["msg_id"] == by_id["msg_id"] == sent["msg_id"] and by_id["keys"] == ["s1", "s2"]
    [got] = json_lines(run("consume", "-t", "Short", "-g", "ShortG", "--commit", env=with_env))
    assert got["body"] == "short"
    status = json.loads(run("status", "--json", env=with_env).stdout)
    assert [b["broker_name"] for b in status["brokers"]] == ["broker-a"]
    assert "Short" in {r["topic"] for r in json_lines(run("admin", "topicRoute", "-n", ns, "-t", "Short", "--json"))}
    err = one_line_error(run("send", "-t", "Short", "x"), code=2)  # neither flag nor NAMESRV_ADDR
    assert "--namesrv ADDR" in err and "NAMESRV_ADDR" in err
    # --broker wins over the environment (mqadmin: only when neither is given)
    dead = {**ADMIN_ENV, "NAMESRV_ADDR": "127.0.0.1:1"}
    [direct] = json_lines(run("send", "--broker", sent["address"], "-t", "Short", "direct", env=dead))
    assert direct["status"] == "PUT_OK"


# ---------------------------------------------------------------- item 7: one-shot sends spread


def _route(topic: str, queues: int) -> TopicRoute:
    master = BrokerRoute(0, "ASYNC_MASTER", "127.0.0.1:1")
    return TopicRoute(topic, (GroupRoute("broker-a", (master,), QueueData(queues, queues)),))


def test_the_round_robin_starts_at_a_random_queue_per_topic():
    async def picks(seed: int, topic: str, n: int) -> list[int]:
        producer = Producer(brokers=["127.0.0.1:1"], rng=random.Random(seed))

        async def route(t: str, *, refresh: bool = False) -> TopicRoute:
            return _route(t, 8)

        producer.route = route  # type: ignore[method-assign]
        producer.route_age = lambda t: 0.0  # type: ignore[method-assign]
        return [(await producer._select(topic, None, None, set())).queue_id for _ in range(n)]

    async def main() -> None:
        first = random.Random(7).randrange(1 << 31) % 8
        got = await picks(7, "T", 9)
        assert got == [(first + i) % 8 for i in range(9)]  # from the drawn start, then round robin
        assert await picks(7, "T", 9) == got  # the same draw, the same queues
        starts = {(await picks(seed, "T", 1))[0] for seed in range(40)}
        assert len(starts) > 4, starts  # not always queue 0

    trio.run(main)


@pytest.mark.slow
def test_twenty_one_shot_sends_do_not_all_land_on_one_queue(cluster):
    ns = cluster["namesrv"]
    created = run("admin", "updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", "Spread", "-r", "8", "-w", "8")
    assert created.returncode == 0, created.stderr

    def routed() -> bool:
        r = run("admin", "topicRoute", "-n", ns, "-t", "Spread", "--json")
        return r.returncode == 0 and any(row.get("write_queue_nums") == 8 for row in json_lines(r))

    trio.run(functools.partial(wait_until, routed, timeout=20, what="Spread routed with 8 queues"))
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: run("send", "-n", ns, "-t", "Spread", f"one-shot {i}"), range(20)))
    queues = [json_lines(r)[0]["queue_id"] for r in results]
    assert len(set(queues)) > 1, queues


# ---------------------------------------------------------------- item 8: exit codes and a signal stop


@pytest.mark.slow
def test_a_signal_stop_of_consume_is_not_an_error(cluster):
    ns = cluster["namesrv"]
    json_lines(run("send", "-n", ns, "-t", "Stop40", "first"))
    proc = subprocess.Popen([sys.executable, "-m", "tidemq", "consume", "-n", ns, "-t", "Stop40", "-g", "S",
                             "--commit", "--timeout-ms", "60000"], cwd=REPO, env=ADMIN_ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = proc.stdout.readline()  # blocks until the member printed the message
        assert json.loads(line)["body"] == "first"

        def committed() -> bool:  # a member settled in (stopping it while it joins is another matter)
            r = run("admin", "consumerProgress", "-n", ns, "-g", "S", "-t", "Stop40", "--json")
            return r.returncode == 0 and json_lines(r)[-1]["total_lag"] == 0

        trio.run(functools.partial(wait_until, committed, timeout=30, what="the member committing"))
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert err.strip() == "tidemq: stopped by SIGTERM: what was done so far is kept", err


# ---------------------------------------------------------------- item 9


@pytest.mark.slow  # CLI processes
def test_offline_store_commands_take_no_login_options(tmp_path):
    helped = run("store", "query", "--help", env=ENV)
    assert helped.returncode == 0 and "--user" not in helped.stdout and "--tls-ca" not in helped.stdout
    refused = run("store", "query", str(tmp_path), "--topic", "T", "--key", "k", "--user", "x", env=ENV)
    assert refused.returncode == 2 and "unknown option --user" in refused.stderr
    assert "--user" in run("send", "--help", env=ENV).stdout  # a command that logs in keeps them


def test_offline_file_tools_take_no_login_options():
    """The acl and tls file tools and chaos list/sim/proxy log in nowhere: no --user in them."""
    from tidemq.cli import build_parser

    parser = build_parser()
    for argv in (["acl", "list", "-f", "a.toml"], ["acl", "remove-user", "x", "-f", "a.toml"],
                 ["tls", "make-dev-certs", "d"], ["chaos", "list"], ["chaos", "sim", "--seed", "1"],
                 ["chaos", "proxy"]):
        assert not hasattr(parser.parse_args(argv), "user"), argv
        with pytest.raises(SystemExit):
            parser.parse_args([*argv, "--user", "x"])
    for argv in (["send", "-t", "T", "x"], ["chaos", "run", "kill-slave"], ["admin", "topicList"]):
        assert parser.parse_args([*argv, "--user", "u"]).user == "u", argv


def test_an_exception_group_of_usage_or_os_errors_is_one_line(monkeypatch, capsys):
    """tidemq's entry tells a UsageError or an OSError raised out of a nursery as one line, exit 2."""
    import tidemq.cli as entry

    for raised, said in ((PermissionError(13, "Permission denied", "/nope"), "/nope: Permission denied"),
                         (entry.UsageError("bad value"), "bad value")):
        def handler(args, raised=raised):
            raise ExceptionGroup("a nursery", [ExceptionGroup("inner", [raised])])

        parser = entry.TidemqParser(prog="tidemq")
        parser.set_defaults(handler=handler)
        monkeypatch.setattr(entry, "build_parser", lambda argv=None, parser=parser: parser)
        assert entry.main([]) == 2
        assert capsys.readouterr().err == f"tidemq: error: {said}\n"


def test_chaos_sim_leaves_a_core_free_by_default():
    from tidemq.cli import build_parser

    args = build_parser().parse_args(["chaos", "sim", "--seeds", "1..2"])
    assert args.jobs == max(1, (os.cpu_count() or 1) - 1)


@pytest.mark.slow  # a CLI process
def test_chaos_run_base_dir_must_be_new_or_empty(tmp_path):
    (tmp_path / "something").write_text("x")
    r = run("chaos", "run", "kill-namesrv", "--base-dir", str(tmp_path), env=ENV)
    assert r.returncode == 2 and "is not empty" in r.stderr, r.stderr


@pytest.mark.slow
def test_chaos_run_puts_its_cluster_under_base_dir(tmp_path):
    base = tmp_path / "run"
    r = run("chaos", "run", "kill-namesrv", "--seed", "2", "--duration", "3", "--base-dir", str(base), "--keep",
            env=ENV, timeout=180)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (base / "cluster.json").is_file() and (base / "history.jsonl").is_file()
    assert (base / "store").is_dir() and (base / "logs").is_dir()
