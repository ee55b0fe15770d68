"""node/remoting/acl.py without sockets: a real Guard over an ACL file, real signatures and
real CommitLog records. The pieces every remoting processor goes through with aclEnable:
the signature, the CBOR op's permissions, and the message rule on answers that carry
stored messages (PULL_MESSAGE, QUERY_MESSAGE, VIEW_MESSAGE_BY_ID)."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.remoting.acl import Refused, checked_messages, screened, signed_session
from node.security.acl import make_verifier
from node.security.guard import Guard, Session
from store.message import Message
from store.properties import PROPERTY_RETRY_TOPIC
from store.record_codec import encode_record
from wire.protocol import NODE_REQUESTS, Request, parse_with
from wire.remoting.acl import signed_fields
from wire.remoting.codes import RequestCode, ResponseCode
from wire.remoting.command import RemotingCommand


@pytest.fixture
def guard(tmp_path: Path) -> Guard:
    (tmp_path / "acl.toml").write_text(f"""
[[accounts]]
accessKey = "app"
scram = "{make_verifier("scram").text()}"
topicPerms = ["orders=PUB|SUB"]
defaultGroupPerm = "SUB"
remotingSecret = "rs"

[[accounts]]
accessKey = "cbor-only"
scram = "{make_verifier("scram").text()}"
defaultTopicPerm = "PUB|SUB"
""")
    return Guard(str(tmp_path / "acl.toml"))


def _records(*messages: Message) -> bytes:
    return b"".join(bytes(encode_record(m, "127.0.0.1:10911", 1 << 20)) for m in messages)


def test_a_signed_request_runs_as_its_account_and_a_bad_one_gets_rocketmqs_remark(guard: Guard) -> None:
    fields = signed_fields({"topic": "orders"}, "app", "rs", b"b")
    session = signed_session(guard, RemotingCommand(code=10, ext_fields=fields, body=b"b"), "127.0.0.1:5")
    assert isinstance(session, Session) and session.account == "app"
    for ext, remark in (
        ({"topic": "orders"}, "No accessKey is configured"),
        (signed_fields({"topic": "orders"}, "app", "rs", b"other"), "Check signature failed for accessKey=app"),
        (signed_fields({"topic": "orders"}, "cbor-only", "scram", b"b"), "No acl config for cbor-only"),
    ):
        refused = signed_session(guard, RemotingCommand(code=10, ext_fields=ext, body=b"b"), "127.0.0.1:5")
        assert isinstance(refused, RemotingCommand)
        assert (refused.code, refused.remark) == (ResponseCode.SYSTEM_ERROR, remark)
    assert guard.view()["failed_signatures"] == 2  # no credentials is not a guess


def test_failed_signatures_are_rate_limited_per_address_and_key(guard: Guard) -> None:
    bad = RemotingCommand(code=10, ext_fields=signed_fields({}, "app", "wrong"))
    for _ in range(10):
        signed_session(guard, bad, "10.0.0.1:1")
    good = RemotingCommand(code=10, ext_fields=signed_fields({}, "app", "rs"))
    limited = signed_session(guard, good, "10.0.0.1:1")
    assert isinstance(limited, RemotingCommand) and "too many failed signatures" in (limited.remark or "")
    assert isinstance(signed_session(guard, good, "10.0.0.2:1"), Session)  # another address is not


def test_the_cbor_ops_permissions_apply(guard: Guard) -> None:
    app = Session("127.0.0.1", account="app")

    def send(topic: str) -> Request:
        return parse_with({"v": 1, "id": 0, "op": "send", "topic": topic, "body": b"x"}, NODE_REQUESTS)

    assert screened(guard, app, send("orders")).reader is not None  # copies ask the same rule
    with pytest.raises(Refused) as refused:
        screened(guard, app, send("payments"))
    assert (refused.value.code, refused.value.remark) == (ResponseCode.NO_PERMISSION,
                                                          "send: account 'app' lacks PUB on topic 'payments'")
    with pytest.raises(Refused):  # outside a signed request's task: fail closed
        screened(guard, None, send("orders"))


def test_an_answer_that_shows_a_message_the_account_may_not_read_is_refused(guard: Guard) -> None:
    app = Session("127.0.0.1", account="app")
    view = RemotingCommand(code=RequestCode.VIEW_MESSAGE_BY_ID, opaque=3)
    mine = view.response(ResponseCode.SUCCESS, body=_records(Message("orders", b"a"), Message("orders", b"b")))
    assert checked_messages(guard, app, view, mine) is mine
    theirs = view.response(ResponseCode.SUCCESS, body=_records(Message("orders", b"a"), Message("payments", b"p")))
    refused = checked_messages(guard, app, view, theirs)
    assert refused is not None and (refused.code, refused.opaque, refused.body) == (ResponseCode.NO_PERMISSION, 3, b"")
    assert "lacks SUB on topic 'payments'" in (refused.remark or "")
    # a retry copy of another topic's message: its original topic counts too
    pull = RemotingCommand(code=RequestCode.PULL_MESSAGE)
    copy = Message("%RETRY%billing", b"c", properties={PROPERTY_RETRY_TOPIC: "payments"})
    refused = checked_messages(guard, app, pull, pull.response(ResponseCode.SUCCESS, body=_records(copy)))
    assert refused is not None and refused.code == ResponseCode.NO_PERMISSION
    # what is not records is not sent
    garbled = checked_messages(guard, app, pull, pull.response(ResponseCode.SUCCESS, body=b"\x00" * 7))
    assert garbled is not None and garbled.code == ResponseCode.SYSTEM_ERROR
    # answers without messages pass as they are
    send = RemotingCommand(code=RequestCode.SEND_MESSAGE)
    ok = send.response(ResponseCode.SUCCESS, body=b"anything")
    assert checked_messages(guard, app, send, ok) is ok


def test_a_new_remoting_secret_in_its_file_applies_within_a_second(tmp_path: Path) -> None:
    (tmp_path / "app.remoting").write_text("old-secret\n")
    (tmp_path / "acl.toml").write_text(f"""[[accounts]]
accessKey = "app"
scram = "{make_verifier("scram").text()}"
remotingSecretFile = "app.remoting"
""")
    now = [0.0]
    guard = Guard(str(tmp_path / "acl.toml"), clock=lambda: now[0])

    def signs_with(secret: str) -> bool:
        cmd = RemotingCommand(code=10, ext_fields=signed_fields({"topic": "t"}, "app", secret))
        return isinstance(signed_session(guard, cmd, "127.0.0.1:1"), Session)

    assert signs_with("old-secret") and not signs_with("the-new-secret")
    (tmp_path / "app.remoting").write_text("the-new-secret\n")  # the ACL file itself is unchanged
    now[0] += 1.0
    assert signs_with("the-new-secret") and not signs_with("old-secret")
    assert guard.reloads == 1
