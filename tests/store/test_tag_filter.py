"""store/tag_filter.py: the one parser of subscription tag expressions."""

from __future__ import annotations

import pytest

from store.message import tags_code
from store.tag_filter import TagFilter, parse_tag_expression


@pytest.mark.parametrize("everything", [None, "", "*", "  *  "])
def test_all_matches_every_message_also_untagged(everything):
    f = TagFilter.parse(everything)
    assert f.tags is None and parse_tag_expression(everything) is None
    assert f.matches_code(12345) and f.matches_tag(None) and f.matches_tag("x")


def test_tags_match_by_code_then_by_real_tag():
    f = TagFilter.parse(" red || BB ||")
    assert f.tags == frozenset({"red", "BB"})
    assert f.codes == frozenset({tags_code("red"), tags_code("BB")})
    assert tags_code("Aa") == tags_code("BB")  # a hash collision: the code lets it through...
    assert f.matches_code(tags_code("Aa")) and not f.matches_tag("Aa")  # ...the real tag does not
    assert not f.matches_tag(None)


@pytest.mark.parametrize("bad", ["||", " || || "])
def test_an_expression_naming_no_tag_is_an_error(bad):
    with pytest.raises(ValueError, match="names no tag"):
        TagFilter.parse(bad)
