"""wire.protocol.sql92: RocketMQ's SQL92 filter semantics, parse errors with positions, and a
property test against a plain reference evaluator written here from RocketMQ's rules."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.protocol.checks import check_sql_filter
from wire.protocol.sql92 import Sql92Error, compile_sql92

PROPS = {"a": "10", "b": "x", "TAGS": "t1", "f": "2.5", "big": "3000000000", "yes": "TRUE"}


@pytest.mark.parametrize(("expression", "expected"), [
    ("a > 5", True),
    ("a > 5 AND b = 'x'", True),
    ("TAGS IN ('t1', 't2')", True),
    ("TAGS NOT IN ('t1', 't2')", False),
    ("a BETWEEN 1 AND 10", True),
    ("a NOT BETWEEN 1 AND 10", False),
    ("missing IS NULL", True),
    ("a IS NOT NULL", True),
    ("missing > 1", None),  # NULL: unknown
    ("NOT (missing > 1)", None),  # NOT unknown is unknown
    ("missing > 1 OR TRUE", True),
    ("missing > 1 AND FALSE", False),
    ("f > 2", None),  # '2.5' read as an Integer fails: no match, as RocketMQ
    ("f > 2.0", True),
    ("big > 5", None),  # beyond int: Integer.valueOf fails
    ("big > 5000000000", False),  # a long literal reads it with Long.valueOf
    ("a = 10.0", True),
    ("a = '10.0'", False),  # strings compare as strings
    ("b > a", None),  # two strings ordered as doubles: 'x' is not one
    ("yes = TRUE", True),  # Boolean.valueOf, any case
    ("a", False),  # a bare property is a boolean cast: a string is FALSE
    ("missing = other", True),  # RocketMQ: NULL = NULL is TRUE
    ("5 = missing", False),  # ... and a non-NULL left side with a NULL right one is FALSE
    ("a > -5", True),
    ("/* note */ a > 1 -- rest\n", True),
    ("a > 1 -- a comment to the end, without a newline", True),
    ("inx IS NULL", True),  # a keyword prefix is an identifier
    ("a >= 10 and A is null", True),  # keywords in any case, properties case-sensitive
])
def test_rocketmq_semantics(expression: str, expected: bool | None) -> None:
    f = compile_sql92(expression)
    assert f.evaluate(PROPS) is expected
    assert f.matches(PROPS) is (expected is True)


@pytest.mark.parametrize(("expression", "line", "column", "reason"), [
    ("a >", 1, 4, "unexpected end"),
    ("a = 1 b", 1, 7, "unexpected 'b'"),
    ("a > 'x'", 1, 5, "cannot be compared"),
    ("a IN (1)", 1, 7, "unexpected '1'"),
    ("5", 1, 1, "boolean"),
    ("a = NULL", 1, 5, "NULL"),
    ("TRUE = 1", 1, 1, "boolean literal"),
    ("a BETWEEN 5 AND 1", 1, 11, "BETWEEN"),
    ("0.0 < a", 1, 1, "double"),
    ("a # 1", 1, 3, "'#'"),
    ("a > 1 AND\n  b >> 2", 2, 6, "unexpected '>'"),
    ("NOT a > 1", 1, 1, "cannot be compared"),  # NOT binds tighter than >
    ("-5 IN ('x')", 1, 1, "IN needs a property"),
    ("a = 99999999999999999999", 1, 5, "long range"),
    ("", 1, 1, "empty"),
])
def test_parse_errors_carry_positions(expression: str, line: int, column: int, reason: str) -> None:
    with pytest.raises(Sql92Error) as e:
        compile_sql92(expression)
    assert (e.value.line, e.value.column) == (line, column), str(e.value)
    assert reason in e.value.reason
    assert f"line {line}, column {column}" in str(e.value)
    assert check_sql_filter(expression) == str(e.value)


def test_compiled_once() -> None:
    assert compile_sql92("a > 1 AND b = 'x'") is compile_sql92("a > 1 AND b = 'x'")
    assert check_sql_filter("a > 1") is None


# ---------------------------------------------------------------- reference, by hand

INT_MAX, LONG_MAX = 2**31 - 1, 2**63 - 1


class Thrown(Exception):
    """RocketMQ would throw here: the message does not match."""


def number_from(s: str, kind: str) -> int | float:
    """Integer.valueOf / Long.valueOf / Double.valueOf, for the values generated below."""
    if kind == "double":
        try:
            return float(s)
        except ValueError:
            raise Thrown from None
    top = INT_MAX if kind == "int" else LONG_MAX
    if not re.fullmatch(r"[+-]?[0-9]+", s) or not -top - 1 <= int(s) <= top:
        raise Thrown
    return int(s)


def kind_of(n: Any) -> str:
    if isinstance(n, float):
        return "double"
    return "int" if -INT_MAX - 1 <= n <= INT_MAX else "long"


def ref_value(node: tuple[Any, ...], props: dict[str, str]) -> Any:
    """('prop', name) | ('num', n) | ('neg', node) | ('str', s) | ('bool', b) → value, kind."""
    tag = node[0]
    if tag == "prop":
        return props.get(node[1]), "str"
    if tag == "num":
        return node[1], kind_of(node[1])
    if tag == "neg":
        v, k = ref_value(node[1], props)
        return (-v, k) if k in ("int", "long", "double") and v is not None else (None, "null")
    if tag == "str":
        return node[1], "str"
    return node[1], "bool"


def ref_equal(left: tuple[Any, ...], right: tuple[Any, ...], props: dict[str, str]) -> bool | None:
    lv, lk = ref_value(left, props)
    rv, rk = ref_value(right, props)
    if lv is None and rv is None:
        return True
    if lv is None:
        return None
    if rv is None:
        return False
    if lk == "str" and rk == "str":
        return lv == rv
    if rk == "bool":
        return lk == "str" and (lv.lower() == "true") == rv
    if lk == "str":
        lv = number_from(lv, rk)
    elif rk == "str":
        rv = number_from(rv, lk)
    if "double" in (lk, rk):
        return float(lv) == float(rv)
    return bool(lv == rv)


def ref_order(op: str, left: tuple[Any, ...], right: tuple[Any, ...], props: dict[str, str]) -> bool | None:
    lv, lk = ref_value(left, props)
    if lv is None:
        return None
    rv, rk = ref_value(right, props)
    if rv is None:
        return None
    if lk == "str" and rk == "str":
        lv, rv = number_from(lv, "double"), number_from(rv, "double")
    elif lk == "str":
        lv = number_from(lv, rk)
    elif rk == "str":
        rv = number_from(rv, lk)
    if isinstance(lv, float) or isinstance(rv, float):
        lv, rv = float(lv), float(rv)
    return {"<": lv < rv, "<=": lv <= rv, ">": lv > rv, ">=": lv >= rv}[op]


def ref_eval(node: tuple[Any, ...], props: dict[str, str]) -> bool | None:
    tag = node[0]
    if tag == "const":
        return node[1]
    if tag == "bare":
        return None if props.get(node[1]) is None else False
    if tag == "not":
        v = ref_eval(node[1], props)
        return None if v is None else not v
    if tag == "and":
        a = ref_eval(node[1], props)
        if a is False:
            return False
        b = ref_eval(node[2], props)
        if b is False:
            return False
        return None if a is None or b is None else True
    if tag == "or":
        a = ref_eval(node[1], props)
        if a is True:
            return True
        b = ref_eval(node[2], props)
        if b is True:
            return True
        return None if a is None or b is None else False
    if tag == "eq":
        return ref_equal(node[1], node[2], props)
    if tag == "ne":
        v = ref_equal(node[1], node[2], props)
        return None if v is None else not v
    if tag == "order":
        return ref_order(node[1], node[2], node[3], props)
    if tag == "between":  # x >= low AND x <= high, or its NOT form x < low OR x > high
        _, negated, x, low, high = node
        if negated:
            return ref_eval(("or", ("order", "<", x, low), ("order", ">", x, high)), props)
        return ref_eval(("and", ("order", ">=", x, low), ("order", "<=", x, high)), props)
    if tag == "in":
        _, negated, name, items = node
        v = props.get(name)
        return None if v is None else (v in items) != negated
    if tag == "isnull":
        _, negated, inner = node
        is_null = (ref_eval(inner, props) if inner[0] != "prop" else props.get(inner[1])) is None
        return is_null != negated
    raise AssertionError(tag)


def reference(node: tuple[Any, ...], props: dict[str, str]) -> bool | None:
    """The three-valued result; a conversion RocketMQ would throw on is unknown (no match)."""
    try:
        return ref_eval(node, props)
    except Thrown:
        return None


# ---------------------------------------------------------------- rendering and generating


def quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def render(node: tuple[Any, ...]) -> str:
    tag = node[0]
    if tag in ("prop", "bare"):
        return str(node[1])
    if tag == "num":
        return repr(node[1])
    if tag == "neg":
        return f"-{render(node[1])}"
    if tag == "str":
        return quote(node[1])
    if tag in ("bool", "const"):
        return "TRUE" if node[1] else "FALSE"
    if tag == "not":
        return f"NOT ({render(node[1])})"
    if tag in ("and", "or"):
        return f"({render(node[1])}) {tag.upper()} ({render(node[2])})"
    if tag in ("eq", "ne"):
        return f"{render(node[1])} {'=' if tag == 'eq' else '<>'} {render(node[2])}"
    if tag == "order":
        return f"{render(node[2])} {node[1]} {render(node[3])}"
    if tag == "between":
        return f"{render(node[2])} {'NOT ' if node[1] else ''}BETWEEN {render(node[3])} AND {render(node[4])}"
    if tag == "in":
        return f"{node[2]} {'NOT ' if node[1] else ''}IN ({', '.join(quote(s) for s in node[3])})"
    if tag == "isnull":
        inner = node[2] if node[2][0] == "prop" else ("paren", node[2])
        text = inner[1] if inner[0] == "prop" else f"({render(inner[1])})"
        return f"{text} IS {'NOT ' if node[1] else ''}NULL"
    raise AssertionError(tag)


NAMES = ["a", "b", "TAGS"]
VALUES = ["1", "5", "10", "-3", "+4", "2.5", "abc", "x", "true", "TRUE", "3000000000", "1e3", " 7", "007", ""]
props_st = st.dictionaries(st.sampled_from(NAMES), st.sampled_from(VALUES))
prop = st.sampled_from(NAMES).map(lambda n: ("prop", n))
number = st.one_of(st.integers(0, 2**40), st.floats(1e-300, 1e300)).map(lambda n: ("num", n))
numeric = st.one_of(number, number.map(lambda n: ("neg", n)), prop.map(lambda p: ("neg", p)))
text = st.text(alphabet="abx1' ", max_size=4).map(lambda s: ("str", s))
ordered_side = st.one_of(prop, numeric)
between_bounds = st.tuples(number, number).map(lambda t: sorted(t, key=lambda n: float(n[1])))

leaf = st.one_of(
    st.booleans().map(lambda b: ("const", b)),
    st.sampled_from(NAMES).map(lambda n: ("bare", n)),
    st.tuples(st.one_of(prop, number, text), st.one_of(prop, number, text, st.booleans().map(lambda b: ("bool", b))))
    .flatmap(lambda lr: st.sampled_from(["eq", "ne"]).map(lambda op: (op, *lr))),
    st.tuples(st.sampled_from(["<", "<=", ">", ">="]), ordered_side, ordered_side).map(lambda t: ("order", *t)),
    st.tuples(st.booleans(), prop, between_bounds).map(lambda t: ("between", t[0], t[1], t[2][0], t[2][1])),
    st.tuples(st.booleans(), st.sampled_from(NAMES), st.lists(st.sampled_from(VALUES + ["t1"]), min_size=1,
                                                               max_size=3)).map(lambda t: ("in", *t)),
)


def extend(children: st.SearchStrategy[tuple[Any, ...]]) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.one_of(
        children.map(lambda c: ("not", c)),
        st.tuples(st.sampled_from(["and", "or"]), children, children).map(lambda t: (t[0], t[1], t[2])),
        st.tuples(st.booleans(), st.one_of(prop, children)).map(lambda t: ("isnull", *t)),
    )


expressions = st.recursive(leaf, extend, max_leaves=8)


@settings(max_examples=1000, deadline=None)
@given(expressions, st.lists(props_st, min_size=1, max_size=4))
def test_evaluator_agrees_with_reference(node: tuple[Any, ...], messages: list[dict[str, str]]) -> None:
    expression = render(node)
    compiled = compile_sql92(expression)
    for props in messages:
        expected = reference(node, props)
        assert compiled.evaluate(props) is expected, (expression, props)
        assert compiled.matches(props) is (expected is True)
