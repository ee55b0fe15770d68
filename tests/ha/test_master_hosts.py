"""HAService counts slaves by host (a slave reconnecting from a new port is not a second one)."""

from ha.master import _host


def test_a_peer_address_gives_its_host():
    assert _host("10.0.0.2:41234") == _host("10.0.0.2:50000") == "10.0.0.2"
    assert _host("[::1]:41234") == "::1"


def test_an_unknown_peer_counts_as_itself():
    assert _host("?") == "?"
