"""ACL 1.0 request signatures (wire/remoting/acl.py): the facts sheet's vectors (§6), and
the properties a broker's check relies on."""

from __future__ import annotations

import base64
import hashlib
import hmac

from hypothesis import given, settings
from hypothesis import strategies as st

from wire.remoting.acl import (
    SERVER_SKIPPED,
    credentials,
    sign,
    sign_content,
    signed_fields,
    signing_content,
)


def test_the_sheets_vector_with_credentials() -> None:
    fields = {"AccessKey": "ak", "OnsChannel": "LOCAL", "topic": "TopicTest"}
    assert signing_content(fields) == b"akLOCALTopicTest"
    assert sign("sk", fields) == "OCU644qNRJlkKdlLRTplGLIsCwI="
    assert signed_fields({"topic": "TopicTest"}, "ak", "sk", channel="LOCAL")["Signature"] == \
        "OCU644qNRJlkKdlLRTplGLIsCwI="


def test_the_sheets_vector_without_credentials() -> None:
    fields = {"AccessKey": "", "OnsChannel": "ALIYUN", "topic": "TopicTest"}
    assert signing_content(fields) == b"ALIYUNTopicTest"
    assert sign("", fields) == "N/YT7X6tJe5UfutmW+uNwTTJ7Fc="
    assert credentials({**fields, "Signature": "N/YT7X6tJe5UfutmW+uNwTTJ7Fc="}) is None  # empty AccessKey


def test_the_signature_and_the_unique_key_query_are_outside_what_a_broker_checks() -> None:
    fields = signed_fields({"topic": "T", "key": "k"}, "ak", "sk", body=b"xyz")
    assert credentials(fields) == ("ak", fields["Signature"])
    with_query = {**fields, "_UNIQUE_KEY_QUERY": "true"}  # the Java client adds it after signing
    assert sign_content("sk", signing_content(with_query, b"xyz", skip=SERVER_SKIPPED)) == fields["Signature"]
    assert sign_content("sk", signing_content(with_query, b"xyz")) != fields["Signature"]


_keys = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=12)
_fields = st.dictionaries(_keys.filter(lambda k: k not in ("Signature", "AccessKey", "OnsChannel")),
                          st.text(max_size=20), max_size=8)


@settings(deadline=None)  # a loaded machine must not fail a pure function
@given(_fields, st.binary(max_size=64), st.text(min_size=1, max_size=16), st.text(max_size=16))
def test_a_signature_is_hmac_sha1_of_the_sorted_values_then_the_body(fields: dict[str, str], body: bytes,
                                                                      ak: str, sk: str) -> None:
    signed = signed_fields(fields, ak, sk, body)
    content = "".join(signed[k] for k in sorted(signed) if k != "Signature").encode() + body
    expected = base64.b64encode(hmac.new(sk.encode(), content, hashlib.sha1).digest()).decode()
    assert signed["Signature"] == expected
    # the order the fields came in does not matter
    assert sign(sk, dict(reversed(list(signed.items()))), body) == expected


@settings(deadline=None)  # a loaded machine must not fail a pure function
@given(_fields, st.binary(min_size=1, max_size=64), st.text(min_size=1, max_size=16), st.text(max_size=16))
def test_any_change_to_the_body_or_a_value_changes_the_signature(fields: dict[str, str], body: bytes,
                                                                  ak: str, sk: str) -> None:
    signed = signed_fields(fields, ak, sk, body)
    tampered = bytes([body[0] ^ 1]) + body[1:]
    assert sign(sk, signed, tampered) != signed["Signature"]
    assert sign(sk, {**signed, "AccessKey": ak + "x"}, body) != signed["Signature"]
