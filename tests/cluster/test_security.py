"""Security with real processes: a name server, a SYNC_MASTER and its slave with aclEnable,
accounts made with `tidemq acl add-user`; logins, permissions, a fake broker, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.security import AUTH_FAILED, Credentials
from tests.cluster.helpers import cli, wait_for
from tests.examples import examples
from tests.node.nodeproc import Nodes, master_conf, slave_conf, write_conf
from wire.client import AuthenticationFailed, NoPermission, connect
from wire.protocol import CommitOffset, GetStatus, Promote, Pull, Send, TopicCreate
from wire.protocol.namesrv import RegisterBroker

pytestmark = pytest.mark.slow  # every test here starts `tidemq` processes


def _add_user(acl: Path, name: str, *flags: str) -> Credentials:
    secret = acl.parent / f"{name}.secret"
    result = cli("acl", "add-user", name, "-f", str(acl), "--generate", "--secret-file", str(secret), *flags)
    assert result.returncode == 0, result.stderr.decode()
    return Credentials.from_file(name, str(secret))


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("secure")
    acl = tmp / "acl.toml"
    accounts = {
        "broker": _add_user(acl, "broker", "--admin"),
        "alice": _add_user(acl, "alice", "--topic-perm", "orders=PUB|SUB", "--topic-perm", "logs-*=SUB",
                           "--topic-perm", "logs-secret=DENY", "--default-group-perm", "SUB",
                           "--group-perm", "billing=DENY"),
        "bob": _add_user(acl, "bob"),
    }
    text = acl.read_text()
    assert not [c.user for c in accounts.values() if c.secret in text]  # verifiers only, never a secret
    nodes = Nodes()
    try:
        ns_conf = write_conf(tmp, "namesrv", {"listenPort": 0, "aclEnable": True})
        ns = nodes.start(ns_conf, ["namesrv", "start", "-c", str(ns_conf)])
        login = {"aclEnable": True, "accessKey": "broker", "secretKeyFile": "broker.secret",
                 "namesrvAddr": ns.address}
        mconf = master_conf(tmp, "m", "SYNC_MASTER", **login)
        master = nodes.start(mconf)
        slave = nodes.start(slave_conf(tmp, mconf, "s", **login))
        yield {"namesrv": ns.address, "master": master.address, "slave": slave.address, "tmp": tmp,
               "accounts": accounts, "acl": acl}
    finally:
        nodes.cleanup()


async def _call(address: str, request, credentials: Credentials | None):
    async with connect(address, connect_timeout=5.0, request_timeout=10.0, credentials=credentials) as conn:
        return await conn.call(request)


async def test_accounts_get_what_their_rules_grant_and_nothing_else(secure):
    master, accounts = secure["master"], secure["accounts"]
    admin, alice, bob = accounts["broker"], accounts["alice"], accounts["bob"]
    for topic in ("orders", "logs-app", "logs-secret"):
        await _call(master, TopicCreate(topic=topic), admin)

    async def replicated() -> bool:  # the slave logged in to its master and the name server
        status = await _call(master, GetStatus(), admin)
        return any(s.ack_offset >= 0 for s in status.ha.slaves or ())

    await wait_for(replicated, what="the slave replicating")
    sent = await _call(master, Send(topic="orders", body=b"hello"), alice)
    assert sent.status.value == "PUT_OK"  # SYNC_MASTER: the slave has it too
    pulled = await _call(master, Pull(topic="orders", queue_id=sent.queue_id, offset=0), alice)
    assert [m.body for m in pulled.messages] == [b"hello"]
    refusals = [
        (Send(topic="logs-app", body=b"x"), alice, "lacks PUB on topic 'logs-app'"),
        (Pull(topic="logs-secret", queue_id=0, offset=0), alice, "lacks SUB on topic 'logs-secret'"),
        (Promote(), alice, "lacks admin"),
        (CommitOffset(group="billing", topic="orders", queue_id=0, offset=1), alice, "lacks SUB on group 'billing'"),
        (Send(topic="orders", body=b"x"), bob, "lacks PUB on topic 'orders'"),
        (Send(topic="orders", body=b"x"), None, "authentication required"),
    ]
    for request, who, what in refusals:
        with pytest.raises(NoPermission, match=what):
            await _call(master, request, who)
    with pytest.raises(AuthenticationFailed, match=AUTH_FAILED.split(" (")[0]):
        await _call(master, Send(topic="orders", body=b"x"), Credentials("alice", "not-her-secret"))
    await _call(master, CommitOffset(group="shipping", topic="orders", queue_id=0, offset=1), alice)  # default SUB
    # a refused request changed nothing; the node serves the others as before
    after = await _call(master, Pull(topic="orders", queue_id=sent.queue_id, offset=0), alice)
    assert len(after.messages) == 1
    status = await _call(master, GetStatus(), alice)
    assert status.security["failed_logins"] >= 1 and status.security["refused"] >= len(refusals)
    assert not [c.user for c in accounts.values() if c.secret in json.dumps(status.security)]


async def test_a_fake_broker_cannot_register(secure):
    fake = RegisterBroker(cluster="DefaultCluster", broker_name="broker-t", broker_id=0,
                          address="127.0.0.1:1", ha_address="127.0.0.1:2", role="ASYNC_MASTER")
    for who in (None, secure["accounts"]["alice"]):
        with pytest.raises(NoPermission):
            await _call(secure["namesrv"], fake, who)


def test_the_cli_logs_in_with_user_and_secret_file(secure):
    tmp, ns = secure["tmp"], secure["namesrv"]
    login = ["--user", "alice", "--secret-file", str(tmp / "alice.secret")]
    sent = cli("send", "--namesrv", ns, "--topic", "orders", "from-cli", *login)
    assert sent.returncode == 0, sent.stderr.decode()
    refused = cli("send", "--namesrv", ns, "--topic", "orders", "x")
    assert refused.returncode == 1
    err = refused.stderr.decode()
    assert "authentication required" in err and "Traceback" not in err
    listed = cli("acl", "list", "-f", str(secure["acl"]))
    assert listed.returncode == 0 and "alice" in listed.stdout.decode()
    assert "SCRAM" not in listed.stdout.decode()


async def test_an_account_added_while_running_can_log_in_at_once(secure):
    carol = await trio.to_thread.run_sync(
        lambda: _add_user(secure["acl"], "carol", "--default-topic-perm", "SUB"))

    async def logged_in() -> bool:
        await _call(secure["master"], Pull(topic="orders", queue_id=0, offset=0), carol)
        return True

    await wait_for(logged_in, timeout=10, what="the node reloading the ACL file")


def test_a_node_with_a_wrong_acl_file_does_not_start(tmp_path):
    (tmp_path / "acl.toml").write_text('[[accounts]]\naccessKey = "x"\nscram = "not-a-verifier"\n')
    conf = master_conf(tmp_path, "m", aclEnable=True)
    result = cli("node", "start", "-c", str(conf), timeout=30)
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert "acl.toml: account 1 (x): not a SCRAM-SHA-256" in err and "Traceback" not in err


async def _raw_login_messages(address: str, credentials: Credentials) -> tuple[str, str]:
    """Log in by hand and return the client's two SCRAM messages (what an eavesdropper on a
    plaintext link would record)."""
    client = credentials.scram_client()
    async with connect(address, credentials=None) as conn:
        first_message = client.get_client_first()
        first = await conn.request("auth_start", message=first_message)
        client.set_server_first(first["message"])
        final_message = client.get_client_final()
        await conn.request("auth_finish", message=final_message)
    return first_message, final_message


async def test_a_recorded_login_replayed_on_a_new_connection_is_refused(secure):
    master = secure["master"]
    first_message, final_message = await _raw_login_messages(master, secure["accounts"]["alice"])
    async with connect(master, credentials=None) as conn:
        await conn.request("auth_start", message=first_message)  # answered with a fresh server nonce
        with pytest.raises(NoPermission, match="authentication failed"):
            await conn.request("auth_finish", message=final_message)
        with pytest.raises(NoPermission, match="authentication required"):
            await conn.call(Send(topic="orders", body=b"replayed"))


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.text(min_size=1, max_size=120), final=st.text(min_size=1, max_size=120),
       garbage=st.dictionaries(st.text(max_size=8).filter(lambda k: k not in ("v", "op", "id")), st.one_of(st.integers(), st.text(max_size=8), st.binary(max_size=8)),
                               max_size=3))
def test_fuzzed_login_frames_get_no_internal_error_and_no_access(fuzz_node, first, final, garbage):
    """Hypothesis frames at a real node with aclEnable (its own, so its failure counter
    does not rate-limit the other tests): every answer is a clear refusal, never
    INTERNAL_ERROR, and the connection gets no access."""

    async def attempt() -> list[str]:
        async with connect(fuzz_node, credentials=None, request_timeout=5.0) as conn:
            statuses = []
            for op, message in (("auth_start", first), ("auth_finish", final)):
                answers = await conn.request_many(op, [{"message": message, **garbage}])
                answer = answers[0]
                statuses.append(answer.status if isinstance(answer, Exception) else answer["status"])
            sent = (await conn.request_many("send", [{"topic": "orders", "body": b"x"}]))[0]
            statuses.append(sent.status if isinstance(sent, Exception) else sent["status"])
            return statuses

    statuses = trio.run(attempt)
    assert "INTERNAL_ERROR" not in statuses, statuses
    assert set(statuses[:2]) <= {"OK", "BAD_REQUEST", "NO_PERMISSION"}, statuses
    assert statuses[2] == "NO_PERMISSION", statuses


@pytest.fixture(scope="module")
def fuzz_node(secure, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fuzz")
    (tmp / "acl.toml").write_text(secure["acl"].read_text())
    nodes = Nodes()
    try:
        yield nodes.start(master_conf(tmp, "f", "ASYNC_MASTER", aclEnable=True)).address
    finally:
        nodes.cleanup()
