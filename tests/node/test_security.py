"""node/security without sockets: the ACL file, what each op needs, and the Guard's logins
(the real SCRAM client against the real Guard), including fuzzed handshake messages."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.security import (
    AUTH_FAILED,
    Acl,
    AclError,
    Credentials,
    Guard,
    Perm,
    Session,
    make_verifier,
)
from node.security.guard import MAX_FAILURES, peer_host
from node.security.rules import RULES
from tests.examples import examples
from wire.protocol import NODE_REQUESTS, Request
from wire.protocol.auth import AuthFinish, AuthStart
from wire.protocol.namesrv import NAMESRV_REQUESTS

ALICE = "alice-secret"


def _acl_text(extra: str = "") -> str:
    return f"""
# an operator's comment
[[accounts]]
accessKey = "alice"
scram = "{make_verifier(ALICE).text()}"
defaultTopicPerm = "DENY"
defaultGroupPerm = "SUB"
topicPerms = ["orders=PUB|SUB", "logs-*=SUB", "logs-secret=DENY"]
groupPerms = ["billing=DENY"]

[[accounts]]
accessKey = "root"
secretKey = "root-secret"
admin = true
whiteRemoteAddress = ["127.0.0.1", "10.0.0.0/8"]
{extra}"""


@pytest.fixture
def acl_file(tmp_path: Path) -> Path:
    path = tmp_path / "acl.toml"
    path.write_text(_acl_text())
    return path


def test_permissions_follow_rules_deny_wins_and_defaults_apply() -> None:
    acl = Acl.from_toml(_acl_text())
    alice = acl.accounts["alice"]
    assert alice.may_topic("orders", Perm.PUB) and alice.may_topic("orders", Perm.SUB)
    assert alice.may_topic("logs-app", Perm.SUB) and not alice.may_topic("logs-app", Perm.PUB)
    assert not alice.may_topic("logs-secret", Perm.SUB)  # DENY over the prefix grant
    assert not alice.may_topic("payments", Perm.SUB)  # default DENY
    assert alice.may_group("anything", Perm.SUB) and not alice.may_group("billing", Perm.SUB)
    root = acl.accounts["root"]
    assert root.admin and root.may_topic("payments", Perm.PUB)
    assert root.may_connect_from("10.1.2.3") and root.may_connect_from("127.0.0.1")
    assert not root.may_connect_from("192.168.0.1")
    assert "root-secret" not in repr(root)


@pytest.mark.parametrize(("text", "problem"), [
    ('[[accounts]]\naccessKey = "a"\n', "give exactly one of scram"),
    ('[[accounts]]\naccessKey = "a"\nsecretKey = "s"\ntopicPerms = ["orders=WRITE"]\n', "'WRITE' is not a permission"),
    ('[[accounts]]\naccessKey = "a"\nsecretKey = "s"\ntopicPerms = ["or*ders=PUB"]\n', "may only end a pattern"),
    ('[[accounts]]\naccessKey = "a"\nsecretKey = "s"\nadmn = true\n', "unknown key(s) ['admn']"),
    ('[[accounts]]\naccessKey = "a"\nscram = "plain"\n', "not a SCRAM-SHA-256"),
    ('[[accounts]]\naccessKey = "a"\nsecretKey = "s"\nwhiteRemoteAddress = "10.0.0.0/33"\n', "10.0.0.0/33"),
    ('[[accounts]]\naccessKey = "a"\nsecretKey = "s"\n[[accounts]]\naccessKey = "a"\nsecretKey = "t"\n',
     "appears twice"),
    ("accounts = 3\n", "[[accounts]] tables"),
])
def test_a_wrong_file_names_the_account_and_key(text: str, problem: str) -> None:
    with pytest.raises(AclError, match="acl.toml") as e:
        Acl.from_toml(text, source="acl.toml")
    assert problem in str(e.value)
    assert "\"s\"" not in str(e.value) and "'s'" not in str(e.value)  # a secret is never echoed


def test_every_op_of_node_and_name_server_has_a_rule() -> None:
    assert set(NODE_REQUESTS) | set(NAMESRV_REQUESTS) <= set(RULES)


def _request(cls: type, request_id: int = 1, **fields: object) -> Request:
    return Request(op=cls.OP, id=request_id, fields=cls(**fields))


def _login(guard: Guard, session: Session, user: str, secret: str) -> dict:
    client = Credentials(user, secret).scram_client()
    first = guard.screen(session, _request(AuthStart, message=client.get_client_first()))
    assert first is not None
    if "error" in first:
        return first
    client.set_server_first(first["message"])
    final = guard.screen(session, _request(AuthFinish, 2, message=client.get_client_final()))
    assert final is not None
    if "error" not in final:
        client.set_server_final(final["message"])  # the server proved it holds the verifier
    return final


def test_login_then_permissions(acl_file: Path) -> None:
    guard = Guard(str(acl_file))
    session = Session("127.0.0.1")
    send = _request(NODE_REQUESTS["send"], topic="orders", body=b"x")
    refused = guard.screen(session, send)
    assert refused["status"] == "NO_PERMISSION" and "authentication required" in refused["error"]
    assert "error" not in _login(guard, session, "alice", ALICE)
    assert session.account == "alice"
    assert guard.screen(session, send) is None
    other = guard.screen(session, _request(NODE_REQUESTS["send"], topic="payments", body=b"x"))
    assert other["error"] == "send: account 'alice' lacks PUB on topic 'payments'"
    promote = guard.screen(session, _request(NODE_REQUESTS["promote"]))
    assert promote["error"] == "promote: account 'alice' lacks admin"
    retry = guard.screen(session, _request(NODE_REQUESTS["pull"], topic="%RETRY%billing", queue_id=0, offset=0))
    assert "SUB on group 'billing'" in retry["error"]  # a retry topic belongs to its group
    assert guard.view()["logins"] == 1 and guard.view()["refused"] == 4


def test_wrong_secret_unknown_account_and_foreign_address_fail_alike(acl_file: Path) -> None:
    guard = Guard(str(acl_file))
    answers = [
        _login(guard, Session("127.0.0.1"), "alice", "wrong"),
        _login(guard, Session("127.0.0.1"), "mallory", "anything"),
        _login(guard, Session("192.168.0.9"), "root", "root-secret"),  # not on root's allow list
    ]
    assert [a["error"] for a in answers] == [f"auth_finish: {AUTH_FAILED}"] * 3
    assert guard.failed_logins == 3 and guard.logins == 0


def test_a_replayed_proof_does_not_log_in(acl_file: Path) -> None:
    guard = Guard(str(acl_file))
    client = Credentials("alice", ALICE).scram_client()
    first_message = client.get_client_first()
    session = Session("127.0.0.1")
    first = guard.screen(session, _request(AuthStart, message=first_message))
    client.set_server_first(first["message"])
    proof = client.get_client_final()
    assert "error" not in guard.screen(session, _request(AuthFinish, message=proof))
    # an eavesdropper replays both messages on a new connection: the server's nonce differs
    replay = Session("127.0.0.1")
    guard.screen(replay, _request(AuthStart, message=first_message))
    again = guard.screen(replay, _request(AuthFinish, message=proof))
    assert again["status"] == "NO_PERMISSION" and replay.account is None


def test_repeated_failures_are_rate_limited_per_address(acl_file: Path) -> None:
    now = [1000.0]
    guard = Guard(str(acl_file), clock=lambda: now[0])
    for _ in range(MAX_FAILURES):
        _login(guard, Session("127.0.0.2"), "alice", "wrong")
    limited = _login(guard, Session("127.0.0.2"), "alice", ALICE)
    assert "too many failed logins from 127.0.0.2" in limited["error"]
    assert "error" not in _login(guard, Session("127.0.0.3"), "alice", ALICE)  # another address
    now[0] += 61
    assert "error" not in _login(guard, Session("127.0.0.2"), "alice", ALICE)
    assert guard.view()["rate_limited"] == 1


def test_the_file_is_reloaded_when_it_changes_and_a_bad_one_is_not_used(acl_file: Path) -> None:
    now = [0.0]
    guard = Guard(str(acl_file), clock=lambda: now[0])
    session = Session("127.0.0.1")
    _login(guard, session, "alice", ALICE)
    send = _request(NODE_REQUESTS["send"], topic="payments", body=b"x")
    assert guard.screen(session, send) is not None
    acl_file.write_text(_acl_text().replace('"orders=PUB|SUB"', '"orders=PUB|SUB", "payments=PUB"'))
    now[0] += 2
    assert guard.screen(session, send) is None  # the open connection sees the new grant
    acl_file.write_text("[[accounts]\n")  # broken: the last good file stays
    now[0] += 2
    assert guard.screen(session, send) is None
    assert "TOML syntax error" in guard.view()["reload_error"]
    acl_file.write_text(_acl_text().replace('accessKey = "alice"', 'accessKey = "alicia"'))
    now[0] += 2
    gone = guard.screen(session, send)
    assert "no longer allowed" in gone["error"]


@settings(max_examples=examples(300), deadline=None)
@given(first=st.text(max_size=200), final=st.text(max_size=200))
def test_fuzzed_handshakes_never_log_in_or_raise(tmp_path_factory: pytest.TempPathFactory,
                                                 first: str, final: str) -> None:
    path = tmp_path_factory.getbasetemp() / "fuzz-acl.toml"
    if not path.exists():
        path.write_text(_acl_text())
    guard = Guard(str(path))
    session = Session("127.0.0.9")
    for request in (_request(AuthStart, message=first or "x"), _request(AuthFinish, message=final or "x")):
        answer = guard.screen(session, request)
        assert answer is not None and answer["status"] in ("OK", "NO_PERMISSION", "BAD_REQUEST")
    assert session.account is None


def test_config_anchors_security_files_beside_the_config_and_checks_them(tmp_path: Path) -> None:
    from cluster.namesrv.config import load_namesrv_config
    from node.config import ConfigError, load_config

    (tmp_path / "node.secret").write_text("s3cret\n")
    conf = tmp_path / "b.toml"
    conf.write_text(f'storePathRootDir = "{tmp_path}/store"\naclEnable = true\n'
                    'accessKey = "broker"\nsecretKeyFile = "node.secret"\n')
    cfg = load_config(str(conf))
    assert cfg.acl_enable and cfg.acl_file == str(tmp_path / "acl.toml")
    assert cfg.credentials == Credentials("broker", "s3cret") and "s3cret" not in repr(cfg)
    conf.write_text('accessKey = "broker"\n')
    with pytest.raises(ConfigError, match="accessKey and secretKeyFile go together"):
        load_config(str(conf))
    conf.write_text('accessKey = "broker"\nsecretKeyFile = "missing.secret"\n')
    missing = load_config(str(conf))  # a tool that only reads the config does not need the secret
    with pytest.raises(ConfigError, match="b.toml: secretKeyFile: cannot read the secret file"):
        missing.check_security_files()
    ns = tmp_path / "namesrv.properties"
    ns.write_text("aclEnable=true\naclFile=sub/acl.toml\n")
    ns_cfg = load_namesrv_config(str(ns))
    assert ns_cfg.acl_enable and ns_cfg.acl_file == str(tmp_path / "sub" / "acl.toml")
    ns.write_text("aclEnable=maybe\n")
    with pytest.raises(ConfigError, match="aclEnable must be true or false"):
        load_namesrv_config(str(ns))


def test_spark_options_user_and_secret_file(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    from pipeline.live import LiveOptions

    (tmp_path / "app.secret").write_text("app-secret\n")
    opts = LiveOptions.from_options({"topic": "T", "namesrv": "127.0.0.1:1", "user": "app",
                                     "secretFile": str(tmp_path / "app.secret")})
    assert opts.client_args()["credentials"] == Credentials("app", "app-secret")
    with pytest.raises(ValueError, match="user and secretFile go together"):
        LiveOptions.from_options({"topic": "T", "namesrv": "127.0.0.1:1", "user": "app"})
    with pytest.raises(ValueError, match="option secretFile: cannot read"):
        LiveOptions.from_options({"topic": "T", "namesrv": "127.0.0.1:1", "user": "app", "secretFile": "/nope"})


def test_a_message_looked_up_by_id_needs_sub_on_its_topic(acl_file: Path) -> None:
    guard = Guard(str(acl_file))
    session = Session("127.0.0.1")
    _login(guard, session, "alice", ALICE)
    lookup = _request(NODE_REQUESTS["get_by_msg_id"], msg_id="7F00000100002A9F0000000000000000")
    assert guard.screen(session, lookup) is None  # the topic shows only in the answer
    assert guard.check_answer(session, lookup, {"id": 1, "status": "OK", "message": {"topic": "orders"}}) is None
    hidden = guard.check_answer(session, lookup, {"id": 1, "status": "OK", "message": {"topic": "payments"}})
    assert hidden["error"] == "get_by_msg_id: account 'alice' lacks SUB on topic 'payments'"
    assert "message" not in hidden


@pytest.mark.parametrize(("peer", "host"), [
    ("127.0.0.1:40001", "127.0.0.1"),
    ("[::1]:40001", "::1"),
    ("[fe80::1%eth0]:7", "fe80::1%eth0"),
    ("broker-a.local:1", "broker-a.local"),
    (None, ""),
    ("", ""),
    ("not-an-address", "not-an-address"),
])
def test_the_peer_host_is_the_address_without_its_port(peer: str | None, host: str) -> None:
    assert peer_host(peer) == host


def test_publishing_to_a_topic_learnt_from_a_stored_message_needs_pub_on_it(acl_file: Path) -> None:
    """Request.publisher: a transaction's END writes to the half message's real topic."""
    guard = Guard(str(acl_file))
    session = Session("127.0.0.1")
    _login(guard, session, "alice", ALICE)
    assert guard.refusal_to_publish(session, "orders") is None
    assert guard.refusal_to_publish(session, "logs-a") == "account 'alice' lacks PUB on topic 'logs-a'"
    assert guard.refusal_to_publish(session, "RMQ_SYS_TRANS_HALF_TOPIC") == "account 'alice' lacks admin"
