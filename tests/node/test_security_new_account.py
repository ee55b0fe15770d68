"""Issue 40 item 9: an account added to the ACL file logs in at once: the Guard looks at the
file's stamp before it answers a login for an account it does not know, not only once a
second (the clock stands still here, so only that check can find it)."""

from __future__ import annotations

from pathlib import Path

from node.security import Guard, Session, make_verifier
from tests.node.test_security import ALICE, _acl_text, _login, acl_file  # noqa: F401 (a fixture)

BOB = "bob-secret"


def _with_bob() -> str:
    return _acl_text(f"""
[[accounts]]
accessKey = "bob"
scram = "{make_verifier(BOB).text()}"
defaultTopicPerm = "PUB"
""")


def test_a_just_added_account_logs_in_at_once(acl_file: Path) -> None:  # noqa: F811
    now = [0.0]
    guard = Guard(str(acl_file), clock=lambda: now[0])
    assert "error" not in _login(guard, Session("127.0.0.1"), "alice", ALICE)
    acl_file.write_text(_with_bob())  # `tidemq acl add-user bob`, no time passing
    assert "error" not in _login(guard, Session("127.0.0.1"), "bob", BOB)
    assert guard.view()["reloads"] == 1 and guard.view()["accounts"] == 3


def test_an_unknown_account_still_fails_and_a_known_one_does_not_reread(acl_file: Path) -> None:  # noqa: F811
    now = [0.0]
    guard = Guard(str(acl_file), clock=lambda: now[0])
    failed = _login(guard, Session("127.0.0.1"), "nobody", "x")
    assert failed["status"] == "NO_PERMISSION" and guard.view()["reloads"] == 0
    # a change that names no new account (alice's grants) waits for the once-a-second check
    acl_file.write_text(_acl_text().replace('"orders=PUB|SUB"', '"orders=SUB"'))
    assert "error" not in _login(guard, Session("127.0.0.1"), "alice", ALICE)
    assert guard.view()["reloads"] == 0
    now[0] += 2
    guard.acl  # noqa: B018 - the periodic check
    assert guard.view()["reloads"] == 1
